#include "engine/backend/cpu/cpu_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/quant_dot.h"

namespace spw::cpu {

namespace {

std::vector<float> load_vector(const GgufTensorInfo* t) {
  if (!t) return {};
  std::vector<float> v(static_cast<size_t>(t->ne[0]));
  dequantize_row(t->type, t->data, v.data(), t->ne[0]);
  return v;
}

GgmlType kv_ggml_type(KvType t) {
  switch (t) {
    case KvType::F32:
      return GgmlType::F32;
    case KvType::Q8_0:
      return GgmlType::Q8_0;
    case KvType::F16:
      break;
  }
  return GgmlType::F16;
}

// One position's K or V row, [n_head_kv * head_dim] floats, into the cache's type. Q8_0 blocks
// never straddle heads: head_dim % 32 == 0 (checked at create()).
void store_kv_row(GgmlType t, const float* x, uint8_t* dst, int64_t n) {
  switch (t) {
    case GgmlType::F16:
      return f32_to_f16_row(x, reinterpret_cast<uint16_t*>(dst), n);
    case GgmlType::Q8_0:
      return f32_to_q8_0_row(x, dst, n);
    default:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
  }
}

// Byte offset of element e of a KV row in type t (e % 32 == 0 for Q8_0).
size_t kv_offset(GgmlType t, int64_t e) { return row_size(t, e); }

int resolve_threads(int n) {
  if (n > 0) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace

Expected<std::unique_ptr<CpuSession>> CpuSession::create(const Model& model,
                                                         const SessionParams& params,
                                                         const CpuSessionParams& cpu) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  if (params.n_threads < 0)
    return make_error("thread count {} must not be negative", params.n_threads);
  if (cpu.n_ubatch < 1) return make_error("ubatch size {} must be at least 1", cpu.n_ubatch);
  const ModelConfig& c = model.config();
  if (auto st = check_kv_types(params, c.head_dim, c.head_dim_v); !st) return st.error();
  return std::unique_ptr<CpuSession>(new CpuSession(model, params, cpu));
}

CpuSession::CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu)
    : m_(model),
      c_(model.config()),
      p_(params),
      cp_(cpu),
      pool_(resolve_threads(params.n_threads)) {
  n_ctx_ = p_.n_ctx > 0 ? p_.n_ctx : c_.n_ctx_train;
  kv_k_ = kv_ggml_type(p_.kv_type_k);
  kv_v_ = kv_ggml_type(p_.kv_type_v);
  k_.resize(static_cast<size_t>(c_.n_layer));
  v_.resize(static_cast<size_t>(c_.n_layer));
  lv_.resize(static_cast<size_t>(c_.n_layer));
  for (size_t il = 0; il < lv_.size(); ++il) {
    const LayerWeights& w = m_.layers[il];
    LayerVectors& v = lv_[il];
    v.attn_norm = load_vector(w.attn_norm);
    v.ffn_norm = load_vector(w.ffn_norm);
    v.bq = load_vector(w.attn_q_bias);
    v.bk = load_vector(w.attn_k_bias);
    v.bv = load_vector(w.attn_v_bias);
    v.q_norm = load_vector(w.attn_q_norm);
    v.k_norm = load_vector(w.attn_k_norm);
  }
  output_norm_ = load_vector(m_.output_norm);
  const std::vector<float> factors = load_vector(m_.rope_freqs);
  inv_freq_ = rope_inv_freq(c_.n_rot, c_.rope_freq_base, c_.rope_freq_scale,
                            factors.empty() ? nullptr : factors.data());
}

int64_t CpuSession::kv_bytes() const {
  int64_t total = 0;
  for (size_t il = 0; il < k_.size(); ++il)
    total += static_cast<int64_t>(k_[il].size() + v_[il].size());
  return total;
}

void CpuSession::ensure_kv_capacity(int64_t n_tokens) {
  if (n_tokens <= kv_capacity_) return;
  // Grow geometrically (at least 256 positions) but never past the context.
  const int64_t cap = std::min(n_ctx_, std::max({n_tokens, kv_capacity_ * 2, int64_t{256}}));
  const int64_t kd = c_.n_head_kv * c_.head_dim, vd = c_.n_head_kv * c_.head_dim_v;
  for (size_t il = 0; il < k_.size(); ++il) {
    k_[il].resize(kv_offset(kv_k_, cap * kd));
    v_[il].resize(kv_offset(kv_v_, cap * vd));
  }
  kv_capacity_ = cap;
}

void CpuSession::mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y) {
  if (n == 1) {
    matvec(w.type, w.data, w.ne[0], w.ne[1], X, Y, pool_);
  } else {
    matmul(w.type, w.data, w.ne[0], w.ne[1], X, n, Y, pool_);
  }
}

Status CpuSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  if (auto st = check_batch(tokens, c_.n_vocab, n_past_, n_ctx_); !st) return st;
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  ensure_kv_capacity(n_past_ + n_tokens);
  for (int64_t b = 0; b < n_tokens; b += cp_.n_ubatch) {
    const int64_t n = std::min(cp_.n_ubatch, n_tokens - b);
    const bool last = b + n == n_tokens;
    ubatch(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(n)), want_logits && last);
  }
  return Status::Ok();
}

