// AVX-512 VNNI int8 GEMM tiles (gemm.h): 16 rows in the 16 int32 lanes of a zmm, up to 8 tokens
// per call. Per block: the 8 weight vectors (4 elements x 16 rows each) are loaded once and
// VPDPBUSD-ed against each token's broadcast 4-byte activation groups; the integer sum starts
// at the token's -128 x sum(q_x) so that it comes out as the exact signed sum. Compiled with
// the AVX-512 flags (engine/CMakeLists.txt) and -ffp-contract=off: the only fused operation is
// the explicit FMA, as in the scalar and AVX2 tiles.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_avx512_tile.h"
#include "engine/cpu/gemm_kernels.h"

namespace spw::cpu {
namespace {

template <int T>
void q8_0_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* comp,
               float* y, int64_t ys, int nr) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ8_0GroupBlockBytes;
    if (T == 1)
      _mm_prefetch(reinterpret_cast<const char*>(wb + 4 * kQ8_0GroupBlockBytes), _MM_HINT_T0);
    __m512i wv[8];
    for (int k = 0; k < 8; ++k) wv[k] = _mm512_loadu_si512(wb + 64 * k);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 512)));
    __m512i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm512_set1_epi32(comp[t * xs + b]);
    for (int k = 0; k < 8; ++k) {
      for (int t = 0; t < T; ++t) {
        const __m512i xv = _mm512_set1_epi32(load_i32(x[t * xs + b].qs + 4 * k));
        s[t] = _mm512_dpbusd_epi32(s[t], wv[k], xv);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(x[t * xs + b].d));
      acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(s[t]), acc[t]);
    }
  }
  store_tile(acc, y, ys, nr);
}

void q8_0(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* comp,
          float* y, int64_t ys, int nr, int nt) {
  static constexpr decltype(&q8_0_tile<1>) kTiles[] = {&q8_0_tile<1>, &q8_0_tile<2>, &q8_0_tile<3>,
                                                       &q8_0_tile<4>, &q8_0_tile<5>, &q8_0_tile<6>,
                                                       &q8_0_tile<7>, &q8_0_tile<8>};
  tile_for(kTiles, nt)(w, nb, x, xs, comp, y, ys, nr);
}

// Q8_0 over a packed 8-token activation tile (gemm_kernels.h's kQ8ATileBlockBytes layout): the
// same integer sums and float steps as q8_0_tile<8>, with every activation operand a 32-bit
// embedded broadcast of one base pointer (no separate broadcast instructions, one address
// register) and the block's compensations and scales beside its codes.
void q8_0_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  // The accumulators are named, not an array: as an array GCC 12 keeps them on the stack,
  // stored and reloaded every block (3-4 % slower in gemm_bench).
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ8_0GroupBlockBytes;
    const auto* xq = reinterpret_cast<const int32_t*>(xp + b * kQ8ATileBlockBytes);
    const int32_t* comp = xq + 64;
    const float* d = reinterpret_cast<const float*>(xq + 72);
    __m512i s[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) s[t] = _mm512_set1_epi32(comp[t]);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) dpbusd_tile8(s, _mm512_loadu_si512(wb + 64 * k), xq + 8 * k);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 512)));
    const auto step = [&](__m512 acc, int t) {
      return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(d[t])), _mm512_cvtepi32_ps(s[t]),
                             acc);
    };
    a0 = step(a0, 0);
    a1 = step(a1, 1);
    a2 = step(a2, 2);
    a3 = step(a3, 3);
    a4 = step(a4, 4);
    a5 = step(a5, 5);
    a6 = step(a6, 6);
    a7 = step(a7, 7);
  }
  const __m512 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  store_tile(a, y, ys, nr);
}

