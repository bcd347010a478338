// Model::read_config: the hyperparameters of a GGUF file, key by key as llama.cpp's loader reads
// them (src/llama-model.cpp load_hparams, src/llama-context.cpp for the RoPE scaling it derives).
#include <cmath>
#include <optional>

#include "engine/model/model.h"

namespace spw {

namespace {

struct ArchInfo {
  std::string_view name;
  Arch arch;
  RopeType rope;
  bool qkv_bias;
  bool qk_norm;
};

constexpr ArchInfo kArchs[] = {
    {"llama", Arch::Llama, RopeType::Normal, false, false},
    {"qwen2", Arch::Qwen2, RopeType::NeoX, true, false},
    {"qwen2moe", Arch::Qwen2Moe, RopeType::NeoX, true, false},
    {"qwen3", Arch::Qwen3, RopeType::NeoX, false, true},
    {"qwen3moe", Arch::Qwen3Moe, RopeType::NeoX, false, true},
    {"phi3", Arch::Phi3, RopeType::NeoX, false, false},
    {"gemma3", Arch::Gemma3, RopeType::NeoX, false, true},
};

// Gemma 3: every sixth layer attends globally, the other five a sliding window
// (llama_hparams::set_swa_pattern(6): layer il slides when il % 6 < 5).
constexpr int64_t kGemma3SwaPattern = 6;
// Gemma 3's sliding-window layers keep the original RoPE: base 10000, no scaling.
constexpr double kGemma3SwaFreqBase = 10000.0;
// llama.cpp's LLAMA_MAX_EXPERTS.
constexpr int64_t kMaxExperts = 512;

// Typed key reads with defaults; the first error is kept and reported once.
class KeyReader {
 public:
  KeyReader(const GgufFile& f, std::string prefix) : f_(f), p_(std::move(prefix)) {}

  int64_t get_int(const std::string& key, std::optional<int64_t> def = std::nullopt) {
    if (err_) return 0;
    auto v = f_.get_int(p_ + key, def);
    if (!v) {
      err_ = v.error();
      return 0;
    }
    return *v;
  }
  double get_float(const std::string& key, std::optional<double> def = std::nullopt) {
    if (err_) return 0;
    auto v = f_.get_float(p_ + key, def);
    if (!v) {
      err_ = v.error();
      return 0;
    }
    return *v;
  }
  bool get_bool(const std::string& key, bool def) {
    if (err_) return def;
    auto v = f_.get_bool(p_ + key, def);
    if (!v) {
      err_ = v.error();
      return def;
    }
    return *v;
  }
  std::string get_string(const std::string& key, const std::string& def) {
    if (err_) return def;
    auto v = f_.get_string(p_ + key, def);
    if (!v) {
      err_ = v.error();
      return def;
    }
    return *v;
  }
  bool has(const std::string& key) const { return f_.find(p_ + key) != nullptr; }
  const std::optional<Error>& error() const { return err_; }

