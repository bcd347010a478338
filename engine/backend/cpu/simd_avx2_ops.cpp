// AVX2 + FMA + F16C element-wise kernels and attention building blocks (compiled with -mavx2
// -mfma -mf16c; see engine/CMakeLists.txt). Also serves the AVX-512 level. Only
// <immintrin.h> and kernels.h are included, and everything has internal linkage (kernels.h
// says why).
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstdint>

#include "engine/backend/cpu/kernels.h"

namespace spw::cpu {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x), Cephes' single-precision scheme: x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// polynomial for e^r, 2^n through the exponent bits. Within 2 ulp of expf; 0 below
// -87.33 (where expf turns subnormal), clamped at e^88 above.
inline __m256 exp8(__m256 x) {
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, p);
}

inline float exp1(float x) {
  return _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_set1_ps(x))));
}

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  float ss = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale =
      1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss / static_cast<float>(n) + eps)));
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

// Same operations, in the same order, as the scalar rope: products then add/sub, no FMA.
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs, bool neox) {
  const int64_t half = n_rot / 2;
  const float* cosv = cs;
  const float* sinv = cs + half;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    int64_t i = 0;
    if (neox) {
      for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
        const __m256 c = _mm256_loadu_ps(cosv + i), s = _mm256_loadu_ps(sinv + i);
        _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
      }
      for (; i < half; ++i) {
        const float x0 = v[i], x1 = v[half + i];
        v[i] = x0 * cosv[i] - x1 * sinv[i];
        v[half + i] = x1 * cosv[i] + x0 * sinv[i];
      }
    } else {
      for (; i + 4 <= half; i += 4) {  // 4 pairs = 8 floats
        const __m128 c4 = _mm_loadu_ps(cosv + i), s4 = _mm_loadu_ps(sinv + i);
        const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
        const __m256 xv = _mm256_loadu_ps(v + 2 * i);
        const __m256 xs = _mm256_permute_ps(xv, 0xB1);  // swap each pair
        // even lanes: x0 c - x1 s; odd lanes: x1 c + x0 s
        _mm256_storeu_ps(v + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(xv, c), _mm256_mul_ps(xs, s)));
      }
      for (; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cosv[i] - x1 * sinv[i];
        v[2 * i + 1] = x1 * cosv[i] + x0 * sinv[i];
      }
    }
  }
}

void swiglu(const float* g, const float* u, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp8(_mm256_xor_ps(gv, sign));
    const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.0f + exp1(-g[i])) * u[i];
}

float exp_sum(float* x, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; i < n; ++i) {
    x[i] = exp1(x[i] - m);
    sum += x[i];
  }
  return sum;
}

void scale(float* x, float a, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
  for (; i < n; ++i) x[i] *= a;
}

void softmax(float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float m = hmax(mv);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const float sum = exp_sum(x, n, m);
  scale(x, 1.0f / sum, n);
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

inline __m256 load8(const void* base, bool f16, int64_t idx) {
  if (f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + idx)));
  }
  return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
}

inline float load1(const void* base, bool f16, int64_t idx) {
  return f16 ? _cvtsh_ss(static_cast<const uint16_t*>(base)[idx])
             : static_cast<const float*>(base)[idx];
}

// Scores of G query heads (G <= 4) against each K row: the row is loaded once for all G.
template <int G>
void scores_group(const float* q, int64_t hd, const void* k, bool k_f16, int64_t k_stride,
                  int64_t n_kv, float sc, float* s, int64_t s_stride) {
  for (int64_t j = 0; j < n_kv; ++j) {
    const int64_t row = j * k_stride;
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256 kv = load8(k, k_f16, row + d);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + d), kv, acc[g]);
    }
    for (int g = 0; g < G; ++g) {
      float t = hsum(acc[g]);
      for (int64_t e = d; e < hd; ++e) t += q[g * hd + e] * load1(k, k_f16, row + e);
      s[g * s_stride + j] = t * sc;
    }
  }
}

void attn_scores(const float* q, int64_t n_q, int64_t hd, const void* k, bool k_f16,
                 int64_t k_stride, int64_t n_kv, float sc, float* s, int64_t s_stride) {
  int64_t h = 0;
  for (; h + 4 <= n_q; h += 4)
    scores_group<4>(q + h * hd, hd, k, k_f16, k_stride, n_kv, sc, s + h * s_stride, s_stride);
  switch (n_q - h) {
    case 3:
      return scores_group<3>(q + h * hd, hd, k, k_f16, k_stride, n_kv, sc, s + h * s_stride,
                             s_stride);
    case 2:
      return scores_group<2>(q + h * hd, hd, k, k_f16, k_stride, n_kv, sc, s + h * s_stride,
                             s_stride);
    case 1:
      return scores_group<1>(q + h * hd, hd, k, k_f16, k_stride, n_kv, sc, s + h * s_stride,
                             s_stride);
    default:
      return;
  }
}

// o[g][d..d+8) += sum_j p[g][j] v_j[d..d+8) for G heads: G independent FMA chains over j.
template <int G>
void accum_group(const float* p, int64_t p_stride, const void* v, bool v_f16, int64_t v_stride,
                 int64_t n_kv, int64_t hd_v, float* o) {
  int64_t d = 0;
  for (; d + 8 <= hd_v; d += 8) {
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_loadu_ps(o + g * hd_v + d);
    for (int64_t j = 0; j < n_kv; ++j) {
      const __m256 vv = load8(v, v_f16, j * v_stride + d);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g * p_stride + j]), vv, acc[g]);
    }
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(o + g * hd_v + d, acc[g]);
  }
  for (; d < hd_v; ++d) {
    for (int g = 0; g < G; ++g) {
      float t = o[g * hd_v + d];
      for (int64_t j = 0; j < n_kv; ++j)
        t += p[g * p_stride + j] * load1(v, v_f16, j * v_stride + d);
      o[g * hd_v + d] = t;
    }
  }
}

void attn_accum(const float* p, int64_t p_stride, int64_t n_q, const void* v, bool v_f16,
                int64_t v_stride, int64_t n_kv, int64_t hd_v, float* o) {
  int64_t h = 0;
  for (; h + 4 <= n_q; h += 4)
    accum_group<4>(p + h * p_stride, p_stride, v, v_f16, v_stride, n_kv, hd_v, o + h * hd_v);
  switch (n_q - h) {
    case 3:
      return accum_group<3>(p + h * p_stride, p_stride, v, v_f16, v_stride, n_kv, hd_v,
                            o + h * hd_v);
    case 2:
      return accum_group<2>(p + h * p_stride, p_stride, v, v_f16, v_stride, n_kv, hd_v,
                            o + h * hd_v);
    case 1:
      return accum_group<1>(p + h * p_stride, p_stride, v, v_f16, v_stride, n_kv, hd_v,
                            o + h * hd_v);
    default:
      return;
  }
}

}  // namespace

const OpKernels* op_kernels_avx2() {
  static const OpKernels table = {rms_norm,   rope,    swiglu, softmax,     f32_to_f16,
                                  f16_to_f32, exp_sum, scale,  attn_scores, attn_accum};
  return &table;
}

}  // namespace spw::cpu

#else  // not x86-64 with AVX2 flags: the level is absent

#include "engine/backend/cpu/kernels.h"

namespace spw::cpu {
const OpKernels* op_kernels_avx2() { return nullptr; }
}  // namespace spw::cpu

#endif
