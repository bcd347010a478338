#include "app/runtime/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "engine/kv/tier_policy.h"

namespace spw::app {

const char* progress_phase_name(ProgressPhase phase) {
  switch (phase) {
    case ProgressPhase::Prefill:
      return "prefill";
    case ProgressPhase::Part:
      return "part";
    case ProgressPhase::Decode:
      return "decode";
    case ProgressPhase::Document:
      return "document";
  }
  return "?";
}

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

}  // namespace

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(seconds < 0 ? 0 : seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buf;
}

std::string progress_json(const ProgressEvent& e) {
  std::string out = "{\"phase\": \"";
  out += progress_phase_name(e.phase);
  out += "\", \"done\": " + std::to_string(e.done) + ", \"total\": " + std::to_string(e.total) +
         ", \"tokens_per_s\": " + number(e.tokens_per_s) +
         ", \"eta_s\": " + (e.eta_s < 0 ? std::string("null") : number(e.eta_s)) + "}";
  return out;
}

std::string progress_line(const ProgressEvent& e) {
  const bool counts_tokens = e.phase == ProgressPhase::Prefill || e.phase == ProgressPhase::Decode;
  std::string out = progress_phase_name(e.phase);
  out += ' ' + kv::group_thousands(e.done);
  if (e.total > 0) out += '/' + kv::group_thousands(e.total);
  if (counts_tokens) out += " tokens";
  if (e.total > 0) {
    out += " (" +
           std::to_string(static_cast<int>(100.0 * static_cast<double>(e.done) /
                                           static_cast<double>(e.total))) +
           "%)";
  }
  if (e.tokens_per_s > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, e.tokens_per_s < 10 ? " %.1f t/s" : " %.0f t/s", e.tokens_per_s);
    out += buf;
  }
  if (e.eta_s >= 0) out += " ETA " + format_eta(e.eta_s);
  return out;
}

ProgressMeter::ProgressMeter(ProgressPhase phase, int64_t total, double start_s,
                             int64_t done_at_start, PrefillCost cost)
    : phase_(phase),
      total_(total),
      start_s_(start_s),
      done_at_start_(done_at_start),
      cost_(std::move(cost)) {}

ProgressEvent ProgressMeter::at(int64_t done, double now_s, int64_t tokens) const {
  ProgressEvent e;
  e.phase = phase_;
  e.done = done;
  e.total = total_;
  e.elapsed_s = now_s - start_s_;
  const int64_t new_work = done - done_at_start_;
  const int64_t rate_tokens = tokens >= 0 ? tokens : new_work;
  if (e.elapsed_s > 0 && rate_tokens > 0) {
    e.tokens_per_s = static_cast<double>(rate_tokens) / e.elapsed_s;
  }
  if (total_ > 0 && new_work > 0 && e.elapsed_s > 0) {
    const double per_unit = e.elapsed_s / static_cast<double>(new_work);
    e.eta_s = per_unit * static_cast<double>(total_ - done);
    if (cost_) {
      const double spent = cost_(done) - cost_(done_at_start_);
      if (spent > 0) e.eta_s = e.elapsed_s * (cost_(total_) - cost_(done)) / spent;
    }
    if (e.eta_s < 0) e.eta_s = 0;
  }
  return e;
}

