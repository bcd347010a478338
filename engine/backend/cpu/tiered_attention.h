// Attention over the tiered KV cache's blocks on the CPU (docs/DESIGN.md §4.3): the one
// scheduler of the CPU session's attention and of the CUDA session's host-side attention over
// the cold blocks. It plans jobs, runs them on a thread pool over the blocks where they lie
// (window, host or disk alike), selects blocks for the approximate modes and merges the
// partials by the log-sum-exp rule (attention.h).
//
// Exact attention computes one partial (o, m, s) per block of a query's range and merges them
// left to right in position order, whichever tier each block lies in. A job attends, for one
// query t and one KV head g (all n_rep query heads of its GQA group, kv_head = head / n_rep),
// blocks [b0, b1) in order into the partials of its slot; a pair's slots cover consecutive
// ranges merged in slot order. Few (query, KV head) pairs (decode): one job per block, for
// parallelism, unless the per-block partials would take too much memory; otherwise one job per
// pair. Either way the arithmetic is the same left-to-right merge of per-block partials, so a
// result never depends on the window, the budgets, spill timing, the ubatch or the thread
// count: a spilled run is bit for bit the unspilled one.
//
// Sliding-window layers (ModelConfig::attn_span, gemma3's local layers): a scheduler made for a
// span attends, for a query at p, positions [p - span + 1, p] only: blocks wholly before the
// span are not planned (exact) or skipped (the approximate modes' window, given blocks), and
// the boundary block's rows before it are masked (attended from the first row inside). One
// scheduler serves the layers of one span; the CPU session keeps one per span it needs.
//
// Approximate modes (kv::KvAttention): Streaming attends each query's window (the tier
// policy's sink and recent blocks for that query) only; TopK attends the window and, per KV
// head, the top_k cold blocks whose key bound sum_d max(q_d min_d, q_d max_d) (summed over the
// GQA group's query heads) is largest, from per-block per-head key min/max kept here (Quest).
// Cold blocks are split so that one ubatch has about kTargetJobs jobs, but a chunk never holds
// fewer than kMinChunkTokens positions; a function of the ubatch and the shapes only.
//
// Memory: the partials of one plan, [slots][n_rep] of head_dim_v floats each (bounded by
// kMaxBlockPartials slots x n_rep in the per-block plan); TopK's bounds, [n_layer][n_blocks]
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
  /// `n_threads` only chooses per-block or per-pair jobs.
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
  // TopK: [n_layer][n_blocks][n_head_kv][head_dim] min and max of each key dimension.
  std::vector<std::vector<float>> kmin_, kmax_;
};

}  // namespace spw::cpu
