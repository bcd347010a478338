// The fast CPU session: the same forward pass as ReferenceSession (see reference_session.h for
// the formulas), computed in float32 with the SIMD kernels of engine/backend/cpu on the
// quantized weight blocks where they lie in the GGUF mapping (no dequantized copy of the model),
// activations quantized per block (Q8_0 / Q8_K) for the integer dot products, a persistent
// thread pool, and prefill in ubatches.
//
// KV lives in the tiered, paged cache (engine/kv/kv_cache.h, ../shared/DESIGN.md §4): blocks of
// block_size positions, the sink and recent blocks in the window (RAM here), older blocks spilled
// to the host arena and then the disk file, attended where they lie. For a query at position p,
// its *window* is the sink blocks and the ceil(window_tokens / block_size) blocks up to p's own;
// every other block before p is *cold*.
//
// Exact attention computes one partial (o, m, s) per block of p's causal range and merges them
// left to right in position order with the log-sum-exp rule, whichever tier each block lies in:
// a decode step runs one pool job per (KV head, block), so window and cold blocks are attended by
// separate workers at once and merged afterwards; a prefill ubatch runs one job per (token, KV
// head) that walks the blocks in the same order. The attention arithmetic is therefore identical
// for any window, budgets, spill timing and thread count: a spilled run is bit for bit the
// unspilled one (quantized-weight models amplify even a last-bit difference through their
// per-block activation quantization, so this matters for greedy tokens, not only for logits).
// Prefill and decode take the same path: each query attends its causal range block by block (no
// n x n matrix).
//
// Approximate modes (KvPaging::attention): Streaming attends the window only; TopK attends the
// window and, per KV head, the top_k cold blocks whose key bound sum_d max(q_d min_d, q_d max_d)
// (summed over the GQA group's query heads) is largest, from per-block per-head key min/max
// kept by the session (Quest).
//
// ReferenceSession (contiguous cache) is its oracle: greedy tokens equal, logits within a
// per-type tolerance.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/session/device.h"
#include "engine/session/session.h"

namespace spw::cpu {

struct CpuSessionParams {
  int64_t n_ubatch = 512;  // tokens per prefill step (bounds scratch memory)
  KvPaging paging;         // block size, window, sinks, budgets, spill folder, attention mode
};

/// Counters of one session, updated by the session thread and its workers with relaxed atomics
/// and readable from any thread without locks (a reader may see two steps mixed).
/// Attention times are thread-seconds summed over the workers (jobs run concurrently).
struct CpuSessionTelemetry {
  std::atomic<int64_t> prefill_tokens_computed{0};  // positions computed by prompt evals
  std::atomic<int64_t> prefill_ns{0};
  std::atomic<int64_t> decode_tokens{0};  // single-token evals that extend a sequence
  std::atomic<int64_t> decode_ns{0};
  std::atomic<int64_t> window_attn_ns{0};  // jobs attending a query's window blocks
  std::atomic<int64_t> cold_attn_ns{0};    // jobs attending its cold blocks
  std::atomic<int64_t> merge_ns{0};        // log-sum-exp merges and finalisation
};

/// A plain copy of the telemetry, the cache's counters and the process's resident set size.
struct CpuSessionStats {
  int64_t n_past = 0;
  int64_t prefill_tokens_computed = 0;
  double prefill_s = 0, decode_s = 0;
  int64_t decode_tokens = 0;
  double prefill_tokens_per_s = 0;  // over every prompt eval so far (0 before the first)
  double decode_tokens_per_s = 0;   // over every decode step so far (0 before the first)
  double window_attn_s = 0, cold_attn_s = 0, merge_s = 0;
  kv::KvStats kv;
  int64_t rss_bytes = 0;  // /proc/self/statm resident pages x page size; 0 where unreadable
};

class CpuSession final : public Session {
 public:
  /// Errors: n_ctx < 0, n_threads < 0, n_ubatch < 1, a q8_0 KV type on a model whose
  /// head_dim (head_dim_v for V) is not a multiple of 32, topk with top_k < 1, and the cache's
  /// (bad paging settings, a spill folder that cannot hold the disk budget).
  static Expected<std::unique_ptr<CpuSession>> create(const Model& model,
                                                      const SessionParams& params,
                                                      const CpuSessionParams& cpu = {});

  /// After load_kv(), the next eval() receives the whole sequence from position 0: the part
  /// that starts with the restored tokens is reused and only the rest is computed (a prompt
  /// equal to them recomputes only its last position's logits, whose KV is already stored; a
  /// prompt that does not start with them is computed from an empty cache). Otherwise eval
  /// appends at n_past() as Session says.
  Status eval(std::span<const int32_t> tokens, bool want_logits) override;
  std::span<const float> logits() const override { return logits_; }
  int64_t n_past() const override { return n_past_; }
  /// The cache's max_tokens(): n_ctx or what the window and the budgets hold, whichever is less.
  int64_t n_ctx() const override;
  int64_t n_vocab() const override { return c_.n_vocab; }

