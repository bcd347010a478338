// Small float64 helpers of the reference forward pass (reference_session.cpp,
// reference_ffn.cpp): vectors dequantized to doubles, RMSNorm, the FFN activations.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "engine/gguf/gguf.h"

namespace spw::ref {

/// A 1-D tensor (norm weights, biases, rope factors) as doubles [ne[0]].
inline std::vector<double> load_vector(const GgufTensorInfo& t) {
  std::vector<float> f(static_cast<size_t>(t.ne[0]));
  dequantize_row(t.type, t.data, f.data(), t.ne[0]);
  return {f.begin(), f.end()};
}

/// out = x / sqrt(mean(x^2) + eps) * w, over n elements (out may alias x).
inline void rms_norm(const double* x, const std::vector<double>& w, double eps, int64_t n,
                     double* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[static_cast<size_t>(i)];
}

/// silu(x) = x / (1 + e^-x).
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

/// GELU, tanh approximation (Hendrycks & Gimpel 2016; PyTorch's gelu(approximate="tanh")).
inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace spw::ref
