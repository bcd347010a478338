#include "engine/backend/reference/reference_session.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/backend/reference/reference_math.h"
#include "engine/common/fp16.h"
#include "engine/common/parallel.h"

namespace spw {

Expected<std::unique_ptr<ReferenceSession>> ReferenceSession::create(const Model& model,
                                                                     const SessionParams& params) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  const ModelConfig& c = model.config();
  if (auto st = check_kv_types(params, c.head_dim, c.head_dim_v); !st) return st.error();
  return std::unique_ptr<ReferenceSession>(new ReferenceSession(model, params));
}

ReferenceSession::ReferenceSession(const Model& model, const SessionParams& params)
    : m_(model), c_(model.config()), p_(params) {
  n_ctx_ = p_.n_ctx > 0 ? p_.n_ctx : c_.n_ctx_train;
  factors_.assign(static_cast<size_t>(c_.n_rot / 2), 1.0);
  if (const GgufTensorInfo* f = m_.rope_factors(n_ctx_)) factors_ = ref::load_vector(*f);
  const auto nl = static_cast<size_t>(c_.n_layer);
  k_f32_.resize(nl);
  v_f32_.resize(nl);
  k_f16_.resize(nl);
  v_f16_.resize(nl);
}

void ReferenceSession::matmul(const MatrixView& w, const std::vector<double>& x, int64_t n_tokens,
                              std::vector<double>& y) const {
  const int64_t n_in = w.n_in, n_out = w.n_out;
  y.assign(static_cast<size_t>(n_tokens * n_out), 0.0);
  parallel_for(n_out, p_.n_threads, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(w.type, w.data + static_cast<size_t>(r) * w.row_bytes, row.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const double* xt = x.data() + t * n_in;
        double acc = 0.0;
        for (int64_t i = 0; i < n_in; ++i)
          acc += static_cast<double>(row[static_cast<size_t>(i)]) * xt[i];
        y[static_cast<size_t>(t * n_out + r)] = acc;
      }
    }
  });
}

