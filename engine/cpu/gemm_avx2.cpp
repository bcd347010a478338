// AVX2 int8 GEMM tiles (gemm.h): the 16 rows of a group as two halves of 8 rows in the 8 int32
// lanes of a ymm, up to 4 tokens per call. The weights are signed again (u8 ^ 0x80) and
// multiplied as ggml's AVX2 Q8_0 dot product does: VPMADDUBSW(|w|, sign(x, w)) (no int16
// overflow: 128 x 127 x 2 < 32768), VPMADDWD by 1, VPADDD, so the integer block sums are the
// exact signed ones without the VNNI bias. Compiled with the AVX2 flags and
// -ffp-contract=off (engine/CMakeLists.txt): the float steps are those of the other levels.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernels.h"

namespace spw::cpu {
namespace {

// Writes rows 8h .. min(nr, 8h + 8) of T tokens' accumulators.
template <int T>
void store_rows(const __m256 (&acc)[T], float* y, int64_t ys, int h, int nr) {
  const int n = nr - 8 * h;  // rows of this half to write, 1..8
  for (int t = 0; t < T; ++t) {
    if (n >= 8) {
      _mm256_storeu_ps(y + t * ys + 8 * h, acc[t]);
    } else {
      alignas(32) float v[8];
      _mm256_store_ps(v, acc[t]);
      std::memcpy(y + t * ys + 8 * h, v, static_cast<size_t>(n) * sizeof(float));
    }
  }
}

// Rows 8h .. 8h + 7 of the group, T tokens.
template <int T>
void q8_0_half(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, float* y, int64_t ys,
               int h, int nr) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ8_0GroupBlockBytes;
    if (T == 1)
      _mm_prefetch(reinterpret_cast<const char*>(wb + 4 * kQ8_0GroupBlockBytes), _MM_HINT_T0);
    __m256i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i wq = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k + 32 * h)), bias);
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      for (int t = 0; t < T; ++t) {
        const __m256i xv = _mm256_set1_epi32(load_i32(x[t * xs + b].qs + 4 * k));
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wq));
        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
      }
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 512 + 16 * h)));
    for (int t = 0; t < T; ++t) {
      const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(x[t * xs + b].d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s[t]), acc[t]);
    }
  }
  store_rows(acc, y, ys, h, nr);
}

template <int T>
void q8_0_tile(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, float* y, int64_t ys,
               int nr) {
  q8_0_half<T>(w, nb, x, xs, y, ys, 0, nr);
  if (nr > 8) q8_0_half<T>(w, nb, x, xs, y, ys, 1, nr);
}

void q8_0(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t*, float* y,
          int64_t ys, int nr, int nt) {
  static constexpr decltype(&q8_0_tile<1>) kTiles[] = {&q8_0_tile<1>, &q8_0_tile<2>, &q8_0_tile<3>,
                                                       &q8_0_tile<4>};
  tile_for(kTiles, nt)(w, nb, x, xs, y, ys, nr);
}

// Q4_K, rows 8h .. 8h + 7: VPMADDUBSW of the nibbles against the token's codes, VPMADDWD by the
// row's sub-block scale in both int16 halves of its lane (so the products come out scaled,
// sc (q0 x0 + q1 x1) + sc (q2 x2 + q3 x3)), VPADDD; the mins by VPMADDWD against the token's
// sub-block sums. The same exact integers I, M as the AVX-512 tile, the same float steps.
template <int T>
void q4_k_half(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
               float* y, int64_t ys, int h, int nr) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kQ4_KGroupBlockBytes;
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int jj = 0; jj < 4; ++jj) {
      const auto scale_pairs = [&](int j) {
        const __m256i s = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb + 2048 + 16 * j + 8 * h)));
        return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
      };
      const __m256i sc_lo = scale_pairs(jj), sc_hi = scale_pairs(jj + 4);
      for (int kk = 0; kk < 8; ++kk) {
        const int k = 8 * jj + kk;
        const __m256i wv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k + 32 * h));
        const __m256i lo = _mm256_and_si256(wv, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
        for (int t = 0; t < T; ++t) {
          const int8_t* q = x[t * xs + b].qs;
          const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load_i32(q + 4 * k)));
          const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load_i32(q + 128 + 4 * k)));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sc_lo),
                                                               _mm256_madd_epi16(ph, sc_hi)));
        }
      }
    }
    __m256i msum[T];
    for (int t = 0; t < T; ++t) msum[t] = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i mv = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2176 + 32 * p + 16 * h)));
      for (int t = 0; t < T; ++t) {
        int32_t pair;
        std::memcpy(&pair, bs + (t * xs + b) * 8 + 2 * p, sizeof pair);
        msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mv, _mm256_set1_epi32(pair)));
      }
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2304 + 16 * h)));
    const __m256 dmin =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2336 + 16 * h)));
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(x[t * xs + b].d);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum[t]), acc[t]);
    }
  }
  store_rows(acc, y, ys, h, nr);
}

template <int T>
void q4_k_tile(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
               float* y, int64_t ys, int nr) {
  q4_k_half<T>(w, nb, x, xs, bs, y, ys, 0, nr);
  if (nr > 8) q4_k_half<T>(w, nb, x, xs, bs, y, ys, 1, nr);
}

void q4_k(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
          float* y, int64_t ys, int nr, int nt) {
  static constexpr decltype(&q4_k_tile<1>) kTiles[] = {&q4_k_tile<1>, &q4_k_tile<2>, &q4_k_tile<3>,
                                                       &q4_k_tile<4>};
  tile_for(kTiles, nt)(w, nb, x, xs, bs, y, ys, nr);
}

}  // namespace

const GemmKernels* gemm_kernels_avx2() {
  static const GemmKernels k{&q8_0, &q4_k, 4, 4, false};
  return &k;
}

}  // namespace spw::cpu
#else
#include "engine/cpu/gemm_kernels.h"
namespace spw::cpu {
const GemmKernels* gemm_kernels_avx2() { return nullptr; }
}  // namespace spw::cpu
#endif