  /// Bytes of KV blocks held now over all tiers (K and V, all layers).
  int64_t kv_bytes() const;
  int n_threads() const { return pool_.size(); }
  const KvPaging& paging() const { return cp_.paging; }
  /// The tokens whose KV the cache holds, [n_past()].
  std::span<const int32_t> tokens() const { return history_; }

  const CpuSessionTelemetry& telemetry() const { return tel_; }
  CpuSessionStats stats() const;
  SessionUsage usage() const override;
  const kv::KvCache& cache() const { return *cache_; }

  /// Waits for the spills in flight (the tiers in stats() are then final).
  Status flush_kv() { return cache_->flush(); }
  /// Writes the cache and the token history to `path` (engine/kv/snapshot.h).
  Status save_kv(const std::string& path);
  /// Replaces the cache with the snapshot at `path`; on error (another model, other KV types,
  /// a damaged file) the session is unchanged when the file was refused before the restore,
  /// and empty (n_past() == 0) when the restore itself failed. See eval() for what follows.
  Status load_kv(const std::string& path);

 private:
  CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu,
             std::unique_ptr<kv::KvCache> cache);
  Status check_room(std::span<const int32_t> tokens, int64_t n_past) const;
  // Appends tokens at positions [n_past_, n_past_ + n) in ubatches; `prefill` counts them in
  // prefill_tokens_computed.
  Status compute(std::span<const int32_t> tokens, bool want_logits, bool prefill);
  // One ubatch at positions [base_, base_ + n). store_kv = false recomputes the logits of
  // positions whose KV is already stored (nothing is written to the cache).
  void ubatch(std::span<const int32_t> tokens, bool want_logits, bool store_kv);
  void layer(int64_t il, int64_t n, bool store_kv);
  void plan_attention(int64_t n);
  void attend(int64_t il, int64_t n, bool store_kv);
  void update_key_bounds(int64_t il, int64_t p0, int64_t p1);
  void select_top_k(int64_t il, const float* q, int64_t g, int64_t b0, int64_t b1,
                    std::vector<int64_t>& out) const;
  // Y[n][n_out] = X[n][n_in] W^T for a weight tensor.
  void mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y);

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  CpuSessionParams cp_;
  ThreadPool pool_;
  std::unique_ptr<kv::KvCache> cache_;
  GgmlType kv_k_ = GgmlType::F16, kv_v_ = GgmlType::F16;  // F32, F16 or Q8_0
  int64_t n_past_ = 0;
  int64_t base_ = 0;              // first position of the ubatch being computed
  std::vector<int32_t> history_;  // [n_past]: the tokens whose KV the cache holds
  bool awaiting_prompt_ = false;  // load_kv() happened; the next eval is a whole prompt
  CpuSessionTelemetry tel_;

  // Small per-layer vectors dequantized once (norm weights, biases): [n_layer][...].
  struct LayerVectors {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  };
  std::vector<LayerVectors> lv_;
  std::vector<float> output_norm_;
  std::vector<double> inv_freq_;  // [n_rot / 2]

  // TopK: per layer, per logical block, per KV head, the min and max of each key dimension over
  // the block's stored rows (as stored: after rounding to the cache type):
  // [n_layer][n_blocks][n_head_kv][head_dim].
  std::vector<std::vector<float>> kmin_, kmax_;

  // Attention plan of one ubatch (the same for every layer). A job attends, for token t and KV
  // head g, either the query's window blocks or cold blocks [b0, b1) (TopK: its chosen blocks
  // among them), into n_rep partials at parts_[slot * n_rep].
  // One attention job: token t, KV head g, blocks [b0, b1). Exact attention: blocks in
  // position order (the job's partial is the left-to-right merge of its blocks' partials), and
  // a pair's jobs cover consecutive ranges merged in slot order, so the arithmetic is the same
  // left-to-right merge of per-block partials whatever the window, budgets, ubatch or threads.
  // Streaming / TopK: a window job (sinks + recent) and cold jobs (`cold`).
  struct AttnJob {
    int64_t t = 0, g = 0;
    bool cold = false;
    int64_t b0 = 0, b1 = 0;
    int64_t slot = 0;
  };
  std::vector<AttnJob> jobs_;
  std::vector<int64_t> first_slot_;   // [n * n_head_kv + 1]: slots of (t, g) are [first, next)
  std::vector<AttnPartial> parts_;    // [slots][n_rep]
  std::vector<kv::BlockView> views_;  // blocks of the current layer

  // Scratch for one ubatch of n tokens.
  std::vector<float> x_, h_, q_, k_cur_, v_cur_, attn_, tmp_, gate_, up_;  // [n][...]
  std::vector<float> rope_cs_;  // [n][n_rot]: cos/sin table per token
  std::vector<float> logits_;   // [n_vocab]
};

}  // namespace spw::cpu
