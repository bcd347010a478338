// Internal to tests/support: the tensor list of a test model before any value is drawn, shared
// by build_test_model (test_model.cpp) and make_fast_random_model (test_model_fast.cpp), so both
// write the same names, shapes and types in the same order.
#pragma once

#include <string>
#include <vector>

#include "tests/support/test_model.h"

namespace spw {

/// The spread of a MoE router (ffn_gate_inp) relative to 1 / sqrt(n_embd): logits of about 4
/// standard deviations, so the top-k choice is decisive as a trained router's is (with unit
/// spread a random router's top experts are near ties that any rounding flips).
inline constexpr float kRouterSpread = 4.0f;

struct TensorPlan {
  enum class Kind { Matrix, Vector, RopeFactors, Router };
  Kind kind = Kind::Matrix;
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;      // Matrix: ne = [n_in, n_out] (or [n_in, n_out, n_expert]); others: ne[0]
  int64_t n_out = 1;     // Matrix: rows of one matrix (one expert)
  int64_t n_expert = 1;  // Matrix: > 1 for an expert stack
  float center = 0, spread = 0;  // Vector: center + uniform(spread); RopeFactors: the slow divisor
  bool stack = false;            // Matrix: an expert stack, 3-D even for one expert

  /// The tensor with its values (build_test_model's).
  TestTensor materialize(const TestModelSpec& s) const;
};

/// The keys of spec `s` into `m`, and its tensors. Precondition: check_test_model_spec(s).ok().
std::vector<TensorPlan> plan_test_model(const TestModelSpec& s, TestModel& m);

}  // namespace spw