// Q4_K over a packed 8-token activation tile (kQ8KTileBlockBytes): per super-block, sub-block by
// sub-block, the 8 tokens' sums S_j (VPDPBUSD of the nibbles, one weight operand for 8 tokens)
// times the sub-block scale into I, and M = sum_j m_j bs_j (VPDPWSSD); exact integers as in
// q4_k_tile, then the same two float steps per super-block.
template <bool kHigh>
inline void q4_k_subblock8(const uint8_t* wb, const int32_t* xq, int j, __m512i* isum) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i s[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const __m512i wv = _mm512_loadu_si512(wb + 64 * (8 * (j & 3) + g));
    const __m512i op =
        kHigh ? _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4) : _mm512_and_si512(wv, m4);
    dpbusd_tile8(s, op, xq + 8 * (8 * j + g));
  }
  const __m512i sc =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * j)));
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], sc));
}

void q4_k_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  __m512 acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ4_KGroupBlockBytes;
    const auto* xq = reinterpret_cast<const int32_t*>(xp + b * kQ8KTileBlockBytes);
    __m512i isum[8];
    for (int t = 0; t < 8; ++t) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) q4_k_subblock8<false>(wb, xq, j, isum);
    for (int j = 4; j < 8; ++j) q4_k_subblock8<true>(wb, xq, j, isum);
    __m512i mv[4];
    for (int p = 0; p < 4; ++p) {
      mv[p] = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2176 + 32 * p)));
    }
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2304)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2336)));
    const int32_t* bsp = xq + 512;
    const float* dx = reinterpret_cast<const float*>(xq + 544);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      __m512i msum = _mm512_setzero_si512();
      dpwssd_bcast(msum, mv[0], bsp + t);
      dpwssd_bcast(msum, mv[1], bsp + 8 + t);
      dpwssd_bcast(msum, mv[2], bsp + 16 + t);
      dpwssd_bcast(msum, mv[3], bsp + 24 + t);
      const __m512 x = _mm512_set1_ps(dx[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, x), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
  store_tile(acc, y, ys, nr);
}

// Q6_K (gemm.h's Q6_K record): the u8 operand of elements 4k .. 4k + 3 (k = 0..63) of 16 rows,
// the 6-bit codes: the nibble of ql plane k % 32 (low for k < 32) under the 2 bits of qh plane
// k % 16 at bits 2 (k / 16).
template <int K>
inline __m512i q6_k_operand(const uint8_t* wb) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i lq = _mm512_loadu_si512(wb + 64 * (K % 32));
  const __m512i nib =
      K < 32 ? _mm512_and_si512(lq, m4) : _mm512_and_si512(_mm512_srli_epi16(lq, 4), m4);
  const __m512i hq = _mm512_loadu_si512(wb + 2048 + 64 * (K % 16));
  constexpr int i = K / 16;  // bits 2i .. 2i + 1 go to bits 4, 5
  const __m512i sh = i == 0   ? _mm512_slli_epi16(hq, 4)
                     : i == 1 ? _mm512_slli_epi16(hq, 2)
                     : i == 2 ? hq
                              : _mm512_srli_epi16(hq, 2);
  return _mm512_ternarylogic_epi32(sh, m30, nib, 0xEA);  // (sh & m30) | nib
}

// Q3_K (gemm.h's Q3_K record): the u8 operand of elements 4k .. 4k + 3 (k = 0..63) of 16 rows,
// the 3-bit codes: the 2 bits of plane k % 16 at bits 2 (k / 16) under bit k / 8 of the 3rd-bit
// plane k % 8 (16-bit shifts by at most 6 and 5: no bit of the neighbouring byte reaches the
// masks).
template <int K>
inline __m512i q3_k_operand(const uint8_t* wb) {
  const __m512i lq = _mm512_loadu_si512(wb + 64 * (K % 16));
  const __m512i two = _mm512_and_si512(_mm512_srli_epi16(lq, 2 * (K / 16)), _mm512_set1_epi8(3));
  const __m512i hq = _mm512_loadu_si512(wb + 1024 + 64 * (K % 8));
  constexpr int i = K / 8;  // bit i goes to bit 2
  const __m512i sh = i < 2    ? _mm512_slli_epi16(hq, 2 - i)
                     : i == 2 ? hq
                              : _mm512_srli_epi16(hq, i - 2);
  return _mm512_ternarylogic_epi32(sh, _mm512_set1_epi8(4), two, 0xEA);  // (sh & 4) | two
}

