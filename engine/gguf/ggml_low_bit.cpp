// Scalar reference (de)quantization of Q2_K, Q3_K, IQ4_NL and IQ4_XS (the public entry points
// are dequantize_row / quantize_row in ggml_types.h).
//
// The dequantizers follow ggml's dequantize_row_q2_K, _q3_K, _iq4_nl and _iq4_xs
// (ggml-quants.c) operation for operation, so their floats are bit-identical to ggml's on an
// IEEE machine without FMA contraction. The quantizers are simpler than ggml's (no RMSE or
// importance-weighted search): a per-sub-block range, scale codes rounded away from zero so
// that nothing clips, then round-to-nearest codes against exactly the grid the dequantizer
// uses. ggml decodes the blocks they write to the same values we do, since the layout is the
// format's and only the choice of codes differs.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/gguf/ggml_block_codec.h"

namespace spw::gguf_detail {
namespace {

// Packs 256 2-bit codes as Q2_K and Q3_K store their low bits: per 128-element half h, byte
// 32h + l holds elements 128h + l (bits 0-1), + 32 (bits 2-3), + 64 (bits 4-5), + 96 (6-7).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>((L[j + l] & 3) | ((L[j + l + 32] & 3) << 2) |
                                           ((L[j + l + 64] & 3) << 4) | ((L[j + l + 96] & 3) << 6));
    }
  }
}

// The 16 six-bit Q3_K scale codes (0..63, the scale is code - 32) from their 12 packed bytes:
// the low 4 bits of sub-block s in byte s (s < 8, low nibble) or s - 8 (high nibble), the top 2
// bits in bits 2(s/4).. of byte 8 + s%4. Written as ggml's aux-word shuffle.
void unpack_q3_K_scales(const uint8_t* packed, int8_t* scales) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(scales, aux, 16);
}

// Inverse of unpack_q3_K_scales for codes in 0..63.
void pack_q3_K_scales(const uint8_t* codes, uint8_t* packed) {
  std::memset(packed, 0, kQ3KScaleSize);
  for (int j = 0; j < 16; ++j) {
    const int l = codes[j];
    if (j < 8) {
      packed[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      packed[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    }
    packed[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

// The index of the kValuesIQ4NL entry nearest to v (the lower one of two equally near).
uint8_t iq4_index(float v) {
  int best = 0;
  float best_err = std::fabs(v - kValuesIQ4NL[0]);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(v - kValuesIQ4NL[k]);
    if (err < best_err) best = k, best_err = err;
  }
  return static_cast<uint8_t>(best);
}

// A signed scale code c (|c| <= 31) for `scale` on the grid of step d: rounded away from zero,
// so that |c d| >= |scale| and the block's extreme never clips; 0 when d or scale is 0.
int signed_code_up(float scale, float d) {
  if (d <= 0.0f || scale == 0.0f) return 0;
  const int c = static_cast<int>(std::min(31.0f, std::ceil(std::fabs(scale) / d)));
  return scale < 0 ? -c : c;
}

}  // namespace

// ---- dequantization (ggml's dequantize_row_*) ----

// Q2_K: y = (d * sc) * q - dmin * m per 16-element sub-block, q in 0..3.
void dequant_q2_K(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    const float min = fp16_to_fp32(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = b.scales[is++];
        float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
        sc = b.scales[is++];
        dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
        }
        shift += 2;
      }
      q += 32;
    }
  }
}

// Q3_K: y = (d * (sc - 32)) * (q - 4) per 16-element sub-block, q = low 2 bits | hmask bit << 2.
// Element 32j + l of a 128-element half n takes its high bit from bit 4n + j of hmask[l].
void dequant_q3_K(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d_all = fp16_to_fp32(b.d);
    int8_t scales[16];
    unpack_q3_K_scales(b.scales, scales);
    const uint8_t* q = b.qs;
    const uint8_t* hm = b.hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * (static_cast<int8_t>((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        }
        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        }
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

// IQ4_NL: y = d * kValuesIQ4NL[code]; byte j holds element j (low nibble) and j + 16 (high).
void dequant_iq4_nl(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockIQ4_NL>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j + 0] = d * kValuesIQ4NL[b.qs[j] & 0xf];
      y[j + kQK4_NL / 2] = d * kValuesIQ4NL[b.qs[j] >> 4];
    }
    y += kQK4_NL;
  }
}

