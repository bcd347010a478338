#include "engine/backend/reference/reference_session.h"

#include <algorithm>
#include <cmath>

#include "engine/common/fp16.h"
#include "engine/common/parallel.h"

namespace spw {

namespace {

// Dequantizes a 1-D tensor (norm weights, biases, rope_freqs) to doubles.
std::vector<double> load_vector(const GgufTensorInfo& t) {
  std::vector<float> f(static_cast<size_t>(t.ne[0]));
  dequantize_row(t.type, t.data, f.data(), t.ne[0]);
  return {f.begin(), f.end()};
}

// out = x / sqrt(mean(x^2) + eps) * w, over n elements.
void rms_norm(const double* x, const std::vector<double>& w, double eps, int64_t n, double* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[static_cast<size_t>(i)];
}

}  // namespace

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
  const int64_t half = c_.n_rot / 2;
  std::vector<double> factors(static_cast<size_t>(half), 1.0);
  if (m_.rope_freqs) factors = load_vector(*m_.rope_freqs);
  inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq_[static_cast<size_t>(i)] =
        c_.rope_freq_scale *
        std::pow(c_.rope_freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(c_.n_rot)) /
        factors[static_cast<size_t>(i)];
  }
  const auto nl = static_cast<size_t>(c_.n_layer);
  k_f32_.resize(nl);
  v_f32_.resize(nl);
  k_f16_.resize(nl);
  v_f16_.resize(nl);
}

