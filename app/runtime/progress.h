// Progress of a long run: one event type for prefill (tokens), map-reduce (parts), decode
// (tokens) and batch documents (documents), with its rate and estimated time left. The CLI
// draws it (a redrawn stderr line on a TTY, JSON lines with --progress-json), the desktop app
// shows it as a bar with ETA, the job runner stores it per document.
//
// ProgressMeter turns "done of total" samples into events: the rate is done/elapsed since the
// meter began (over the whole phase, so a slow first ubatch does not dominate for long), the ETA
// (total - done) / rate. It holds no clock of its own: callers pass seconds (tests pass fakes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw::app {

enum class ProgressPhase { Prefill, Part, Decode, Document };

/// "prefill", "part", "decode", "document" (the `phase` field of --progress-json).
const char* progress_phase_name(ProgressPhase phase);

struct ProgressEvent {
  ProgressPhase phase = ProgressPhase::Prefill;
  int64_t done = 0;   // tokens (prefill, decode), parts (part) or documents (document) done
  int64_t total = 0;  // of that many; 0 when unknown (decode until the end of text)
  /// Tokens per second over the phase so far (parts and documents: the tokens they computed
  /// per second, when the caller counts them; else 0).
  double tokens_per_s = 0;
  double eta_s = -1;  // seconds left; < 0 when unknown (nothing done yet, or total unknown)
  double elapsed_s = 0;
};

/// Receives progress events; called on the running thread.
using ProgressSink = std::function<void(const ProgressEvent&)>;

/// Predicted cost (any unit) of prefilling positions [0, pos) of one prompt. A prefill's later
/// tokens cost more (each attends every position before it), so its ETA scales the measured time
/// by cost left / cost done instead of tokens left / tokens done, which promised "ETA 4s" early
/// in a long prefill that took minutes. Empty: every token costs the same.
using PrefillCost = std::function<double(int64_t pos)>;

/// A model's PrefillCost: per token 2 x its active parameters less token_embd and the output
/// matrix (the projections), plus per layer 4 x n_head x head_dim x the positions the token
/// attends (a sliding layer at most its window), weighted by kAttentionCostPerFlop.
PrefillCost model_prefill_cost(const Model& model);
/// Seconds per attention FLOP over seconds per projection FLOP in a CPU prefill: ~2.5 on the
/// 250M Q8_0 benchmark model at 4K and 16K (tests/bench/RESULTS.md, quiet: attention's share of
/// the time 0.49 and 0.79 against FLOP shares of 0.27 and 0.60), less on a loaded machine; 2 is
/// between. A shape for the ETA, not a timing: the ETA scales the time measured so far.
inline constexpr double kAttentionCostPerFlop = 2.0;

/// One JSON object on one line (no newline): {"phase": "prefill", "done": N, "total": N,
/// "tokens_per_s": X, "eta_s": X} (eta_s is null when unknown).
std::string progress_json(const ProgressEvent& e);

/// The human line: "prefill 12,288/73,167 tokens (17%) 48 t/s ETA 21m07s";
/// "part 3/12 (25%) ETA 1h02m"; unknown parts are left out.
std::string progress_line(const ProgressEvent& e);

/// Durations as the progress line writes them: "45s", "21m07s", "1h02m".
std::string format_eta(double seconds);

class ProgressMeter {
 public:
  /// `start_s`: the clock at the start of the phase; `done_at_start` counts work that was
  /// already there (a restored checkpoint) and is not part of the rate.
  ProgressMeter(ProgressPhase phase, int64_t total, double start_s, int64_t done_at_start = 0,
                PrefillCost cost = {});
  /// The event for `done` at clock `now_s`. `tokens` (parts, documents): the tokens computed so
  /// far, for tokens_per_s; prefill and decode use `done` itself.
  ProgressEvent at(int64_t done, double now_s, int64_t tokens = -1) const;

 private:
  ProgressPhase phase_;
  int64_t total_;
  double start_s_;
  int64_t done_at_start_;
  PrefillCost cost_;  // the ETA's shape (prefill); empty: linear in `done`
};

/// Seconds on the steady clock: the trackers' default clock.
double steady_seconds();

/// The events of one answer as it runs: each prompt's prefill (per ubatch: prompt positions
/// done of the prompt's tokens) and decode (per token: tokens generated of n_predict, 0 when
/// unbounded), and, in map-reduce mode, the parts (part events: parts done of N, with the ETA of
/// the whole answer). The whole answer's ETA counts the tokens the remaining parts hold (their
/// prompts plus room for an answer each, and the final combination: one answer per part plus
/// its own) at the rate measured over the tokens computed so far. Restored tokens (saved KV)
/// are done but not computed, so they do not speed up the measured rate. Used on one thread.
class AnswerProgress {
 public:
  /// No sink: every call does nothing. `clock` (seconds) defaults to steady_seconds.
  explicit AnswerProgress(ProgressSink sink, std::function<double()> clock = {});
  bool enabled() const { return static_cast<bool>(sink_); }

  /// Map-reduce: `part_prompt_tokens[k]` is part k+1's prompt; each part and the combination
  /// answer in at most `answer_tokens`. Emits the first part event (0 of N).
  void plan_parts(const std::vector<int64_t>& part_prompt_tokens, int64_t answer_tokens);
  /// Part `k` (1-based) finished: part event k of N.
  void part_done(int k);
  /// The combination finished: the last part event (N of N, ETA 0).
  void answer_done();

  /// A prompt of `n_prompt` tokens begins; it generates at most `n_predict` (<= 0: unbounded).
  void prompt_begin(int64_t n_prompt, int64_t n_predict);
  /// `n_tokens` prompt positions came from saved KV (not computed).
  void prompt_restored(int64_t n_tokens);
  /// The shape of every later prompt's prefill cost (model_prefill_cost()), for its ETA.
  void set_prefill_cost(PrefillCost cost) { prefill_cost_ = std::move(cost); }
  /// The session hook for an eval() whose tokens end at prompt position `end_pos`: reports the
  /// prefill position after each ubatch (end_pos - total + done), then calls `outer` (the hook
  /// already installed: cancellation, usage) and returns its answer.
  EvalProgress prefill_hook(EvalProgress outer, int64_t end_pos);
  /// Prompt position `pos` is computed (prefill event when it moved).
  void prefill_at(int64_t pos);
  /// The prompt is in the KV: the last prefill event (done == total) if not sent yet.
  void prefill_done();
  /// `n_generated` tokens of this prompt's answer are generated (decode event).
  void decode_at(int64_t n_generated);

 private:
  void emit_part(int done, bool finished);
  double computed_rate(double now) const;

  ProgressSink sink_;
  std::function<double()> clock_;
  PrefillCost prefill_cost_;
  // The prompt now running.
  int64_t n_prompt_ = 0, n_predict_ = 0, restored_ = 0, pos_ = 0, generated_ = 0;
  double prompt_start_s_ = 0, decode_start_s_ = 0;
  bool prefill_sent_done_ = false;
  // Map-reduce.
  std::vector<int64_t> part_tokens_;
  int64_t answer_tokens_ = 0;
  int parts_done_ = 0;
  double parts_start_s_ = 0;
  int64_t work_done_ = 0;      // tokens of finished prompts (prompt + generated)
  int64_t computed_done_ = 0;  // of those, computed (not restored)
};

}  // namespace spw::app