// IQ4_XS: eight 32-element sub-blocks laid out as IQ4_NL blocks, each with its own 6-bit scale
// ls (low 4 bits in scales_l, top 2 in scales_h): y = (d * (ls - 32)) * kValuesIQ4NL[code].
void dequant_iq4_xs(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockIQ4_XS>(src, i);
    const uint8_t* qs = b.qs;
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls =
          ((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b.scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * kValuesIQ4NL[qs[j] & 0xf];
        y[j + 16] = dl * kValuesIQ4NL[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

// ---- quantization ----

// Q2_K: per 16-element sub-block the range [min(0, min x), max x]; the 4-bit min codes are
// rounded up on a dmin grid that reaches the largest -min, then the 4-bit scale codes rounded
// up so that 3 steps span from the encoded low end to max x. Nothing clips; the error is at most
// half a (slightly widened) step.
void quant_q2_K(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float lo[16], hi[16];
    float max_min = 0.0f;
    for (int s = 0; s < 16; ++s) {
      const auto [mn, mx] = std::minmax_element(x + 16 * s, x + 16 * s + 16);
      lo[s] = std::min(0.0f, *mn);  // the format subtracts an offset, never adds one
      hi[s] = *mx;
      max_min = std::max(max_min, -lo[s]);
    }
    BlockQ2_K b{};
    b.dmin = fp16_round_up(max_min / 15);
    const float dmin = fp16_to_fp32(b.dmin);
    int m[16];
    float need[16];  // sub-block scale that reaches hi from the encoded low end
    float max_need = 0.0f;
    for (int s = 0; s < 16; ++s) {
      m[s] = dmin > 0.0f ? static_cast<int>(std::min(15.0f, std::ceil(-lo[s] / dmin))) : 0;
      need[s] = std::max(0.0f, (hi[s] + dmin * m[s]) / 3);
      max_need = std::max(max_need, need[s]);
    }
    b.d = fp16_round_up(max_need / 15);
    const float d = fp16_to_fp32(b.d);
    uint8_t L[kQK_K];
    for (int s = 0; s < 16; ++s) {
      const int sc = d > 0.0f ? static_cast<int>(std::min(15.0f, std::ceil(need[s] / d))) : 0;
      b.scales[s] = static_cast<uint8_t>(sc | (m[s] << 4));
      const float dl = d * sc, ml = dmin * m[s];  // the dequantizer's products
      for (int l = 0; l < 16; ++l) {
        const int q = dl > 0.0f ? nearest_int((x[16 * s + l] + ml) / dl) : 0;
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(q, 0, 3));
      }
    }
    pack_2bit(L, b.qs);
    store_block(dst, i, b);
  }
}

// Q3_K: per 16-element sub-block the extreme takes the -4 end of q - 4 in -4..3 (as ggml), the
// step widened when the other side needs more than +3; the signed 6-bit scale codes are rounded
// away from zero on a d grid that reaches the largest step. Error <= half a step.
void quant_q3_K(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float scale[16];
    float max_mag = 0.0f;
    for (int s = 0; s < 16; ++s) {
      const float* xs = x + 16 * s;
      const float ext = signed_absmax(xs, 16);
      float opp = 0.0f;  // magnitude of the largest value of the other sign
      for (int l = 0; l < 16; ++l) {
        if ((ext < 0) != (xs[l] < 0)) opp = std::max(opp, std::fabs(xs[l]));
      }
      const float mag = std::max(std::fabs(ext) / 4, opp / 3);
      scale[s] = ext < 0 ? mag : -mag;  // (q - 4) * scale = ext at q - 4 = -4
      max_mag = std::max(max_mag, mag);
    }
    BlockQ3_K b{};
    b.d = fp16_round_up(max_mag / 31);
    const float d = fp16_to_fp32(b.d);
    uint8_t codes[16];
    uint8_t L[kQK_K];
    for (int s = 0; s < 16; ++s) {
      const int c = signed_code_up(scale[s], d);
      codes[s] = static_cast<uint8_t>(c + 32);
      const float dl = d * c;
      for (int l = 0; l < 16; ++l) {
        const int q = dl != 0.0f ? nearest_int(x[16 * s + l] / dl) : 0;
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(q, -4, 3) + 4);
      }
    }
    pack_q3_K_scales(codes, b.scales);
    // The high bit of element j goes to bit j / 32 of hmask[j % 32].
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) b.hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
    }
    pack_2bit(L, b.qs);
    store_block(dst, i, b);
  }
}

// IQ4_NL: d = extreme / -127, so the extreme takes the grid's -127 end; every element then takes
// the nearest grid value. The opposite side reaches at most +127, where the grid stops at 113.
void quant_iq4_nl(const float* x, void* dst, int64_t nb) {
  constexpr int qk = kQK4_NL;
  for (int64_t i = 0; i < nb; ++i, x += qk) {
    BlockIQ4_NL b{};
    b.d = fp32_to_fp16(signed_absmax(x, qk) / -127);
    const float d = fp16_to_fp32(b.d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < qk / 2; ++j) {
      b.qs[j] = static_cast<uint8_t>(iq4_index(x[j] * id) | (iq4_index(x[j + qk / 2] * id) << 4));
    }
    store_block(dst, i, b);
  }
}

// IQ4_XS: IQ4_NL's rule per 32-element sub-block for the sub-block scale, then the signed 6-bit
// scale codes rounded away from zero on a d grid that reaches the largest of them.
void quant_iq4_xs(const float* x, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float scale[8];
    float max_abs = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scale[ib] = signed_absmax(x + 32 * ib, 32) / -127;
      max_abs = std::max(max_abs, std::fabs(scale[ib]));
    }
    BlockIQ4_XS b{};
    b.d = fp16_round_up(max_abs / 31);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = signed_code_up(scale[ib], d) + 32;
      b.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
      b.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
      const float dl = d * (ls - 32);
      const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
      const float* xs = x + 32 * ib;
      for (int j = 0; j < 16; ++j) {
        b.qs[16 * ib + j] =
            static_cast<uint8_t>(iq4_index(xs[j] * id) | (iq4_index(xs[j + 16] * id) << 4));
      }
    }
    store_block(dst, i, b);
  }
}

}  // namespace spw::gguf_detail