// Q2_K (gemm.h's Q2_K record): the u8 operand of elements 4k .. 4k + 3, the 2 bits of plane k % 16
// at bits 2 (k / 16).
template <int K>
inline __m512i q2_k_operand(const uint8_t* wb) {
  const __m512i lq = _mm512_loadu_si512(wb + 64 * (K % 16));
  return _mm512_and_si512(_mm512_srli_epi16(lq, 2 * (K / 16)), _mm512_set1_epi8(3));
}

// The K-quants with scales per 16-element sub-block: an offset code (Q6_K: w = q - 32, Q3_K:
// w = q - 4) with int8 scales, or (Q2_K) 4-bit scales and mins: their records' offsets (gemm.h)
// and operands.
template <int kBits>
struct Sub16 {
  static constexpr int kBytes = kBits == 6   ? kQ6_KGroupBlockBytes
                                : kBits == 3 ? kQ3_KGroupBlockBytes
                                             : kQ2_KGroupBlockBytes;
  static constexpr int kSc = kBits == 6 ? 3072 : kBits == 3 ? 1536 : 1024;  // [8][16][2]
  static constexpr int kD = kBits == 6 ? 3328 : kBits == 3 ? 1792 : 1280;
  static constexpr bool kMin = kBits == 2;                 // dmin at kD + 32
  static constexpr int kOffsetShift = kBits == 6 ? 5 : 2;  // offset 32 or 4 (not Q2_K)
  template <int K>
  static __m512i operand(const uint8_t* wb) {
    if constexpr (kBits == 6) return q6_k_operand<K>(wb);
    if constexpr (kBits == 3) return q3_k_operand<K>(wb);
    return q2_k_operand<K>(wb);
  }
};

// Row r's scale of sub-block s in 32-bit lane r: the pair (2p, 2p + 1) sign-extended to int16s;
// for Q2_K the scale nibbles, and the min nibbles into *mins.
template <int kBits>
inline __m512i q6_k_pair(const uint8_t* wb, int p, __m512i* mins = nullptr) {
  const __m256i v =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + Sub16<kBits>::kSc + 32 * p));
  if constexpr (kBits == 2) {
    const __m512i u = _mm512_cvtepu8_epi16(v);
    *mins = _mm512_srli_epi16(u, 4);
    return _mm512_and_si512(u, _mm512_set1_epi16(0x0F));
  }
  return _mm512_cvtepi8_epi16(v);
}
// Sub-block 2p + H's scales as int32 lanes: VPMADDWD of the pair by (1, 0) or (0, 1).
template <int H>
inline __m512i q6_k_scale(__m512i pair) {
  return _mm512_madd_epi16(pair, _mm512_set1_epi32(H == 0 ? 1 : 0x10000));
}