PrefillCost model_prefill_cost(const Model& model) {
  const ModelConfig& c = model.config();
  // The projections: the active parameters less token_embd (a lookup) and the output matrix
  // (a prefill computes the last position's logits only).
  const double embd = static_cast<double>(c.n_vocab) * static_cast<double>(c.n_embd);
  const double active = static_cast<double>(model.size().active_params);
  const double per_token = 2.0 * std::max(active / 4, active - embd * (c.tied_embeddings ? 1 : 2));
  const double per_pair =
      kAttentionCostPerFlop * 4.0 * static_cast<double>(c.n_head) * static_cast<double>(c.head_dim);
  std::vector<int64_t> spans;  // one entry per layer: 0 global, else its window
  for (int64_t il = 0; il < c.n_layer; ++il) spans.push_back(c.attn_span(il));
  return [per_token, per_pair, spans](int64_t pos) {
    const double p = static_cast<double>(pos);
    double pairs = 0;  // (query, key) pairs of positions [0, pos), summed over the layers
    for (const int64_t s : spans) {
      const double w = static_cast<double>(s);
      pairs += s == 0 || p <= w ? p * p / 2 : w * w / 2 + w * (p - w);
    }
    return per_token * p + per_pair * pairs;
  };
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

AnswerProgress::AnswerProgress(ProgressSink sink, std::function<double()> clock)
    : sink_(std::move(sink)), clock_(clock ? std::move(clock) : steady_seconds) {}

void AnswerProgress::plan_parts(const std::vector<int64_t>& part_prompt_tokens,
                                int64_t answer_tokens) {
  if (!enabled()) return;
  part_tokens_ = part_prompt_tokens;
  answer_tokens_ = answer_tokens;
  parts_done_ = 0;
  work_done_ = computed_done_ = 0;
  parts_start_s_ = clock_();
  emit_part(0, false);
}

double AnswerProgress::computed_rate(double now) const {
  const double elapsed = now - parts_start_s_;
  const int64_t computed = computed_done_ + (pos_ - restored_) + generated_;
  return elapsed > 0 && computed > 0 ? static_cast<double>(computed) / elapsed : 0;
}

void AnswerProgress::emit_part(int done, bool finished) {
  const auto n = static_cast<int64_t>(part_tokens_.size());
  const double now = clock_();
  ProgressEvent e;
  e.phase = ProgressPhase::Part;
  e.done = done;
  e.total = n;
  e.elapsed_s = now - parts_start_s_;
  e.tokens_per_s = computed_rate(now);
  if (finished) {
    e.eta_s = 0;
  } else if (e.tokens_per_s > 0) {
    // Every part's prompt and answer, then the combination (one answer per part, and its own).
    const int64_t all = std::accumulate(part_tokens_.begin(), part_tokens_.end(), int64_t{0}) +
                        n * answer_tokens_ + (n + 1) * answer_tokens_;
    const int64_t left = std::max<int64_t>(0, all - (work_done_ + pos_ + generated_));
    e.eta_s = static_cast<double>(left) / e.tokens_per_s;
  }
  sink_(e);
}

void AnswerProgress::part_done(int k) {
  if (!enabled() || part_tokens_.empty()) return;
  parts_done_ = k;
  emit_part(k, false);
}

void AnswerProgress::answer_done() {
  if (!enabled() || part_tokens_.empty()) return;
  emit_part(static_cast<int>(part_tokens_.size()), true);
}

void AnswerProgress::prompt_begin(int64_t n_prompt, int64_t n_predict) {
  if (!enabled()) return;
  // The prompt before this one is finished: its tokens count as done work.
  work_done_ += pos_ + generated_;
  computed_done_ += (pos_ - restored_) + generated_;
  n_prompt_ = n_prompt;
  n_predict_ = n_predict > 0 ? n_predict : 0;
  restored_ = pos_ = generated_ = 0;
  prefill_sent_done_ = false;
  prompt_start_s_ = decode_start_s_ = clock_();
}

void AnswerProgress::prompt_restored(int64_t n_tokens) {
  if (!enabled()) return;
  restored_ = pos_ = n_tokens;
}

EvalProgress AnswerProgress::prefill_hook(EvalProgress outer, int64_t end_pos) {
  return [this, outer = std::move(outer), end_pos](int64_t done, int64_t total) {
    prefill_at(end_pos - total + done);
    return outer ? outer(done, total) : true;
  };
}

void AnswerProgress::prefill_at(int64_t pos) {
  if (!enabled() || pos <= pos_) return;
  pos_ = std::min(pos, n_prompt_);
  const ProgressMeter meter(ProgressPhase::Prefill, n_prompt_, prompt_start_s_, restored_,
                            prefill_cost_);
  prefill_sent_done_ = pos_ == n_prompt_;
  sink_(meter.at(pos_, clock_()));
}

void AnswerProgress::prefill_done() {
  if (!enabled()) return;
  if (!prefill_sent_done_) {
    // A session that reports no ubatches (the reference session), or a prompt restored whole.
    const ProgressMeter meter(ProgressPhase::Prefill, n_prompt_, prompt_start_s_, restored_,
                              prefill_cost_);
    pos_ = n_prompt_;
    prefill_sent_done_ = true;
    sink_(meter.at(pos_, clock_()));
  }
  decode_start_s_ = clock_();
}

void AnswerProgress::decode_at(int64_t n_generated) {
  if (!enabled()) return;
  generated_ = n_generated;
  const ProgressMeter meter(ProgressPhase::Decode, n_predict_, decode_start_s_);
  sink_(meter.at(n_generated, clock_()));
}

}  // namespace spw::app
