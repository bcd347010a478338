// Decode attention over one contiguous range of KV positions, returning a *partial* result
// that merges exactly with partials of other ranges (the log-sum-exp rule of flash-decoding).
// The tiered KV cache attends its hot window and its cold host/disk blocks separately and
// merges the partials; a plain session calls it once over the whole range and finalises.
//
// For one KV head and the n_q query heads that share it (a GQA group), over positions j of
// the range, with s_j = scale * q . k_j:
//   m = max_j s_j,  s = sum_j exp(s_j - m),  o = sum_j exp(s_j - m) v_j   (unnormalised)
// and softmax(QK^T) V = o / s.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace spw::cpu {

/// Partial attention of one query head over a KV range. An empty range gives m = -inf, s = 0.
struct AttnPartial {
  std::vector<float> o;  // [head_dim_v], unnormalised
  float m = -INFINITY;   // running max of the scores
  float s = 0.0f;        // running sum of exp(score - m)
};

/// A range of one KV head's rows: row j (0 <= j < n) starts at element j * stride of data.
/// type: F32, F16 or Q8_0. In the block layout [n_kv_heads, block_size, head_dim] stride is
/// head_dim; in a [pos][n_kv_heads * head_dim] layout it is n_kv_heads * head_dim.
/// Q8_0 rows are BlockQ8_0 blocks (34 B per 32 elements); stride still counts elements, and
/// it and the row length (head_dim, head_dim_v) must be multiples of 32, so element e of a
/// row lies at byte (e / 32) * 34 (+ 2 + e % 32 for its quant) from the row start.
struct KvSpan {
  const void* data = nullptr;
  GgmlType type = GgmlType::F16;
  int64_t stride = 0;
};

struct AttnShape {
  int64_t n_q = 1;         // query heads sharing this KV head (n_head / n_head_kv)
  int64_t head_dim = 0;    // of q and k
  int64_t head_dim_v = 0;  // of v and o
  float scale = 1.0f;      // usually 1 / sqrt(head_dim)
};

/// Attends q: [n_q][head_dim] over rows [0, n_kv) of k and v; out[0 .. n_q) receive the
/// partials (o resized to head_dim_v). Runs on the calling thread; callers split heads or
/// ranges across threads.
void attn_partial(const AttnShape& shape, const float* q, KvSpan k, KvSpan v, int64_t n_kv,
                  AttnPartial* out);

/// into <- the partial of the union of both ranges. Order of merging does not matter beyond
/// float rounding.
void attn_merge(AttnPartial& into, const AttnPartial& other);

/// out[i] = o[i] / s: the attention output of the head (zeros for an empty range).
void attn_finalize(const AttnPartial& p, float* out);

}  // namespace spw::cpu
