#include "engine/cpu/ops.h"

#include <cassert>
#include <cmath>

#include "engine/cpu/kernels.h"

namespace spw::cpu {

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out) {
  assert(n > 0);
  active_op_kernels().rms_norm(x, w, eps, n, out);
}

std::vector<double> rope_inv_freq(int64_t n_rot, double base, double freq_scale,
                                  const float* factors) {
  const int64_t half = n_rot / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double factor = factors ? static_cast<double>(factors[i]) : 1.0;
    f[static_cast<size_t>(i)] =
        freq_scale * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) /
        factor;
  }
  return f;
}

void rope_cos_sin(const double* inv_freq, int64_t n_rot, int64_t pos, float mscale, float* cs) {
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

void softmax(float* x, int64_t n) {
  if (n > 0) active_op_kernels().softmax(x, n);
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