// Activation block J (elements 32J .. 32J + 31, sub-blocks 2J and 2J + 1) of a super-block for 8
// packed tokens (xq: that block's kQ8ATileBlockBytes record): I_J = sc_2J S_2J + sc_2J+1 S_2J+1 +
// offset x sc . halves (the halves negated), exact, then acc[t] = fma(d_w d_x[t], float(I_J),
// acc[t]).
template <int kBits, int J>
inline void q6_k_block8(const uint8_t* wb, const int32_t* xq, __m512 dw, __m512 dmin, __m512* acc) {
  using P = Sub16<kBits>;
  __m512i mins;
  const __m512i pr = q6_k_pair<kBits>(wb, J, &mins);
  __m512i s[8], i[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) s[t] = _mm512_setzero_si512();
  dpbusd_tile8(s, P::template operand<8 * J>(wb), xq);
  dpbusd_tile8(s, P::template operand<8 * J + 1>(wb), xq + 8);
  dpbusd_tile8(s, P::template operand<8 * J + 2>(wb), xq + 16);
  dpbusd_tile8(s, P::template operand<8 * J + 3>(wb), xq + 24);
  const __m512i sc0 = q6_k_scale<0>(pr);
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    i[t] = _mm512_mullo_epi32(s[t], sc0);
    s[t] = _mm512_setzero_si512();
  }
  dpbusd_tile8(s, P::template operand<8 * J + 4>(wb), xq + 32);
  dpbusd_tile8(s, P::template operand<8 * J + 5>(wb), xq + 40);
  dpbusd_tile8(s, P::template operand<8 * J + 6>(wb), xq + 48);
  dpbusd_tile8(s, P::template operand<8 * J + 7>(wb), xq + 56);
  const __m512i sc1 = q6_k_scale<1>(pr);
  const float* dx = reinterpret_cast<const float*>(xq + 72);
  if constexpr (P::kMin) {  // M = -(m . sums), then acc += d dx I + dmin dx M
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      i[t] = _mm512_add_epi32(i[t], _mm512_mullo_epi32(s[t], sc1));
      __m512i m = _mm512_setzero_si512();
      dpwssd_bcast(m, mins, xq + 80 + t);
      const __m512 x = _mm512_set1_ps(dx[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, x), _mm512_cvtepi32_ps(i[t]), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, x), _mm512_cvtepi32_ps(m), acc[t]);
    }
  } else {
    const __m512i p32 = _mm512_slli_epi16(pr, P::kOffsetShift);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      i[t] = _mm512_add_epi32(i[t], _mm512_mullo_epi32(s[t], sc1));
      dpwssd_bcast(i[t], p32, xq + 80 + t);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[t])), _mm512_cvtepi32_ps(i[t]),
                               acc[t]);
    }
  }
}

template <int kBits, int... J>
inline void q6_k_blocks8(const uint8_t* wb, const uint8_t* xp, __m512 dw, __m512 dmin, __m512* acc,
                         std::integer_sequence<int, J...>) {
  (q6_k_block8<kBits, J>(wb, reinterpret_cast<const int32_t*>(xp + J * kQ8ATileBlockBytes), dw,
                         dmin, acc),
   ...);
}

// Q6_K (kBits 6) and Q3_K (3) over packed 8-token BlockQ8A tiles (kQ8ATileBlockBytes, 8 records
// per super-block): the integers and float steps of q6_k_tile.
template <int kBits>
void q6_k_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  using P = Sub16<kBits>;
  __m512 acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * P::kBytes;
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD)));
    const __m512 dmin =
        P::kMin
            ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD + 32)))
            : dw;
    q6_k_blocks8<kBits>(wb, xp + 8 * b * kQ8ATileBlockBytes, dw, dmin, acc,
                        std::make_integer_sequence<int, 8>{});
  }
  store_tile(acc, y, ys, nr);
}

// Q5_K (gemm.h's Q5_K record): the u8 operand of group g of sub-block J for 16 rows, the 5-bit
// codes: the nibble of Q4_K's plane 8 (J % 4) + g (low for J < 4) under bit J of qh plane g,
// which a 16-bit shift by at most 4 moves to bit 4 of the same byte.
template <int J>
inline __m512i q5_k_operand(const uint8_t* wb, int g) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i wv = _mm512_loadu_si512(wb + 64 * (8 * (J % 4) + g));
  const __m512i nib =
      J < 4 ? _mm512_and_si512(wv, m4) : _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
  const __m512i h = _mm512_loadu_si512(wb + kQ4_KGroupBlockBytes + 64 * g);
  const __m512i sh = J < 4 ? _mm512_slli_epi16(h, 4 - J) : J == 4 ? h : _mm512_srli_epi16(h, J - 4);
  return _mm512_ternarylogic_epi32(sh, _mm512_set1_epi8(0x10), nib, 0xEA);  // (sh & 0x10) | nib
}