 private:
  const GgufFile& f_;
  std::string p_;
  std::optional<Error> err_;
};

// The RoPE keys (rope.freq_base, rope.scaling.*, the legacy rope.scale_linear) into c.rope and
// c.rope_swa, with llama.cpp's defaults: an absent type means linear, an absent factor means
// 1, "none" never scales; YaRN's extrapolation is on for yarn only.
Status read_rope(const GgufFile& f, KeyReader& k, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  RopeParams& r = c.rope;
  r.freq_base = k.get_float("rope.freq_base", 10000.0);
  r.n_ctx_orig = k.get_int("rope.scaling.original_context_length", c.n_ctx_train);
  const std::string type = k.get_string("rope.scaling.type", "linear");
  // The factor; the legacy key when the current one is absent (both absent: not scaled).
  double factor = 0.0;
  if (k.has("rope.scaling.factor")) {
    factor = k.get_float("rope.scaling.factor");
  } else if (k.has("rope.scale_linear")) {
    factor = k.get_float("rope.scale_linear");
  }
  r.attn_factor = k.get_float("rope.scaling.attn_factor", 1.0);
  r.yarn_attn_factor = k.get_float("rope.scaling.yarn_attn_factor", 1.0);
  r.beta_fast = k.get_float("rope.scaling.yarn_beta_fast", 32.0);
  r.beta_slow = k.get_float("rope.scaling.yarn_beta_slow", 1.0);
  const double ext = k.get_float("rope.scaling.yarn_ext_factor", -1.0);
  if (k.error()) return *k.error();

  if (!std::isfinite(r.freq_base) || r.freq_base <= 1) {
    return make_error("{}: {}rope.freq_base = {} must be a finite number above 1", f.path(), p,
                      r.freq_base);
  }
  if (!std::isfinite(factor) || factor < 0) {
    return make_error("{}: {}rope.scaling.factor = {} must be a positive number", f.path(), p,
                      factor);
  }
  if (r.n_ctx_orig <= 0) {
    return make_error("{}: {}rope.scaling.original_context_length = {} must be positive", f.path(),
                      p, r.n_ctx_orig);
  }
  for (const double v : {r.attn_factor, r.yarn_attn_factor, r.beta_fast, r.beta_slow}) {
    if (!std::isfinite(v) || v <= 0) {
      return make_error(
          "{}: {}rope.scaling attention factors and YaRN betas must be positive (got {})", f.path(),
          p, v);
    }
  }
  r.freq_scale = factor == 0.0 ? 1.0 : 1.0 / factor;
  if (type == "none") {
    r.scaling = RopeScaling::None;
    r.freq_scale = 1.0;
  } else if (type == "linear") {
    r.scaling = r.freq_scale == 1.0 ? RopeScaling::None : RopeScaling::Linear;
  } else if (type == "yarn") {
    r.scaling = RopeScaling::Yarn;
  } else if (type == "longrope") {
    r.scaling = RopeScaling::LongRope;
  } else if (type == "llama3") {
    // Llama 3.1's scaling arrives as the rope_freqs tensor (llama.cpp's converter writes no type
    // for it); a file that names it without the tensor cannot be scaled.
    r.scaling = RopeScaling::None;
    r.freq_scale = 1.0;
    if (f.find_tensor("rope_freqs.weight") == nullptr) {
      c.warnings.push_back(fmt::format(
          "{}rope.scaling.type is llama3 but the file has no rope_freqs.weight: RoPE runs "
          "unscaled, so positions past the original context ({} tokens) will degrade; convert "
          "the model again with a current llama.cpp",
          p, r.n_ctx_orig));
    }
  } else {
    return make_error(
        "{}: {}rope.scaling.type '{}' is not supported (supported: none, linear, yarn, longrope, "
        "llama3)",
        f.path(), p, type);
  }
  r.ext_factor = ext >= 0.0 ? ext : (r.scaling == RopeScaling::Yarn ? 1.0 : 0.0);

  // Sliding-window layers use the same RoPE unless the architecture says otherwise.
  c.rope_swa = r;
  if (c.arch == Arch::Gemma3) {
    c.rope_swa.freq_base = kGemma3SwaFreqBase;
    c.rope_swa.freq_scale = 1.0;
    c.rope_swa.scaling = RopeScaling::None;
  }
  return Status::Ok();
}

// Experts: counts, the expert FFN's width, the router's weighting.
Status read_experts(const GgufFile& f, KeyReader& k, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.n_expert = k.get_int("expert_count", 0);
  c.n_expert_used = k.get_int("expert_used_count", 0);
  const bool moe_arch = c.arch == Arch::Qwen2Moe || c.arch == Arch::Qwen3Moe;
  const bool moe_capable = moe_arch || c.arch == Arch::Llama;
  if (k.error()) return *k.error();
  if (!moe_capable) {
    if (c.n_expert > 0) {
      return make_error("{}: {}expert_count = {}, but Spillway reads {} as a dense model", f.path(),
                        p, c.n_expert, c.arch_name);
    }
    return Status::Ok();
  }
  if (c.n_expert == 0 && !moe_arch) return Status::Ok();  // a dense llama
  if (c.n_expert <= 0 || c.n_expert > kMaxExperts || c.n_expert_used <= 0 ||
      c.n_expert_used > c.n_expert) {
    return make_error(
        "{}: expert counts {}expert_count = {}, {}expert_used_count = {} (need 0 < used <= count "
        "<= {})",
        f.path(), p, c.n_expert, p, c.n_expert_used, kMaxExperts);
  }
  // llama (Mixtral) stores its experts at the dense width; the Qwen MoE files say theirs.
  c.n_ff_exp = c.arch == Arch::Llama
                   ? c.n_ff
                   : k.get_int("expert_feed_forward_length", c.n_ff / c.n_expert_used);
  if (c.arch == Arch::Qwen2Moe)
    c.n_ff_shexp = k.get_int("expert_shared_feed_forward_length", c.n_ff);
  c.expert_weights_norm = k.get_bool("expert_weights_norm", c.arch != Arch::Qwen2Moe);
  c.expert_weights_scale = k.get_float("expert_weights_scale", 0.0);
  const int64_t gating = k.get_int("expert_gating_func", 1);
  if (k.error()) return *k.error();
  if (gating != 1) {
    return make_error(
        "{}: {}expert_gating_func = {} is not supported (Spillway routes with softmax, 1)",
        f.path(), p, gating);
  }
  if (c.n_ff_exp <= 0 || (c.arch == Arch::Qwen2Moe && c.n_ff_shexp <= 0) ||
      !std::isfinite(c.expert_weights_scale) || c.expert_weights_scale < 0) {
    return make_error(
        "{}: invalid expert hyperparameters (expert_feed_forward_length {}, "
        "expert_shared_feed_forward_length {}, expert_weights_scale {})",
        f.path(), c.n_ff_exp, c.n_ff_shexp, c.expert_weights_scale);
  }
  return Status::Ok();
}

// Attention spans (sliding windows) and the softmax scale.
Status read_attention(const GgufFile& f, KeyReader& k, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.layer_attn_span.assign(static_cast<size_t>(c.n_layer), 0);
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.arch == Arch::Gemma3) {
    c.n_swa = k.get_int("attention.sliding_window");
    if (k.error()) return *k.error();
    if (c.n_swa <= 0) {
      return make_error("{}: {}attention.sliding_window = {} must be positive", f.path(), p,
                        c.n_swa);
    }
    for (int64_t il = 0; il < c.n_layer; ++il) {
      if (il % kGemma3SwaPattern < kGemma3SwaPattern - 1)
        c.layer_attn_span[static_cast<size_t>(il)] = c.n_swa;
    }
    // gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B (62 layers), head_dim
    // for the others (llama.cpp keys it on the layer count, as no GGUF key carries it).
    if (c.n_layer == 62) c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.n_embd / c.n_head));
  } else if (c.arch == Arch::Phi3) {
    // Phi-3's window on every layer, as Hugging Face's Phi3Attention applies it and llama.cpp
    // did until mid-2025 (src/llama-model.cpp before PR 13676; the peer logits of the phi3
    // sample agree with it, not with the window turned off): the file's key, or for files
    // converted without one the defaults llama.cpp kept for them (PR 8931).
    int64_t n_swa = 0;
    if ((c.n_layer == 32 || c.n_layer == 40) && c.n_ctx_train == 4096) {
      n_swa = 2047;  // Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct
    } else if (c.n_layer == 32 && c.n_head_kv == 32 && c.n_ctx_train == 131072) {
      n_swa = 262144;  // Phi-3-mini-128k-instruct
    } else if (c.n_layer == 40 && c.n_ctx_train == 131072) {
      n_swa = 131072;  // Phi-3-medium-128k-instruct
    }
    n_swa = k.get_int("attention.sliding_window", n_swa);
    if (k.error()) return *k.error();
    if (n_swa < 0) {
      return make_error("{}: {}attention.sliding_window = {} must not be negative", f.path(), p,
                        n_swa);
    }
    if (n_swa > 0) {
      c.n_swa = n_swa;
      c.layer_attn_span.assign(static_cast<size_t>(c.n_layer), n_swa);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string supported_architectures() {
  std::string s;
  for (const auto& a : kArchs) s += fmt::format("{}{}", s.empty() ? "" : ", ", a.name);
  return s;
}

Expected<ModelConfig> Model::read_config(const GgufFile& f) {
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return arch_name.error();
  const ArchInfo* info = nullptr;
  for (const auto& a : kArchs) {
    if (a.name == *arch_name) info = &a;
  }
  if (!info) {
    return make_error("{}: unknown architecture '{}' (supported: {})", f.path(), *arch_name,
                      supported_architectures());
  }
  ModelConfig c;
  c.arch = info->arch;
  c.arch_name = *arch_name;
  c.rope_type = info->rope;
  c.has_qkv_bias = info->qkv_bias;
  c.has_qk_norm = info->qk_norm;
  if (auto n = f.get_string("general.name", std::string()); n) c.name = *n;
  const bool moe_arch = c.arch == Arch::Qwen2Moe || c.arch == Arch::Qwen3Moe;

  KeyReader k(f, c.arch_name + ".");
  c.n_ctx_train = k.get_int("context_length");
  c.n_embd = k.get_int("embedding_length");
  c.n_layer = k.get_int("block_count");
  c.n_ff = moe_arch ? k.get_int("feed_forward_length", 0) : k.get_int("feed_forward_length");
  c.n_head = k.get_int("attention.head_count");
  if (k.error()) return *k.error();
  c.n_head_kv = k.get_int("attention.head_count_kv", c.n_head);
  if (c.n_head <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || (c.n_ff <= 0 && !moe_arch) ||
      c.n_ff < 0 || c.n_ctx_train <= 0) {
    return make_error(
        "{}: invalid hyperparameters (embedding_length {}, block_count {}, feed_forward_length {}, "
        "head_count {}, context_length {})",
        f.path(), c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_ctx_train);
  }
  c.head_dim = k.get_int("attention.key_length", c.n_embd / c.n_head);
  c.head_dim_v = k.get_int("attention.value_length", c.head_dim);
  c.n_rot = k.get_int("rope.dimension_count", c.head_dim);
  if (k.error()) return *k.error();
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return make_error("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head,
                      c.n_head_kv);
  }
  if (c.head_dim <= 0 || c.head_dim_v <= 0 || c.head_dim % 2 != 0 || c.n_rot <= 0 ||
      c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return make_error(
        "{}: invalid head dimensions (key_length {}, value_length {}, rope.dimension_count {})",
        f.path(), c.head_dim, c.head_dim_v, c.n_rot);
  }
  if (c.n_layer > 4096 || c.n_head > 4096) {
    return make_error("{}: implausible hyperparameters (block_count {}, head_count {})", f.path(),
                      c.n_layer, c.n_head);
  }
  c.rms_eps = k.get_float("attention.layer_norm_rms_epsilon", 1e-5);
  if (k.error()) return *k.error();
  if (!std::isfinite(c.rms_eps) || c.rms_eps <= 0 || c.rms_eps > 1) {
    return make_error("{}: {}.attention.layer_norm_rms_epsilon = {} is not a small positive number",
                      f.path(), c.arch_name, c.rms_eps);
  }
  if (auto st = read_rope(f, k, c); !st) return st.error();
  if (auto st = read_attention(f, k, c); !st) return st.error();
  if (auto st = read_experts(f, k, c); !st) return st.error();

  c.fused_qkv = c.arch == Arch::Phi3;
  c.fused_gate_up = c.arch == Arch::Phi3;
  if (c.arch == Arch::Gemma3) {
    c.has_post_norms = true;
    c.ffn_act = FfnActivation::GeluTanh;
    c.embd_scale = std::sqrt(static_cast<double>(c.n_embd));
  }
  if (const GgufTensorInfo* t = f.find_tensor("token_embd.weight")) c.n_vocab = t->ne[1];
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.has_rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  c.has_rope_factors = f.find_tensor("rope_factors_long.weight") != nullptr ||
                       f.find_tensor("rope_factors_short.weight") != nullptr;
  return c;
}

}  // namespace spw
