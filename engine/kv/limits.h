// Bounds on the KV paging settings, shared by the cache and the planner so that no size
// arithmetic can overflow int64 and no setting can ask for more than a context can use.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/common/expected.h"

namespace spw::kv {

inline constexpr int64_t kMaxContextTokens = int64_t{1} << 31;  // 2^31 positions
inline constexpr int64_t kMaxBlockTokens = int64_t{1} << 16;    // 65536 tokens per block

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

/// Settings beyond what n_ctx can use are cut to it: a block, a window or sinks longer than the
/// context hold no more than the context (and allocate no more).
inline void clamp_paging_to_context(int64_t n_ctx, int64_t& block_size, int64_t& window_tokens,
                                    int64_t& n_sinks) {
  block_size = std::min(block_size, n_ctx);
  window_tokens = std::min(window_tokens, n_ctx);
  n_sinks = std::min(n_sinks, n_ctx);
}

}  // namespace spw::kv
