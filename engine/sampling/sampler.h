// Token sampling from logits. Greedy (temp <= 0) is plain argmax with the lowest id winning ties
// and no penalties applied, so greedy runs are comparable token for token with other engines.
// Otherwise the chain follows llama.cpp's default order: repetition penalty -> top-k -> top-p ->
// min-p -> temperature -> softmax -> draw with a seeded mt19937.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/common/expected.h"

namespace spw {

struct SamplerParams {
  float temp = 0.8f;            // <= 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last repeat_last_n
  int32_t repeat_last_n = 64;
  uint32_t seed = 0xFFFFFFFF;  // 0xFFFFFFFF: a random seed
};

/// Checks ranges: temp >= 0 (negative allowed = greedy), 0 < top_p <= 1, 0 <= min_p <= 1,
/// repeat_penalty > 0, repeat_last_n >= 0. Errors name the option.
Status validate(const SamplerParams& p);

/// Index of the largest logit; the lowest index wins ties. Precondition: logits non-empty.
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  /// Picks the next token from `logits` [n_vocab], given the tokens so far (for the penalty).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  uint32_t seed() const { return seed_; }

 private:
  SamplerParams p_;
  uint32_t seed_;
  std::mt19937 rng_;
};

}  // namespace spw
