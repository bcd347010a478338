// A loaded decoder-only transformer: hyperparameters from the `<arch>.*` GGUF keys and validated
// views of every weight tensor (no copies: tensors stay in the GGUF mapping).
//
// Architectures (general.architecture), read as llama.cpp reads them (src/llama-model.cpp):
//   llama     Llama 2, Llama 3/3.1 (incl. `rope_freqs`), Mistral; with <arch>.expert_count > 0
//             the Mixtral layout (ffn_gate_inp, ffn_{gate,up,down}_exps);
//   qwen2     QKV bias, NeoX RoPE;          qwen2moe  qwen2 + experts + a gated shared expert;
//   qwen3     per-head Q/K RMSNorm;         qwen3moe  qwen3 + experts;
//   phi3      Phi-3, Phi-3.5, Phi-4, Phi-4-mini: fused attn_qkv, fused gate+up ffn_up, NeoX
//             RoPE (partial when rope.dimension_count < head_dim), LongRoPE factors, the
//             file's sliding window on every layer;
//   gemma3    embeddings x sqrt(n_embd), QK-norm, post-attention and post-FFN norms, GeGLU,
//             tied output, sliding-window layers (5 of every 6) with their own RoPE.
// Tensor names as GGUF spells them (token_embd.weight, blk.N.attn_q.weight, ...). Shapes in ggml
// order: a weight that maps n_in -> n_out has ne = [n_in, n_out] (each of the n_out rows holds
// n_in elements); an expert stack is [n_in, n_out, n_expert] (expert e's rows follow expert
// e - 1's). Norm weights are used as stored (Gemma's converter stores 1 + w).
//
// Errors from Model::load name the file and the offending key or tensor: unknown architecture
// (with the supported list), missing tensor, wrong shape, unsupported tensor type (Q2_K, IQ*).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/gguf.h"
#include "engine/model/rope.h"

namespace spw {

enum class Arch { Llama, Qwen2, Qwen3, Qwen2Moe, Qwen3Moe, Phi3, Gemma3 };

/// RoPE pairing: Normal rotates (x[2i], x[2i+1]) (llama); NeoX rotates (x[i], x[i + n_rot/2]).
enum class RopeType { Normal, NeoX };

/// The gated FFN's activation: SwiGLU (silu(gate) * up) or GeGLU with the tanh approximation
/// (gelu_tanh(gate) * up, Gemma).
enum class FfnActivation { Silu, GeluTanh };

/// "llama, qwen2, ..." for messages.
std::string supported_architectures();

/// Hyperparameters. Defaults follow the GGUF spec / llama.cpp when a key is absent.
struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;    // general.architecture
  std::string name;         // general.name (may be empty)
  int64_t n_vocab = 0;      // rows of token_embd.weight
  int64_t n_ctx_train = 0;  // <arch>.context_length
  int64_t n_embd = 0;       // <arch>.embedding_length (d_model)
  int64_t n_layer = 0;      // <arch>.block_count
  int64_t n_ff = 0;         // <arch>.feed_forward_length (dense FFN)
  int64_t n_head = 0;       // <arch>.attention.head_count
  int64_t n_head_kv = 0;    // <arch>.attention.head_count_kv (default n_head; GQA when fewer)
  int64_t head_dim = 0;     // <arch>.attention.key_length (default n_embd / n_head)
  int64_t head_dim_v = 0;   // <arch>.attention.value_length (default head_dim)
  int64_t n_rot = 0;        // <arch>.rope.dimension_count (default head_dim)
  double rms_eps = 1e-5;    // <arch>.attention.layer_norm_rms_epsilon
  RopeType rope_type = RopeType::Normal;
  RopeParams rope;               // every layer's RoPE, or the global layers' where rope_swa differs
  RopeParams rope_swa;           // the sliding-window layers' RoPE (gemma3: base 10000, unscaled)
  bool has_qkv_bias = false;     // qwen2, qwen2moe (optional for llama)
  bool has_qk_norm = false;      // qwen3, qwen3moe, gemma3
  bool tied_embeddings = false;  // output.weight absent: logits use token_embd.weight
  bool has_rope_freqs = false;   // rope_freqs.weight present (Llama 3.1 long-context scaling)
  bool has_rope_factors = false;  // rope_factors_long/short.weight present (phi3 LongRoPE)

  // Layer shape variants.
  bool fused_qkv = false;       // phi3: attn_qkv [n_embd, q + k + v] instead of attn_q/k/v
  bool fused_gate_up = false;   // phi3: ffn_up [n_embd, 2 n_ff], gate rows first, no ffn_gate
  bool has_post_norms = false;  // gemma3: post_attention_norm, post_ffw_norm
  FfnActivation ffn_act = FfnActivation::Silu;
  double embd_scale = 1.0;  // token embeddings are multiplied by it (gemma3: sqrt(n_embd))
  double attn_scale = 0.0;  // softmax scale of q.k: 1 / sqrt(head_dim) (gemma3 27B: 1 /
                            // sqrt(n_embd / n_head), its query_pre_attn_scalar)

