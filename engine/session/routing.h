// Mixture-of-experts routing as a session chose it: what the float64 reference records and what
// the CPU session can be made to follow, so that tests compare a quantized fast path with the
// reference on the same expert choices (engine/backend/reference/reference_session.h,
// engine/backend/cpu/cpu_session.h). The product never sets these hooks.
#pragma once

#include <cstdint>
#include <vector>

namespace spw {

/// One token's choice in one MoE layer.
struct RouteChoice {
  int64_t layer = 0;
  int64_t pos = 0;               // the token's position in the sequence
  std::vector<int32_t> experts;  // the n_expert_used chosen, most probable first
  /// Their gates as applied to the experts' outputs (probabilities, normalised and scaled as the
  /// model says), in the order of `experts`.
  std::vector<double> weights;
  /// Router logit of the last chosen expert minus that of the most probable one left out (>= 0;
  /// +inf when every expert is chosen): a choice closer than the other path's rounding of the
  /// router's input to a tie may go the other way there.
  double margin = 0.0;
};

}  // namespace spw
