// The fast CPU session: the same forward pass as ReferenceSession (see reference_session.h for
// the formulas), computed in float32 with the SIMD kernels of engine/cpu on the quantized
// weight blocks where they lie in the GGUF mapping (no dequantized copy of the model),
// activations quantized per block (Q8_0 / Q8_K) for the integer dot products, a persistent
// thread pool, and prefill in ubatches. Files: cpu_session.cpp (the ubatch loop, a layer's
// attention block), cpu_ffn.cpp (the FFN variants and the mixture of experts: decode computes
// only the selected experts; prefill groups the ubatch's tokens by expert, so each expert's
// weights are read once per ubatch).
//
// KV lives in the tiered, paged cache (engine/kv/kv_cache.h, docs/DESIGN.md §4.1-§4.3): blocks of
// block_size positions, the sink and recent blocks in the window (RAM here), older blocks spilled
// to the host arena and then the disk file, attended where they lie by the CPU attention
// scheduler (engine/backend/cpu/tiered_attention.h): exact attention merges one partial per
// block of each query's causal range in position order whatever the tiers, so a spilled run is
// bit for bit the unspilled one; streaming and topk are the labelled approximations.
//
// ReferenceSession (contiguous cache) is its oracle: greedy tokens equal, logits within a
// per-type tolerance.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/tiered_attention.h"
#include "engine/backend/device.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/packed_weights.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_set.h"
#include "engine/model/model.h"
#include "engine/session/routing.h"
#include "engine/session/session.h"

namespace spw::cpu {

struct CpuSessionParams {
  int64_t n_ubatch = 512;  // tokens per prefill step (bounds scratch memory)
  kv::KvSettings kv;       // block size, window, sinks, budgets, spill folder, attention mode
};

class CpuSession final : public Session {
 public:
  /// Errors: n_ctx < 0, n_threads < 0, n_ubatch < 1, a q8_0 KV type on a model whose
  /// head_dim (head_dim_v for V) is not a multiple of 32, the KV settings' (kv::validate(), e.g.
  /// topk with K < 1), the cache's (a spill folder that cannot hold the disk budget), and RAM
  /// that runs out for the ubatch's scratch ("cannot allocate 1.2 GiB of RAM for the CPU
  /// session's scratch ...; a smaller --ubatch").
  static Expected<std::unique_ptr<CpuSession>> create(const Model& model,
                                                      const SessionParams& params,
                                                      const CpuSessionParams& cpu = {});

  /// RAM that runs out during a step is an error naming the step, the KV held and the settings
  /// to change (never std::bad_alloc); the session then holds what it held before the step.
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
  /// The KV settings as given (the window as applied: cache().layout()).
  const kv::KvSettings& kv_settings() const { return cp_.kv; }
  /// The tokens whose KV the cache holds, [n_past()].
  std::span<const int32_t> tokens() const { return history_; }

  /// Everything the session counts (usage.h): attention times in thread-seconds, the cache's
  /// tiers (spills in flight may still land: flush_kv() first for final tiers), the RSS.
  SessionUsage usage() const override;
  /// The global layers' cache (every layer's unless some slide): its layout is the paging the
  /// session reports.
  const kv::KvCache& cache() const { return cache_->primary(); }
  /// Every layer group's cache (kv_cache_set.h).
  const kv::KvCacheSet& caches() const { return *cache_; }

  /// Waits for the spills in flight (the tiers in usage() are then final).
  Status flush_kv() { return cache_->flush(); }
  /// Writes the cache and the token history to `path` (engine/kv/snapshot.h).
  Status save_kv(const std::string& path);
  /// MoE, for tests (engine/session/routing.h): from now on append this session's own choice of
  /// every token in every MoE layer to *log (its router's top k and margin, even where a forced
  /// route is followed); null stops.
  void set_route_log(std::vector<RouteChoice>* log) { route_log_ = log; }
  /// MoE, for tests: from now on a token whose (layer, position) has a choice in *routes runs
  /// those experts instead of its router's top k, weighted by the choice's weights, or where it
  /// has none by its router's probabilities of them (normalised and scaled as the model says);
  /// others route as usual. routes must outlive the evals; null stops. Error: a choice of
  /// another count than n_expert_used (experts, or weights when given) or an expert out of
  /// range.
  Status force_routes(const std::vector<RouteChoice>* routes);

  /// Replaces the cache with the snapshot at `path`; on error (another model, other KV types,
  /// a damaged file) the session is unchanged when the file was refused before the restore,
  /// and empty (n_past() == 0) when the restore itself failed. See eval() for what follows.
  Status load_kv(const std::string& path);
  /// For speed calibration only (app/runtime/speed_profile.h): rebuilds the cache holding
  /// n_tokens positions whose blocks are copies of the first whole blocks stored now (at most
  /// four, in turn; per layer group; a sliding group holding no whole block repeats its one
  /// held block, its unwritten rows copies of the written ones), placed in the tiers a run of
  /// that length puts them in
  /// (KvCache::restore()). n_past() becomes n_tokens and tokens() the stored tokens repeated.
  /// Later evals cost what they cost at that depth (attention reads every position, wherever
  /// it lies), but what they compute continues no text. Errors, the session unchanged: no whole
  /// block stored ("repeating the KV needs a whole 256-token block; 100 positions are
  /// stored"), n_tokens < 1 or beyond n_ctx(). Errors of the cache (RAM for the host tier, the
  /// disk tier's file) leave the session empty (n_past() == 0).
  Status repeat_kv(int64_t n_tokens);

