#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace spw {

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::None:
      return "none";
    case RopeScaling::Linear:
      return "linear";
    case RopeScaling::Yarn:
      return "yarn";
    case RopeScaling::LongRope:
      return "longrope";
  }
  return "none";
}

std::array<double, 2> rope_yarn_corr_dims(int64_t n_rot, const RopeParams& p) {
  const auto dim = [&](double beta) {
    return static_cast<double>(n_rot) *
           std::log(static_cast<double>(p.n_ctx_orig) / (beta * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(p.freq_base));
  };
  const double low = std::floor(dim(p.beta_fast));
  const double high = std::ceil(dim(p.beta_slow));
  return {std::max(0.0, low), std::min(static_cast<double>(n_rot - 1), high)};
}

double rope_mscale(const RopeParams& p) {
  if (p.ext_factor == 0.0) return p.yarn_attn_factor * p.attn_factor;
  const double factor = 1.0 / p.freq_scale;
  return (factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0) * p.attn_factor;
}

std::vector<double> rope_inv_freq(int64_t n_rot, const RopeParams& p, const float* factors) {
  const int64_t half = n_rot / 2;
  std::vector<double> f(static_cast<size_t>(half));
  const std::array<double, 2> corr = rope_yarn_corr_dims(n_rot, p);
  for (int64_t i = 0; i < half; ++i) {
    const double extrap =
        std::pow(p.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) /
        (factors ? static_cast<double>(factors[i]) : 1.0);
    double scale = p.freq_scale;  // linear interpolation
    if (p.ext_factor != 0.0) {    // YaRN: extrapolate the fast pairs, interpolate the slow ones
      const double y = (static_cast<double>(i) - corr[0]) / std::max(0.001, corr[1] - corr[0]);
      const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * p.ext_factor;
      scale = p.freq_scale * (1.0 - mix) + mix;
    }
    f[static_cast<size_t>(i)] = extrap * scale;
  }
  return f;
}

}  // namespace spw
