// AVX-512 VNNI int8 GEMM tiles (gemm.h) of the types whose 4-bit codes stand for values by a
// rule other than the K-quants' scale and min: the 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL) and IQ4_XS. Compiled as gemm_avx512.cpp (its flags and -ffp-contract=off).
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

// The 32-element block types (gemm.h's "32-element blocks"), slot S of b32_slot(): what the
// record holds and the offset of the codes.
template <int S>
struct B32 {
  static constexpr bool kQh = S == 2 || S == 3;   // Q5_0, Q5_1: a 5th-bit plane at 256
  static constexpr bool kMin = S == 1 || S == 3;  // Q4_1, Q5_1: m after d
  static constexpr bool kTable = S == 4;          // IQ4_NL: the code indexes kValuesIQ4NL
  static constexpr int kOffset = S == 0 ? 8 : S == 2 ? 16 : S == 4 ? 128 : 0;  // w = u8 - offset
  static constexpr int kBytes = kB32GroupBlockBytes[S];
  static constexpr int kD = kQh ? 320 : 256;
};

// Slot S's u8 operand of elements 4k .. 4k + 3 (k = 0..7) of 16 rows: the nibble of plane k % 4
// (low for k < 4), under bit k of the qh plane (Q5_0, Q5_1), or looked up as value + 128
// (IQ4_NL: VPSHUFB of the 16 values).
template <int S, int K>
inline __m512i b32_operand(const uint8_t* wb, __m512i table) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i wv = _mm512_loadu_si512(wb + 64 * (K % 4));
  const __m512i nib =
      K < 4 ? _mm512_and_si512(wv, m4) : _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
  if constexpr (B32<S>::kTable) return _mm512_shuffle_epi8(table, nib);
  if constexpr (!B32<S>::kQh) return nib;
  const __m512i h = _mm512_loadu_si512(wb + 256);
  const __m512i sh = K < 4 ? _mm512_slli_epi16(h, 4 - K) : K == 4 ? h : _mm512_srli_epi16(h, K - 4);
  return _mm512_ternarylogic_epi32(sh, _mm512_set1_epi8(0x10), nib, 0xEA);  // (sh & 0x10) | nib
}

// IQ4_NL's VPSHUFB table: kValuesIQ4NL[i] + 128 in byte i of each 128-bit lane.
inline __m512i b32_table() {
  alignas(16) uint8_t v[16];
  for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(kValuesIQ4NL[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
}

// Slot S's exact integer sums of one 32-element block wb (a b32 record, or an IQ4_XS sub-block's
// planes) for the 8 tokens of a packed tile record xq: -offset x the token's code sum (VPDPWSSD
// of (offset, offset) against its negated halves) + the VPDPBUSDs of the 8 operands.
template <int S>
inline void b32_sums8(const uint8_t* wb, const int32_t* xq, __m512i table, __m512i (&s)[8]) {
  const __m512i off = _mm512_set1_epi32(B32<S>::kOffset * 0x10001);
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    s[t] = _mm512_setzero_si512();
    if constexpr (B32<S>::kOffset != 0) dpwssd_bcast(s[t], off, xq + 80 + t);
  }
  dpbusd_tile8(s, b32_operand<S, 0>(wb, table), xq);
  dpbusd_tile8(s, b32_operand<S, 1>(wb, table), xq + 8);
  dpbusd_tile8(s, b32_operand<S, 2>(wb, table), xq + 16);
  dpbusd_tile8(s, b32_operand<S, 3>(wb, table), xq + 24);
  dpbusd_tile8(s, b32_operand<S, 4>(wb, table), xq + 32);
  dpbusd_tile8(s, b32_operand<S, 5>(wb, table), xq + 40);
  dpbusd_tile8(s, b32_operand<S, 6>(wb, table), xq + 48);
  dpbusd_tile8(s, b32_operand<S, 7>(wb, table), xq + 56);
}

// The same sums for T tokens of BlockQ8A blocks: token t's block at x[t * xs], its negated
// halves at halves[t * xs].
template <int S, int T>
inline void b32_sums(const uint8_t* wb, const BlockQ8A* x, const int32_t* halves, int64_t xs,
                     __m512i table, __m512i (&s)[T]) {
  const __m512i off = _mm512_set1_epi32(B32<S>::kOffset * 0x10001);
  for (int t = 0; t < T; ++t) {
    s[t] = _mm512_setzero_si512();
    if constexpr (B32<S>::kOffset != 0)
      s[t] = _mm512_dpwssd_epi32(s[t], off, _mm512_set1_epi32(halves[t * xs]));
  }
  const auto op = [&]<int K>() {
    const __m512i v = b32_operand<S, K>(wb, table);
    for (int t = 0; t < T; ++t) {
      const __m512i xv = _mm512_set1_epi32(load_i32(x[t * xs].qs + 4 * K));
      s[t] = _mm512_dpbusd_epi32(s[t], v, xv);
    }
  };
  [&]<int... K>(std::integer_sequence<int, K...>) { (op.template operator()<K>(), ...); }
  (std::make_integer_sequence<int, 8>{});
}

// Slot S over packed 8-token BlockQ8A tiles (kQ8ATileBlockBytes): per block, S_t = -offset x
// (the token's code sum, VPDPWSSD of (offset, offset) against its negated halves) + the
// VPDPBUSDs of the 8 operands, exact; then acc = fma(d_w d_x, float(S), acc), and for Q4_1 /
// Q5_1 acc = fma(m_w, s_x, acc).
template <int S>
void b32_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  using P = B32<S>;
  const __m512i table = P::kTable ? b32_table() : _mm512_setzero_si512();
  __m512 acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * P::kBytes;
    const auto* xq = reinterpret_cast<const int32_t*>(xp + b * kQ8ATileBlockBytes);
    __m512i s[8];
    b32_sums8<S>(wb, xq, table, s);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD)));
    const auto* dx = reinterpret_cast<const float*>(xq + 72);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[t])), _mm512_cvtepi32_ps(s[t]),
                               acc[t]);
    }
    if constexpr (P::kMin) {
      const __m512 mw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD + 32)));
      const auto* sx = reinterpret_cast<const float*>(xq + 88);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx[t]), acc[t]);
    }
  }
  store_tile(acc, y, ys, nr);
}

