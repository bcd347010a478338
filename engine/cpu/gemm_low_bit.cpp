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

// Slot S of b32_slot(): the exact integer sum S of row r's 32-element block wb (a b32 record, or
// an IQ4_XS sub-block's planes) against xb: the codes as the u8 the VPDPBUSD operand holds (IQ4_NL:
// its value + 128) times xb's codes, minus the offset times their sum (-neg: the negated halves).
template <int S>
int32_t b32_sum(const uint8_t* wb, int r, const BlockQ8A& xb, const int32_t& neg_halves) {
  constexpr bool kQh = S == 2 || S == 3, kTable = S == 4;
  constexpr int kOffset = S == 0 ? 8 : S == 2 ? 16 : S == 4 ? 128 : 0;
  int16_t neg[2];
  std::memcpy(neg, &neg_halves, sizeof neg);
  int32_t sum = kOffset * (neg[0] + neg[1]);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = wb[64 * ((e % 16) / 4) + 4 * r + e % 4];
    int q = e < 16 ? byte & 0x0F : byte >> 4;
    if (kQh) q |= ((wb[256 + 4 * r + e % 4] >> (e / 4)) & 1) << 4;
    if (kTable) q = kValuesIQ4NL[q] + 128;
    sum += q * xb.qs[e];
  }
  return sum;
}