// Sub-block J's float factors for 16 rows: d_w sc_J and dmin_w m_J.
template <int J>
inline void q5_k_factors(const uint8_t* wb, __m512 dw, __m512 dmin, __m512& a, __m512& bm) {
  const __m512i sc =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * J)));
  a = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(sc));
  const __m512i mp = _mm512_cvtepu8_epi16(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2176 + 32 * (J / 2))));
  const __m512i m = _mm512_madd_epi16(mp, _mm512_set1_epi32(J % 2 == 0 ? 1 : 0x10000));
  bm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m));
}

// Sub-block J of a super-block for 8 packed tokens (xt: the sub-block's kQ8ATileBlockBytes record).
template <int J>
inline void q5_k_sub8(const uint8_t* wb, const uint8_t* xt, __m512 dw, __m512 dmin, __m512* acc) {
  const auto* xq = reinterpret_cast<const int32_t*>(xt);
  __m512i s[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) dpbusd_tile8(s, q5_k_operand<J>(wb, g), xq + 8 * g);
  __m512 a, bm;
  q5_k_factors<J>(wb, dw, dmin, a, bm);
  const auto* dx = reinterpret_cast<const float*>(xt + 288);
  const auto* sx = reinterpret_cast<const float*>(xt + 352);
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    acc[t] =
        _mm512_fmadd_ps(_mm512_set1_ps(dx[t]), _mm512_mul_ps(_mm512_cvtepi32_ps(s[t]), a), acc[t]);
    acc[t] = _mm512_fnmadd_ps(bm, _mm512_set1_ps(sx[t]), acc[t]);
  }
}

template <int... J>
inline void q5_k_subs8(const uint8_t* wb, const uint8_t* xp, __m512 dw, __m512 dmin, __m512* acc,
                       std::integer_sequence<int, J...>) {
  (q5_k_sub8<J>(wb, xp + J * kQ8ATileBlockBytes, dw, dmin, acc), ...);
}

// Q5_K over packed 8-token BlockQ8A tiles (8 records per super-block): the integers and float
// steps of q5_k_tile.
void q5_k_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  __m512 acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ5_KGroupBlockBytes;
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2304)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2336)));
    q5_k_subs8(wb, xp + 8 * b * kQ8ATileBlockBytes, dw, dmin, acc,
               std::make_integer_sequence<int, 8>{});
  }
  store_tile(acc, y, ys, nr);
}

// Q5_K, T <= 4 tokens of BlockQ8A activations (decode, and the tokens past the last 8-token
// tile): the integers and float steps of q5_k_tile8p.
template <int T>
void q5_k_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t*,
               float* y, int64_t ys, int nr) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ5_KGroupBlockBytes;
    if (T == 1) prefetch_record_ahead<kQ5_KGroupBlockBytes>(wb);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2304)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2336)));
    const auto sub = [&]<int J>() {
      __m512i s[T];
      for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
      for (int g = 0; g < 8; ++g) {
        const __m512i v = q5_k_operand<J>(wb, g);
        for (int t = 0; t < T; ++t) {
          const int8_t* q = x[t * xs + 8 * b + J].qs + 4 * g;
          s[t] = _mm512_dpbusd_epi32(s[t], v, _mm512_set1_epi32(load_i32(q)));
        }
      }
      __m512 a, bm;
      q5_k_factors<J>(wb, dw, dmin, a, bm);
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = x[t * xs + 8 * b + J];
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(xb.d), _mm512_mul_ps(_mm512_cvtepi32_ps(s[t]), a),
                                 acc[t]);
        acc[t] = _mm512_fnmadd_ps(bm, _mm512_set1_ps(xb.s), acc[t]);
      }
    };
    [&]<int... J>(std::integer_sequence<int, J...>) { (sub.template operator()<J>(), ...); }
    (std::make_integer_sequence<int, 8>{});
  }
  store_tile(acc, y, ys, nr);
}

