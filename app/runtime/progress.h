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
  ProgressMeter(ProgressPhase phase, int64_t total, double start_s, int64_t done_at_start = 0);
  /// The event for `done` at clock `now_s`. `tokens` (parts, documents): the tokens computed so
  /// far, for tokens_per_s; prefill and decode use `done` itself.
  ProgressEvent at(int64_t done, double now_s, int64_t tokens = -1) const;

 private:
  ProgressPhase phase_;
  int64_t total_;
  double start_s_;
  int64_t done_at_start_;
};

}  // namespace spw::app
