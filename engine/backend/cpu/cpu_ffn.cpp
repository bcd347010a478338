// The CPU session's feed-forward blocks (formulas in engine/backend/reference/reference_session.h):
// the gated dense FFN (SwiGLU, GeGLU, phi3's fused gate+up) and the mixture of experts.
//
// MoE, as llama.cpp's build_moe_ffn: router logits h Wrouter, softmax over the experts (f32),
// the n_expert_used most probable (the lower expert first on ties), their probabilities as
// weights (renormalised / scaled as the model says). Decode (one token) runs only the chosen
// experts' matrices; prefill groups the ubatch's tokens by expert, so each chosen expert's
// three matrices are read once per ubatch with all of its tokens. Either way each (token,
// choice)'s expert output lands in its own slot and a token's slots are summed in choice
// order: matvec(x) and a row of matmul(X) are bit-identical (quant_dot.h), so a token's result
// does not depend on the ubatch it came in.
#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/quant_dot.h"

namespace spw::cpu {

namespace {
size_t sz(int64_t a) { return static_cast<size_t>(a); }
}  // namespace

void CpuSession::gated(const float* g, const float* u, float* out, int64_t n) const {
  if (c_.ffn_act == FfnActivation::GeluTanh) {
    geglu(g, u, out, n);
  } else {
    swiglu(g, u, out, n);
  }
}

void CpuSession::ffn(int64_t il, int64_t n) {
  const LayerWeights& w = m_.layers[sz(il)];
  if (w.ffn_gate_inp != nullptr) {
    moe(il, n);
    return;
  }
  // The gate and up products run kFfnChunkTokens tokens at a time (a ubatch split evenly, never a
  // 1-token chunk of a prefill): their scratch is [chunk][n_ff] each, not [ubatch][n_ff] (11 MiB
  // at n_ff 2816 and 512 tokens, 2.8 MiB now). Products do not depend on how tokens are split
  // (gemm.h, quant_dot.h), so neither does the layer.
  const int64_t n_ff = c_.n_ff, n_embd = c_.n_embd;
  const int64_t n_chunks = (n + kFfnChunkTokens - 1) / kFfnChunkTokens;
  const int64_t chunk = (n + n_chunks - 1) / n_chunks;
  tmp_.resize(sz(n * n_embd));
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t nc = std::min(chunk, n - t0);
    const float* h = &h_[sz(t0 * n_embd)];
    gate_.resize(sz(nc * n_ff));
    if (w.ffn_gate == nullptr) {  // phi3: ffn_up holds the gate rows, then the up rows
      up_.resize(sz(nc * 2 * n_ff));
      mul(*w.ffn_up, h, nc, up_.data());  // [nc][2 n_ff]
      for (int64_t t = 0; t < nc; ++t) {
        const float* gu = &up_[sz(t * 2 * n_ff)];
        gated(gu, gu + n_ff, &gate_[sz(t * n_ff)], n_ff);
      }
    } else {
      up_.resize(sz(nc * n_ff));
      mul(*w.ffn_gate, h, nc, gate_.data());                          // [nc][n_ff]
      mul(*w.ffn_up, h, nc, up_.data(), cpu::GemmInput::SameAsLast);  // [nc][n_ff]
      gated(gate_.data(), up_.data(), gate_.data(), nc * n_ff);
    }
    mul(*w.ffn_down, gate_.data(), nc, &tmp_[sz(t0 * n_embd)]);
  }
}

Status CpuSession::force_routes(const std::vector<RouteChoice>* routes) {
  std::map<std::pair<int64_t, int64_t>, const RouteChoice*> forced;
  if (routes != nullptr) {
    for (const RouteChoice& r : *routes) {
      if (static_cast<int64_t>(r.experts.size()) != c_.n_expert_used ||
          (!r.weights.empty() && r.weights.size() != r.experts.size()))
        return make_error(
            "a forced route of layer {} position {} has {} experts and {} weights, "
            "not {} (weights may be left empty)",
            r.layer, r.pos, r.experts.size(), r.weights.size(), c_.n_expert_used);
      for (int32_t e : r.experts) {
        if (e < 0 || e >= c_.n_expert)
          return make_error("a forced route of layer {} position {} names expert {} of {}", r.layer,
                            r.pos, e, c_.n_expert);
      }
      forced[{r.layer, r.pos}] = &r;
    }
  }
  forced_ = std::move(forced);
  return Status::Ok();
}

// router_ holds the ubatch's router probabilities and chosen_ / chosen_w_ the top-k: logs this
// session's choices, then puts the forced ones in their place (weights from the same
// probabilities, as route_experts makes them).
void CpuSession::route_hooks(int64_t il, int64_t n) {
  const int64_t n_exp = c_.n_expert, k = c_.n_expert_used;
  for (int64_t t = 0; t < n; ++t) {
    const float* p = &router_[sz(t * n_exp)];
    int32_t* chosen = &chosen_[sz(t * k)];
    if (route_log_ != nullptr) {
      // The margin in logits: the softmax keeps differences of logs.
      double best_out = -INFINITY;
      for (int64_t e = 0; e < n_exp; ++e) {
        if (std::find(chosen, chosen + k, e) == chosen + k)
          best_out = std::max(best_out, std::log(static_cast<double>(p[e])));
      }
      std::vector<double> weights(&chosen_w_[sz(t * k)], &chosen_w_[sz(t * k + k)]);
      route_log_->push_back({il, base_ + t, std::vector<int32_t>(chosen, chosen + k),
                             std::move(weights),
                             std::log(static_cast<double>(p[chosen[k - 1]])) - best_out});
    }
    const auto it = forced_.find({il, base_ + t});
    if (it == forced_.end()) continue;
    const RouteChoice& f = *it->second;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      chosen[j] = f.experts[sz(j)];
      sum += p[chosen[j]];
    }
    for (int64_t j = 0; j < k; ++j) {
      float w = p[chosen[j]];
      if (c_.expert_weights_norm) w /= sum;
      if (c_.expert_weights_scale != 0.0) w *= static_cast<float>(c_.expert_weights_scale);
      chosen_w_[sz(t * k + j)] = f.weights.empty() ? w : static_cast<float>(f.weights[sz(j)]);
    }
  }
}

