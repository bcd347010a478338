// The fast CPU session: the same forward pass as ReferenceSession (see reference_session.h for
// the formulas), computed in float32 with the SIMD kernels of engine/backend/cpu on the
// quantized weight blocks where they lie in the GGUF mapping (no dequantized copy of the model),
// activations quantized per block (Q8_0 / Q8_K) for the integer dot products, a persistent
// thread pool, and prefill in ubatches.
//
// The KV cache is contiguous per layer, [pos][n_head_kv * head_dim] in f16 (default), f32 or
// q8_0 (each head's row as head_dim / 32 BlockQ8_0 blocks), grown in steps as tokens arrive (the
// tiered, paged cache replaces it in a later change). ReferenceSession is its oracle: greedy tokens
// equal, logits within a per-type tolerance.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend/cpu/thread_pool.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw::cpu {

struct CpuSessionParams {
  int64_t n_ubatch = 512;  // tokens per prefill step (bounds scratch memory)
};

class CpuSession final : public Session {
 public:
  /// Errors: n_ctx < 0, n_threads < 0, n_ubatch < 1, a q8_0 KV type on a model whose
  /// head_dim (head_dim_v for V) is not a multiple of 32.
  static Expected<std::unique_ptr<CpuSession>> create(const Model& model,
                                                      const SessionParams& params,
                                                      const CpuSessionParams& cpu = {});

  Status eval(std::span<const int32_t> tokens, bool want_logits) override;
  std::span<const float> logits() const override { return logits_; }
  int64_t n_past() const override { return n_past_; }
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t n_vocab() const override { return c_.n_vocab; }

  /// Bytes held by the KV cache now (K and V, all layers).
  int64_t kv_bytes() const;
  int n_threads() const { return pool_.size(); }

 private:
  CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu);
  void ubatch(std::span<const int32_t> tokens, bool want_logits);
  void layer(int64_t il, int64_t n);
  void ensure_kv_capacity(int64_t n_tokens);
  // Y[n][n_out] = X[n][n_in] W^T for a weight tensor.
  void mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y);

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  CpuSessionParams cp_;
  ThreadPool pool_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  GgmlType kv_k_ = GgmlType::F16, kv_v_ = GgmlType::F16;  // F32, F16 or Q8_0
  int64_t kv_capacity_ = 0;                               // positions allocated per layer
  // Per layer: K [kv_capacity][n_head_kv * head_dim], V [kv_capacity][n_head_kv * head_dim_v],
  // in row_size(type, ...) bytes per position.
  std::vector<std::vector<uint8_t>> k_, v_;
  // Small per-layer vectors dequantized once (norm weights, biases): [n_layer][...].
  struct LayerVectors {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  };
  std::vector<LayerVectors> lv_;
  std::vector<float> output_norm_;
  std::vector<double> inv_freq_;  // [n_rot / 2]
  // Scratch for one ubatch of n tokens.
  std::vector<float> x_, h_, q_, k_cur_, v_cur_, attn_, tmp_, gate_, up_;  // [n][...]
  std::vector<float> rope_cs_;  // [n][n_rot]: cos/sin table per token
  std::vector<float> logits_;   // [n_vocab]
};

}  // namespace spw::cpu
