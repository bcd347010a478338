// The reference forward pass: plain, slow, float64 accumulation. The oracle every fast path
// (SIMD CPU, CUDA, tiered KV) is tested against.
//
// Per token (Touvron et al. 2023, "LLaMA"; Qwen2/Qwen3 technical reports for the bias and
// QK-norm variants):
//   x = token_embd[id]
//   per layer: h = RMSNorm(x) * attn_norm; q,k,v = h Wq (+bq), h Wk (+bk), h Wv (+bv);
//              [qwen3] q,k = RMSNorm per head * attn_{q,k}_norm; RoPE(q,k) at pos;
//              append k,v to the cache; per head: softmax(q k^T / sqrt(head_dim)) v over
//              positions [0, pos] with kv_head = head / (n_head / n_head_kv) (GQA);
//              x += attn Wo; h = RMSNorm(x) * ffn_norm; x += (silu(h Wgate) * (h Wup)) Wdown
//   logits = RMSNorm(x) * output_norm Woutput
// RoPE (Su et al. 2021, "RoFormer"): theta_i = pos * freq_scale * base^(-2i/n_rot) / rope_freqs[i].
// Weights are dequantized row by row (dequantize_row) and never copied whole.
#pragma once

#include <memory>
#include <vector>

#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw {

class ReferenceSession final : public Session {
 public:
  /// Errors: n_ctx < 0; a q8_0 KV type on a model whose head_dim (head_dim_v for V) is not a
  /// multiple of 32. n_ctx 0 means the model's trained context. KV memory grows with use.
  static Expected<std::unique_ptr<ReferenceSession>> create(const Model& model,
                                                            const SessionParams& params);

  Status eval(std::span<const int32_t> tokens, bool want_logits) override;
  std::span<const float> logits() const override { return logits_; }
  int64_t n_past() const override { return n_past_; }
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t n_vocab() const override { return c_.n_vocab; }

 private:
  ReferenceSession(const Model& model, const SessionParams& params);

  // y[t][r] = sum_i W[r][i] * x[t][i] for t < n_tokens; W is [n_in, n_out] in ggml order,
  // x is [n_tokens][n_in], y is [n_tokens][n_out].
  void matmul(const GgufTensorInfo& w, const std::vector<double>& x, int64_t n_tokens,
              std::vector<double>& y) const;
  void layer(int64_t il, std::vector<double>& x, int64_t n_tokens);
  void rope(double* v, int64_t n_heads, int64_t pos) const;
  void store_kv(int64_t il, int64_t pos, const double* k, const double* v);
  double k_at(int64_t il, int64_t pos, int64_t i) const;
  double v_at(int64_t il, int64_t pos, int64_t i) const;

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  std::vector<double> inv_freq_;  // [n_rot / 2]: freq_scale * base^(-2i/n_rot) / rope_freqs[i]
  // KV cache per layer, contiguous over positions: [n_past][n_head_kv * head_dim] (V: head_dim_v).
  // Stored as f32 or as f16 bits, per kv_type_k / kv_type_v; q8_0 rows as their dequantized
  // f32 values.
  std::vector<std::vector<float>> k_f32_, v_f32_;
  std::vector<std::vector<uint16_t>> k_f16_, v_f16_;
  std::vector<float> logits_;  // [n_vocab]
};

}  // namespace spw