void ReferenceSession::matmul(const GgufTensorInfo& w, const std::vector<double>& x,
                              int64_t n_tokens, std::vector<double>& y) const {
  const int64_t n_in = w.ne[0], n_out = w.ne[1];
  const size_t rb = w.row_bytes();
  y.assign(static_cast<size_t>(n_tokens * n_out), 0.0);
  parallel_for(n_out, p_.n_threads, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(w.type, w.data + static_cast<size_t>(r) * rb, row.data(), n_in);
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

void ReferenceSession::rope(double* v, int64_t n_heads, int64_t pos) const {
  const int64_t half = c_.n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    double* x = v + h * c_.head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos) * inv_freq_[static_cast<size_t>(i)];
      const double cs = std::cos(theta), sn = std::sin(theta);
      // Normal pairs adjacent elements; NeoX pairs element i with i + n_rot/2.
      const int64_t a = c_.rope_type == RopeType::Normal ? 2 * i : i;
      const int64_t b = c_.rope_type == RopeType::Normal ? 2 * i + 1 : i + half;
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

void ReferenceSession::layer(int64_t il, std::vector<double>& x, int64_t n_tokens) {
  const LayerWeights& w = m_.layers[static_cast<size_t>(il)];
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim, hdv = c_.head_dim_v;
  const int64_t q_dim = c_.n_head * hd, k_dim = c_.n_head_kv * hd, v_dim = c_.n_head_kv * hdv;
  const int64_t n_rep = c_.n_head / c_.n_head_kv;

  // Attention block.
  std::vector<double> h(x.size());  // [n_tokens][n_embd]
  const std::vector<double> attn_norm = load_vector(*w.attn_norm);
  for (int64_t t = 0; t < n_tokens; ++t)
    rms_norm(&x[t * n_embd], attn_norm, c_.rms_eps, n_embd, &h[t * n_embd]);
  std::vector<double> q, k, v;  // [n_tokens][q_dim], [n_tokens][k_dim], [n_tokens][v_dim]
  matmul(*w.attn_q, h, n_tokens, q);
  matmul(*w.attn_k, h, n_tokens, k);
  matmul(*w.attn_v, h, n_tokens, v);
  if (c_.has_qkv_bias) {
    const auto bq = load_vector(*w.attn_q_bias), bk = load_vector(*w.attn_k_bias),
               bv = load_vector(*w.attn_v_bias);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < q_dim; ++i) q[t * q_dim + i] += bq[static_cast<size_t>(i)];
      for (int64_t i = 0; i < k_dim; ++i) k[t * k_dim + i] += bk[static_cast<size_t>(i)];
      for (int64_t i = 0; i < v_dim; ++i) v[t * v_dim + i] += bv[static_cast<size_t>(i)];
    }
  }
  if (c_.has_qk_norm) {
    const auto qn = load_vector(*w.attn_q_norm), kn = load_vector(*w.attn_k_norm);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t hh = 0; hh < c_.n_head; ++hh) {
        double* p = &q[t * q_dim + hh * hd];
        rms_norm(p, qn, c_.rms_eps, hd, p);
      }
      for (int64_t hh = 0; hh < c_.n_head_kv; ++hh) {
        double* p = &k[t * k_dim + hh * hd];
        rms_norm(p, kn, c_.rms_eps, hd, p);
      }
    }
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = n_past_ + t;
    rope(&q[t * q_dim], c_.n_head, pos);
    rope(&k[t * k_dim], c_.n_head_kv, pos);
    store_kv(il, pos, &k[t * k_dim], &v[t * v_dim]);
  }

  std::vector<double> attn(static_cast<size_t>(n_tokens * c_.n_head * hdv),
                           0.0);  // [n_tokens][n_head*hdv]
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> scores;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n_kv = n_past_ + t + 1;  // causal: positions [0, pos]
    scores.resize(static_cast<size_t>(n_kv));
    for (int64_t hh = 0; hh < c_.n_head; ++hh) {
      const int64_t kv_head = hh / n_rep;  // GQA
      const double* qh = &q[t * q_dim + hh * hd];
      double mx = -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j) {
        double s = 0.0;
        for (int64_t i = 0; i < hd; ++i) s += qh[i] * k_at(il, j, kv_head * hd + i);
        scores[static_cast<size_t>(j)] = s * scale;
        mx = std::max(mx, s * scale);
      }
      double sum = 0.0;
      for (auto& s : scores) {
        s = std::exp(s - mx);
        sum += s;
      }
      double* out = &attn[static_cast<size_t>(t * c_.n_head * hdv + hh * hdv)];
      for (int64_t j = 0; j < n_kv; ++j) {
        const double p = scores[static_cast<size_t>(j)] / sum;
        for (int64_t i = 0; i < hdv; ++i) out[i] += p * v_at(il, j, kv_head * hdv + i);
      }
    }
  }
  std::vector<double> o;  // [n_tokens][n_embd]
  matmul(*w.attn_output, attn, n_tokens, o);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  // Feed-forward block (SwiGLU).
  const std::vector<double> ffn_norm = load_vector(*w.ffn_norm);
  for (int64_t t = 0; t < n_tokens; ++t)
    rms_norm(&x[t * n_embd], ffn_norm, c_.rms_eps, n_embd, &h[t * n_embd]);
  std::vector<double> gate, up, down;  // [n_tokens][n_ff] x2, [n_tokens][n_embd]
  matmul(*w.ffn_gate, h, n_tokens, gate);
  matmul(*w.ffn_up, h, n_tokens, up);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  matmul(*w.ffn_down, gate, n_tokens, down);
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
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
    std::copy(row.begin(), row.end(), x.begin() + t * n_embd);
  }
  for (int64_t il = 0; il < c_.n_layer; ++il) layer(il, x, n_tokens);
  n_past_ += n_tokens;

  if (want_logits) {  // prefill is a flag: only the last token's logits are computed
    std::vector<double> last(static_cast<size_t>(n_embd)), logits;
    rms_norm(&x[(n_tokens - 1) * n_embd], load_vector(*m_.output_norm), c_.rms_eps, n_embd,
             last.data());
    matmul(*m_.output, last, 1, logits);
    logits_.assign(logits.begin(), logits.end());
  }
  return Status::Ok();
}

}  // namespace spw
