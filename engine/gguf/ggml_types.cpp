// Type table and scalar reference (de)quantization of ggml block formats.
//
// The dequantizers follow ggml's dequantize_row_* (ggml-quants.c) operation for operation,
// so the floats they produce are bit-identical to ggml's on an IEEE machine without FMA
// contraction. The quantizers are round-to-nearest references: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0
// follow quantize_row_*_ref; the K-quants use a simpler scale search than ggml (no RMSE
// refinement) but always write blocks that ggml decodes to the same values we do.
//
// Q2_K, Q3_K, IQ4_NL and IQ4_XS have their codecs in ggml_low_bit.cpp. Blocks may sit at any
// byte offset inside an mmapped file: ggml_block_codec.h's load_block / store_block copy them.
#include "engine/gguf/ggml_types.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/common/fp16.h"
#include "engine/gguf/ggml_block_codec.h"

namespace spw {
namespace {

using gguf_detail::fp16_round_up;
using gguf_detail::load_block;
using gguf_detail::nearest_int;
using gguf_detail::signed_absmax;
using gguf_detail::store_block;

// Indexed by ggml_type number; a zero block_size marks a number ggml does not use
// (4 and 5 were Q4_2/Q4_3, 31-33 the removed Q4_0_4_4 family, 36-38 IQ4_NL_4_4 and friends).
// Sizes: ggml-common.h's block_* structs.
constexpr std::array<TypeTraits, 40> kTraits = {{
    {"F32", 1, 4, true},          // 0
    {"F16", 1, 2, true},          // 1
    {"Q4_0", 32, 18, true},       // 2
    {"Q4_1", 32, 20, true},       // 3
    {"", 0, 0, false},            // 4  (Q4_2, removed)
    {"", 0, 0, false},            // 5  (Q4_3, removed)
    {"Q5_0", 32, 22, true},       // 6
    {"Q5_1", 32, 24, true},       // 7
    {"Q8_0", 32, 34, true},       // 8
    {"Q8_1", 32, 36, false},      // 9:  d, s (fp16) + 32 x int8
    {"Q2_K", 256, 84, true},      // 10
    {"Q3_K", 256, 110, true},     // 11
    {"Q4_K", 256, 144, true},     // 12
    {"Q5_K", 256, 176, true},     // 13
    {"Q6_K", 256, 210, true},     // 14
    {"Q8_K", 256, 292, false},    // 15: float d, qs[256], int16 bsums[16]
    {"IQ2_XXS", 256, 66, false},  // 16
    {"IQ2_XS", 256, 74, false},   // 17
    {"IQ3_XXS", 256, 98, false},  // 18
    {"IQ1_S", 256, 50, false},    // 19
    {"IQ4_NL", 32, 18, true},     // 20
    {"IQ3_S", 256, 110, false},   // 21
    {"IQ2_S", 256, 82, false},    // 22
    {"IQ4_XS", 256, 136, true},   // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", 256, 56, false},    // 29
    {"BF16", 1, 2, true},         // 30
    {"", 0, 0, false},            // 31 (Q4_0_4_4, removed)
    {"", 0, 0, false},            // 32 (Q4_0_4_8, removed)
    {"", 0, 0, false},            // 33 (Q4_0_8_8, removed)
    {"TQ1_0", 256, 54, false},    // 34
    {"TQ2_0", 256, 66, false},    // 35
    {"", 0, 0, false},            // 36 (IQ4_NL_4_4, removed)
    {"", 0, 0, false},            // 37 (IQ4_NL_4_8, removed)
    {"", 0, 0, false},            // 38 (IQ4_NL_8_8, removed)
    {"MXFP4", 32, 17, false},     // 39: e8m0 exponent + 16 bytes of e2m1 pairs
}};

// ---- dequantization (ggml's dequantize_row_*) ----

void dequant_q4_0(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = (b.qs[j] & 0x0F) - 8;
      const int x1 = (b.qs[j] >> 4) - 8;
      y[i * kQK4_0 + j] = x0 * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = x1 * d;
    }
  }
}

void dequant_q4_1(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int x0 = b.qs[j] & 0x0F;
      const int x1 = b.qs[j] >> 4;
      y[i * kQK4_1 + j] = x0 * d + m;
      y[i * kQK4_1 + j + kQK4_1 / 2] = x1 * d + m;
    }
  }
}

