// Attention over the tiered KV cache's blocks on the CPU (docs/DESIGN.md §4.3): the one
// scheduler of the CPU session's attention and of the CUDA session's host-side attention over
// the cold blocks. It plans jobs, runs them on a thread pool over the blocks where they lie
// (window, host or disk alike), selects blocks for the approximate modes and merges the
// partials by the log-sum-exp rule (attention.h).
//
// Two exact schemes, each tier-blind (blocks are read where they lie, in position order), so a
// spilled run is bit for bit the unspilled one:
// - Query-tiled (plan(): the CPU session's exact attention, decode and prefill alike; below).
// - Per-block partials (plan_given(): the CUDA session's cold blocks): one partial (o, m, s) per
//   block of a query's range, merged left to right in position order. A job attends, for one
//   query t and one KV head g (all n_rep query heads of its GQA group, kv_head = head / n_rep),
//   blocks [b0, b1) in order into the partials of its slot; a pair's slots cover consecutive
//   ranges merged in slot order. Few (query, KV head) pairs: one job per block, for
//   parallelism, unless the per-block partials would take too much memory; otherwise one job
//   per pair. Either way the same left-to-right merge of per-block partials.
//
// Sliding-window layers (ModelConfig::attn_span, gemma3's local layers): a scheduler made for a
// span attends, for a query at p, positions [p - span + 1, p] only: blocks wholly before the
// span are not planned (exact) or skipped (the approximate modes' window, given blocks), and
// the boundary block's rows before it are masked (attended from the first row inside). One
// scheduler serves the layers of one span; the CPU session keeps one per span it needs.
//
// Query-tiled (engine/cpu/attention_tile.h, tiled_attention.cpp): a job attends, for one KV head g
// and a tile of tile_tokens(n_rep) consecutive queries (the GQA group's heads of each: up to 64
// rows), the blocks of one key range in position order with an online softmax, and a tile's ranges
// are merged in range order by the log-sum-exp rule. Ranges are fixed positions (multiples of
// kRangeTokens, in whole blocks), not a function of the ubatch or the thread count, and a row's
// arithmetic does not depend on its tile (attention_tile.h): so a query's result is the same bits
// whatever the threads, the window, the budgets, spill timing and the ubatch (decode equals
// prefill). The ubatch's tiles run in waves whose range states stay within kMaxWaveBytes
// ([slots][rows][head_dim_v + 2] floats; at least one tile per wave), plus the output [n][n_head]
// [head_dim_v] and the tile kernel's per-thread scratch. Within a wave the jobs run KV head by KV
// head and range by range, the tiles of one range consecutive, so a thread reads a range's K and
// V from its L2 tile after tile (the order changes no result: each job has its own slot); where
// K or V is not F32 a thread converts a range's rows of its KV head to f32 once for those tiles
// (the same values the tile kernel converts them to: the same bits), in a per-thread buffer of
// max(kRangeTokens, block size) x (head_dim + head_dim_v) floats (1 MiB at head_dim 64). An
// approximate mode whose ubatch has no cold block attends exactly this way too (so it equals the
// exact mode there).
//
// Approximate modes (kv::KvAttention): Streaming attends each query's window (the tier
// policy's sink and recent blocks for that query) only; TopK attends the window and, per KV
// head, the top_k cold blocks whose key bound sum_d max(q_d min_d, q_d max_d) (summed over the
// GQA group's query heads) is largest, from per-block per-head key min/max kept here (Quest).
// Cold blocks are split so that one ubatch has about kTargetJobs jobs, but a chunk never holds
// fewer than kMinChunkTokens positions; a function of the ubatch and the shapes only.
//
// Memory: the partials of a per-block or approximate plan, [slots][n_rep] of head_dim_v floats
// each (bounded by kMaxBlockPartials slots x n_rep in the per-block plan); a tiled plan's, above;
// TopK's bounds, [n_layer][n_blocks]
// [n_head_kv][head_dim] floats twice.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/tier_policy.h"

namespace spw::cpu {

/// The attention shape of a model's layers, the KV element types and the layers' span.
struct AttnDims {
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;    // of q and k
  int64_t head_dim_v = 0;  // of v and the output
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  float scale = 0.0f;  // softmax scale of q.k (ModelConfig::attn_scale); 0: 1 / sqrt(head_dim)
  int64_t span = 0;    // positions a query attends back, its own included; 0: all (global)
};

/// Nanoseconds of one layer's attention: thread-seconds of the jobs, split by the tier the
/// blocks attended are in for their query (window: sinks and recent; cold: the rest), and the
/// merge's wall time.
struct AttnTimes {
  int64_t window_ns = 0, cold_ns = 0, merge_ns = 0;
};

class TieredAttention {
 public:
  /// `rule`: the cache's window rule as applied (TierLayout::window); `mode`, `top_k`: the KV
  /// settings'.
  TieredAttention(const AttnDims& dims, const kv::WindowRule& rule, kv::KvAttention mode,
                  int64_t top_k);

  /// Causal: n queries at positions [pos0, pos0 + n) attend their causal ranges (within the
  /// span) of the cache's blocks, block b holding positions [b * block_size, ...)
  /// (KvCache::blocks()). The same plan serves every layer of the span in the ubatch.
  /// `n_threads` changes nothing (the plan never depends on it); plan_given()'s chooses
  /// per-block or per-pair jobs.
  void plan(int64_t pos0, int64_t n, int n_threads);
  /// Given blocks (exact only): n queries at [pos0, pos0 + n) attend the given blocks, every
  /// one before pos0, in position order (the CUDA session's cold blocks), those of them within
  /// each query's span.
  void plan_given(int64_t pos0, int64_t n, std::span<const kv::BlockView> blocks, int n_threads);

