#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace spw {

Status validate(const SamplerParams& p) {
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return make_error("--top-p {} must be in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return make_error("--min-p {} must be in [0, 1]", p.min_p);
  if (!(p.repeat_penalty > 0.0f))
    return make_error("--repeat-penalty {} must be positive", p.repeat_penalty);
  if (p.repeat_last_n < 0)
    return make_error("--repeat-last-n {} must not be negative", p.repeat_last_n);
  if (std::isnan(p.temp)) return make_error("--temp must be a number");
  return Status::Ok();
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplerParams& params)
    : p_(params),
      seed_(params.seed == 0xFFFFFFFF ? std::random_device{}() : params.seed),
      rng_(seed_) {}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (p_.temp <= 0.0f) return argmax(logits);

  struct Cand {
    int32_t id;
    float logit;
  };
  std::vector<Cand> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c[i] = {static_cast<int32_t>(i), logits[i]};

  // Repetition penalty (CTRL, Keskar et al. 2019), as llama.cpp applies it: divide positive
  // logits, multiply negative ones, once per distinct recent token.
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    const size_t n = std::min(history.size(), static_cast<size_t>(p_.repeat_last_n));
    std::unordered_set<int32_t> seen(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= c.size()) continue;
      float& l = c[static_cast<size_t>(id)].logit;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  // Sort descending by logit, lowest id first on ties (stable across platforms).
  std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  });
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < c.size())
    c.resize(static_cast<size_t>(p_.top_k));

  auto probs = [&](float temp) {
    std::vector<double> p(c.size());
    const double mx = c.front().logit;
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); ++i) sum += p[i] = std::exp((c[i].logit - mx) / temp);
    for (auto& x : p) x /= sum;
    return p;
  };
  if (p_.top_p < 1.0f) {
    const auto p = probs(1.0f);
    double cum = 0.0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += p[i];
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(std::max<size_t>(keep, 1));
  }
  if (p_.min_p > 0.0f) {
    const auto p = probs(1.0f);
    size_t keep = 1;
    while (keep < c.size() && p[keep] >= p_.min_p * p[0]) ++keep;
    c.resize(keep);
  }
  const auto p = probs(p_.temp);
  std::discrete_distribution<size_t> dist(p.begin(), p.end());
  return c[dist(rng_)].id;
}

}  // namespace spw
