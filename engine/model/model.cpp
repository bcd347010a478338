#include "engine/model/model.h"

#include <cmath>
#include <optional>
#include <unordered_set>

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
    {"qwen3", Arch::Qwen3, RopeType::NeoX, false, true},
};

// Loader state for one file: looks up tensors and checks shape and type once, so the forward
// pass can trust them (STYLE: shapes and dtypes are checked once, at load).
class TensorBinder {
 public:
  explicit TensorBinder(const GgufFile& f) : f_(f) {}

  Expected<const GgufTensorInfo*> get(const std::string& name, std::vector<int64_t> shape,
                                      bool required = true) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!required) return static_cast<const GgufTensorInfo*>(nullptr);
      return make_error("{}: required tensor '{}' is missing", f_.path(), name);
    }
    if (!is_supported_type(t->type)) {
      return make_error(
          "{}: tensor '{}' has type {}, which Spillway does not support yet "
          "(supported: {}); use a Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q3_K_M or IQ4_XS file",
          f_.path(), name, type_name(static_cast<uint32_t>(t->type)), supported_type_names());
    }
    bool match = t->n_dims == static_cast<int>(shape.size());
    for (size_t i = 0; match && i < shape.size(); ++i) match = t->ne[i] == shape[i];
    if (!match) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i)
        want += fmt::format("{}{}", i ? ", " : "", shape[i]);
      want += "]";
      return make_error("{}: tensor '{}' has shape {}, expected {}", f_.path(), name,
                        t->shape_string(), want);
    }
    return t;
  }

 private:
  const GgufFile& f_;
};

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

  const std::string p = c.arch_name + ".";
  // Reads an integer key into `out`; collects the first error.
  std::optional<Error> err;
  auto get_int = [&](const std::string& key, int64_t& out,
                     std::optional<int64_t> def = std::nullopt) {
    if (err) return;
    auto v = f.get_int(p + key, def);
    if (!v) {
      err = v.error();
      return;
    }
    out = *v;
  };
  get_int("context_length", c.n_ctx_train);
  get_int("embedding_length", c.n_embd);
  get_int("block_count", c.n_layer);
  get_int("feed_forward_length", c.n_ff);
  get_int("attention.head_count", c.n_head);
  if (err) return *err;
  get_int("attention.head_count_kv", c.n_head_kv, c.n_head);
  if (c.n_head <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || c.n_ff <= 0 || c.n_ctx_train <= 0) {
    return make_error(
        "{}: invalid hyperparameters (embedding_length {}, block_count {}, feed_forward_length {}, "
        "head_count {}, context_length {})",
        f.path(), c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_ctx_train);
  }
  get_int("attention.key_length", c.head_dim, c.n_embd / c.n_head);
  get_int("attention.value_length", c.head_dim_v, c.head_dim);
  get_int("rope.dimension_count", c.n_rot, c.head_dim);
  if (err) return *err;
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
  auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  if (!eps) return eps.error();
  c.rms_eps = *eps;
  if (!std::isfinite(c.rms_eps) || c.rms_eps <= 0 || c.rms_eps > 1) {
    return make_error("{}: {}attention.layer_norm_rms_epsilon = {} is not a small positive number",
                      f.path(), p, c.rms_eps);
  }
  auto base = f.get_float(p + "rope.freq_base", 10000.0);
  if (!base) return base.error();
  c.rope_freq_base = *base;
  if (!std::isfinite(c.rope_freq_base) || c.rope_freq_base <= 1) {
    return make_error("{}: {}rope.freq_base = {} must be a finite number above 1", f.path(), p,
                      c.rope_freq_base);
  }
  auto scaling = f.get_string(p + "rope.scaling.type", std::string("none"));
  if (!scaling) return scaling.error();
  if (*scaling == "linear") {
    auto factor = f.get_float(p + "rope.scaling.factor", 1.0);
    if (!factor) return factor.error();
    if (!std::isfinite(*factor) || *factor <= 0)
      return make_error("{}: rope.scaling.factor {} must be positive", f.path(), *factor);
    c.rope_freq_scale = 1.0 / *factor;
  } else if (*scaling != "none" && *scaling != "llama3") {
    // llama3 scaling arrives as the rope_freqs tensor; YaRN is not implemented yet.
    return make_error(
        "{}: RoPE scaling type '{}' is not supported yet (supported: none, linear, llama3)",
        f.path(), *scaling);
  }
  if (const GgufTensorInfo* t = f.find_tensor("token_embd.weight")) c.n_vocab = t->ne[1];
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.has_rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  return c;
}

