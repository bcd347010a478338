// AVX-512 query-tiled attention (compiled with -mavx512f -mavx512bw -mavx512vl on top of the
// AVX2 flags; see engine/CMakeLists.txt). The AVX-512 level's op table is the AVX2 one with
// these tile kernels: the other element-wise ops gain nothing from 512-bit registers. Only
// <immintrin.h> and kernels.h are included, and everything has internal linkage (kernels.h says
// why).
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__FMA__)

#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/kernels.h"

namespace spw::cpu {
namespace {

// exp(x) as the AVX2 level's exp8 (simd_avx2_ops.cpp), 16 lanes: Cephes' single-precision
// scheme, 0 below -87.33, clamped at e^88. Lane for lane the same operations, so the two levels
// give the same bits.
inline __m512 exp16(__m512 x) {
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), p);
}

// The query-tiled attention's traits at 16 lanes (attn_tile.inc). 32 registers: a scores
// micro-tile of 4 row vectors (64 rows) x 4 keys and an accumulation one of 4 rows x 4 vectors
// of columns, 16 accumulators each.
struct Tile {
  using V = __m512;
  using VI = __m512i;
  static constexpr int W = 16, kRV = 4, kKK = 4, kAR = 4, kAD = 4;
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 set1(float x) { return _mm512_set1_ps(x); }
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static __m512i loadi(const int32_t* p) { return _mm512_loadu_si512(p); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 exp(__m512 x) { return exp16(x); }
  static __mmask16 valid(__m512i pos, __m512i lo, int32_t kp) {
    const __m512i k = _mm512_set1_epi32(kp);
    return static_cast<__mmask16>(_mm512_cmple_epi32_mask(k, pos) & _mm512_cmple_epi32_mask(lo, k));
  }
  static __mmask16 eq(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static __m512 blend(__mmask16 m, __m512 a, __m512 b) { return _mm512_mask_blend_ps(m, b, a); }
  // kt[d0 + c][j0 + r] = k[j0 + r][d0 + c] for a 16 x 16 block (rows past n_k: 0).
  static __m512 load_part(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static void store_part(float* p, __m512 v, int64_t n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
  }
  static float to_f32(float x) { return x; }
  static float to_f32(uint16_t h) { return _cvtsh_ss(h); }
  static __m512 load_row(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_row(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  template <typename E, bool kFull>
  [[gnu::always_inline]] static void transpose_block(const E* k, int64_t hd, int64_t n_k,
                                                     int64_t d0, int64_t j0, float* kt,
                                                     int64_t nkp) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i)
      r[i] = kFull || j0 + i < n_k ? load_row(k + (j0 + i) * hd + d0) : _mm512_setzero_ps();
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4 h + c], 128-bit lane L: column 4 L + c of rows 4 h .. 4 h + 3.
    for (int h = 0; h < 4; ++h) {
      u[4 * h] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
      u[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    // Lanes L of u[c], u[4 + c], u[8 + c], u[12 + c] are column 4 L + c, rows 0 .. 15.
    for (int c = 0; c < 4; ++c) {
      const __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  // lanes 0, 2
      const __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);  // lanes 1, 3
      const __m512 e = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
      const __m512 f = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
      _mm512_storeu_ps(kt + (d0 + c) * nkp + j0, _mm512_shuffle_f32x4(a, e, 0x88));
      _mm512_storeu_ps(kt + (d0 + 8 + c) * nkp + j0, _mm512_shuffle_f32x4(a, e, 0xDD));
      _mm512_storeu_ps(kt + (d0 + 4 + c) * nkp + j0, _mm512_shuffle_f32x4(b, f, 0x88));
      _mm512_storeu_ps(kt + (d0 + 12 + c) * nkp + j0, _mm512_shuffle_f32x4(b, f, 0xDD));
    }
  }
};

#include "engine/cpu/attn_tile.inc"

}  // namespace

const OpKernels* op_kernels_avx512() {
  static const OpKernels table = [] {
    const OpKernels* avx2 = op_kernels_avx2();
    OpKernels t{};
    if (avx2 != nullptr) t = *avx2;
    t.tile_scores = tile_scores;
    t.tile_softmax = tile_softmax;
    t.tile_accum = tile_accum;
    t.tile_scores_t = tile_scores_t;
    t.tile_transpose = tile_transpose;
    t.tile_transpose_f16 = tile_transpose_f16;
    return t;
  }();
  return op_kernels_avx2() != nullptr ? &table : nullptr;
}

}  // namespace spw::cpu

#else  // not x86-64 with AVX-512 flags: the level's tile kernels are absent

#include "engine/cpu/kernels.h"

namespace spw::cpu {
const OpKernels* op_kernels_avx512() { return nullptr; }
}  // namespace spw::cpu

#endif