  // Attention span per layer: 0 = global (every earlier position), otherwise a sliding window
  // of that many positions, the query's own included (<arch>.attention.sliding_window).
  int64_t n_swa = 0;                     // the window of the sliding layers (0: none)
  std::vector<int64_t> layer_attn_span;  // [n_layer]

  // Mixture of experts (n_expert > 0): <arch>.expert_count, .expert_used_count,
  // .expert_feed_forward_length (default n_ff for llama, n_ff / n_expert_used otherwise),
  // qwen2moe's shared expert (.expert_shared_feed_forward_length, default n_ff), and the
  // router's top-k weights renormalised (.expert_weights_norm; llama and qwen3moe true,
  // qwen2moe false) and scaled (.expert_weights_scale, 0: not scaled).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // 0: no shared expert
  bool expert_weights_norm = false;
  double expert_weights_scale = 0.0;

  /// Things the loader accepted but a user should know (a scaling it cannot apply, a window it
  /// ignores as llama.cpp does), one line each.
  std::vector<std::string> warnings;

  /// Attention span of layer il: 0 (global) or the window.
  int64_t attn_span(int64_t il) const { return layer_attn_span[static_cast<size_t>(il)]; }
  /// Whether any layer attends a sliding window.
  bool has_swa() const { return n_swa > 0; }
  /// The RoPE of layer il (rope_swa for gemma3's sliding layers).
  const RopeParams& rope_of(int64_t il) const {
    return arch == Arch::Gemma3 && attn_span(il) > 0 ? rope_swa : rope;
  }
  bool is_moe() const { return n_expert > 0; }

  /// Bytes of K+V per token for a cache element size (2 for f16): 2 x n_layer x n_head_kv x
  /// head_dim x bytes (value heads use head_dim_v).
  int64_t kv_bytes_per_token(double bytes_per_element) const {
    return n_layer * layer_kv_bytes_per_token(bytes_per_element);
  }
  /// Bytes of K+V one token takes in one layer (every layer has the same KV shape):
  /// n_head_kv x (head_dim + head_dim_v) x bytes.
  int64_t layer_kv_bytes_per_token(double bytes_per_element) const {
    return static_cast<int64_t>(n_head_kv * (head_dim + head_dim_v) * bytes_per_element);
  }
  /// Positions of KV layer il's attention can ever read at context n_ctx: n_ctx for a global
  /// layer, min(span, n_ctx) for a sliding one (a query at pos reads [pos - span + 1, pos]).
  /// What the cache could keep per layer; today it keeps n_ctx positions for every layer.
  int64_t layer_kv_tokens(int64_t il, int64_t n_ctx) const {
    const int64_t span = attn_span(il);
    return span > 0 && span < n_ctx ? span : n_ctx;
  }
};

/// Views of one transformer block's weights. Optional tensors are nullptr when absent.
struct LayerWeights {
  const GgufTensorInfo* attn_norm = nullptr;       // [n_embd]
  const GgufTensorInfo* attn_q = nullptr;          // [n_embd, n_head * head_dim]
  const GgufTensorInfo* attn_k = nullptr;          // [n_embd, n_head_kv * head_dim]
  const GgufTensorInfo* attn_v = nullptr;          // [n_embd, n_head_kv * head_dim_v]
  const GgufTensorInfo* attn_qkv = nullptr;        // phi3: [n_embd, q + k + v] (Q rows, K, V)
  const GgufTensorInfo* attn_output = nullptr;     // [n_head * head_dim_v, n_embd]
  const GgufTensorInfo* attn_q_bias = nullptr;     // qwen2: [n_head * head_dim]
  const GgufTensorInfo* attn_k_bias = nullptr;     // qwen2: [n_head_kv * head_dim]
  const GgufTensorInfo* attn_v_bias = nullptr;     // qwen2: [n_head_kv * head_dim_v]
  const GgufTensorInfo* attn_q_norm = nullptr;     // qwen3, gemma3: [head_dim]
  const GgufTensorInfo* attn_k_norm = nullptr;     // qwen3, gemma3: [head_dim]
  const GgufTensorInfo* attn_post_norm = nullptr;  // gemma3 post_attention_norm: [n_embd]
  const GgufTensorInfo* ffn_norm = nullptr;        // [n_embd]
  const GgufTensorInfo* ffn_gate = nullptr;        // [n_embd, n_ff]
  const GgufTensorInfo* ffn_up = nullptr;          // [n_embd, n_ff]; phi3 [n_embd, 2 n_ff]
  const GgufTensorInfo* ffn_down = nullptr;        // [n_ff, n_embd]
  const GgufTensorInfo* ffn_post_norm = nullptr;   // gemma3 post_ffw_norm: [n_embd]
  // Experts (MoE layers; the dense ffn_gate/up/down are then absent).
  const GgufTensorInfo* ffn_gate_inp = nullptr;   // router: [n_embd, n_expert]
  const GgufTensorInfo* ffn_gate_exps = nullptr;  // [n_embd, n_ff_exp, n_expert]
  const GgufTensorInfo* ffn_up_exps = nullptr;    // [n_embd, n_ff_exp, n_expert]
  const GgufTensorInfo* ffn_down_exps = nullptr;  // [n_ff_exp, n_embd, n_expert]
  // qwen2moe's shared expert, gated by sigmoid(ffn_gate_inp_shexp . x).
  const GgufTensorInfo* ffn_gate_inp_shexp = nullptr;  // [n_embd]
  const GgufTensorInfo* ffn_gate_shexp = nullptr;      // [n_embd, n_ff_shexp]
  const GgufTensorInfo* ffn_up_shexp = nullptr;        // [n_embd, n_ff_shexp]
  const GgufTensorInfo* ffn_down_shexp = nullptr;      // [n_ff_shexp, n_embd]