void CpuSession::ubatch(std::span<const int32_t> tokens, bool want_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = c_.n_embd;
  x_.resize(static_cast<size_t>(n * n_embd));  // [n][n_embd]
  for (int64_t t = 0; t < n; ++t) {
    const auto id = static_cast<size_t>(tokens[static_cast<size_t>(t)]);
    dequantize_row(m_.token_embd->type, m_.token_embd->data + id * m_.token_embd->row_bytes(),
                   &x_[static_cast<size_t>(t * n_embd)], n_embd);
  }
  rope_cs_.resize(static_cast<size_t>(n * c_.n_rot));  // one cos/sin table per position
  for (int64_t t = 0; t < n; ++t) {
    rope_cos_sin(inv_freq_.data(), c_.n_rot, n_past_ + t, 1.0f,
                 &rope_cs_[static_cast<size_t>(t * c_.n_rot)]);
  }
  for (int64_t il = 0; il < c_.n_layer; ++il) layer(il, n);
  n_past_ += n;

  if (want_logits) {  // prefill is a flag: logits only for the last token
    std::vector<float> last(static_cast<size_t>(n_embd));
    rms_norm(&x_[static_cast<size_t>((n - 1) * n_embd)], output_norm_.data(),
             static_cast<float>(c_.rms_eps), n_embd, last.data());
    logits_.resize(static_cast<size_t>(c_.n_vocab));
    mul(*m_.output, last.data(), 1, logits_.data());
  }
}

void CpuSession::layer(int64_t il, int64_t n) {
  const LayerWeights& w = m_.layers[static_cast<size_t>(il)];
  const LayerVectors& lv = lv_[static_cast<size_t>(il)];
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim, hdv = c_.head_dim_v;
  const int64_t q_dim = c_.n_head * hd, k_dim = c_.n_head_kv * hd, v_dim = c_.n_head_kv * hdv;
  const int64_t n_rep = c_.n_head / c_.n_head_kv;
  const auto eps = static_cast<float>(c_.rms_eps);
  const auto sz = [](int64_t a) { return static_cast<size_t>(a); };

  // Attention block.
  h_.resize(sz(n * n_embd));
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&x_[sz(t * n_embd)], lv.attn_norm.data(), eps, n_embd, &h_[sz(t * n_embd)]);
  q_.resize(sz(n * q_dim));
  k_cur_.resize(sz(n * k_dim));
  v_cur_.resize(sz(n * v_dim));
  mul(*w.attn_q, h_.data(), n, q_.data());  // [n][q_dim]
  mul(*w.attn_k, h_.data(), n, k_cur_.data());
  mul(*w.attn_v, h_.data(), n, v_cur_.data());
  for (int64_t t = 0; t < n; ++t) {
    float* q = &q_[sz(t * q_dim)];
    float* k = &k_cur_[sz(t * k_dim)];
    float* v = &v_cur_[sz(t * v_dim)];
    if (!lv.bq.empty()) {
      for (int64_t i = 0; i < q_dim; ++i) q[i] += lv.bq[sz(i)];
      for (int64_t i = 0; i < k_dim; ++i) k[i] += lv.bk[sz(i)];
      for (int64_t i = 0; i < v_dim; ++i) v[i] += lv.bv[sz(i)];
    }
    if (!lv.q_norm.empty()) {  // qwen3: RMSNorm per head before RoPE
      for (int64_t hh = 0; hh < c_.n_head; ++hh)
        rms_norm(q + hh * hd, lv.q_norm.data(), eps, hd, q + hh * hd);
      for (int64_t hh = 0; hh < c_.n_head_kv; ++hh)
        rms_norm(k + hh * hd, lv.k_norm.data(), eps, hd, k + hh * hd);
    }
    const float* cs = &rope_cs_[sz(t * c_.n_rot)];
    rope(q, c_.n_head, hd, c_.n_rot, cs, c_.rope_type);
    rope(k, c_.n_head_kv, hd, c_.n_rot, cs, c_.rope_type);
    // Append K and V at position n_past + t.
    const int64_t pos = n_past_ + t;
    store_kv_row(kv_k_, k, k_[sz(il)].data() + kv_offset(kv_k_, pos * k_dim), k_dim);
    store_kv_row(kv_v_, v, v_[sz(il)].data() + kv_offset(kv_v_, pos * v_dim), v_dim);
  }

  // Causal attention: each (token, KV head) pair attends positions [0, n_past + t] for its GQA
  // group of n_rep query heads (kv_head = head / n_rep).
  attn_.resize(sz(n * c_.n_head * hdv));
  const AttnShape shape{n_rep, hd, hdv,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
  pool_.parallel_for(n * c_.n_head_kv, [&](int64_t b, int64_t e) {
    std::vector<AttnPartial> partials(sz(n_rep));
    for (int64_t job = b; job < e; ++job) {
      const int64_t t = job / c_.n_head_kv, g = job % c_.n_head_kv;
      const KvSpan k{k_[sz(il)].data() + kv_offset(kv_k_, g * hd), kv_k_, k_dim};
      const KvSpan v{v_[sz(il)].data() + kv_offset(kv_v_, g * hdv), kv_v_, v_dim};
      attn_partial(shape, &q_[sz(t * q_dim + g * n_rep * hd)], k, v, n_past_ + t + 1,
                   partials.data());
      for (int64_t r = 0; r < n_rep; ++r) {
        attn_finalize(partials[sz(r)], &attn_[sz(t * c_.n_head * hdv + (g * n_rep + r) * hdv)]);
      }
    }
  });
  tmp_.resize(sz(n * n_embd));
  mul(*w.attn_output, attn_.data(), n, tmp_.data());
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];

  // Feed-forward block (SwiGLU).
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&x_[sz(t * n_embd)], lv.ffn_norm.data(), eps, n_embd, &h_[sz(t * n_embd)]);
  gate_.resize(sz(n * c_.n_ff));
  up_.resize(sz(n * c_.n_ff));
  mul(*w.ffn_gate, h_.data(), n, gate_.data());
  mul(*w.ffn_up, h_.data(), n, up_.data());
  swiglu(gate_.data(), up_.data(), gate_.data(), n * c_.n_ff);
  mul(*w.ffn_down, gate_.data(), n, tmp_.data());
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];
}

}  // namespace spw::cpu
