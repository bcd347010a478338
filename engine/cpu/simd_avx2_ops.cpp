// AVX2 + FMA + F16C element-wise kernels and attention building blocks (compiled with -mavx2
// -mfma -mf16c; see engine/CMakeLists.txt). Also serves the AVX-512 level. Only
// <immintrin.h> and kernels.h are included, and everything has internal linkage (kernels.h
// says why).
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/kernels.h"

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

// Same operations as the scalar geglu (no FMA: products and sums in the scalar's order).
constexpr float kGeluC1 = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kGeluC2 = 1.5957691216057308f * 0.044715f;

void geglu(const float* g, const float* u, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 c1 = _mm256_set1_ps(kGeluC1), c2 = _mm256_set1_ps(kGeluC2);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 t = _mm256_mul_ps(x, _mm256_add_ps(c1, _mm256_mul_ps(c2, _mm256_mul_ps(x, x))));
    const __m256 e = exp8(_mm256_xor_ps(t, sign));
    // exp8 clamps at e^88, where expf overflows to inf and the scalar form gives x / inf = 0.
    const __m256 tail = _mm256_cmp_ps(t, _mm256_set1_ps(-88.0f), _CMP_LT_OQ);
    const __m256 gelu = _mm256_andnot_ps(tail, _mm256_div_ps(x, _mm256_add_ps(one, e)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) {
    const float x = g[i];
    const float t = x * (kGeluC1 + kGeluC2 * (x * x));
    out[i] = t < -88.0f ? 0.0f : x / (1.0f + exp1(-t)) * u[i];
  }
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

// quantize_row_q8_0_ref, bit for bit: amax and d = amax / 127 as there, q = x * (1 / d)
// rounded half away from zero (std::round): truncate, then step away from zero where the
// exact remainder v - trunc(v) reaches 0.5 (-ffp-contract=off keeps x * id rounded first).
void f32_to_q8_0(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint8_t*>(y);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0BlockBytes) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    __m256 amax8 = _mm256_andnot_ps(sign, v[0]);
    for (int i = 1; i < 4; ++i) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[i]));
    const float amax = hmax(amax8);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const auto dh = static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    out[0] = static_cast<uint8_t>(dh & 0xFF);
    out[1] = static_cast<uint8_t>(dh >> 8);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 s = _mm256_mul_ps(v[i], idv);
      const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));  // exact
      const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ),
                                      _mm256_or_ps(one, _mm256_and_ps(sign, s)));  // +-1
      q[i] = _mm256_cvtps_epi32(_mm256_add_ps(t, up));
    }
    // packs interleave the 128-bit lanes; the permute restores element order.
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2), ordered);
  }
}

// Row elements of an f32 or f16 KV row (Q8_0 rows have their own loops below).
template <KvFormat F>
inline __m256 load8(const void* base, int64_t idx) {
  if constexpr (F == KvFormat::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + idx)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
  }
}

template <KvFormat F>
inline float load1(const void* base, int64_t idx) {
  if constexpr (F == KvFormat::F16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(base)[idx]);
  } else {
    return static_cast<const float*>(base)[idx];
  }
}

// Q8_0 rows (hd % 32 == 0, stride % 32 == 0): 8 int8 quants of a block as floats, and the
// block's scale. The scale is applied once per block (scores) or folded into the softmax
// weight (accumulation) instead of once per 8 values.
inline __m256 q8_8(const uint8_t* blk, int c) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * c))));
}

