// The int8 GEMM's portable tiles and the repacking of the low-bit types: the 32-element block
// types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL), IQ4_XS, Q3_K and Q2_K (gemm.h has the
// layouts). The tiles
// compute what the AVX-512 tiles (gemm_avx512_low_bit.cpp) compute, bit for bit
// (-ffp-contract=off).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/common/fp16.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernels.h"

namespace spw::cpu {
namespace {

// The 32-element block types (slot S of b32_slot()): the code of element e of row r, as the
// u8 the VPDPBUSD operand holds (IQ4_NL: its value + 128), and the offset it carries.
template <int S>
void b32_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
                float* y, int64_t ys, int nr, int nt) {
  constexpr bool kQh = S == 2 || S == 3, kMin = S == 1 || S == 3, kTable = S == 4;
  constexpr int kOffset = S == 0 ? 8 : S == 2 ? 16 : S == 4 ? 128 : 0;
  constexpr int kD = kQh ? 320 : 256;
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kB32GroupBlockBytes[S];
        const BlockQ8A& xb = x[t * xs + b];
        int16_t neg[2];
        std::memcpy(neg, halves + t * xs + b, sizeof neg);
        int32_t sum = kOffset * (neg[0] + neg[1]);
        for (int e = 0; e < 32; ++e) {
          const uint8_t byte = wb[64 * ((e % 16) / 4) + 4 * r + e % 4];
          int q = e < 16 ? byte & 0x0F : byte >> 4;
          if (kQh) q |= ((wb[256 + 4 * r + e % 4] >> (e / 4)) & 1) << 4;
          if (kTable) q = kValuesIQ4NL[q] + 128;
          sum += q * xb.qs[e];
        }
        uint16_t hd;
        std::memcpy(&hd, wb + kD + 2 * r, sizeof hd);
        acc = std::fma(fp16_to_fp32(hd) * xb.d, static_cast<float>(sum), acc);
        if (kMin) {
          uint16_t hm;
          std::memcpy(&hm, wb + kD + 32 + 2 * r, sizeof hm);
          acc = std::fma(fp16_to_fp32(hm), xb.s, acc);
        }
      }
      y[t * ys + r] = acc;
    }
  }
}

// The 32-element block types: per block, the file's 16 code bytes of each row as 4-byte words
// (plane k holds elements 4k .. 4k + 3 in the low nibbles, 16 + 4k .. in the high ones), the 5th
// bits (Q5_0, Q5_1: bit e of the file's qh is element e's) regrouped so that bit k of byte
// (r, j) is element 4k + j's, then d and m.
template <typename Block>
void pack_b32_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                    uint8_t* gd, int record_bytes) {
  constexpr bool kQh = requires(Block blk) { blk.qh; };
  constexpr bool kMin = requires(Block blk) { blk.m; };
  constexpr int kD = kQh ? 320 : 256;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + b * record_bytes;
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const int64_t row = g * kGemmGroupRows + r;
      Block blk{};  // the padding rows: d = m = 0, codes 0
      if (row < n_out) std::memcpy(&blk, src + row * rs + b * sizeof(Block), sizeof blk);
      for (int k = 0; k < 4; ++k) std::memcpy(out + 64 * k + 4 * r, blk.qs + 4 * k, 4);
      if constexpr (kQh) {
        uint32_t qh;
        std::memcpy(&qh, blk.qh, sizeof qh);
        for (int j = 0; j < 4; ++j) {  // bits j, j + 4, ..., j + 28 of qh to bits 0..7
          uint32_t v = (qh >> j) & 0x11111111u;
          v = (v | (v >> 3)) & 0x03030303u;
          v = (v | (v >> 6)) & 0x000F000Fu;
          out[256 + 4 * r + j] = static_cast<uint8_t>(v | (v >> 12));
        }
      }
      std::memcpy(out + kD + 2 * r, &blk.d, sizeof blk.d);
      if constexpr (kMin) std::memcpy(out + kD + 32 + 2 * r, &blk.m, sizeof blk.m);
    }
  }
}

// IQ4_XS: per super-block and 32-element sub-block j, S_j as IQ4_NL's (the plane base 256 j),
// I_j = sc_j S_j (exact), then acc = fma(d_w d_x[j], float(I_j), acc).
void iq4_xs_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs,
                   const int32_t* halves, float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kIQ4_XSGroupBlockBytes;
        uint16_t hd;
        std::memcpy(&hd, wb + 2176 + 2 * r, sizeof hd);
        const float dw = fp16_to_fp32(hd);
        for (int j = 0; j < 8; ++j) {
          const BlockQ8A& xb = x[t * xs + 8 * b + j];
          int16_t neg[2];
          std::memcpy(neg, halves + t * xs + 8 * b + j, sizeof neg);
          int32_t sum = 128 * (neg[0] + neg[1]);
          for (int e = 0; e < 32; ++e) {
            const uint8_t byte = wb[256 * j + 64 * ((e % 16) / 4) + 4 * r + e % 4];
            sum += (kValuesIQ4NL[e < 16 ? byte & 0x0F : byte >> 4] + 128) * xb.qs[e];
          }
          const auto sc = static_cast<int8_t>(wb[2048 + 16 * j + r]);
          acc = std::fma(dw * xb.d, static_cast<float>(sc * sum), acc);
        }
      }
      y[t * ys + r] = acc;
    }
  }
}

