#include "engine/cpu/ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "engine/cpu/kernels.h"

namespace spw::cpu {

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out) {
  assert(n > 0);
  active_op_kernels().rms_norm(x, w, eps, n, out);
}

void rope_cos_sin(const double* inv_freq, int64_t n_rot, int64_t pos, double mscale, float* cs) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    cs[i] = static_cast<float>(std::cos(theta) * mscale);
    cs[half + i] = static_cast<float>(std::sin(theta) * mscale);
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs,
          RopeType type) {
  assert(n_rot % 2 == 0 && n_rot <= head_dim);
  active_op_kernels().rope(x, n_heads, head_dim, n_rot, cs, type == RopeType::NeoX);
}

void swiglu(const float* g, const float* u, float* out, int64_t n) {
  active_op_kernels().swiglu(g, u, out, n);
}

void geglu(const float* g, const float* u, float* out, int64_t n) {
  active_op_kernels().geglu(g, u, out, n);
}

void softmax(float* x, int64_t n) {
  if (n > 0) active_op_kernels().softmax(x, n);
}

void route_experts(float* logits, int64_t n, int64_t n_expert, int64_t k, bool norm, float scale,
                   int32_t* chosen, float* weights) {
  assert(k >= 1 && k <= n_expert);
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n; ++t) {
    float* p = logits + t * n_expert;
    softmax(p, n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < k; ++j) {
      float w = p[order[static_cast<size_t>(j)]];
      if (norm) w /= sum;
      if (scale != 0.0f) w *= scale;
      chosen[t * k + j] = order[static_cast<size_t>(j)];
      weights[t * k + j] = w;
    }
  }
}

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n) {
  active_op_kernels().f32_to_f16(x, y, n);
}

void f16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
  active_op_kernels().f16_to_f32(x, y, n);
}

void f32_to_q8_0_row(const float* x, void* y, int64_t n) {
  assert(n % 32 == 0);
  active_op_kernels().f32_to_q8_0(x, y, n);
}

}  // namespace spw::cpu
