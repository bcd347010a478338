// What a session holds and has done (docs/DESIGN.md §4.6): the live counters both backends
// update while they run, and the one plain struct they fill from them, SessionUsage, which the
// app reads everywhere (the dashboard's samples, job progress, spillway-cli --stats and bench).
// A new quantity is one counter here, one field, one line in read_counters().
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/kv/kv_cache.h"

namespace spw {

/// Counters of one session, updated by the session thread and its workers with relaxed atomics
/// and readable from any thread without locks (a reader may see two steps mixed). Times are
/// nanoseconds; attention times on the CPU are thread-seconds summed over the workers.
struct SessionCounters {
  std::atomic<int64_t> prefill_tokens_computed{0};  // positions computed by prompt evals
  std::atomic<int64_t> prefill_ns{0};
  std::atomic<int64_t> decode_tokens{0};  // single-token evals that extend a sequence
  std::atomic<int64_t> decode_ns{0};
  std::atomic<int64_t> window_attn_ns{0};  // CPU jobs attending a query's window blocks
  std::atomic<int64_t> cold_attn_ns{0};    // CPU jobs (CUDA: CPU wall time) on cold blocks
  std::atomic<int64_t> merge_ns{0};        // log-sum-exp merges and finalisation (CPU)
  std::atomic<int64_t> query_wait_ns{0};   // CUDA: the host waiting for a layer's query
  // CUDA: bytes over PCIe. Decode moves queries down and the CPU's partials up, never cold KV
  // (decode_cold_to_device_bytes stays 0); prefill stages cold blocks to the GPU.
  std::atomic<int64_t> query_d2h_bytes{0};
  std::atomic<int64_t> partial_h2d_bytes{0};
  std::atomic<int64_t> prefill_stage_h2d_bytes{0};
  std::atomic<int64_t> decode_cold_to_device_bytes{0};

  static void add(std::atomic<int64_t>& c, int64_t v) { c.fetch_add(v, std::memory_order_relaxed); }
};

/// What a session holds and has done, backend-neutral. Bytes are all layers, K + V.
struct SessionUsage {
  bool gpu = false;  // a CUDA session (the vram_* and PCIe fields are then filled)
  int64_t n_past = 0, n_ctx = 0;
  int64_t prefill_tokens_computed = 0, decode_tokens = 0;
  double prefill_s = 0, decode_s = 0;  // wall time inside eval(), prompt and decode steps
  double window_attn_s = 0, cold_attn_s = 0, merge_s = 0, query_wait_s = 0;
  /// The tiered KV cache: blocks and bytes per tier, bytes moved between tiers so far.
  kv::KvStats kv;
  // CUDA: device memory by purpose, and bytes over PCIe (window_d2h: blocks copied off the GPU
  // by spills and snapshot reads); pcie_bytes is all of them.
  int64_t vram_weights = 0, vram_window = 0, vram_scratch = 0;
  int64_t query_d2h_bytes = 0, partial_h2d_bytes = 0, prefill_stage_h2d_bytes = 0;
  int64_t window_d2h_bytes = 0, decode_cold_to_device_bytes = 0;
  /// This process's resident set (/proc/self/statm); 0 where unreadable.
  int64_t rss_bytes = 0;

  /// Prefill tokens per second of prefill, decode tokens per second of decode, over the
  /// session so far (0 before the first).
  double prefill_tokens_per_s() const {
    return prefill_s > 0 ? static_cast<double>(prefill_tokens_computed) / prefill_s : 0;
  }
  double decode_tokens_per_s() const {
    return decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0;
  }
  /// Bytes over PCIe in both directions.
  int64_t pcie_bytes() const {
    return query_d2h_bytes + partial_h2d_bytes + prefill_stage_h2d_bytes + window_d2h_bytes;
  }
};

/// Copies the counters into `u`: counts, and times as seconds. The caller fills the rest
/// (n_past, kv, vram, window_d2h_bytes, rss).
void read_counters(const SessionCounters& c, SessionUsage& u);

/// This process's resident set size in bytes (/proc/self/statm); 0 where unreadable.
int64_t process_rss_bytes();

}  // namespace spw
