// The reference forward pass: plain, slow, float64 accumulation. The oracle every fast path
// (SIMD CPU, CUDA, tiered KV) is tested against.
//
// Per token (Touvron et al. 2023, "LLaMA"; the Qwen2/Qwen3, Phi-3, Gemma 3 and Mixtral reports
// for their variants; llama.cpp's graphs, src/llama-model.cpp, for what a GGUF file means):
//   x = token_embd[id] * embd_scale                               (gemma3: sqrt(n_embd))
//   per layer: h = RMSNorm(x) * attn_norm
//              q,k,v = h Wq (+bq), h Wk (+bk), h Wv (+bv)         (phi3: h Wqkv, split Q|K|V)
//              [qwen3, gemma3] q,k = RMSNorm per head * attn_{q,k}_norm
//              RoPE(q,k) at pos with the layer's RoPE (rope.h; gemma3's sliding layers have
//              their own), the session's rope factors
//              append k,v to the cache; per head: softmax(attn_scale q k^T) v over positions
//              [lo, pos], lo = 0 for a global layer and pos - span + 1 for a sliding one,
//              kv_head = head / (n_head / n_head_kv) (GQA)
//              o = attn Wo; [gemma3] o = RMSNorm(o) * post_attention_norm; x += o
//              h = RMSNorm(x) * ffn_norm
//              dense:  f = (act(h Wgate) * (h Wup)) Wdown, act = silu or gelu_tanh (gemma3);
//                      phi3's fused ffn_up gives gate (first n_ff) and up (next n_ff)
//              MoE:    p = softmax(h Wrouter); the n_expert_used largest p (ties: lower
//                      expert first), renormalised when expert_weights_norm, scaled by
//                      expert_weights_scale; f = sum_e p_e (silu(h Wgate_e) * (h Wup_e)) Wdown_e
//                      [qwen2moe] + sigmoid(h . w_shexp) (silu(h Wgate_sh) * (h Wup_sh)) Wdown_sh
//              [gemma3] f = RMSNorm(f) * post_ffw_norm; x += f
//   logits = RMSNorm(x) * output_norm Woutput
// RoPE is ggml's rope_ext in double: theta_extrap = pos base^(-2i/n_rot) / f_i, theta_interp =
// freq_scale theta_extrap, YaRN's ramp mix between them, cos and sin times the magnitude
// factor llama.cpp derives (src/llama-context.cpp). Weights are dequantized row by row
// (dequantize_row) and never copied whole.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "engine/model/model.h"
#include "engine/session/routing.h"
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

  /// MoE: the smallest router-logit gap between the last chosen expert and the first one left
  /// out, over the layers, at the last position of the last eval (+inf for a dense model): below
  /// the fast paths' rounding such a choice may go the other way there (a near tie).
  double last_route_margin() const { return route_margin_; }

  /// MoE: from now on append every token's choice in every MoE layer to *log (null: stop), in
  /// the order computed (layer by layer within an eval). For tests (engine/session/routing.h).
  void set_route_log(std::vector<RouteChoice>* log) { route_log_ = log; }

 private:
  ReferenceSession(const Model& model, const SessionParams& params);

  // y[t][r] = sum_i W[r][i] * x[t][i] for t < n_tokens; W is [n_in, n_out] in ggml order,
  // x is [n_tokens][n_in], y is [n_tokens][n_out].
  void matmul(const MatrixView& w, const std::vector<double>& x, int64_t n_tokens,
              std::vector<double>& y) const;
  void matmul(const GgufTensorInfo& w, const std::vector<double>& x, int64_t n_tokens,
              std::vector<double>& y) const {
    matmul(matrix_of(w), x, n_tokens, y);
  }
  void layer(int64_t il, std::vector<double>& x, int64_t n_tokens);
  // Attention of the layer's n_tokens queries q [n_tokens][n_head * head_dim] over the cache,
  // into out [n_tokens][n_head * head_dim_v].
  void attend(int64_t il, const std::vector<double>& q, int64_t n_tokens,
              std::vector<double>& out) const;
  // The FFN of h [n_tokens][n_embd] (dense or MoE), into f [n_tokens][n_embd].
  void ffn(const LayerWeights& w, const std::vector<double>& h, int64_t n_tokens,
           std::vector<double>& f) const;
  void moe(const LayerWeights& w, const std::vector<double>& h, int64_t n_tokens,
           std::vector<double>& f) const;
  void rope(double* v, int64_t n_heads, int64_t pos, const RopeParams& p) const;
  void store_kv(int64_t il, int64_t pos, const double* k, const double* v);
  double k_at(int64_t il, int64_t pos, int64_t i) const;
  double v_at(int64_t il, int64_t pos, int64_t i) const;

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  std::vector<double> factors_;  // [n_rot / 2]: the session's rope divisors (1 without any)
  // KV cache per layer, contiguous over positions: [n_past][n_head_kv * head_dim] (V: head_dim_v).
  // Stored as f32 or as f16 bits, per kv_type_k / kv_type_v; q8_0 rows as their dequantized
  // f32 values.
  std::vector<std::vector<float>> k_f32_, v_f32_;
  std::vector<std::vector<uint16_t>> k_f16_, v_f16_;
  std::vector<float> logits_;               // [n_vocab]
  mutable double route_margin_ = INFINITY;  // see last_route_margin()
  std::vector<RouteChoice>* route_log_ = nullptr;
  int64_t layer_ = 0;  // the layer being computed (for the route log)
};

}  // namespace spw