// The 32-element block types: per block b32_sum, then acc = fma(d_w d_x, float(S), acc) and, for
// Q4_1 and Q5_1, acc = fma(m_w, s_x, acc).
template <int S>
void b32_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
                float* y, int64_t ys, int nr, int nt) {
  constexpr bool kMin = S == 1 || S == 3;
  constexpr int kD = S == 2 || S == 3 ? 320 : 256;
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kB32GroupBlockBytes[S];
        const BlockQ8A& xb = x[t * xs + b];
        const int32_t sum = b32_sum<S>(wb, r, xb, halves[t * xs + b]);
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
  // The padding rows: d = m = 0, codes 0.
  for_each_group_block<Block>(
      src, rs, g, nb, n_out, gd, record_bytes, [&](const Block& blk, int r, uint8_t* out) {
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
      });
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
          const int32_t sum = b32_sum<4>(wb + 256 * j, r, xb, halves[t * xs + 8 * b + j]);
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
  // The padding rows: d = 0, codes 0, scales -32.
  for_each_group_block<BlockIQ4_XS>(
      src, rs, g, nb, n_out, gd, kIQ4_XSGroupBlockBytes,
      [&](const BlockIQ4_XS& blk, int r, uint8_t* out) {
        for (int j = 0; j < 8; ++j) {
          for (int k = 0; k < 4; ++k)
            std::memcpy(out + 256 * j + 64 * k + 4 * r, blk.qs + 16 * j + 4 * k, 4);
          const int ls = ((blk.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) |
                         (((blk.scales_h >> (2 * j)) & 3) << 4);
          out[2048 + 16 * j + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
        }
        std::memcpy(out + 2176 + 2 * r, &blk.d, sizeof blk.d);
      });
}

// The K-quants with a scale per 16-element sub-block (kBits 6: Q6_K, 3: Q3_K, 2: Q2_K; the AVX-512
// tiles' Sub16): per super-block and activation block j, S_s = sum of q x over sub-block s's 16
// elements and h_s the negated sum of their activation codes (exact integers); Q6_K and Q3_K:
// I_j = sum over s = 2j, 2j + 1 of sc_s (S_s - offset h_s) (offset 32, 4; |I_j| < 2^24), then
// acc = fma(d_w d_x[j], float(I_j), acc); Q2_K: I_j = sum sc_s S_s and M_j = sum m_s h_s, then
// acc = fma(d_w d_x[j], float(I_j), acc), acc = fma(dmin_w d_x[j], float(M_j), acc).
template <int kBits>
void sub16_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs,
                  const int32_t* halves, float* y, int64_t ys, int nr, int nt) {
  constexpr int kBytes = kBits == 6   ? kQ6_KGroupBlockBytes
                         : kBits == 3 ? kQ3_KGroupBlockBytes
                                      : kQ2_KGroupBlockBytes;
  constexpr int kSc = kBits == 6 ? 3072 : kBits == 3 ? 1536 : 1024;  // [8][16][2]
  constexpr int kD = kBits == 6 ? 3328 : kBits == 3 ? 1792 : 1280;   // dmin (Q2_K) at kD + 32
  constexpr int kOffset = kBits == 6 ? 32 : 4;
  // The code of element e of row r (gemm.h's records).
  const auto code = [](const uint8_t* wb, int r, int e) {
    if constexpr (kBits == 6) {
      const uint8_t lo = wb[64 * ((e % 128) / 4) + 4 * r + e % 4];
      const uint8_t hi = wb[2048 + 64 * ((e % 64) / 4) + 4 * r + e % 4];
      return (e < 128 ? lo & 0x0F : lo >> 4) | (((hi >> (2 * (e / 64))) & 3) << 4);
    }
    const int two = (wb[64 * ((e % 64) / 4) + 4 * r + e % 4] >> (2 * (e / 64))) & 3;
    if constexpr (kBits == 2) return two;
    const uint8_t hb = wb[1024 + 64 * ((e % 32) / 4) + 4 * r + e % 4];
    return two | (((hb >> (e / 32)) & 1) << 2);
  };
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kBytes;
        uint16_t hd, hm = 0;
        std::memcpy(&hd, wb + kD + 2 * r, sizeof hd);
        if (kBits == 2) std::memcpy(&hm, wb + kD + 32 + 2 * r, sizeof hm);
        const float dw = fp16_to_fp32(hd), dmin = fp16_to_fp32(hm);
        for (int j = 0; j < 8; ++j) {
          const BlockQ8A& xb = x[t * xs + 8 * b + j];
          int16_t neg[2];
          std::memcpy(neg, halves + t * xs + 8 * b + j, sizeof neg);
          int32_t isum = 0, msum = 0;
          for (int h = 0; h < 2; ++h) {
            const int s = 2 * j + h;
            int32_t sum = 0;
            for (int e = 16 * s; e < 16 * s + 16; ++e) sum += code(wb, r, e) * xb.qs[e % 32];
            const uint8_t sc = wb[kSc + 32 * j + 2 * r + h];
            if constexpr (kBits == 2) {  // the scale in the low nibble, the min in the high one
              isum += (sc & 0x0F) * sum;
              msum += (sc >> 4) * neg[h];
            } else {
              const auto sc8 = static_cast<int8_t>(sc);
              isum += sc8 * sum + kOffset * sc8 * neg[h];
            }
          }
          acc = std::fma(dw * xb.d, static_cast<float>(isum), acc);
          if (kBits == 2) acc = std::fma(dmin * xb.d, static_cast<float>(msum), acc);
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
  // The padding rows: d = 0.
  const auto pack = [](const BlockQ3_K& blk, int r, uint8_t* out) {
    pack_2bit_planes(blk.qs, r, out);
    // bit i of hmask[l] is the 3rd bit of element 32 i + l: plane g is hmask[4g .. 4g + 3]
    for (int k = 0; k < 8; ++k) std::memcpy(out + 1024 + 64 * k + 4 * r, blk.hmask + 4 * k, 4);
    for (int s = 0; s < 16; ++s) {
      out[1536 + 32 * (s / 2) + 2 * r + s % 2] = static_cast<uint8_t>(q3_k_scale(blk.scales, s));
    }
    std::memcpy(out + 1792 + 2 * r, &blk.d, sizeof blk.d);
  };
  for_each_group_block<BlockQ3_K>(src, rs, g, nb, n_out, gd, kQ3_KGroupBlockBytes, pack);
}

// Q2_K: the codes' 2-bit planes (the file's qs in Q3_K's layout), the scale bytes in pairs, d,
// dmin.
void pack_q2_k_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                     uint8_t* gd) {
  // The padding rows: d = dmin = 0.
  for_each_group_block<BlockQ2_K>(src, rs, g, nb, n_out, gd, kQ2_KGroupBlockBytes,
                                  [&](const BlockQ2_K& blk, int r, uint8_t* out) {
                                    pack_2bit_planes(blk.qs, r, out);
                                    for (int j = 0; j < 8; ++j)
                                      std::memcpy(out + 1024 + 32 * j + 2 * r, blk.scales + 2 * j,
                                                  2);
                                    std::memcpy(out + 1280 + 2 * r, &blk.d, sizeof blk.d);
                                    std::memcpy(out + 1312 + 2 * r, &blk.dmin, sizeof blk.dmin);
                                  });
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
  k.q6_k = &sub16_scalar<6>;
  k.q3_k = &sub16_scalar<3>;
  k.q2_k = &sub16_scalar<2>;
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