// IQ4_XS: per super-block, sub-block j's 16 code bytes of each row as IQ4_NL's (plane 4j + k),
// the 6-bit scales as int8 ls - 32, d.
void pack_iq4_xs_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                       uint8_t* gd) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + b * kIQ4_XSGroupBlockBytes;
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const int64_t row = g * kGemmGroupRows + r;
      BlockIQ4_XS blk{};  // the padding rows: d = 0, codes 0, scales -32
      if (row < n_out) std::memcpy(&blk, src + row * rs + b * sizeof(BlockIQ4_XS), sizeof blk);
      for (int j = 0; j < 8; ++j) {
        for (int k = 0; k < 4; ++k)
          std::memcpy(out + 256 * j + 64 * k + 4 * r, blk.qs + 16 * j + 4 * k, 4);
        const int ls = ((blk.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) |
                       (((blk.scales_h >> (2 * j)) & 3) << 4);
        out[2048 + 16 * j + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
      }
      std::memcpy(out + 2176 + 2 * r, &blk.d, sizeof blk.d);
    }
  }
}

// Q3_K: per super-block and activation block j, I_j = sum over s = 2j, 2j + 1 of sc_s (S_s - 4 h_s)
// (S_s the sum of q x over the sub-block's 16 elements, h_s the negated sum of their codes), then
// acc = fma(d_w d_x[j], float(I_j), acc): Q6_K's steps (gemm.cpp's q6_k_scalar).
void q3_k_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
                 float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kQ3_KGroupBlockBytes;
        uint16_t hd;
        std::memcpy(&hd, wb + 1792 + 2 * r, sizeof hd);
        const float dw = fp16_to_fp32(hd);
        for (int j = 0; j < 8; ++j) {
          const BlockQ8A& xb = x[t * xs + 8 * b + j];
          int16_t neg[2];
          std::memcpy(neg, halves + t * xs + 8 * b + j, sizeof neg);
          int32_t i32 = 0;
          for (int h = 0; h < 2; ++h) {
            const int s = 2 * j + h;
            int32_t sum = 0;
            for (int e = 16 * s; e < 16 * s + 16; ++e) {
              const uint8_t two = wb[64 * ((e % 64) / 4) + 4 * r + e % 4];
              const uint8_t hb = wb[1024 + 64 * ((e % 32) / 4) + 4 * r + e % 4];
              const int q = ((two >> (2 * (e / 64))) & 3) | (((hb >> (e / 32)) & 1) << 2);
              sum += q * xb.qs[e % 32];
            }
            const auto sc = static_cast<int8_t>(wb[1536 + 32 * j + 2 * r + h]);
            i32 += sc * sum + 4 * sc * neg[h];
          }
          acc = std::fma(dw * xb.d, static_cast<float>(i32), acc);
        }
      }
      y[t * ys + r] = acc;
    }
  }
}

// Q3_K: the codes q = w + 4 of element e (the file's low 2 bits at bits 2 ((e % 128) / 32) of
// qs[32 (e / 128) + e % 32], the 3rd bit at bit e / 32 of hmask[e % 32]) into the 2-bit and 1-bit
// planes, the 16 six-bit scales (low 4 bits in the nibbles of bytes 0..7, top 2 at bits
// 2 (s / 4) of byte 8 + s % 4) minus 32, d.
void pack_q3_k_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                     uint8_t* gd) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + b * kQ3_KGroupBlockBytes;
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const int64_t row = g * kGemmGroupRows + r;
      BlockQ3_K blk{};  // the padding rows: d = 0
      if (row < n_out) std::memcpy(&blk, src + row * rs + b * sizeof(BlockQ3_K), sizeof blk);
      pack_2bit_planes(blk.qs, r, out);
      // bit i of hmask[l] is the 3rd bit of element 32 i + l: plane g is hmask[4g .. 4g + 3]
      for (int k = 0; k < 8; ++k) std::memcpy(out + 1024 + 64 * k + 4 * r, blk.hmask + 4 * k, 4);
      for (int s = 0; s < 16; ++s) {
        const int lo = s < 8 ? blk.scales[s] & 0x0F : blk.scales[s - 8] >> 4;
        const int hi = (blk.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        out[1536 + 32 * (s / 2) + 2 * r + s % 2] =
            static_cast<uint8_t>(static_cast<int8_t>((lo | (hi << 4)) - 32));
      }
      std::memcpy(out + 1792 + 2 * r, &blk.d, sizeof blk.d);
    }
  }
}

