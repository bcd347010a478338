// Bounds on the KV paging settings, shared by the cache and the planner so that no size
// arithmetic can overflow int64 and no setting can ask for more than a context can use.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/common/expected.h"

namespace spw::kv {

inline constexpr int64_t kMaxContextTokens = int64_t{1} << 31;  // 2^31 positions
inline constexpr int64_t kMaxBlockTokens = int64_t{1} << 16;    // 65536 tokens per block

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The window's blocks: the attention-sink tokens and the recent tokens, each rounded up to
/// whole blocks (the block being filled counts as a recent one). One rule for the cache, the
/// session's split of attention jobs and the planner.
struct WindowBlocks {
  int64_t sinks = 0;
  int64_t recent = 0;
  int64_t total() const { return sinks + recent; }
};
inline WindowBlocks window_blocks(int64_t n_sinks, int64_t window_tokens, int64_t block_size) {
  return {ceil_div(n_sinks, block_size), ceil_div(window_tokens, block_size)};
}

/// Window slots beyond the window's own blocks: a block that has left the window keeps its
/// slot until its spill has landed, so with two spares decode normally never waits.
inline constexpr int64_t kSpareWindowSlots = 2;

/// Slots a fixed window pool (a DeviceWindow) needs so that the cache never has to grow it: the
/// window, the spares, and the blocks one ubatch of n_ubatch tokens can newly touch (it may span
/// more blocks than the window holds; those leave the window at commit). Settings as applied
/// (after clamp_paging_to_context); never more than the context's blocks plus the spares.
/// A window that holds the whole context never spills and needs exactly the context's blocks.
inline int64_t window_pool_slots(int64_t n_ctx, int64_t block_size, int64_t window_tokens,
                                 int64_t n_sinks, int64_t n_ubatch) {
  const int64_t n_blocks = ceil_div(n_ctx, block_size);
  const int64_t w = window_blocks(n_sinks, window_tokens, block_size).total();
  if (w >= n_blocks) return n_blocks;
  const int64_t ub = ceil_div(std::min(n_ubatch, n_ctx), block_size) + 1;
  return std::min(w + ub, n_blocks) + kSpareWindowSlots;
}

/// Errors for a context or block size beyond the limits above.
inline Status check_paging_limits(int64_t n_ctx, int64_t block_size) {
  if (n_ctx > kMaxContextTokens) {
    return make_error("context of {} tokens is too large (at most {})", n_ctx, kMaxContextTokens);
  }
  if (block_size > kMaxBlockTokens) {
    return make_error("--kv-block {} is too large (at most {} tokens)", block_size,
                      kMaxBlockTokens);
  }
  return Status::Ok();
}

/// The paging settings' own errors (before any clamping), in this order: "--kv-block must be >= 1
/// (got 0)", the limits above, "--kv-sinks must be >= 0 (got -1)", "--kv-window must be >= 1
/// (got 0)". One check for the cache and the CUDA session's planner.
inline Status check_paging_settings(int64_t n_ctx, int64_t block_size, int64_t window_tokens,
                                    int64_t n_sinks) {
  if (block_size < 1) return make_error("--kv-block must be >= 1 (got {})", block_size);
  if (Status st = check_paging_limits(n_ctx, block_size); !st) return st;
  if (n_sinks < 0) return make_error("--kv-sinks must be >= 0 (got {})", n_sinks);
  if (window_tokens < 1) return make_error("--kv-window must be >= 1 (got {})", window_tokens);
  return Status::Ok();
}

/// Settings beyond what n_ctx can use are cut to it: a block, a window or sinks longer than the
/// context hold no more than the context (and allocate no more).
inline void clamp_paging_to_context(int64_t n_ctx, int64_t& block_size, int64_t& window_tokens,
                                    int64_t& n_sinks) {
  block_size = std::min(block_size, n_ctx);
  window_tokens = std::min(window_tokens, n_ctx);
  n_sinks = std::min(n_sinks, n_ctx);
}

}  // namespace spw::kv