inline float q8_d(const uint8_t* blk) {
  return _cvtsh_ss(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
}

// s[g][j] = sc * sum over blocks b of d_b * (q[g] . qs_b).
template <int G>
void scores_group_q8(const float* q, int64_t hd, const uint8_t* k, int64_t k_stride, int64_t n_kv,
                     float sc, float* s, int64_t s_stride) {
  const int64_t row_bytes = k_stride / 32 * kQ8_0BlockBytes;
  for (int64_t j = 0; j < n_kv; ++j) {
    const uint8_t* row = k + j * row_bytes;
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t b = 0; b < hd / 32; ++b) {
      const uint8_t* blk = row + b * kQ8_0BlockBytes;
      __m256 t[G];
      for (int g = 0; g < G; ++g) t[g] = _mm256_setzero_ps();
      for (int c = 0; c < 4; ++c) {
        const __m256 kv = q8_8(blk, c);
        for (int g = 0; g < G; ++g)
          t[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + 32 * b + 8 * c), kv, t[g]);
      }
      const __m256 d = _mm256_set1_ps(q8_d(blk));
      for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(t[g], d, acc[g]);
    }
    for (int g = 0; g < G; ++g) s[g * s_stride + j] = hsum(acc[g]) * sc;
  }
}

// o[g][:] += sum_j (p[g][j] d_jb) qs_jb over blocks b, positions in steps of kQ8Rows: the
// weights p * d of a step are formed once per block column and serve its four 8-wide parts.
template <int G>
void accum_group_q8(const float* p, int64_t p_stride, const uint8_t* v, int64_t v_stride,
                    int64_t n_kv, int64_t hd_v, float* o) {
  constexpr int64_t kQ8Rows = 64;
  const int64_t row_bytes = v_stride / 32 * kQ8_0BlockBytes;
  float pd[G][kQ8Rows];
  for (int64_t j0 = 0; j0 < n_kv; j0 += kQ8Rows) {
    const int64_t nj = n_kv - j0 < kQ8Rows ? n_kv - j0 : kQ8Rows;
    const uint8_t* rows = v + j0 * row_bytes;
    for (int64_t b = 0; b < hd_v / 32; ++b) {
      const uint8_t* col = rows + b * kQ8_0BlockBytes;
      for (int64_t j = 0; j < nj; ++j) {
        const float d = q8_d(col + j * row_bytes);
        for (int g = 0; g < G; ++g) pd[g][j] = p[g * p_stride + j0 + j] * d;
      }
      for (int c = 0; c < 4; ++c) {
        float* oc = o + 32 * b + 8 * c;
        __m256 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm256_loadu_ps(oc + g * hd_v);
        for (int64_t j = 0; j < nj; ++j) {
          const __m256 vv = q8_8(col + j * row_bytes, c);
          for (int g = 0; g < G; ++g)
            acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(pd[g][j]), vv, acc[g]);
        }
        for (int g = 0; g < G; ++g) _mm256_storeu_ps(oc + g * hd_v, acc[g]);
      }
    }
  }
}

// Scores of G query heads (G <= 4) against each K row: the row is loaded once for all G.
template <int G, KvFormat F>
void scores_group(const float* q, int64_t hd, const void* k, int64_t k_stride, int64_t n_kv,
                  float sc, float* s, int64_t s_stride) {
  for (int64_t j = 0; j < n_kv; ++j) {
    const int64_t row = j * k_stride;
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256 kv = load8<F>(k, row + d);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + d), kv, acc[g]);
    }
    for (int g = 0; g < G; ++g) {
      float t = hsum(acc[g]);
      for (int64_t e = d; e < hd; ++e) t += q[g * hd + e] * load1<F>(k, row + e);
      s[g * s_stride + j] = t * sc;
    }
  }
}

template <int G, KvFormat F>
void scores_any(const float* q, int64_t hd, const void* k, int64_t k_stride, int64_t n_kv, float sc,
                float* s, int64_t s_stride) {
  if constexpr (F == KvFormat::Q8_0) {
    scores_group_q8<G>(q, hd, static_cast<const uint8_t*>(k), k_stride, n_kv, sc, s, s_stride);
  } else {
    scores_group<G, F>(q, hd, k, k_stride, n_kv, sc, s, s_stride);
  }
}