void CpuSession::moe(int64_t il, int64_t n) {
  const LayerWeights& w = m_.layers[sz(il)];
  const int64_t n_embd = c_.n_embd, n_exp = c_.n_expert, k = c_.n_expert_used;
  const int64_t n_ff = c_.n_ff_exp;

  // Routing.
  router_.resize(sz(n * n_exp));
  mul(*w.ffn_gate_inp, h_.data(), n, router_.data());  // [n][n_expert] logits
  chosen_.resize(sz(n * k));
  chosen_w_.resize(sz(n * k));
  route_experts(router_.data(), n, n_exp, k, c_.expert_weights_norm,
                static_cast<float>(c_.expert_weights_scale), chosen_.data(), chosen_w_.data());
  if (route_log_ != nullptr || !forced_.empty()) route_hooks(il, n);

  // The chosen experts, into slot_ [n][k][n_embd].
  slot_.resize(sz(n * k * n_embd));
  if (n == 1) {  // decode: only the chosen experts' matrices are read
    gate_.resize(sz(n_ff));
    up_.resize(sz(n_ff));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = chosen_[sz(j)];
      mul_expert(*w.ffn_gate_exps, e, h_.data(), 1, gate_.data());
      mul_expert(*w.ffn_up_exps, e, h_.data(), 1, up_.data());
      swiglu(gate_.data(), up_.data(), gate_.data(), n_ff);
      mul_expert(*w.ffn_down_exps, e, gate_.data(), 1, &slot_[sz(j * n_embd)]);
    }
  } else {  // prefill: the ubatch's tokens grouped by expert
    std::vector<std::vector<int64_t>> picks(sz(n_exp));  // (t * k + j) per expert
    for (int64_t i = 0; i < n * k; ++i) picks[sz(chosen_[sz(i)])].push_back(i);
    for (int64_t e = 0; e < n_exp; ++e) {
      const std::vector<int64_t>& list = picks[sz(e)];
      if (list.empty()) continue;
      const auto m = static_cast<int64_t>(list.size());
      xe_.resize(sz(m * n_embd));
      for (int64_t i = 0; i < m; ++i) {
        const float* src = &h_[sz(list[sz(i)] / k * n_embd)];
        std::copy(src, src + n_embd, &xe_[sz(i * n_embd)]);
      }
      gate_.resize(sz(m * n_ff));
      up_.resize(sz(m * n_ff));
      mul_expert(*w.ffn_gate_exps, e, xe_.data(), m, gate_.data());
      mul_expert(*w.ffn_up_exps, e, xe_.data(), m, up_.data());
      swiglu(gate_.data(), up_.data(), gate_.data(), m * n_ff);
      ye_.resize(sz(m * n_embd));
      mul_expert(*w.ffn_down_exps, e, gate_.data(), m, ye_.data());
      for (int64_t i = 0; i < m; ++i) {
        std::copy(&ye_[sz(i * n_embd)], &ye_[sz((i + 1) * n_embd)],
                  &slot_[sz(list[sz(i)] * n_embd)]);
      }
    }
  }
  tmp_.assign(sz(n * n_embd), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float* out = &tmp_[sz(t * n_embd)];
    for (int64_t j = 0; j < k; ++j) {
      const float wj = chosen_w_[sz(t * k + j)];
      const float* s = &slot_[sz((t * k + j) * n_embd)];
      for (int64_t i = 0; i < n_embd; ++i) out[i] += wj * s[i];
    }
  }

  if (w.ffn_gate_inp_shexp != nullptr) {  // qwen2moe: the shared expert, gated per token
    const LayerVectors& lv = lv_[sz(il)];
    const int64_t n_sh = c_.n_ff_shexp;
    gate_.resize(sz(n * n_sh));
    up_.resize(sz(n * n_sh));
    mul(*w.ffn_gate_shexp, h_.data(), n, gate_.data());
    mul(*w.ffn_up_shexp, h_.data(), n, up_.data(), cpu::GemmInput::SameAsLast);
    swiglu(gate_.data(), up_.data(), gate_.data(), n * n_sh);
    ye_.resize(sz(n * n_embd));
    mul(*w.ffn_down_shexp, gate_.data(), n, ye_.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* h = &h_[sz(t * n_embd)];
      float s = 0.0f;
      for (int64_t i = 0; i < n_embd; ++i) s += lv.shexp_gate[sz(i)] * h[i];
      const float g = 1.0f / (1.0f + std::exp(-s));
      float* out = &tmp_[sz(t * n_embd)];
      const float* y = &ye_[sz(t * n_embd)];
      for (int64_t i = 0; i < n_embd; ++i) out[i] += g * y[i];
    }
  }
}

}  // namespace spw::cpu
