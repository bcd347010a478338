// Engine telemetry as the memory dashboard reads it: one plain snapshot struct per sample,
// published by the engine worker (app/worker/engine_worker.h) 2-4 times per second while a run
// is going and from a timer (process memory only) while idle.
//
// Engine-free on purpose: ui/ includes this header, so it names no engine/ type. The one
// conversion from the engine's counters (spw::SessionUsage) is declared with a forward
// declaration and defined in telemetry.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <QMetaType>

namespace spw {
struct SessionUsage;
}

namespace spw::app {

/// One sample. Byte counts are bytes, rates per second; -1 marks a value not known (no GPU,
/// /proc unreadable). KV fields are those of the last run sample (zeros before any run).
struct TelemetrySample {
  int64_t t_ms = 0;               // wall clock, milliseconds since the Unix epoch
  bool running = false;           // a run (prefill or decode) was in progress when taken
  bool gpu = false;               // the session runs on a CUDA device (vram_* then filled)
  int64_t n_past = 0, n_ctx = 0;  // tokens in the session's context, and its size
  // The tiered KV cache: blocks and bytes per tier (window = GPU on a GPU session, RAM else).
  int64_t window_blocks = 0, host_blocks = 0, disk_blocks = 0;
  int64_t window_bytes = 0, host_bytes = 0, disk_bytes = 0;
  // Sliding-window layers' blocks beyond their window, dropped (not spilled) and their bytes.
  int64_t dropped_blocks = 0, dropped_bytes = 0;
  // Bytes moved between tiers since the session began (window->host, window->disk,
  // cold->window together), and per token computed between this sample and the one before.
  int64_t moved_bytes = 0;
  double moved_bytes_per_token = 0;
  // GPU sessions: device memory by purpose and free (probe_cuda); -1 on CPU sessions.
  int64_t vram_weights = -1, vram_window = -1, vram_scratch = -1, vram_free = -1;
  // Host memory: this process's resident set (/proc/self/statm) and the system's
  // MemAvailable (/proc/meminfo).
  int64_t rss_bytes = -1, available_bytes = -1;
  // Throughput: prefill tokens computed per second of prefill, decode tokens per second of
  // decode, over the session so far (0 before any).
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
};

/// This process's resident set size in bytes (/proc/self/statm); -1 when unreadable.
int64_t process_rss_bytes();
/// The system's available memory in bytes (MemAvailable in /proc/meminfo); -1 when unreadable.
int64_t system_available_bytes();

/// A sample of the process memory only (running = false, KV fields zero), stamped now.
TelemetrySample idle_sample();

/// A run sample from the session's counters, stamped now, with RSS and available memory read.
/// `prev` (may be null) is the previous run sample of the same run, for the per-token bytes
/// moved; `vram_free` is probe_cuda()'s free bytes on GPU sessions (ignored on CPU).
TelemetrySample sample_from_usage(const SessionUsage& usage, const TelemetrySample* prev,
                                  int64_t vram_free);

/// Decides when a run sample is published: at most once per `interval_ms` (default 300 ms, so
/// 3 per second), and always the first. Not thread-safe; one per run thread.
class TelemetryThrottle {
 public:
  explicit TelemetryThrottle(int64_t interval_ms = 300) : interval_ms_(interval_ms) {}
  /// True when a sample taken at `now_ms` should be published (and records it as published).
  bool due(int64_t now_ms);
  void reset() { last_ms_ = -1; }

 private:
  int64_t interval_ms_;
  int64_t last_ms_ = -1;
};

/// A run's usage feed (RunCallbacks::usage, RunnerCallbacks::usage) as the dashboard's run
/// samples: at most one per `interval_ms` (TelemetryThrottle), each against the sample before
/// it, and the last reading forced out by finish(). What chat runs and batch jobs both feed
/// the dashboard with. Not thread-safe; one per run thread.
class UsageSampler {
 public:
  /// `out` receives each sample (on the calling thread).
  UsageSampler(int64_t interval_ms, std::function<void(const TelemetrySample&)> out);
  void add(const SessionUsage& usage);
  /// The last reading, published whatever the throttle says (the run's final state); nothing
  /// when no reading came since the last finish().
  void finish();

 private:
  void publish(const SessionUsage& usage);
  TelemetryThrottle throttle_;
  std::function<void(const TelemetrySample&)> out_;
  std::shared_ptr<SessionUsage> last_;  // the newest reading (SessionUsage is engine-side)
  bool pending_ = false;                // last_ came after the last published sample
  TelemetrySample prev_;
  bool have_prev_ = false;
};

/// CSV export: the header line and one line per sample (no trailing newline), columns in the
/// order of TelemetrySample's fields; unknown values (-1) are written as empty cells.
std::string telemetry_csv_header();
std::string telemetry_csv_row(const TelemetrySample& s);

}  // namespace spw::app

Q_DECLARE_METATYPE(spw::app::TelemetrySample)
