// A loaded Llama-family model: hyperparameters from the `<arch>.*` GGUF keys and validated views
// of every weight tensor (no copies: tensors stay in the GGUF mapping).
//
// Architectures: `llama` (Llama 2, Llama 3/3.1 incl. `rope_freqs`, Mistral), `qwen2` (QKV bias,
// NeoX RoPE), `qwen3` (per-head Q/K RMSNorm, NeoX RoPE). Tensor names as GGUF spells them
// (token_embd.weight, blk.N.attn_q.weight, ...). Shapes in ggml order: a weight that maps
// n_in -> n_out has ne = [n_in, n_out] (each of the n_out rows holds n_in elements).
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

namespace spw {

enum class Arch { Llama, Qwen2, Qwen3 };

/// RoPE pairing: Normal rotates (x[2i], x[2i+1]) (llama); NeoX rotates (x[i], x[i + n_rot/2]).
enum class RopeType { Normal, NeoX };

/// "llama, qwen2, qwen3" for messages.
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
  int64_t n_ff = 0;         // <arch>.feed_forward_length
  int64_t n_head = 0;       // <arch>.attention.head_count
  int64_t n_head_kv = 0;    // <arch>.attention.head_count_kv (default n_head; GQA when fewer)
  int64_t head_dim = 0;     // <arch>.attention.key_length (default n_embd / n_head)
  int64_t head_dim_v = 0;   // <arch>.attention.value_length (default head_dim)
  int64_t n_rot = 0;        // <arch>.rope.dimension_count (default head_dim)
  double rms_eps = 1e-5;    // <arch>.attention.layer_norm_rms_epsilon
  double rope_freq_base = 10000.0;  // <arch>.rope.freq_base
  double rope_freq_scale = 1.0;     // 1 / <arch>.rope.scaling.factor for "linear" scaling
  RopeType rope_type = RopeType::Normal;
  bool has_qkv_bias = false;     // qwen2
  bool has_qk_norm = false;      // qwen3
  bool tied_embeddings = false;  // output.weight absent: logits use token_embd.weight
  bool has_rope_freqs = false;   // rope_freqs.weight present (Llama 3.1 long-context scaling)

  /// Bytes of K+V per token for a cache element size (2 for f16): 2 x n_layer x n_head_kv x
  /// head_dim x bytes (value heads use head_dim_v).
  int64_t kv_bytes_per_token(double bytes_per_element) const {
    return static_cast<int64_t>(n_layer * n_head_kv * (head_dim + head_dim_v) * bytes_per_element);
  }
};

/// Views of one transformer block's weights. Optional tensors are nullptr when absent.
struct LayerWeights {
  const GgufTensorInfo* attn_norm = nullptr;    // [n_embd]
  const GgufTensorInfo* attn_q = nullptr;       // [n_embd, n_head * head_dim]
  const GgufTensorInfo* attn_k = nullptr;       // [n_embd, n_head_kv * head_dim]
  const GgufTensorInfo* attn_v = nullptr;       // [n_embd, n_head_kv * head_dim_v]
  const GgufTensorInfo* attn_output = nullptr;  // [n_head * head_dim_v, n_embd]
  const GgufTensorInfo* attn_q_bias = nullptr;  // qwen2: [n_head * head_dim]
  const GgufTensorInfo* attn_k_bias = nullptr;  // qwen2: [n_head_kv * head_dim]
  const GgufTensorInfo* attn_v_bias = nullptr;  // qwen2: [n_head_kv * head_dim_v]
  const GgufTensorInfo* attn_q_norm = nullptr;  // qwen3: [head_dim]
  const GgufTensorInfo* attn_k_norm = nullptr;  // qwen3: [head_dim]
  const GgufTensorInfo* ffn_norm = nullptr;     // [n_embd]
  const GgufTensorInfo* ffn_gate = nullptr;     // [n_embd, n_ff]
  const GgufTensorInfo* ffn_up = nullptr;       // [n_embd, n_ff]
  const GgufTensorInfo* ffn_down = nullptr;     // [n_ff, n_embd]
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

  const GgufTensorInfo* token_embd = nullptr;   // [n_embd, n_vocab]
  const GgufTensorInfo* output_norm = nullptr;  // [n_embd]
  const GgufTensorInfo* output = nullptr;       // [n_embd, n_vocab]; token_embd when tied
  const GgufTensorInfo* rope_freqs = nullptr;   // [n_rot / 2] or nullptr
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