std::shared_ptr<void> Model::derived(const std::string& key,
                                     const std::function<std::shared_ptr<void>()>& make) const {
  const std::lock_guard<std::mutex> lock(derived_mu_);
  std::shared_ptr<void>& slot = derived_[key];
  if (!slot) slot = make();
  return slot;
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return file.error();
  auto config = read_config(**file);
  if (!config) return config.error();

  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(*file);
  m->config_ = std::move(*config);
  const ModelConfig& c = m->config_;
  TensorBinder b(*m->file_);

  const GgufTensorInfo* embd = m->file_->find_tensor("token_embd.weight");
  if (!embd) return make_error("{}: required tensor 'token_embd.weight' is missing", path);
  if (c.n_vocab <= 0) return make_error("{}: token_embd.weight has no rows", path);

#define SPW_BIND(dst, ...)        \
  do {                            \
    auto r_ = b.get(__VA_ARGS__); \
    if (!r_) return r_.error();   \
    dst = *r_;                    \
  } while (0)

  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t k_dim = c.n_head_kv * c.head_dim;
  const int64_t v_dim = c.n_head_kv * c.head_dim_v;
  SPW_BIND(m->token_embd, "token_embd.weight", {c.n_embd, c.n_vocab});
  SPW_BIND(m->output_norm, "output_norm.weight", {c.n_embd});
  SPW_BIND(m->output, "output.weight", {c.n_embd, c.n_vocab}, false);
  if (!m->output) m->output = m->token_embd;
  SPW_BIND(m->rope_freqs, "rope_freqs.weight", {c.n_rot / 2}, false);

  m->layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = m->layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("blk.{}.", i);
    SPW_BIND(l.attn_norm, p + "attn_norm.weight", {c.n_embd});
    SPW_BIND(l.attn_q, p + "attn_q.weight", {c.n_embd, q_dim});
    SPW_BIND(l.attn_k, p + "attn_k.weight", {c.n_embd, k_dim});
    SPW_BIND(l.attn_v, p + "attn_v.weight", {c.n_embd, v_dim});
    SPW_BIND(l.attn_output, p + "attn_output.weight", {c.n_head * c.head_dim_v, c.n_embd});
    SPW_BIND(l.attn_q_bias, p + "attn_q.bias", {q_dim}, c.has_qkv_bias);
    SPW_BIND(l.attn_k_bias, p + "attn_k.bias", {k_dim}, c.has_qkv_bias);
    SPW_BIND(l.attn_v_bias, p + "attn_v.bias", {v_dim}, c.has_qkv_bias);
    if (c.has_qk_norm) {  // elsewhere a stray QK-norm tensor is reported as unused below
      SPW_BIND(l.attn_q_norm, p + "attn_q_norm.weight", {c.head_dim});
      SPW_BIND(l.attn_k_norm, p + "attn_k_norm.weight", {c.head_dim});
    }
    // QKV biases: required for qwen2, optional for llama (some Llama-architecture fine-tunes
    // carry them, as llama.cpp allows); all three in every block, or none anywhere.
    const bool has_bias = l.attn_q_bias && l.attn_k_bias && l.attn_v_bias;
    const bool any_bias = l.attn_q_bias || l.attn_k_bias || l.attn_v_bias;
    if (any_bias != has_bias || (i > 0 && has_bias != m->config_.has_qkv_bias)) {
      return make_error("{}: block {} has an incomplete set of attn_q/k/v biases", path, i);
    }
    m->config_.has_qkv_bias = has_bias;
    SPW_BIND(l.ffn_norm, p + "ffn_norm.weight", {c.n_embd});
    SPW_BIND(l.ffn_gate, p + "ffn_gate.weight", {c.n_embd, c.n_ff});
    SPW_BIND(l.ffn_up, p + "ffn_up.weight", {c.n_embd, c.n_ff});
    SPW_BIND(l.ffn_down, p + "ffn_down.weight", {c.n_ff, c.n_embd});
  }
#undef SPW_BIND
  // Every tensor in the file must have been bound: a leftover means the file does not match its
  // own hyperparameters (e.g. block_count smaller than the blocks present) or the architecture
  // has parts we would silently skip. llama.cpp refuses such files too.
  std::unordered_set<const GgufTensorInfo*> bound = {m->token_embd, m->output_norm, m->output,
                                                     m->rope_freqs};
  for (const LayerWeights& l : m->layers) {
    for (const GgufTensorInfo* t : {l.attn_norm, l.attn_q, l.attn_k, l.attn_v, l.attn_output,
                                    l.attn_q_bias, l.attn_k_bias, l.attn_v_bias, l.attn_q_norm,
                                    l.attn_k_norm, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down}) {
      bound.insert(t);
    }
  }
  // Refuse unsupported types anywhere in the file, not only in the tensors bound above, so the
  // message names the first offending tensor even for layouts we would otherwise ignore.
  for (const auto& t : m->file_->tensors()) {
    if (is_supported_type(t.type) && !bound.count(&t)) {
      return make_error(
          "{}: tensor '{}' is not used by a {} model with {} blocks (block_count); "
          "the file does not match its own hyperparameters",
          path, t.name, c.arch_name, c.n_layer);
    }
    if (!is_supported_type(t.type)) {
      return make_error(
          "{}: tensor '{}' has type {}, which Spillway does not support yet (supported: {})", path,
          t.name, type_name(static_cast<uint32_t>(t.type)), supported_type_names());
    }
  }
  return m;
}

std::vector<float> dequantize_vector(const GgufTensorInfo* t) {
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->ne[0]));
  dequantize_row(t->type, t->data, v.data(), t->ne[0]);
  return v;
}

}  // namespace spw