// ggml's rope_ext (ggml-cpu ops.cpp rope_yarn) in double, per pair i of the first n_rot dims.
void ReferenceSession::rope(double* v, int64_t n_heads, int64_t pos, const RopeParams& p) const {
  const int64_t n_rot = c_.n_rot, half = n_rot / 2;
  // YaRN's correction range (ggml_rope_yarn_corr_dims) and llama.cpp's magnitude: with
  // extrapolation on, the context sets attn_factor * get_mscale(factor) / (1 + 0.1 ln factor)
  // and ggml multiplies it by 1 + 0.1 ln(1 / freq_scale) again.
  const auto corr_dim = [&](double beta) {
    return static_cast<double>(n_rot) *
           std::log(static_cast<double>(p.n_ctx_orig) / (beta * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(p.freq_base));
  };
  const double low = std::max(0.0, std::floor(corr_dim(p.beta_fast)));
  const double high = std::min(static_cast<double>(n_rot - 1), std::ceil(corr_dim(p.beta_slow)));
  double mscale = p.yarn_attn_factor * p.attn_factor;
  if (p.ext_factor != 0.0) {
    const double factor = 1.0 / p.freq_scale;
    const double get_mscale = factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
    mscale = get_mscale / (1.0 + 0.1 * std::log(factor)) * p.attn_factor;
    mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  }
  for (int64_t i = 0; i < half; ++i) {
    const double theta_extrap =
        static_cast<double>(pos) *
        std::pow(p.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) /
        factors_[static_cast<size_t>(i)];
    const double theta_interp = p.freq_scale * theta_extrap;
    double theta = theta_interp;
    if (p.ext_factor != 0.0) {
      const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
      const double ramp_mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
      theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
    }
    const double cs = std::cos(theta) * mscale, sn = std::sin(theta) * mscale;
    // Normal pairs adjacent elements; NeoX pairs element i with i + n_rot/2.
    const int64_t a = c_.rope_type == RopeType::Normal ? 2 * i : i;
    const int64_t b = c_.rope_type == RopeType::Normal ? 2 * i + 1 : i + half;
    for (int64_t h = 0; h < n_heads; ++h) {
      double* x = v + h * c_.head_dim;
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * cs - x1 * sn;
      x[b] = x0 * sn + x1 * cs;
    }
  }
}

// One position's K or V row as the cache keeps it: f32 and q8_0 rows are held as floats (a
// q8_0 row is quantized with quantize_row and kept dequantized: the values the fast path
// reads, without a second decoder here), f16 rows as f16 bits.
void ReferenceSession::store_kv(int64_t il, int64_t pos, const double* k, const double* v) {
  const auto l = static_cast<size_t>(il);
  const auto store = [pos](KvType type, const double* x, int64_t n, std::vector<float>& f32,
                           std::vector<uint16_t>& f16) {
    const auto n0 = static_cast<size_t>(pos * n), nn = static_cast<size_t>(n);
    std::vector<float> row(x, x + n);
    if (type == KvType::F16) {
      f16.resize(n0 + nn);
      for (size_t i = 0; i < nn; ++i) f16[n0 + i] = fp32_to_fp16(row[i]);
      return;
    }
    if (type == KvType::Q8_0) {  // n % 32 == 0: checked at create()
      std::vector<uint8_t> q(row_size(GgmlType::Q8_0, n));
      quantize_row(GgmlType::Q8_0, row.data(), q.data(), n);
      dequantize_row(GgmlType::Q8_0, q.data(), row.data(), n);
    }
    f32.resize(n0 + nn);
    std::copy(row.begin(), row.end(), f32.begin() + static_cast<std::ptrdiff_t>(n0));
  };
  store(p_.kv_type_k, k, c_.n_head_kv * c_.head_dim, k_f32_[l], k_f16_[l]);
  store(p_.kv_type_v, v, c_.n_head_kv * c_.head_dim_v, v_f32_[l], v_f16_[l]);
}

double ReferenceSession::k_at(int64_t il, int64_t pos, int64_t i) const {
  const auto idx = static_cast<size_t>(pos * c_.n_head_kv * c_.head_dim + i);
  const auto l = static_cast<size_t>(il);
  return p_.kv_type_k == KvType::F16 ? fp16_to_fp32(k_f16_[l][idx]) : k_f32_[l][idx];
}

double ReferenceSession::v_at(int64_t il, int64_t pos, int64_t i) const {
  const auto idx = static_cast<size_t>(pos * c_.n_head_kv * c_.head_dim_v + i);
  const auto l = static_cast<size_t>(il);
  return p_.kv_type_v == KvType::F16 ? fp16_to_fp32(v_f16_[l][idx]) : v_f32_[l][idx];
}

void ReferenceSession::attend(int64_t il, const std::vector<double>& q, int64_t n_tokens,
                              std::vector<double>& out) const {
  const int64_t hd = c_.head_dim, hdv = c_.head_dim_v, n_head = c_.n_head;
  const int64_t q_dim = n_head * hd, k_dim = c_.n_head_kv * hd, v_dim = c_.n_head_kv * hdv;
  const int64_t n_rep = n_head / c_.n_head_kv;
  const int64_t span = c_.attn_span(il);
  const int64_t n_kv = n_past_ + n_tokens;
  // The layer's cache as doubles, read once: [n_kv][k_dim], [n_kv][v_dim].
  std::vector<double> K(static_cast<size_t>(n_kv * k_dim)), V(static_cast<size_t>(n_kv * v_dim));
  for (int64_t j = 0; j < n_kv; ++j) {
    for (int64_t i = 0; i < k_dim; ++i) K[static_cast<size_t>(j * k_dim + i)] = k_at(il, j, i);
    for (int64_t i = 0; i < v_dim; ++i) V[static_cast<size_t>(j * v_dim + i)] = v_at(il, j, i);
  }
  out.assign(static_cast<size_t>(n_tokens * n_head * hdv), 0.0);
  parallel_for(n_tokens * n_head, p_.n_threads, [&](int64_t b, int64_t e) {
    std::vector<double> scores;
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / n_head, hh = th % n_head;
      const int64_t pos = n_past_ + t;
      const int64_t lo = span > 0 ? std::max<int64_t>(0, pos - span + 1) : 0;  // sliding window
      const int64_t kv_head = hh / n_rep;                                      // GQA
      const double* qh = &q[static_cast<size_t>(t * q_dim + hh * hd)];
      scores.assign(static_cast<size_t>(pos + 1 - lo), 0.0);
      double mx = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {  // causal: positions [lo, pos]
        const double* kj = &K[static_cast<size_t>(j * k_dim + kv_head * hd)];
        double s = 0.0;
        for (int64_t i = 0; i < hd; ++i) s += qh[i] * kj[i];
        s *= c_.attn_scale;
        scores[static_cast<size_t>(j - lo)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0.0;
      for (auto& s : scores) {
        s = std::exp(s - mx);
        sum += s;
      }
      double* o = &out[static_cast<size_t>(t * n_head * hdv + hh * hdv)];
      for (int64_t j = lo; j <= pos; ++j) {
        const double pj = scores[static_cast<size_t>(j - lo)] / sum;
        const double* vj = &V[static_cast<size_t>(j * v_dim + kv_head * hdv)];
        for (int64_t i = 0; i < hdv; ++i) o[i] += pj * vj[i];
      }
    }
  });
}

void ReferenceSession::layer(int64_t il, std::vector<double>& x, int64_t n_tokens) {
  const LayerWeights& w = m_.layers[static_cast<size_t>(il)];
  layer_ = il;
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim, hdv = c_.head_dim_v;
  const int64_t q_dim = c_.n_head * hd, k_dim = c_.n_head_kv * hd, v_dim = c_.n_head_kv * hdv;

  // Attention block.
  std::vector<double> h(x.size());  // [n_tokens][n_embd]
  const std::vector<double> attn_norm = ref::load_vector(*w.attn_norm);
  for (int64_t t = 0; t < n_tokens; ++t)
    ref::rms_norm(&x[t * n_embd], attn_norm, c_.rms_eps, n_embd, &h[t * n_embd]);
  std::vector<double> q, k, v;  // [n_tokens][q_dim], [n_tokens][k_dim], [n_tokens][v_dim]
  if (w.attn_qkv != nullptr) {  // phi3: one product, rows Q | K | V
    std::vector<double> qkv;
    matmul(*w.attn_qkv, h, n_tokens, qkv);
    const int64_t n_qkv = q_dim + k_dim + v_dim;
    q.resize(static_cast<size_t>(n_tokens * q_dim));
    k.resize(static_cast<size_t>(n_tokens * k_dim));
    v.resize(static_cast<size_t>(n_tokens * v_dim));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const double* r = &qkv[static_cast<size_t>(t * n_qkv)];
      std::copy(r, r + q_dim, &q[static_cast<size_t>(t * q_dim)]);
      std::copy(r + q_dim, r + q_dim + k_dim, &k[static_cast<size_t>(t * k_dim)]);
      std::copy(r + q_dim + k_dim, r + n_qkv, &v[static_cast<size_t>(t * v_dim)]);
    }
  } else {
    matmul(*w.attn_q, h, n_tokens, q);
    matmul(*w.attn_k, h, n_tokens, k);
    matmul(*w.attn_v, h, n_tokens, v);
  }
  if (c_.has_qkv_bias) {
    const auto bq = ref::load_vector(*w.attn_q_bias), bk = ref::load_vector(*w.attn_k_bias),
               bv = ref::load_vector(*w.attn_v_bias);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < q_dim; ++i) q[t * q_dim + i] += bq[static_cast<size_t>(i)];
      for (int64_t i = 0; i < k_dim; ++i) k[t * k_dim + i] += bk[static_cast<size_t>(i)];
      for (int64_t i = 0; i < v_dim; ++i) v[t * v_dim + i] += bv[static_cast<size_t>(i)];
    }
  }
  if (c_.has_qk_norm) {
    const auto qn = ref::load_vector(*w.attn_q_norm), kn = ref::load_vector(*w.attn_k_norm);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t hh = 0; hh < c_.n_head; ++hh) {
        double* p = &q[t * q_dim + hh * hd];
        ref::rms_norm(p, qn, c_.rms_eps, hd, p);
      }
      for (int64_t hh = 0; hh < c_.n_head_kv; ++hh) {
        double* p = &k[t * k_dim + hh * hd];
        ref::rms_norm(p, kn, c_.rms_eps, hd, p);
      }
    }
  }
  const RopeParams& rp = c_.rope_of(il);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = n_past_ + t;
    rope(&q[t * q_dim], c_.n_head, pos, rp);
    rope(&k[t * k_dim], c_.n_head_kv, pos, rp);
    store_kv(il, pos, &k[t * k_dim], &v[t * v_dim]);
  }
  std::vector<double> attn;  // [n_tokens][n_head * hdv]
  attend(il, q, n_tokens, attn);
  std::vector<double> o;  // [n_tokens][n_embd]
  matmul(*w.attn_output, attn, n_tokens, o);
  if (w.attn_post_norm != nullptr) {  // gemma3
    const std::vector<double> pn = ref::load_vector(*w.attn_post_norm);
    for (int64_t t = 0; t < n_tokens; ++t)
      ref::rms_norm(&o[t * n_embd], pn, c_.rms_eps, n_embd, &o[t * n_embd]);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  // Feed-forward block.
  const std::vector<double> ffn_norm = ref::load_vector(*w.ffn_norm);
  for (int64_t t = 0; t < n_tokens; ++t)
    ref::rms_norm(&x[t * n_embd], ffn_norm, c_.rms_eps, n_embd, &h[t * n_embd]);
  std::vector<double> f;  // [n_tokens][n_embd]
  ffn(w, h, n_tokens, f);
  if (w.ffn_post_norm != nullptr) {  // gemma3
    const std::vector<double> pn = ref::load_vector(*w.ffn_post_norm);
    for (int64_t t = 0; t < n_tokens; ++t)
      ref::rms_norm(&f[t * n_embd], pn, c_.rms_eps, n_embd, &f[t * n_embd]);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
}

Status ReferenceSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  if (auto st = check_batch(tokens, c_.n_vocab, n_past_, n_ctx_); !st) return st;
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = c_.n_embd;
  std::vector<double> x(static_cast<size_t>(n_tokens * n_embd));  // [n_tokens][n_embd]
  std::vector<float> row(static_cast<size_t>(n_embd));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto id = static_cast<size_t>(tokens[static_cast<size_t>(t)]);
    dequantize_row(m_.token_embd->type, m_.token_embd->data + id * m_.token_embd->row_bytes(),
                   row.data(), n_embd);
    for (int64_t i = 0; i < n_embd; ++i)
      x[static_cast<size_t>(t * n_embd + i)] = row[static_cast<size_t>(i)] * c_.embd_scale;
  }
  route_margin_ = INFINITY;
  for (int64_t il = 0; il < c_.n_layer; ++il) layer(il, x, n_tokens);
  n_past_ += n_tokens;

  if (want_logits) {  // prefill is a flag: only the last token's logits are computed
    std::vector<double> last(static_cast<size_t>(n_embd)), logits;
    ref::rms_norm(&x[(n_tokens - 1) * n_embd], ref::load_vector(*m_.output_norm), c_.rms_eps,
                  n_embd, last.data());
    matmul(*m_.output, last, 1, logits);
    logits_.assign(logits.begin(), logits.end());
  }
  return Status::Ok();
}

}  // namespace spw
