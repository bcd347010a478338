// The reference session's feed-forward blocks (formulas in reference_session.h): the gated
// dense FFN (SwiGLU, GeGLU, phi3's fused gate+up) and the mixture of experts (llama.cpp's
// build_moe_ffn: softmax router, top-k, optional renormalisation and scale; qwen2moe's shared
// expert).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/backend/reference/reference_math.h"
#include "engine/backend/reference/reference_session.h"

namespace spw {

void ReferenceSession::ffn(const LayerWeights& w, const std::vector<double>& h, int64_t n_tokens,
                           std::vector<double>& f) const {
  if (w.ffn_gate_inp != nullptr) {
    moe(w, h, n_tokens, f);
    return;
  }
  const int64_t n_ff = c_.n_ff;
  std::vector<double> gate, up;  // [n_tokens][n_ff] each
  if (w.ffn_gate == nullptr) {   // phi3: ffn_up holds the gate rows, then the up rows
    std::vector<double> both;    // [n_tokens][2 n_ff]
    matmul(*w.ffn_up, h, n_tokens, both);
    gate.resize(static_cast<size_t>(n_tokens * n_ff));
    up.resize(static_cast<size_t>(n_tokens * n_ff));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const double* r = &both[static_cast<size_t>(t * 2 * n_ff)];
      std::copy(r, r + n_ff, &gate[static_cast<size_t>(t * n_ff)]);
      std::copy(r + n_ff, r + 2 * n_ff, &up[static_cast<size_t>(t * n_ff)]);
    }
  } else {
    matmul(*w.ffn_gate, h, n_tokens, gate);
    matmul(*w.ffn_up, h, n_tokens, up);
  }
  const bool gelu = c_.ffn_act == FfnActivation::GeluTanh;
  for (size_t i = 0; i < gate.size(); ++i)
    gate[i] = (gelu ? ref::gelu_tanh(gate[i]) : ref::silu(gate[i])) * up[i];
  matmul(*w.ffn_down, gate, n_tokens, f);
}

void ReferenceSession::moe(const LayerWeights& w, const std::vector<double>& h, int64_t n_tokens,
                           std::vector<double>& f) const {
  const int64_t n_embd = c_.n_embd, n_exp = c_.n_expert, k = c_.n_expert_used;
  std::vector<double> logits;  // [n_tokens][n_expert]
  matmul(*w.ffn_gate_inp, h, n_tokens, logits);

  // Routing: softmax over the experts, the k most probable (the lower expert first on ties).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> tokens_of(static_cast<size_t>(n_exp));
  std::vector<double> weight(static_cast<size_t>(n_tokens * k));  // [n_tokens][k]
  std::vector<int64_t> order(static_cast<size_t>(n_exp));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double* lg = &logits[static_cast<size_t>(t * n_exp)];
    const double mx = *std::max_element(lg, lg + n_exp);
    std::vector<double> p(static_cast<size_t>(n_exp));
    double sum = 0.0;
    for (int64_t e = 0; e < n_exp; ++e) sum += p[static_cast<size_t>(e)] = std::exp(lg[e] - mx);
    for (double& v : p) v /= sum;
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
    });
    const double gap =
        k < n_exp ? lg[order[static_cast<size_t>(k - 1)]] - lg[order[static_cast<size_t>(k)]]
                  : INFINITY;
    if (t == n_tokens - 1) route_margin_ = std::min(route_margin_, gap);
    RouteChoice* logged = nullptr;
    if (route_log_ != nullptr) {
      route_log_->push_back(
          {layer_, n_past_ + t, std::vector<int32_t>(order.begin(), order.begin() + k), {}, gap});
      logged = &route_log_->back();
    }
    double wsum = 0.0;
    for (int64_t j = 0; j < k; ++j) wsum += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[static_cast<size_t>(j)];
      double wj = p[static_cast<size_t>(e)];
      if (c_.expert_weights_norm) wj /= wsum;
      if (c_.expert_weights_scale != 0.0) wj *= c_.expert_weights_scale;
      weight[static_cast<size_t>(t * k + j)] = wj;
      if (logged != nullptr) logged->weights.push_back(wj);
      tokens_of[static_cast<size_t>(e)].emplace_back(t, j);
    }
  }

  // Each expert over its tokens: y = (silu(x Wgate_e) * (x Wup_e)) Wdown_e.
  std::vector<double> slot(static_cast<size_t>(n_tokens * k * n_embd), 0.0);  // [t][j][n_embd]
  std::vector<double> x, gate, up, y;
  for (int64_t e = 0; e < n_exp; ++e) {
    const auto& list = tokens_of[static_cast<size_t>(e)];
    if (list.empty()) continue;
    const auto m = static_cast<int64_t>(list.size());
    x.resize(static_cast<size_t>(m * n_embd));
    for (int64_t i = 0; i < m; ++i) {
      const double* src = &h[static_cast<size_t>(list[static_cast<size_t>(i)].first * n_embd)];
      std::copy(src, src + n_embd, &x[static_cast<size_t>(i * n_embd)]);
    }
    matmul(expert_of(*w.ffn_gate_exps, e), x, m, gate);
    matmul(expert_of(*w.ffn_up_exps, e), x, m, up);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = ref::silu(gate[i]) * up[i];
    matmul(expert_of(*w.ffn_down_exps, e), gate, m, y);
    for (int64_t i = 0; i < m; ++i) {
      const auto [t, j] = list[static_cast<size_t>(i)];
      std::copy(&y[static_cast<size_t>(i * n_embd)], &y[static_cast<size_t>((i + 1) * n_embd)],
                &slot[static_cast<size_t>((t * k + j) * n_embd)]);
    }
  }
  f.assign(static_cast<size_t>(n_tokens * n_embd), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const double wj = weight[static_cast<size_t>(t * k + j)];
      const double* s = &slot[static_cast<size_t>((t * k + j) * n_embd)];
      for (int64_t i = 0; i < n_embd; ++i) f[static_cast<size_t>(t * n_embd + i)] += wj * s[i];
    }
  }

  if (w.ffn_gate_inp_shexp != nullptr) {  // qwen2moe: the shared expert, gated per token
    const std::vector<double> g = ref::load_vector(*w.ffn_gate_inp_shexp);
    matmul(*w.ffn_gate_shexp, h, n_tokens, gate);
    matmul(*w.ffn_up_shexp, h, n_tokens, up);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = ref::silu(gate[i]) * up[i];
    matmul(*w.ffn_down_shexp, gate, n_tokens, y);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0.0;
      for (int64_t i = 0; i < n_embd; ++i)
        s += g[static_cast<size_t>(i)] * h[static_cast<size_t>(t * n_embd + i)];
      const double gate_t = 1.0 / (1.0 + std::exp(-s));
      for (int64_t i = 0; i < n_embd; ++i)
        f[static_cast<size_t>(t * n_embd + i)] += gate_t * y[static_cast<size_t>(t * n_embd + i)];
    }
  }
}

}  // namespace spw