template <KvFormat F>
void scores_fmt(const float* q, int64_t n_q, int64_t hd, const void* k, int64_t k_stride,
                int64_t n_kv, float sc, float* s, int64_t s_stride) {
  int64_t h = 0;
  for (; h + 4 <= n_q; h += 4)
    scores_any<4, F>(q + h * hd, hd, k, k_stride, n_kv, sc, s + h * s_stride, s_stride);
  switch (n_q - h) {
    case 3:
      return scores_any<3, F>(q + h * hd, hd, k, k_stride, n_kv, sc, s + h * s_stride, s_stride);
    case 2:
      return scores_any<2, F>(q + h * hd, hd, k, k_stride, n_kv, sc, s + h * s_stride, s_stride);
    case 1:
      return scores_any<1, F>(q + h * hd, hd, k, k_stride, n_kv, sc, s + h * s_stride, s_stride);
    default:
      return;
  }
}

void attn_scores(const float* q, int64_t n_q, int64_t hd, const void* k, KvFormat k_fmt,
                 int64_t k_stride, int64_t n_kv, float sc, float* s, int64_t s_stride) {
  switch (k_fmt) {
    case KvFormat::F16:
      return scores_fmt<KvFormat::F16>(q, n_q, hd, k, k_stride, n_kv, sc, s, s_stride);
    case KvFormat::Q8_0:
      return scores_fmt<KvFormat::Q8_0>(q, n_q, hd, k, k_stride, n_kv, sc, s, s_stride);
    case KvFormat::F32:
      break;
  }
  return scores_fmt<KvFormat::F32>(q, n_q, hd, k, k_stride, n_kv, sc, s, s_stride);
}

// o[g][d..d+8) += sum_j p[g][j] v_j[d..d+8) for G heads: G independent FMA chains over j.
template <int G, KvFormat F>
void accum_group(const float* p, int64_t p_stride, const void* v, int64_t v_stride, int64_t n_kv,
                 int64_t hd_v, float* o) {
  int64_t d = 0;
  for (; d + 8 <= hd_v; d += 8) {
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_loadu_ps(o + g * hd_v + d);
    for (int64_t j = 0; j < n_kv; ++j) {
      const __m256 vv = load8<F>(v, j * v_stride + d);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g * p_stride + j]), vv, acc[g]);
    }
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(o + g * hd_v + d, acc[g]);
  }
  for (; d < hd_v; ++d) {
    for (int g = 0; g < G; ++g) {
      float t = o[g * hd_v + d];
      for (int64_t j = 0; j < n_kv; ++j) t += p[g * p_stride + j] * load1<F>(v, j * v_stride + d);
      o[g * hd_v + d] = t;
    }
  }
}

template <int G, KvFormat F>
void accum_any(const float* p, int64_t p_stride, const void* v, int64_t v_stride, int64_t n_kv,
               int64_t hd_v, float* o) {
  if constexpr (F == KvFormat::Q8_0) {
    accum_group_q8<G>(p, p_stride, static_cast<const uint8_t*>(v), v_stride, n_kv, hd_v, o);
  } else {
    accum_group<G, F>(p, p_stride, v, v_stride, n_kv, hd_v, o);
  }
}

template <KvFormat F>
void accum_fmt(const float* p, int64_t p_stride, int64_t n_q, const void* v, int64_t v_stride,
               int64_t n_kv, int64_t hd_v, float* o) {
  int64_t h = 0;
  for (; h + 4 <= n_q; h += 4)
    accum_any<4, F>(p + h * p_stride, p_stride, v, v_stride, n_kv, hd_v, o + h * hd_v);
  switch (n_q - h) {
    case 3:
      return accum_any<3, F>(p + h * p_stride, p_stride, v, v_stride, n_kv, hd_v, o + h * hd_v);
    case 2:
      return accum_any<2, F>(p + h * p_stride, p_stride, v, v_stride, n_kv, hd_v, o + h * hd_v);
    case 1:
      return accum_any<1, F>(p + h * p_stride, p_stride, v, v_stride, n_kv, hd_v, o + h * hd_v);
    default:
      return;
  }
}