// Slot S, T <= 4 tokens of BlockQ8A activations (decode, and the tokens past the last 8-token
// tile): the integers and float steps of b32_tile8p.
template <int S, int T>
void b32_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
              float* y, int64_t ys, int nr) {
  using P = B32<S>;
  const __m512i table = P::kTable ? b32_table() : _mm512_setzero_si512();
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * P::kBytes;
    if (T == 1) _mm_prefetch(reinterpret_cast<const char*>(wb + 4 * P::kBytes), _MM_HINT_T0);
    __m512i s[T];
    b32_sums<S, T>(wb, x + b, halves + b, xs, table, s);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD)));
    for (int t = 0; t < T; ++t) {
      const BlockQ8A& xb = x[t * xs + b];
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), _mm512_cvtepi32_ps(s[t]),
                               acc[t]);
    }
    if constexpr (P::kMin) {
      const __m512 mw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + P::kD + 32)));
      for (int t = 0; t < T; ++t)
        acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x[t * xs + b].s), acc[t]);
    }
  }
  store_tile(acc, y, ys, nr);
}

template <int S>
void b32(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* h, float* y,
         int64_t ys, int nr, int nt) {
  static constexpr decltype(&b32_tile<S, 1>) kTiles[] = {&b32_tile<S, 1>, &b32_tile<S, 2>,
                                                         &b32_tile<S, 3>, &b32_tile<S, 4>};
  tile_for(kTiles, nt)(w, nb, x, xs, h, y, ys, nr);
}

// IQ4_XS (gemm.h's IQ4_XS record) over packed 8-token BlockQ8A tiles (8 records per
// super-block): per sub-block j, S_j as IQ4_NL's (the plane base 256 j), I_j = sc_j S_j exact
// (|I_j| < 2^24), then acc = fma(d_w d_x[j], float(I_j), acc).
void iq4_xs_tile8p(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y, int64_t ys, int nr) {
  const __m512i table = b32_table();
  __m512 acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kIQ4_XSGroupBlockBytes;
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2176)));
    for (int j = 0; j < 8; ++j) {
      const auto* xq = reinterpret_cast<const int32_t*>(xp + (8 * b + j) * kQ8ATileBlockBytes);
      __m512i s[8];
      b32_sums8<4>(wb + 256 * j, xq, table, s);  // IQ4_NL's sums on sub-block j's planes
      const __m512i sc = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * j)));
      const auto* dx = reinterpret_cast<const float*>(xq + 72);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[t])),
                                 _mm512_cvtepi32_ps(_mm512_mullo_epi32(s[t], sc)), acc[t]);
      }
    }
  }
  store_tile(acc, y, ys, nr);
}

// IQ4_XS, T <= 4 tokens of BlockQ8A activations (8 per super-block): the integers and float
// steps of iq4_xs_tile8p.
template <int T>
void iq4_xs_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* halves,
                 float* y, int64_t ys, int nr) {
  const __m512i table = b32_table();
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kIQ4_XSGroupBlockBytes;
    if (T == 1) prefetch_record_ahead<kIQ4_XSGroupBlockBytes>(wb);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2176)));
    for (int j = 0; j < 8; ++j) {
      __m512i s[T];
      b32_sums<4, T>(wb + 256 * j, x + 8 * b + j, halves + 8 * b + j, xs, table, s);
      const __m512i sc = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * j)));
      for (int t = 0; t < T; ++t) {
        const float dx = x[t * xs + 8 * b + j].d;
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                 _mm512_cvtepi32_ps(_mm512_mullo_epi32(s[t], sc)), acc[t]);
      }
    }
  }
  store_tile(acc, y, ys, nr);
}

void iq4_xs(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* h, float* y,
            int64_t ys, int nr, int nt) {
  static constexpr decltype(&iq4_xs_tile<1>) kTiles[] = {&iq4_xs_tile<1>, &iq4_xs_tile<2>,
                                                         &iq4_xs_tile<3>, &iq4_xs_tile<4>};
  tile_for(kTiles, nt)(w, nb, x, xs, h, y, ys, nr);
}

}  // namespace

void add_low_bit_tiles_avx512(GemmKernels& k) {
  k.b32[0] = &b32<0>;
  k.b32[1] = &b32<1>;
  k.b32[2] = &b32<2>;
  k.b32[3] = &b32<3>;
  k.b32[4] = &b32<4>;
  k.b32_tile8[0] = &b32_tile8p<0>;
  k.b32_tile8[1] = &b32_tile8p<1>;
  k.b32_tile8[2] = &b32_tile8p<2>;
  k.b32_tile8[3] = &b32_tile8p<3>;
  k.b32_tile8[4] = &b32_tile8p<4>;
  k.iq4_xs = &iq4_xs;
  k.iq4_xs_tile8 = &iq4_xs_tile8p;
}

}  // namespace spw::cpu
#endif