// Q5_0/Q5_1: bit j of the little-endian qh word is the 5th bit of element j (j < 32).
void dequant_q5_0(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
      const int32_t x1 = ((b.qs[j] >> 4) | xh1) - 16;
      y[i * kQK5_0 + j] = x0 * d;
      y[i * kQK5_0 + j + kQK5_0 / 2] = x1 * d;
    }
  }
}

void dequant_q5_1(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      const int x0 = (b.qs[j] & 0x0F) | xh0;
      const int x1 = (b.qs[j] >> 4) | xh1;
      y[i * kQK5_1 + j] = x0 * d + m;
      y[i * kQK5_1 + j + kQK5_1 / 2] = x1 * d + m;
    }
  }
}

void dequant_q8_0(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = b.qs[j] * d;
  }
}

// Scale and min of 32-element sub-block j (0..7) from the 12 packed bytes: sub-blocks 0-3
// keep 6 bits in bytes 0-7; sub-blocks 4-7 keep their low 4 bits in bytes 8-11 and their
// top 2 bits in the spare top bits of bytes 0-7.
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

void dequant_q4_K(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float min = fp16_to_fp32(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < kQK_K; j += 64) {
      get_scale_min_k4(is + 0, b.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, b.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequant_q5_K(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float min = fp16_to_fp32(b.dmin);
    const uint8_t* ql = b.qs;
    const uint8_t* qh = b.qh;
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      get_scale_min_k4(is + 0, b.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, b.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void dequant_q6_K(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// ---- quantization ----

void quant_q4_0(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK4_0;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    // The extreme maps to -8, so the opposite side reaches at most +8 and clips to 7:
    // that asymmetry is the format's (and ggml's), and dominates the error bound.
    const float d = signed_absmax(x, qk) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b{};
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>(x[j] * id + 8.5f));
      const uint8_t xi1 = std::min<int8_t>(15, static_cast<int8_t>(x[qk / 2 + j] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
    store_block(dst, i, b);
  }
}

void quant_q4_1(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK4_1;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    const auto [lo, hi] = std::minmax_element(x, x + qk);
    const float min = *lo;
    const float d = (*hi - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b{};
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>((x[j] - min) * id + 0.5f));
      const uint8_t xi1 =
          std::min<int8_t>(15, static_cast<int8_t>((x[qk / 2 + j] - min) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
    store_block(dst, i, b);
  }
}

void quant_q5_0(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK5_0;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    const float d = signed_absmax(x, qk) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b{};
    b.d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xi0 = std::min<int8_t>(31, static_cast<int8_t>(x[j] * id + 16.5f));
      const uint8_t xi1 = std::min<int8_t>(31, static_cast<int8_t>(x[qk / 2 + j] * id + 16.5f));
      b.qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(b.qh, &qh, sizeof qh);
    store_block(dst, i, b);
  }
}

void quant_q5_1(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK5_1;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    const auto [lo, hi] = std::minmax_element(x, x + qk);
    const float min = *lo;
    const float d = (*hi - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 b{};
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xi0 = std::min<int8_t>(31, static_cast<int8_t>((x[j] - min) * id + 0.5f));
      const uint8_t xi1 =
          std::min<int8_t>(31, static_cast<int8_t>((x[qk / 2 + j] - min) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(b.qh, &qh, sizeof qh);
    store_block(dst, i, b);
  }
}

void quant_q8_0(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK8_0;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    float amax = 0.0f;
    for (int j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b{};
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < qk; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    store_block(dst, i, b);
  }
}

// Q4_K / Q5_K: eight 32-element sub-blocks, each y = d*sc*q - dmin*m with 6-bit sc, m and
// q in [0, nmax]. Instead of ggml's iterative search this picks, per sub-block, the range
// [min(0, min x), max x] and rounds every code *up* (mins first, then the scales that must
// span max x from the rounded-down low end), so no value is ever clipped: the error is
// at most half a quantization step of the (slightly widened) sub-block scale.
struct KQuantScales {
  uint16_t d = 0, dmin = 0;
  uint8_t sc[8] = {}, m[8] = {};
};

KQuantScales choose_k_scales(const float* x, int nmax) {
  float lo[8], hi[8];
  float max_min = 0.0f;  // largest -lo, the positive amount ggml subtracts
  for (int s = 0; s < 8; ++s) {
    const auto [mn, mx] = std::minmax_element(x + 32 * s, x + 32 * s + 32);
    lo[s] = std::min(0.0f, *mn);  // ggml cannot add an offset, only subtract one
    hi[s] = *mx;
    max_min = std::max(max_min, -lo[s]);
  }
  KQuantScales k;
  k.dmin = fp16_round_up(max_min / 63);
  const float dmin = fp16_to_fp32(k.dmin);
  float need[8];  // sub-block scale needed to reach hi from the encoded low end
  float max_scale = 0.0f;
  for (int s = 0; s < 8; ++s) {
    k.m[s] = dmin > 0.0f ? static_cast<uint8_t>(std::min(63.0f, std::ceil(-lo[s] / dmin))) : 0;
    need[s] = std::max(0.0f, (hi[s] + dmin * k.m[s]) / nmax);
    max_scale = std::max(max_scale, need[s]);
  }
  k.d = fp16_round_up(max_scale / 63);
  const float d = fp16_to_fp32(k.d);
  for (int s = 0; s < 8; ++s) {
    k.sc[s] = d > 0.0f ? static_cast<uint8_t>(std::min(63.0f, std::ceil(need[s] / d))) : 0;
  }
  return k;
}

// Inverse of get_scale_min_k4.
void pack_scales_k4(const KQuantScales& k, uint8_t* scales) {
  std::memset(scales, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = k.sc[j], lm = k.m[j];
    if (j < 4) {
      scales[j] |= ls;
      scales[j + 4] |= lm;
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
}

// Codes in [0, nmax] for one super-block, computed with the decoded scales and mins so
// rounding is against exactly the grid the dequantizer will use.
void k_codes(const float* x, const KQuantScales& k, int nmax, uint8_t* L) {
  const float d = fp16_to_fp32(k.d), dmin = fp16_to_fp32(k.dmin);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * k.sc[s];
    const float ms = dmin * k.m[s];
    for (int l = 0; l < 32; ++l) {
      const int q = ds > 0.0f ? nearest_int((x[32 * s + l] + ms) / ds) : 0;
      L[32 * s + l] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

void quant_q4_K(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    const KQuantScales k = choose_k_scales(x, 15);
    uint8_t L[kQK_K];
    k_codes(x, k, 15, L);
    BlockQ4_K b{};
    b.d = k.d;
    b.dmin = k.dmin;
    pack_scales_k4(k, b.scales);
    // Each 64-element chunk shares 32 bytes: low nibbles the first 32, high the next 32.
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) {
        b.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      }
    }
    store_block(dst, i, b);
  }
}

void quant_q5_K(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    const KQuantScales k = choose_k_scales(x, 31);
    uint8_t L[kQK_K];
    k_codes(x, k, 31, L);
    BlockQ5_K b{};
    b.d = k.d;
    b.dmin = k.dmin;
    pack_scales_k4(k, b.scales);
    // As Q4_K for the low nibbles; qh[l] bit 2c (2c+1) holds the 5th bit of element l
    // (l + 32) of 64-element chunk c.
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          b.qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          b.qh[j] |= m2;
        }
        b.qs[n / 2 + j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
    }
    store_block(dst, i, b);
  }
}

// Q6_K: sixteen 16-element sub-blocks, y = d * scales[s] * (q - 32) with q in [0, 63] and
// signed 8-bit scales. Per sub-block the extreme value takes the -32 end as in ggml, but
// the step is widened when needed so that the opposite side fits in +31 (ggml's first
// guess would clip it); the 8-bit scale codes are rounded away from zero for the same
// reason. Error <= half a step of the sub-block.
void quant_q6_K(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float scale[16];
    float max_abs_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
      const float* xs = x + 16 * s;
      const float ext = signed_absmax(xs, 16);
      float opp = 0.0f;  // magnitude of the largest value of the other sign
      for (int l = 0; l < 16; ++l) {
        if ((ext < 0) != (xs[l] < 0)) opp = std::max(opp, std::fabs(xs[l]));
      }
      const float mag = std::max(std::fabs(ext) / 32, opp / 31);
      scale[s] = ext < 0 ? mag : -mag;  // (q - 32) * scale = ext at q - 32 = -32
      max_abs_scale = std::max(max_abs_scale, mag);
    }
    BlockQ6_K b{};
    b.d = fp16_round_up(max_abs_scale / 127);
    const float d = fp16_to_fp32(b.d);
    for (int s = 0; s < 16; ++s) {
      const float c = d > 0.0f ? std::min(127.0f, std::ceil(std::fabs(scale[s]) / d)) : 0.0f;
      b.scales[s] = static_cast<int8_t>(scale[s] < 0 ? -c : c);
    }
    uint8_t L[kQK_K];
    for (int s = 0; s < 16; ++s) {
      const float ds = d * b.scales[s];
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0.0f ? nearest_int(x[16 * s + l] / ds) : 0;
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    // Per 128-element half: ql[l] holds elements l (low nibble) and l+64 (high), ql[l+32]
    // holds l+32 and l+96; qh[l] holds the top two bits of l, l+32, l+64, l+96.
    for (int j = 0; j < kQK_K; j += 128) {
      uint8_t* ql = b.ql + j / 2;
      uint8_t* qh = b.qh + j / 4;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type) {
  if (type >= kTraits.size() || kTraits[type].block_size == 0) return std::nullopt;
  return kTraits[type];
}

std::string type_name(uint32_t type) {
  if (const auto t = type_traits(type)) return std::string(t->name);
  return fmt::format("unknown type {}", type);
}

size_t row_size(GgmlType type, int64_t n) {
  const auto t = type_traits(static_cast<uint32_t>(type));
  assert(t && n >= 0 && n % t->block_size == 0);
  return static_cast<size_t>(n / t->block_size) * static_cast<size_t>(t->type_size);
}

bool is_supported_type(GgmlType type) {
  const auto t = type_traits(static_cast<uint32_t>(type));
  return t && t->supported;
}

std::string supported_type_names() {
  std::string names;
  for (const TypeTraits& t : kTraits) {
    if (t.supported) names += fmt::format("{}{}", names.empty() ? "" : ", ", t.name);
  }
  return names;
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  assert(is_supported_type(type));
  assert(n % type_traits(static_cast<uint32_t>(type))->block_size == 0);
  const auto* bytes = static_cast<const unsigned char*>(src);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * j, 2);
        dst[j] = fp16_to_fp32(h);
      }
      return;
    case GgmlType::BF16:
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * j, 2);
        dst[j] = bf16_to_fp32(h);
      }
      return;
    case GgmlType::Q4_0:
      return dequant_q4_0(src, dst, n / kQK4_0);
    case GgmlType::Q4_1:
      return dequant_q4_1(src, dst, n / kQK4_1);
    case GgmlType::Q5_0:
      return dequant_q5_0(src, dst, n / kQK5_0);
    case GgmlType::Q5_1:
      return dequant_q5_1(src, dst, n / kQK5_1);
    case GgmlType::Q8_0:
      return dequant_q8_0(src, dst, n / kQK8_0);
    case GgmlType::Q4_K:
      return dequant_q4_K(src, dst, n / kQK_K);
    case GgmlType::Q5_K:
      return dequant_q5_K(src, dst, n / kQK_K);
    case GgmlType::Q6_K:
      return dequant_q6_K(src, dst, n / kQK_K);
    case GgmlType::Q2_K:
      return gguf_detail::dequant_q2_K(src, dst, n / kQK_K);
    case GgmlType::Q3_K:
      return gguf_detail::dequant_q3_K(src, dst, n / kQK_K);
    case GgmlType::IQ4_NL:
      return gguf_detail::dequant_iq4_nl(src, dst, n / kQK4_NL);
    case GgmlType::IQ4_XS:
      return gguf_detail::dequant_iq4_xs(src, dst, n / kQK_K);
    default:
      // Unreachable for callers that respect the precondition; NaNs make misuse loud in
      // release builds where the assert is gone.
      std::fill(dst, dst + n, std::nanf(""));
      return;
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  assert(is_supported_type(type));
  assert(n % type_traits(static_cast<uint32_t>(type))->block_size == 0);
  auto* bytes = static_cast<unsigned char*>(dst);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t h = fp32_to_fp16(src[j]);
        std::memcpy(bytes + 2 * j, &h, 2);
      }
      return;
    case GgmlType::BF16:
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t h = fp32_to_bf16(src[j]);
        std::memcpy(bytes + 2 * j, &h, 2);
      }
      return;
    case GgmlType::Q4_0:
      return quant_q4_0(src, dst, n / kQK4_0);
    case GgmlType::Q4_1:
      return quant_q4_1(src, dst, n / kQK4_1);
    case GgmlType::Q5_0:
      return quant_q5_0(src, dst, n / kQK5_0);
    case GgmlType::Q5_1:
      return quant_q5_1(src, dst, n / kQK5_1);
    case GgmlType::Q8_0:
      return quant_q8_0(src, dst, n / kQK8_0);
    case GgmlType::Q4_K:
      return quant_q4_K(src, dst, n / kQK_K);
    case GgmlType::Q5_K:
      return quant_q5_K(src, dst, n / kQK_K);
    case GgmlType::Q6_K:
      return quant_q6_K(src, dst, n / kQK_K);
    case GgmlType::Q2_K:
      return gguf_detail::quant_q2_K(src, dst, n / kQK_K);
    case GgmlType::Q3_K:
      return gguf_detail::quant_q3_K(src, dst, n / kQK_K);
    case GgmlType::IQ4_NL:
      return gguf_detail::quant_iq4_nl(src, dst, n / kQK4_NL);
    case GgmlType::IQ4_XS:
      return gguf_detail::quant_iq4_xs(src, dst, n / kQK_K);
    default:
      std::memset(dst, 0, row_size(type, n));
      return;
  }
}

double quant_error_bound(GgmlType type) {
  // max|x - dq(q(x))| / max|x| over a row: the analytic worst case of each quantizer above
  // (fp16 scale rounding included), rounded up. "measured": the largest ratio over 20,000
  // random 256-element rows (uniform [-1,1], gaussian, sub-blocks of mixed magnitude,
  // one sign per sub-block); tests/unit/test_ggml_types.cpp sees slightly less.
  // Valid while the block scales stay normal binary16 numbers (max|x| above ~0.05): for
  // tinier rows the fp16 scale loses relative precision, as it does in ggml.
  switch (type) {
    case GgmlType::F32:
      return 0.0;
    // Half an ulp relative to the row's largest binade: 2^-11 = 4.88e-4; measured 4.8e-4.
    case GgmlType::F16:
      return 4.9e-4;
    // 2^-8 = 3.91e-3; measured 3.74e-3.
    case GgmlType::BF16:
      return 3.95e-3;
    // Half a step (1/254) + the fp16 error of d seen at q = 127 (2^-11) = 4.43e-3;
    // measured 4.39e-3.
    case GgmlType::Q8_0:
      return 4.6e-3;
    // A full step, not half: the extreme takes -8 and the opposite side clips at +7.
    // 1/8 + 7/8 * 2^-11 = 0.1254; measured 0.1252.
    case GgmlType::Q4_0:
      return 0.126;
    // Half of a (2/15) step + fp16 error of d and m: 0.0681; measured 0.0675.
    case GgmlType::Q4_1:
      return 0.070;
    // As Q4_0 with 16 levels a side: 1/16 + 15/16 * 2^-11 = 0.0630; measured 0.0627.
    case GgmlType::Q5_0:
      return 0.0635;
    // Half of a (2/31) step + fp16 error of d and m: 0.0337; measured 0.0333.
    case GgmlType::Q5_1:
      return 0.035;
    // Half of a step widened by the rounded-up min and scale codes:
    // (2 + 1/63) / 15 * (1 + 1/63) / 2 = 0.0683; measured 0.0667.
    case GgmlType::Q4_K:
      return 0.072;
    // (2 + 1/63) / 31 * (1 + 1/63) / 2 = 0.0330; measured 0.0323.
    case GgmlType::Q5_K:
      return 0.036;
    // Half of a 1/31 step widened by the rounded-up 8-bit scale: 0.0163; measured 0.0161.
    case GgmlType::Q6_K:
      return 0.017;
    // Half of a 3-level step over the widened range: ((2 + 1/15) / 3) * (1 + 1/15) / 2 = 0.368
    // (fp16 round-ups included); measured 0.3335.
    case GgmlType::Q2_K:
      return 0.370;
    // Half of a step of 1/3 of the sub-block's extreme, widened by the rounded-up 6-bit scale:
    // (1/3 + 1/93) / 2 = 0.1720; measured 0.1666.
    case GgmlType::Q3_K:
      return 0.174;
    // The grid's top is 113 where the opposite side of the extreme reaches 127: 14/127 of the
    // block's extreme, plus 113/127 * 2^-11 when fp16 rounds the scale down = 0.1107;
    // measured 0.1106.
    case GgmlType::IQ4_NL:
      return 0.111;
    // As IQ4_NL, but the rounded-up 6-bit code only widens the step: the +127 -> 113 clip,
    // 14/127 = 0.1102, stays the worst (half the widest gap, 12/127 * (1 + 1/31), is 0.098);
    // measured 0.1101.
    case GgmlType::IQ4_XS:
      return 0.111;
    default:
      return 1.0;
  }
}

}  // namespace spw