void attn_accum(const float* p, int64_t p_stride, int64_t n_q, const void* v, KvFormat v_fmt,
                int64_t v_stride, int64_t n_kv, int64_t hd_v, float* o) {
  switch (v_fmt) {
    case KvFormat::F16:
      return accum_fmt<KvFormat::F16>(p, p_stride, n_q, v, v_stride, n_kv, hd_v, o);
    case KvFormat::Q8_0:
      return accum_fmt<KvFormat::Q8_0>(p, p_stride, n_q, v, v_stride, n_kv, hd_v, o);
    case KvFormat::F32:
      break;
  }
  return accum_fmt<KvFormat::F32>(p, p_stride, n_q, v, v_stride, n_kv, hd_v, o);
}

// The query-tiled attention's traits at 8 lanes (attn_tile.inc). 16 registers: a scores
// micro-tile of 2 row vectors x 6 keys (12 accumulators), an accumulation one of 4 rows x 2
// vectors of columns.
struct Tile {
  using V = __m256;
  using VI = __m256i;
  static constexpr int W = 8, kRV = 2, kKK = 6, kAR = 4, kAD = 2;
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 set1(float x) { return _mm256_set1_ps(x); }
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  static __m256i loadi(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 exp(__m256 x) { return exp8(x); }
  // Lanes with lo <= kp <= pos, as an all-ones float mask.
  static __m256 valid(__m256i pos, __m256i lo, int32_t kp) {
    const __m256i k = _mm256_set1_epi32(kp);
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(k, pos), _mm256_cmpgt_epi32(lo, k));
    return _mm256_castsi256_ps(_mm256_xor_si256(out, _mm256_set1_epi32(-1)));
  }
  static __m256 eq(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static __m256 blend(__m256 m, __m256 a, __m256 b) { return _mm256_blendv_ps(b, a, m); }
  // kt[d0 + c][j0 + r] = k[j0 + r][d0 + c] for an 8 x 8 block (rows past n_k: 0).
  static __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static __m256 load_part(const float* p, int64_t n) {
    return _mm256_maskload_ps(p, lanes_below(n));
  }
  static void store_part(float* p, __m256 v, int64_t n) {
    _mm256_maskstore_ps(p, lanes_below(n), v);
  }
  static float to_f32(float x) { return x; }
  static float to_f32(uint16_t h) { return _cvtsh_ss(h); }
  static __m256 load_row(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 load_row(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <typename E, bool kFull>
  [[gnu::always_inline]] static void transpose_block(const E* k, int64_t hd, int64_t n_k,
                                                     int64_t d0, int64_t j0, float* kt,
                                                     int64_t nkp) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i)
      r[i] = kFull || j0 + i < n_k ? load_row(k + (j0 + i) * hd + d0) : _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4 h + c], 128-bit lane L: column 4 L + c of rows 4 h .. 4 h + 3.
    for (int h = 0; h < 2; ++h) {
      u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
      u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {
      _mm256_storeu_ps(kt + (d0 + c) * nkp + j0, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
      _mm256_storeu_ps(kt + (d0 + 4 + c) * nkp + j0, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
  }
};

#include "engine/cpu/attn_tile.inc"

}  // namespace

const OpKernels* op_kernels_avx2() {
  static const OpKernels table = {
      rms_norm,    rope,         swiglu,     geglu,         softmax,        f32_to_f16,
      f16_to_f32,  f32_to_q8_0,  exp_sum,    scale,         attn_scores,    attn_accum,
      tile_scores, tile_softmax, tile_accum, tile_scores_t, tile_transpose, tile_transpose_f16};
  return &table;
}

}  // namespace spw::cpu

#else  // not x86-64 with AVX2 flags: the level is absent

#include "engine/cpu/kernels.h"

namespace spw::cpu {
const OpKernels* op_kernels_avx2() { return nullptr; }
}  // namespace spw::cpu

#endif