// Q2_K: per super-block and activation block j, I_j = sum over s = 2j, 2j + 1 of sc_s S_s and
// M_j = sum of m_s times the negated code sums (exact), then acc = fma(d_w d_x[j], I_j, acc) and
// acc = fma(dmin_w d_x[j], M_j, acc).
void q2_k_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
                 float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kQ2_KGroupBlockBytes;
        uint16_t hd, hm;
        std::memcpy(&hd, wb + 1280 + 2 * r, sizeof hd);
        std::memcpy(&hm, wb + 1312 + 2 * r, sizeof hm);
        const float dw = fp16_to_fp32(hd), dmin = fp16_to_fp32(hm);
        for (int j = 0; j < 8; ++j) {
          const BlockQ8A& xb = x[t * xs + 8 * b + j];
          int16_t neg[2];
          std::memcpy(neg, halves + t * xs + 8 * b + j, sizeof neg);
          int32_t isum = 0, msum = 0;
          for (int h = 0; h < 2; ++h) {
            const int s = 2 * j + h;
            int32_t sum = 0;
            for (int e = 16 * s; e < 16 * s + 16; ++e) {
              const uint8_t two = wb[64 * ((e % 64) / 4) + 4 * r + e % 4];
              sum += ((two >> (2 * (e / 64))) & 3) * xb.qs[e % 32];
            }
            const uint8_t sm = wb[1024 + 32 * j + 2 * r + h];
            isum += (sm & 0x0F) * sum;
            msum += (sm >> 4) * neg[h];
          }
          acc = std::fma(dw * xb.d, static_cast<float>(isum), acc);
          acc = std::fma(dmin * xb.d, static_cast<float>(msum), acc);
        }
      }
      y[t * ys + r] = acc;
    }
  }
}

// Q2_K: the codes' 2-bit planes (the file's qs in Q3_K's layout), the scale bytes in pairs, d,
// dmin.
void pack_q2_k_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                     uint8_t* gd) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + b * kQ2_KGroupBlockBytes;
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const int64_t row = g * kGemmGroupRows + r;
      BlockQ2_K blk{};  // the padding rows: d = dmin = 0
      if (row < n_out) std::memcpy(&blk, src + row * rs + b * sizeof(BlockQ2_K), sizeof blk);
      pack_2bit_planes(blk.qs, r, out);
      for (int j = 0; j < 8; ++j) std::memcpy(out + 1024 + 32 * j + 2 * r, blk.scales + 2 * j, 2);
      std::memcpy(out + 1280 + 2 * r, &blk.d, sizeof blk.d);
      std::memcpy(out + 1312 + 2 * r, &blk.dmin, sizeof blk.dmin);
    }
  }
}

}  // namespace

void pack_2bit_planes(const uint8_t* q2, int r, uint8_t* out) {
  for (int k = 0; k < 16; ++k) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      uint32_t w;
      std::memcpy(&w, q2 + 32 * (i / 2) + 4 * (k % 8), sizeof w);
      v |= ((w >> (2 * (2 * (i % 2) + k / 8))) & 0x03030303u) << (2 * i);
    }
    std::memcpy(out + 64 * k + 4 * r, &v, sizeof v);
  }
}

void add_low_bit_tiles_scalar(GemmKernels& k) {
  k.q3_k = &q3_k_scalar;
  k.q2_k = &q2_k_scalar;
  k.b32[0] = &b32_scalar<0>;
  k.b32[1] = &b32_scalar<1>;
  k.b32[2] = &b32_scalar<2>;
  k.b32[3] = &b32_scalar<3>;
  k.b32[4] = &b32_scalar<4>;
  k.iq4_xs = &iq4_xs_scalar;
}

void pack_low_bit_group(GgmlType type, const uint8_t* src, size_t rs, int64_t g, int64_t nb,
                        int64_t n_out, uint8_t* gd) {
  switch (type) {
    case GgmlType::Q4_0:
      return pack_b32_group<BlockQ4_0>(src, rs, g, nb, n_out, gd, kB32GroupBlockBytes[0]);
    case GgmlType::Q4_1:
      return pack_b32_group<BlockQ4_1>(src, rs, g, nb, n_out, gd, kB32GroupBlockBytes[1]);
    case GgmlType::Q5_0:
      return pack_b32_group<BlockQ5_0>(src, rs, g, nb, n_out, gd, kB32GroupBlockBytes[2]);
    case GgmlType::Q5_1:
      return pack_b32_group<BlockQ5_1>(src, rs, g, nb, n_out, gd, kB32GroupBlockBytes[3]);
    case GgmlType::IQ4_NL:
      return pack_b32_group<BlockIQ4_NL>(src, rs, g, nb, n_out, gd, kB32GroupBlockBytes[4]);
    case GgmlType::Q3_K:
      return pack_q3_k_group(src, rs, g, nb, n_out, gd);
    case GgmlType::Q2_K:
      return pack_q2_k_group(src, rs, g, nb, n_out, gd);
    default:
      return pack_iq4_xs_group(src, rs, g, nb, n_out, gd);
  }
}

}  // namespace spw::cpu
