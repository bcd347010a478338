// Portable scalar element-wise kernels and attention building blocks (see kernels.h for the
// contracts). The fallback level, and the yardstick of the SIMD ones.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/common/fp16.h"
#include "engine/cpu/kernels.h"

namespace spw::cpu {
namespace {

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const auto scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs, bool neox) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cs[i], s = cs[half + i];
      const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x1 * c + x0 * s;
    }
  }
}

void swiglu(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// gelu_tanh(g) = 0.5 g (1 + tanh(z)) = g / (1 + exp(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3).
constexpr float kGeluC1 = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kGeluC2 = 1.5957691216057308f * 0.044715f;

void geglu(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float t = x * (kGeluC1 + kGeluC2 * (x * x));
    out[i] = x / (1.0f + std::exp(-t)) * u[i];
  }
}

void softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

// quantize_row_q8_0_ref: d = amax / 127, q = round(x / d) (half away from zero).
void f32_to_q8_0(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint8_t*>(y);
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = fp32_to_fp16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j)
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

float exp_sum(float* x, int64_t n, float m) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

void scale(float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

float kv_at(const void* base, KvFormat fmt, int64_t idx) {
  switch (fmt) {
    case KvFormat::F16:
      return fp16_to_fp32(static_cast<const uint16_t*>(base)[idx]);
    case KvFormat::Q8_0: {
      const uint8_t* blk = static_cast<const uint8_t*>(base) + (idx / 32) * kQ8_0BlockBytes;
      uint16_t dh;
      std::memcpy(&dh, blk, 2);
      return static_cast<float>(static_cast<int8_t>(blk[2 + idx % 32])) * fp16_to_fp32(dh);
    }
    case KvFormat::F32:
      break;
  }
  return static_cast<const float*>(base)[idx];
}

void attn_scores(const float* q, int64_t n_q, int64_t hd, const void* k, KvFormat k_fmt,
                 int64_t k_stride, int64_t n_kv, float sc, float* s, int64_t s_stride) {
  for (int64_t j = 0; j < n_kv; ++j) {
    for (int64_t h = 0; h < n_q; ++h) {
      float acc = 0.0f;
      for (int64_t d = 0; d < hd; ++d) acc += q[h * hd + d] * kv_at(k, k_fmt, j * k_stride + d);
      s[h * s_stride + j] = acc * sc;
    }
  }
}

void attn_accum(const float* p, int64_t p_stride, int64_t n_q, const void* v, KvFormat v_fmt,
                int64_t v_stride, int64_t n_kv, int64_t hd_v, float* o) {
  for (int64_t j = 0; j < n_kv; ++j) {
    for (int64_t h = 0; h < n_q; ++h) {
      const float pj = p[h * p_stride + j];
      for (int64_t d = 0; d < hd_v; ++d) o[h * hd_v + d] += pj * kv_at(v, v_fmt, j * v_stride + d);
    }
  }
}

// The query-tiled attention's traits at one lane (attn_tile.inc).
struct Tile {
  using V = float;
  using VI = int32_t;
  static constexpr int W = 1, kRV = 4, kKK = 4, kAR = 4, kAD = 4;
  static float zero() { return 0.0f; }
  static float set1(float x) { return x; }
  static float load(const float* p) { return *p; }
  static void store(float* p, float v) { *p = v; }
  static int32_t loadi(const int32_t* p) { return *p; }
  static float add(float a, float b) { return a + b; }
  static float sub(float a, float b) { return a - b; }
  static float mul(float a, float b) { return a * b; }
  static float max(float a, float b) { return a > b ? a : b; }
  static float fma(float a, float b, float c) { return std::fma(a, b, c); }
  static float exp(float x) { return std::exp(x); }
  static bool valid(int32_t pos, int32_t lo, int32_t kp) { return lo <= kp && kp <= pos; }
  static bool eq(float a, float b) { return a == b; }
  static float blend(bool m, float a, float b) { return m ? a : b; }
  static float load_part(const float* p, int64_t) { return *p; }
  static void store_part(float* p, float v, int64_t) { *p = v; }
  static float to_f32(float x) { return x; }
  static float to_f32(uint16_t h) { return fp16_to_fp32(h); }
  template <typename E, bool kFull>
  static void transpose_block(const E* k, int64_t hd, int64_t n_k, int64_t d0, int64_t j0,
                              float* kt, int64_t nkp) {
    kt[d0 * nkp + j0] = kFull || j0 < n_k ? to_f32(k[j0 * hd + d0]) : 0.0f;
  }
};

#include "engine/cpu/attn_tile.inc"

}  // namespace

const OpKernels* op_kernels_scalar() {
  static const OpKernels table = {
      rms_norm,    rope,         swiglu,     geglu,         softmax,        f32_to_f16,
      f16_to_f32,  f32_to_q8_0,  exp_sum,    scale,         attn_scores,    attn_accum,
      tile_scores, tile_softmax, tile_accum, tile_scores_t, tile_transpose, tile_transpose_f16};
  return &table;
}

}  // namespace spw::cpu