  /// Runs the plan for layer il. q [n][n_head * head_dim] f32 (after RoPE); `blocks` the layer's
  /// views in the plan's order (the block table for plan(), the given blocks for plan_given()).
  /// Adds the job thread-seconds to `times`.
  void run(ThreadPool& pool, int64_t il, const float* q, std::span<const kv::BlockView> blocks,
           AttnTimes& times);
  /// Each (query, head)'s partials merged in slot order and normalised: out [n][n_head]
  /// [head_dim_v]. Adds the merge's time to `times`.
  void finalize(ThreadPool& pool, float* out, AttnTimes& times);
  /// The same merge, unnormalised: o [n][n_head][head_dim_v], ms [n][n_head][2] (m, s).
  void write_partials(float* o, float* ms);

  /// The span this scheduler attends (0: global).
  int64_t span() const { return d_.span; }

  /// TopK: folds the stored keys of positions [p0, p1) of layer il into the per-block bounds,
  /// read back from `blocks` (the block table), so they are the stored (rounded) keys.
  void update_key_bounds(int64_t il, std::span<const kv::BlockView> blocks, int64_t p0, int64_t p1);
  void clear_key_bounds();
  bool keeps_key_bounds() const { return mode_ == kv::KvAttention::TopK; }

  // Job sizing (see the top of this file). Never a function of the thread count.
  static constexpr int64_t kTargetJobs = 64;
  // Query-tiled plans: key ranges of this many positions (rounded down to whole blocks, at
  // least one), and the range states of one wave.
  static constexpr int64_t kRangeTokens = 2048;
  static constexpr int64_t kMaxWaveBytes = int64_t{8} << 20;
  static constexpr int64_t kMinChunkTokens = 256;
  static constexpr int64_t kMaxBlockPartials = int64_t{1} << 16;

 private:
  // One job: query t, KV head g, blocks [b0, b1) of the plan's list, into partials at
  // parts_[slot * n_rep]. Streaming / TopK: a window job (cold == false; b0, b1 unused) and cold
  // jobs.
  struct Job {
    int64_t t = 0, g = 0;
    bool cold = false;
    int64_t b0 = 0, b1 = 0;
    int64_t slot = 0;
  };
  // The exact plan: query t's blocks are [first, end) = blocks_of(t) (an empty range still gets
  // one job, which writes the empty partial).
  template <typename BlocksOf>
  void plan_exact(int64_t n, int64_t max_blocks, int n_threads, BlocksOf blocks_of);
  // First position query p attends: p - span + 1 (0 for a global scheduler).
  int64_t lowest(int64_t p) const {
    return d_.span > 0 ? std::max<int64_t>(0, p - d_.span + 1) : 0;
  }
  void select_top_k(int64_t il, const float* q, int64_t g, int64_t b0, int64_t b1,
                    std::vector<int64_t>& out) const;
  // Query head r of pair (t * n_head_kv + g): its slots' partials merged in slot order.
  const AttnPartial& merged(int64_t pair, int64_t r);

  // Query-tiled exact prefill (tiled_attention.cpp). A job: KV head g, queries [t0, t0 + nt)
  // of the ubatch, blocks [b0, b1) of the block table, into slot `slot`.
  struct TileJob {
    int64_t g = 0, t0 = 0, nt = 0, b0 = 0, b1 = 0, slot = 0;
  };
  void plan_tiled(int64_t pos0, int64_t n);
  void run_tiled(ThreadPool& pool, const float* q, std::span<const kv::BlockView> blocks,
                 AttnTimes& times);
  void finalize_tiled(float* out, AttnTimes& times);
  // A wave of the tiled plan: jobs up to job_end, (tile, KV head) pairs up to pair_end, its
  // first slot.
  struct Wave {
    int64_t job_end = 0, pair_end = 0, slot0 = 0;
  };

  AttnDims d_;
  kv::WindowRule rule_;
  kv::KvAttention mode_;
  int64_t top_k_;
  int64_t n_rep_;  // query heads per KV head
  int64_t bs_;     // block size
  bool given_ = false;
  int64_t pos0_ = 0, n_ = 0;
  std::vector<Job> jobs_;
  std::vector<int64_t> first_slot_;  // [n * n_head_kv + 1]: slots of (t, g) are [first, next)
  std::vector<AttnPartial> parts_;   // [slots][n_rep]
  bool tiled_ = false;
  int64_t tile_tok_ = 0;   // queries per tile
  int64_t tile_rows_ = 0;  // rows of a full tile, padded (attention_tile.h)
  std::vector<TileJob> tile_jobs_;
  std::vector<int64_t> tile_first_slot_;  // [n_tiles * n_head_kv + 1]: (tile, g)'s slots
  std::vector<Wave> tile_waves_;
  std::vector<float>
      tile_state_;               // a wave's slots: [slots][o: rows x head_dim_v, m: rows, s: rows]
  std::vector<float> tile_out_;  // [n][n_head][head_dim_v]
  // TopK: [n_layer][n_blocks][n_head_kv][head_dim] min and max of each key dimension.
  std::vector<std::vector<float>> kmin_, kmax_;
};

}  // namespace spw::cpu
