// The CUDA session's feed-forward blocks (cuda_session.h; formulas in
// engine/backend/reference/reference_session.h): the gated dense FFN (SwiGLU, GeGLU, phi3's
// fused gate+up product) and the mixture of experts, routed on the host as the CPU session
// routes (cpu::route_experts) and run one chosen expert at a time over its gathered tokens.
#include <algorithm>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_session.h"
#include "engine/cpu/ops.h"
#include "kernels/launch.h"

namespace spw::cuda {

namespace k = ::spw::kernels;

Status CudaSession::split_cols(const float* src, int64_t ld, int64_t col0, int64_t cols, int64_t n,
                               float* dst) {
  const size_t f = sizeof(float);
  SPW_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(cols) * f, src + col0,
                                   static_cast<size_t>(ld) * f, static_cast<size_t>(cols) * f,
                                   static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                                   stream_.get()));
  return Status::Ok();
}

Status CudaSession::gated(const float* g, const float* u, float* y, int64_t n) {
  if (c_.ffn_act == FfnActivation::GeluTanh) {
    SPW_CUDA_CHECK(k::launch_geglu(g, u, y, n, stream_.get()));
  } else {
    SPW_CUDA_CHECK(k::launch_swiglu(g, u, y, n, stream_.get()));
  }
  return Status::Ok();
}

Status CudaSession::ffn(const DevLayer& L, int64_t n) {
  if (L.router.data != nullptr) return moe(L, n);
  const int64_t n_ff = c_.n_ff;
  if (L.gate.data == nullptr) {  // phi3: up_ = [n][gate | up], split into gate_'s two halves
    SPW_TRY(mul(L.up, h_, n, up_));
    float* up = gate_ + n * n_ff;  // gate_ holds n * 2 n_ff floats (ffn_width)
    SPW_TRY(split_cols(up_, 2 * n_ff, 0, n_ff, n, gate_));
    SPW_TRY(split_cols(up_, 2 * n_ff, n_ff, n_ff, n, up));
    SPW_TRY(gated(gate_, up, gate_, n * n_ff));
  } else {
    SPW_TRY(mul(L.gate, h_, n, gate_));  // [n][n_ff]
    SPW_TRY(mul(L.up, h_, n, up_));      // [n][n_ff]
    SPW_TRY(gated(gate_, up_, gate_, n * n_ff));
  }
  return mul(L.down, gate_, n, tmp_);
}

Status CudaSession::moe(const DevLayer& L, int64_t n) {
  cudaStream_t s = stream_.get();
  const int64_t n_embd = c_.n_embd, n_exp = c_.n_expert, kk = c_.n_expert_used;
  const int64_t n_ff = c_.n_ff_exp, nk = n * kk;

  // Router logits to the host; the stream's work so far (and the previous layer's copies of
  // moe_host_) is done once they are there.
  SPW_TRY(mul(L.router, h_, n, router_dev_));  // [n][n_expert]
  auto* logits = static_cast<float*>(router_host_.get());
  SPW_CUDA_CHECK(cudaMemcpyAsync(logits, router_dev_,
                                 static_cast<size_t>(n * n_exp) * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
  SPW_CUDA_CHECK(cudaStreamSynchronize(s));
  auto* rows = static_cast<int32_t*>(moe_host_.get());  // [nk] gather rows, then [nk] slot rows
  auto* weights = reinterpret_cast<float*>(rows + 2 * nk);
  std::vector<int32_t> chosen(static_cast<size_t>(nk));
  cpu::route_experts(logits, n, n_exp, kk, c_.expert_weights_norm,
                     static_cast<float>(c_.expert_weights_scale), chosen.data(), weights);
  // Per expert, its (token, choice) pairs: the token's row of h_ and the pair's slot row.
  std::vector<int64_t> first(static_cast<size_t>(n_exp + 1), 0);
  for (int64_t i = 0; i < nk; ++i) ++first[static_cast<size_t>(chosen[static_cast<size_t>(i)]) + 1];
  for (int64_t e = 0; e < n_exp; ++e)
    first[static_cast<size_t>(e + 1)] += first[static_cast<size_t>(e)];
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  for (int64_t i = 0; i < nk; ++i) {
    const int64_t at = fill[static_cast<size_t>(chosen[static_cast<size_t>(i)])]++;
    rows[at] = static_cast<int32_t>(i / kk);
    rows[nk + at] = static_cast<int32_t>(i);
  }
  SPW_CUDA_CHECK(cudaMemcpyAsync(moe_rows_, rows, static_cast<size_t>(2 * nk) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, s));
  SPW_CUDA_CHECK(cudaMemcpyAsync(moe_w_, weights, static_cast<size_t>(nk) * sizeof(float),
                                 cudaMemcpyHostToDevice, s));

  // Each chosen expert once, over its tokens.
  for (int64_t e = 0; e < n_exp; ++e) {
    const int64_t r0 = first[static_cast<size_t>(e)], m = first[static_cast<size_t>(e + 1)] - r0;
    if (m == 0) continue;
    SPW_CUDA_CHECK(k::launch_gather_rows(h_, moe_rows_ + r0, m, n_embd, xe_, s));
    SPW_TRY(mul(L.gate_exps.expert(e), xe_, m, gate_));  // [m][n_ff_exp]
    SPW_TRY(mul(L.up_exps.expert(e), xe_, m, up_));
    SPW_CUDA_CHECK(k::launch_swiglu(gate_, up_, gate_, m * n_ff, s));
    SPW_TRY(mul(L.down_exps.expert(e), gate_, m, ye_));  // [m][n_embd]
    SPW_CUDA_CHECK(k::launch_scatter_rows(ye_, moe_rows_ + nk + r0, m, n_embd, slot_, s));
  }
  SPW_CUDA_CHECK(k::launch_moe_combine(slot_, moe_w_, n, kk, n_embd, tmp_, s));

  if (L.shexp_gate != nullptr) {  // qwen2moe: the shared expert, gated per token
    const int64_t n_sh = c_.n_ff_shexp;
    SPW_TRY(mul(L.gate_sh, h_, n, gate_));
    SPW_TRY(mul(L.up_sh, h_, n, up_));
    SPW_CUDA_CHECK(k::launch_swiglu(gate_, up_, gate_, n * n_sh, s));
    SPW_TRY(mul(L.down_sh, gate_, n, ye_));
    SPW_CUDA_CHECK(k::launch_shared_gate_add(h_, L.shexp_gate, ye_, n, n_embd, tmp_, s));
  }
  return Status::Ok();
}

}  // namespace spw::cuda
