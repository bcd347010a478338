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

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernels.h"

namespace spw::cpu {
namespace {

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

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
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys, m, acc[t]);
}

void q8_0(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t* comp,
          float* y, int64_t ys, int nr, int nt) {
  switch (nt) {
    case 1:
      return q8_0_tile<1>(w, nb, x, xs, comp, y, ys, nr);
    case 2:
      return q8_0_tile<2>(w, nb, x, xs, comp, y, ys, nr);
    case 3:
      return q8_0_tile<3>(w, nb, x, xs, comp, y, ys, nr);
    case 4:
      return q8_0_tile<4>(w, nb, x, xs, comp, y, ys, nr);
    case 5:
      return q8_0_tile<5>(w, nb, x, xs, comp, y, ys, nr);
    case 6:
      return q8_0_tile<6>(w, nb, x, xs, comp, y, ys, nr);
    case 7:
      return q8_0_tile<7>(w, nb, x, xs, comp, y, ys, nr);
    default:
      return q8_0_tile<8>(w, nb, x, xs, comp, y, ys, nr);
  }
}

// Q8_0 over a packed 8-token activation tile (gemm_kernels.h's kQ8ATileBlockBytes layout): the
// same integer sums and float steps as q8_0_tile<8>, with every activation operand a 32-bit
// embedded broadcast of one base pointer (no separate broadcast instructions, one address
// register) and the block's compensations and scales beside its codes.
#define SPW_DPBUSD_BCAST(acc, wv, ptr) \
  __asm__("vpdpbusd %[x]%{1to16%}, %[w], %[s]" : [s] "+v"(acc) : [w] "v"(wv), [x] "m"(*(ptr)))

// s[t] += VPDPBUSD(op, token t's 4 codes at q[t]) for the 8 tokens of a packed tile.
__attribute__((always_inline)) inline void dpbusd_tile8(__m512i (&s)[8], __m512i op,
                                                        const int32_t* q) {
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) SPW_DPBUSD_BCAST(s[t], op, q + t);
}

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
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  const __m512 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  for (int t = 0; t < 8; ++t) _mm512_mask_storeu_ps(y + t * ys, m, a[t]);
}
#define SPW_DPWSSD_BCAST(acc, wv, ptr) \
  __asm__("vpdpwssd %[x]%{1to16%}, %[w], %[s]" : [s] "+v"(acc) : [w] "v"(wv), [x] "m"(*(ptr)))

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
      SPW_DPWSSD_BCAST(msum, mv[0], bsp + t);
      SPW_DPWSSD_BCAST(msum, mv[1], bsp + 8 + t);
      SPW_DPWSSD_BCAST(msum, mv[2], bsp + 16 + t);
      SPW_DPWSSD_BCAST(msum, mv[3], bsp + 24 + t);
      const __m512 x = _mm512_set1_ps(dx[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, x), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  for (int t = 0; t < 8; ++t) _mm512_mask_storeu_ps(y + t * ys, m, acc[t]);
}
#undef SPW_DPWSSD_BCAST
#undef SPW_DPBUSD_BCAST

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
    if (T == 1) {
      for (int l = 0; l < kQ4_KGroupBlockBytes; l += 256)
        _mm_prefetch(reinterpret_cast<const char*>(wb + 2 * kQ4_KGroupBlockBytes + l), _MM_HINT_T0);
    }
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
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys, m, acc[t]);
}

void q4_k(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
          float* y, int64_t ys, int nr, int nt) {
  switch (nt) {
    case 1:
      return q4_k_tile<1>(w, nb, x, xs, bs, y, ys, nr);
    case 2:
      return q4_k_tile<2>(w, nb, x, xs, bs, y, ys, nr);
    case 3:
      return q4_k_tile<3>(w, nb, x, xs, bs, y, ys, nr);
    default:
      return q4_k_tile<4>(w, nb, x, xs, bs, y, ys, nr);
  }
}

}  // namespace

const GemmKernels* gemm_kernels_avx512() {
  static const GemmKernels k{&q8_0, &q4_k, 4, 8, true, &q8_0_tile8p, &q4_k_tile8p};
  return &k;
}

}  // namespace spw::cpu
#else
#include "engine/cpu/gemm_kernels.h"
namespace spw::cpu {
const GemmKernels* gemm_kernels_avx512() { return nullptr; }
}  // namespace spw::cpu
#endif