void q5_k(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* c, float* y,
          int64_t ys, int nr, int nt) {
  static constexpr decltype(&q5_k_tile<1>) kTiles[] = {&q5_k_tile<1>, &q5_k_tile<2>, &q5_k_tile<3>,
                                                       &q5_k_tile<4>};
  tile_for(kTiles, nt)(w, nb, x, xs, c, y, ys, nr);
}

// Q6_K (kBits 6) and Q3_K (3), T <= 4 tokens of BlockQ8A activations (decode, and the tokens
// past the last 8-token tile): per super-block and 32-element activation block j, the integers
// and the float step of q6_k_tile8p.
template <int kBits, int T>
void q6_k_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
               float* y, int64_t ys, int nr) {
  using P = Sub16<kBits>;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * P::kBytes;
    if (T == 1) prefetch_record_ahead<P::kBytes>(wb);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD)));
    const __m512 dmin =
        P::kMin
            ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD + 32)))
            : dw;
    const auto block = [&]<int J>() {
      __m512i mins;
      const __m512i pr = q6_k_pair<kBits>(wb, J, &mins);
      __m512i i[T];
      const auto half = [&]<int H>() {
        __m512i s[T];
        for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
        const auto op = [&]<int K>() {
          const __m512i v = P::template operand<8 * J + 4 * H + K>(wb);
          for (int t = 0; t < T; ++t) {
            const int8_t* q = x[t * xs + 8 * b + J].qs + 16 * H + 4 * K;
            s[t] = _mm512_dpbusd_epi32(s[t], v, _mm512_set1_epi32(load_i32(q)));
          }
        };
        op.template operator()<0>();
        op.template operator()<1>();
        op.template operator()<2>();
        op.template operator()<3>();
        const __m512i sc = q6_k_scale<H>(pr);
        for (int t = 0; t < T; ++t) {
          const __m512i p = _mm512_mullo_epi32(s[t], sc);
          i[t] = H == 0 ? p : _mm512_add_epi32(i[t], p);
        }
      };
      half.template operator()<0>();
      half.template operator()<1>();
      for (int t = 0; t < T; ++t) {
        const int64_t xb = t * xs + 8 * b + J;
        const __m512 xd = _mm512_set1_ps(x[xb].d);
        if constexpr (P::kMin) {
          const __m512i m =
              _mm512_dpwssd_epi32(_mm512_setzero_si512(), mins, _mm512_set1_epi32(halves[xb]));
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(i[t]), acc[t]);
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, xd), _mm512_cvtepi32_ps(m), acc[t]);
        } else {
          const __m512i p32 = _mm512_slli_epi16(pr, P::kOffsetShift);
          i[t] = _mm512_dpwssd_epi32(i[t], p32, _mm512_set1_epi32(halves[xb]));
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(i[t]), acc[t]);
        }
      }
    };
    [&]<int... J>(std::integer_sequence<int, J...>) { (block.template operator()<J>(), ...); }
    (std::make_integer_sequence<int, 8>{});
  }
  store_tile(acc, y, ys, nr);
}

template <int kBits>
void q6_k(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* bs, float* y,
          int64_t ys, int nr, int nt) {
  static constexpr decltype(&q6_k_tile<kBits, 1>) kTiles[] = {
      &q6_k_tile<kBits, 1>, &q6_k_tile<kBits, 2>, &q6_k_tile<kBits, 3>, &q6_k_tile<kBits, 4>};
  tile_for(kTiles, nt)(w, nb, x, xs, bs, y, ys, nr);
}