  /// The block's weight matrices the architecture has, in a fixed order: attention (split or
  /// fused QKV), output projection, dense FFN, router, the expert stacks (the only 3-D ones,
  /// [n_in, n_out, n_expert]), shared expert. Norms, biases and the shared expert's gate
  /// vector are not matrices.
  std::vector<const GgufTensorInfo*> matrices() const;
};

/// A weight matrix as the matmul kernels take it: n_out rows of n_in elements in `type`, row r
/// at data + r * row_bytes. A 2-D tensor, or one expert of a [n_in, n_out, n_expert] stack.
struct MatrixView {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
};

/// The whole 2-D tensor t.
MatrixView matrix_of(const GgufTensorInfo& t);
/// Expert e of a 3-D stack t ([n_in, n_out, n_expert]).
MatrixView expert_of(const GgufTensorInfo& t, int64_t e);

/// Parameter counts and the bytes one decode step reads.
struct ModelSize {
  int64_t params = 0;         // every tensor's elements
  int64_t active_params = 0;  // per token: n_expert_used of the n_expert experts
  int64_t decode_bytes = 0;   // layer matrices + output (experts: the used share), no norms
};

/// A model: the mapped file, its config and weight views. Immutable after load; shareable
/// across sessions and threads.
class Model {
 public:
  /// Opens, validates and maps `path`. Every tensor the architecture needs is checked for
  /// presence, shape and a supported type before returning.
  static Expected<std::unique_ptr<Model>> load(const std::string& path);

  /// Builds the config from an open file (also used by `info` on files whose weights are
  /// not loaded). Fails on an unknown architecture or inconsistent hyperparameters.
  static Expected<ModelConfig> read_config(const GgufFile& file);

  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }

  /// The RoPE divisors a session with context n_ctx uses, as llama.cpp chooses them:
  /// rope_freqs when present, else rope_factors_long when n_ctx exceeds the original context
  /// (rope.n_ctx_orig) and rope_factors_short otherwise; nullptr when the file has none.
  const GgufTensorInfo* rope_factors(int64_t n_ctx) const;

  /// Parameters total and active, and decode's weight bytes.
  ModelSize size() const;

  const GgufTensorInfo* token_embd = nullptr;          // [n_embd, n_vocab]
  const GgufTensorInfo* output_norm = nullptr;         // [n_embd]
  const GgufTensorInfo* output = nullptr;              // [n_embd, n_vocab]; token_embd when tied
  const GgufTensorInfo* rope_freqs = nullptr;          // [n_rot / 2] or nullptr
  const GgufTensorInfo* rope_factors_long = nullptr;   // phi3: [n_rot / 2] or nullptr
  const GgufTensorInfo* rope_factors_short = nullptr;  // phi3: [n_rot / 2] or nullptr
  std::vector<LayerWeights> layers;

  /// Data a backend derives from the weights and shares across its sessions (the CPU's
  /// repacked matrices, engine/cpu/packed_weights.h): one object per key, made by `make` on the
  /// first request and kept until the model is destroyed. Thread-safe: a request made while
  /// another makes the same key waits for it. The model stays immutable as seen from outside
  /// (the derived objects are the backend's own).
  std::shared_ptr<void> derived(const std::string& key,
                                const std::function<std::shared_ptr<void>()>& make) const;

 private:
  Model() = default;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  mutable std::mutex derived_mu_;
  mutable std::map<std::string, std::shared_ptr<void>> derived_;  // guarded by derived_mu_
};

/// A 1-D tensor (norm weight, bias, rope factors) dequantized to f32 [ne[0]]; empty for
/// nullptr (an optional tensor the model lacks).
std::vector<float> dequantize_vector(const GgufTensorInfo* t);

}  // namespace spw