 private:
  CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu,
             std::unique_ptr<kv::KvCacheSet> cache);
  // The ubatch's scratch at its largest, allocated once at create(): layer()'s resizes then
  // never allocate, and a machine without the RAM for it is told at create() with the numbers.
  Status reserve_scratch();
  Status check_room(std::span<const int32_t> tokens, int64_t n_past) const;
  Status eval_unguarded(std::span<const int32_t> tokens, bool want_logits);
  // After the cache was rebuilt (load_kv, repeat_kv): TopK's key bounds of every stored block.
  void rebuild_key_bounds();
  // Appends tokens at positions [n_past_, n_past_ + n) in ubatches; `prefill` counts them in
  // prefill_tokens_computed.
  Status compute(std::span<const int32_t> tokens, bool want_logits, bool prefill);
  // One ubatch at positions [base_, base_ + n). store_kv = false recomputes the logits of
  // positions whose KV is already stored (nothing is written to the cache).
  void ubatch(std::span<const int32_t> tokens, bool want_logits, bool store_kv);
  void layer(int64_t il, int64_t n, bool store_kv);
  // Causal attention of the ubatch's n queries over the cache's blocks (within the layer's
  // span), into attn_.
  void attend(int64_t il, int64_t n, bool store_kv);
  // The FFN of layer il on h_ [n][n_embd], into tmp_ [n][n_embd] (cpu_ffn.cpp); a dense FFN's
  // gate and up products kFfnChunkTokens tokens at a time.
  void ffn(int64_t il, int64_t n);
  static constexpr int64_t kFfnChunkTokens = 128;
  void moe(int64_t il, int64_t n);
  void route_hooks(int64_t il, int64_t n);
  // Y[n][n_out] = X[n][n_in] W^T for a weight matrix.
  void mul(const MatrixView& w, const float* X, int64_t n, float* Y);
  // A whole weight tensor: its repacked form when it has one (packed_weights.h). SameAsLast:
  // X is unchanged since the previous mul of this X (gemm.h: its quantized form is reused).
  void mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y,
           cpu::GemmInput input = cpu::GemmInput::New);
  // Expert e of a 3-D stack: its repacked form when the type has one, else the plain path.
  void mul_expert(const GgufTensorInfo& w, int64_t e, const float* X, int64_t n, float* Y);
  // out = act(g) * u, n elements (the model's FFN activation).
  void gated(const float* g, const float* u, float* out, int64_t n) const;

  const Model& m_;
  const ModelConfig& c_;
  std::shared_ptr<PackedWeights> packed_;  // the model's repacked matrices (int8 GEMM)
  SessionParams p_;
  CpuSessionParams cp_;
  ThreadPool pool_;
  std::unique_ptr<kv::KvCacheSet> cache_;
  int64_t n_past_ = 0;
  int64_t base_ = 0;              // first position of the ubatch being computed
  std::vector<int32_t> history_;  // [n_past]: the tokens whose KV the cache holds
  bool awaiting_prompt_ = false;  // load_kv() happened; the next eval is a whole prompt
  SessionCounters tel_;

  // Small per-layer vectors dequantized once (norm weights, biases): [n_layer][...].
  struct LayerVectors {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm, attn_post_norm,
        ffn_post_norm, shexp_gate;
  };
  std::vector<LayerVectors> lv_;
  std::vector<float> output_norm_;

  // One RoPE (ModelConfig::rope, and gemma3's sliding layers' rope_swa): its angles per
  // position, its magnitude, and the ubatch's cos/sin tables.
  struct RopeTable {
    std::vector<double> inv_freq;  // [n_rot / 2]
    double mscale = 1.0;
    std::vector<float> cs;  // [n][n_rot]: cos/sin table per token
  };
  std::vector<RopeTable> ropes_;    // [0]: every layer's, [1]: the sliding layers' if different
  std::vector<size_t> layer_rope_;  // [n_layer]: index into ropes_

  // The attention schedulers, one per distinct span (global, sliding window), each planning
  // once per ubatch.
  std::vector<std::unique_ptr<TieredAttention>> scheds_;
  std::vector<size_t> layer_sched_;   // [n_layer]: index into scheds_
  std::vector<kv::BlockView> views_;  // blocks of the current layer

  // Scratch for one ubatch of n tokens.
  std::vector<float> x_, h_, q_, k_cur_, v_cur_, qkv_, attn_, tmp_, gate_, up_;  // [n][...]
  // MoE scratch: router probabilities [n][n_expert], the choice [n][k] (expert, weight), one
  // expert's tokens gathered [m][n_embd], their outputs [m][n_embd], and each (token, choice)'s
  // output [n][k][n_embd], summed in choice order.
  std::vector<float> router_, xe_, ye_, slot_;
  std::vector<int32_t> chosen_;
  std::vector<float> chosen_w_;
  // Test hooks (set_route_log, force_routes): the log, and the forced choices by (layer,
  // position).
  std::vector<RouteChoice>* route_log_ = nullptr;
  std::map<std::pair<int64_t, int64_t>, const RouteChoice*> forced_;
  std::vector<float> logits_;  // [n_vocab]
};

}  // namespace spw::cpu