// Q4_K (gemm.h's Q4_K record): per super-block and token, I = sum_j sc_j S_j (VPDPBUSD of the
// nibbles against the token's codes, VPMULLD by the sub-block scales) and M = sum_j m_j bs_j
// (VPDPWSSD of the mins against the token's sub-block sums), exact integers; then
// acc = fma(d dx, I, acc), acc = fma(-dmin dx, M, acc).
template <int T>
void q4_k_tile(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
               float* y, int64_t ys, int nr) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ4_KGroupBlockBytes;
    if (T == 1) prefetch_record_ahead<kQ4_KGroupBlockBytes>(wb);
    __m512i isum[T], msum[T];
    for (int t = 0; t < T; ++t) isum[t] = msum[t] = _mm512_setzero_si512();
    for (int jj = 0; jj < 4; ++jj) {
      __m512i slo[T], shi[T];
      for (int t = 0; t < T; ++t) slo[t] = shi[t] = _mm512_setzero_si512();
      for (int kk = 0; kk < 8; ++kk) {
        const int k = 8 * jj + kk;
        const __m512i wv = _mm512_loadu_si512(wb + 64 * k);
        const __m512i lo = _mm512_and_si512(wv, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
        for (int t = 0; t < T; ++t) {
          const int8_t* q = x[t * xs + b].qs;
          slo[t] = _mm512_dpbusd_epi32(slo[t], lo, _mm512_set1_epi32(load_i32(q + 4 * k)));
          shi[t] = _mm512_dpbusd_epi32(shi[t], hi, _mm512_set1_epi32(load_i32(q + 128 + 4 * k)));
        }
      }
      const __m512i sc_lo = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * jj)));
      const __m512i sc_hi = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * (jj + 4))));
      for (int t = 0; t < T; ++t) {
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(slo[t], sc_lo),
                                                             _mm512_mullo_epi32(shi[t], sc_hi)));
      }
    }
    for (int p = 0; p < 4; ++p) {
      const __m512i mv = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2176 + 32 * p)));
      for (int t = 0; t < T; ++t) {
        const int16_t* s = bs + (t * xs + b) * 8 + 2 * p;
        int32_t pair;
        std::memcpy(&pair, s, sizeof pair);
        msum[t] = _mm512_dpwssd_epi32(msum[t], mv, _mm512_set1_epi32(pair));
      }
    }
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2304)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2336)));
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(x[t * xs + b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(msum[t]), acc[t]);
    }
  }
  store_tile(acc, y, ys, nr);
}

void q4_k(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
          float* y, int64_t ys, int nr, int nt) {
  static constexpr decltype(&q4_k_tile<1>) kTiles[] = {&q4_k_tile<1>, &q4_k_tile<2>, &q4_k_tile<3>,
                                                       &q4_k_tile<4>};
  tile_for(kTiles, nt)(w, nb, x, xs, bs, y, ys, nr);
}

}  // namespace

const GemmKernels* gemm_kernels_avx512() {
  static const GemmKernels k = [] {
    GemmKernels g{.q8_0 = &q8_0,
                  .q4_k = &q4_k,
                  .max_tokens_k = 4,
                  .max_tokens = 8,
                  .uses_comp = true,
                  .q8_0_tile8 = &q8_0_tile8p,
                  .q4_k_tile8 = &q4_k_tile8p,
                  .q6_k = &q6_k<6>,
                  .q6_k_tile8 = &q6_k_tile8p<6>,
                  .max_tokens_6 = 4,
                  .q5_k = &q5_k,
                  .q5_k_tile8 = &q5_k_tile8p};
    g.q3_k = &q6_k<3>;
    g.q3_k_tile8 = &q6_k_tile8p<3>;
    g.q2_k = &q6_k<2>;
    g.q2_k_tile8 = &q6_k_tile8p<2>;
    add_low_bit_tiles_avx512(g);
    add_packers_avx512(g);
    return g;
  }();
  return &k;
}

}  // namespace spw::cpu
#else
#include "engine/cpu/gemm_kernels.h"
namespace spw::cpu {
const GemmKernels* gemm_kernels_avx512() { return nullptr; }
}  // namespace spw::cpu
#endif
