#include "engine/model/model.h"

#include <unordered_set>

namespace spw {

namespace {

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
  // Mixtral files from before llama.cpp stacked the experts hold one tensor per expert.
  if (m->file_->find_tensor("blk.0.ffn_gate.0.weight") != nullptr ||
      m->file_->find_tensor("blk.0.ffn_down.0.weight") != nullptr) {
    return make_error(
        "{}: the experts are stored one tensor per expert (blk.0.ffn_gate.0.weight, ...), an old "
        "conversion; convert the model again with a current llama.cpp (ffn_gate_exps)",
        path);
  }

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
  if (c.arch == Arch::Phi3) {  // LongRoPE: both or neither
    SPW_BIND(m->rope_factors_long, "rope_factors_long.weight", {c.n_rot / 2}, false);
    SPW_BIND(m->rope_factors_short, "rope_factors_short.weight", {c.n_rot / 2}, false);
    if ((m->rope_factors_long == nullptr) != (m->rope_factors_short == nullptr)) {
      return make_error(
          "{}: rope_factors_long.weight and rope_factors_short.weight come together; the file "
          "has only one",
          path);
    }
  }

  m->layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = m->layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("blk.{}.", i);
    SPW_BIND(l.attn_norm, p + "attn_norm.weight", {c.n_embd});
    if (c.fused_qkv) {
      SPW_BIND(l.attn_qkv, p + "attn_qkv.weight", {c.n_embd, q_dim + k_dim + v_dim});
    } else {
      SPW_BIND(l.attn_q, p + "attn_q.weight", {c.n_embd, q_dim});
      SPW_BIND(l.attn_k, p + "attn_k.weight", {c.n_embd, k_dim});
      SPW_BIND(l.attn_v, p + "attn_v.weight", {c.n_embd, v_dim});
      SPW_BIND(l.attn_q_bias, p + "attn_q.bias", {q_dim}, c.has_qkv_bias);
      SPW_BIND(l.attn_k_bias, p + "attn_k.bias", {k_dim}, c.has_qkv_bias);
      SPW_BIND(l.attn_v_bias, p + "attn_v.bias", {v_dim}, c.has_qkv_bias);
    }
    SPW_BIND(l.attn_output, p + "attn_output.weight", {c.n_head * c.head_dim_v, c.n_embd});
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
    if (c.has_post_norms) SPW_BIND(l.attn_post_norm, p + "post_attention_norm.weight", {c.n_embd});
    SPW_BIND(l.ffn_norm, p + "ffn_norm.weight", {c.n_embd});
    if (c.is_moe()) {
      const std::vector<int64_t> in_stack = {c.n_embd, c.n_ff_exp, c.n_expert};
      SPW_BIND(l.ffn_gate_inp, p + "ffn_gate_inp.weight", {c.n_embd, c.n_expert});
      SPW_BIND(l.ffn_gate_exps, p + "ffn_gate_exps.weight", in_stack);
      SPW_BIND(l.ffn_up_exps, p + "ffn_up_exps.weight", in_stack);
      SPW_BIND(l.ffn_down_exps, p + "ffn_down_exps.weight", {c.n_ff_exp, c.n_embd, c.n_expert});
      if (c.n_ff_shexp > 0) {
        SPW_BIND(l.ffn_gate_inp_shexp, p + "ffn_gate_inp_shexp.weight", {c.n_embd});
        SPW_BIND(l.ffn_gate_shexp, p + "ffn_gate_shexp.weight", {c.n_embd, c.n_ff_shexp});
        SPW_BIND(l.ffn_up_shexp, p + "ffn_up_shexp.weight", {c.n_embd, c.n_ff_shexp});
        SPW_BIND(l.ffn_down_shexp, p + "ffn_down_shexp.weight", {c.n_ff_shexp, c.n_embd});
      }
    } else if (c.fused_gate_up) {
      SPW_BIND(l.ffn_up, p + "ffn_up.weight", {c.n_embd, 2 * c.n_ff});
      SPW_BIND(l.ffn_down, p + "ffn_down.weight", {c.n_ff, c.n_embd});
    } else {
      SPW_BIND(l.ffn_gate, p + "ffn_gate.weight", {c.n_embd, c.n_ff});
      SPW_BIND(l.ffn_up, p + "ffn_up.weight", {c.n_embd, c.n_ff});
      SPW_BIND(l.ffn_down, p + "ffn_down.weight", {c.n_ff, c.n_embd});
    }
    if (c.has_post_norms) SPW_BIND(l.ffn_post_norm, p + "post_ffw_norm.weight", {c.n_embd});
  }
#undef SPW_BIND
  // Every tensor in the file must have been bound: a leftover means the file does not match its
  // own hyperparameters (e.g. block_count smaller than the blocks present) or the architecture
  // has parts we would silently skip. llama.cpp refuses such files too.
  std::unordered_set<const GgufTensorInfo*> bound = {
      m->token_embd, m->output_norm,       m->output,
      m->rope_freqs, m->rope_factors_long, m->rope_factors_short};
  for (const LayerWeights& l : m->layers) {
    for (const GgufTensorInfo* t : {l.attn_norm,      l.attn_q,
                                    l.attn_k,         l.attn_v,
                                    l.attn_qkv,       l.attn_output,
                                    l.attn_q_bias,    l.attn_k_bias,
                                    l.attn_v_bias,    l.attn_q_norm,
                                    l.attn_k_norm,    l.attn_post_norm,
                                    l.ffn_norm,       l.ffn_gate,
                                    l.ffn_up,         l.ffn_down,
                                    l.ffn_post_norm,  l.ffn_gate_inp,
                                    l.ffn_gate_exps,  l.ffn_up_exps,
                                    l.ffn_down_exps,  l.ffn_gate_inp_shexp,
                                    l.ffn_gate_shexp, l.ffn_up_shexp,
                                    l.ffn_down_shexp}) {
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

const GgufTensorInfo* Model::rope_factors(int64_t n_ctx) const {
  if (rope_freqs != nullptr) return rope_freqs;
  if (rope_factors_long == nullptr) return nullptr;
  return n_ctx > config_.rope.n_ctx_orig ? rope_factors_long : rope_factors_short;
}

std::vector<const GgufTensorInfo*> LayerWeights::matrices() const {
  std::vector<const GgufTensorInfo*> v;
  for (const GgufTensorInfo* t :
       {attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down, ffn_gate_inp,
        ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp}) {
    if (t != nullptr) v.push_back(t);
  }
  return v;
}

ModelSize Model::size() const {
  ModelSize s;
  const ModelConfig& c = config_;
  for (const GgufTensorInfo& t : file_->tensors()) s.params += t.n_elements();
  s.active_params = s.params;
  int64_t bytes = static_cast<int64_t>(output->n_bytes);
  for (const LayerWeights& w : layers) {
    for (const GgufTensorInfo* t : w.matrices()) {
      if (t->n_dims != 3) {
        bytes += static_cast<int64_t>(t->n_bytes);
        continue;
      }
      // An expert stack: a token reads n_expert_used of the n_expert experts.
      s.active_params -= t->n_elements() - t->n_elements() / c.n_expert * c.n_expert_used;
      bytes += static_cast<int64_t>(t->n_bytes) / c.n_expert * c.n_expert_used;
    }
  }
  s.decode_bytes = bytes;
  return s;
}

MatrixView matrix_of(const GgufTensorInfo& t) {
  return MatrixView{t.type, t.data, t.ne[0], t.ne[1], t.row_bytes()};
}

MatrixView expert_of(const GgufTensorInfo& t, int64_t e) {
  const size_t rb = t.row_bytes();
  return MatrixView{t.type, t.data + static_cast<size_t>(e * t.ne[1]) * rb, t.ne[0], t.ne[1], rb};
}

std::vector<float> dequantize_vector(const GgufTensorInfo* t) {
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->ne[0]));
  dequantize_row(t->type, t->data, v.data(), t->ne[0]);
  return v;
}

}  // namespace spw
