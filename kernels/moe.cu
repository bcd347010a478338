// The mixture of experts' data movement on the GPU (the CUDA session's MoE FFN,
// engine/backend/cuda/cuda_moe.cpp): one expert's tokens gathered into a contiguous block, the
// expert's outputs scattered to their (token, choice) slots, the slots summed with the router's
// weights in choice order (as the CPU session), and qwen2moe's sigmoid-gated shared expert.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;

// One CTA per output row: dst[i] = src[rows[i]] (gather) or dst[rows[i]] = src[i] (scatter).
__global__ void __launch_bounds__(kThreads)
    copy_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows, int64_t dim,
                     float* __restrict__ dst, bool scatter) {
  const int64_t i = blockIdx.x;
  const int64_t r = rows[i];
  const float* s = src + (scatter ? i : r) * dim;
  float* d = dst + (scatter ? r : i) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) d[c] = s[c];
}

// One CTA per token: out[t] = sum_j w[t][j] * slot[t][j], j in order.
__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(const float* __restrict__ slot, const float* __restrict__ w, int64_t k,
                       int64_t dim, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) acc += w[t * k + j] * slot[(t * k + j) * dim + c];
    out[t * dim + c] = acc;
  }
}

// One CTA per token: out[t] += sigmoid(h[t] . g) * y[t].
__global__ void __launch_bounds__(kThreads)
    shared_gate_add_kernel(const float* __restrict__ h, const float* __restrict__ g,
                           const float* __restrict__ y, int64_t dim, float* __restrict__ out) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t t = blockIdx.x;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) s += h[t * dim + c] * g[c];
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  const float gate = 1.0f / (1.0f + expf(-total));
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) out[t * dim + c] += gate * y[t * dim + c];
}

}  // namespace

cudaError_t launch_gather_rows(const float* src, const int32_t* rows, int64_t n_rows, int64_t dim,
                               float* dst, cudaStream_t stream) {
  if (n_rows < 0 || n_rows > INT32_MAX || dim < 0) return cudaErrorInvalidValue;
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (!src || !rows || !dst) return cudaErrorInvalidValue;
  copy_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(src, rows, dim, dst,
                                                                           false);
  return cudaGetLastError();
}

cudaError_t launch_scatter_rows(const float* src, const int32_t* rows, int64_t n_rows, int64_t dim,
                                float* dst, cudaStream_t stream) {
  if (n_rows < 0 || n_rows > INT32_MAX || dim < 0) return cudaErrorInvalidValue;
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (!src || !rows || !dst) return cudaErrorInvalidValue;
  copy_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(src, rows, dim, dst,
                                                                           true);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(const float* slot, const float* weights, int64_t n_tok, int64_t k,
                               int64_t dim, float* out, cudaStream_t stream) {
  if (n_tok < 0 || n_tok > INT32_MAX || k < 1 || dim < 0) return cudaErrorInvalidValue;
  if (n_tok == 0 || dim == 0) return cudaSuccess;
  if (!slot || !weights || !out) return cudaErrorInvalidValue;
  moe_combine_kernel<<<static_cast<unsigned>(n_tok), kThreads, 0, stream>>>(slot, weights, k, dim,
                                                                            out);
  return cudaGetLastError();
}

cudaError_t launch_shared_gate_add(const float* h, const float* gate_w, const float* y,
                                   int64_t n_tok, int64_t dim, float* out, cudaStream_t stream) {
  if (n_tok < 0 || n_tok > INT32_MAX || dim < 0) return cudaErrorInvalidValue;
  if (n_tok == 0 || dim == 0) return cudaSuccess;
  if (!h || !gate_w || !y || !out) return cudaErrorInvalidValue;
  shared_gate_add_kernel<<<static_cast<unsigned>(n_tok), kThreads, 0, stream>>>(h, gate_w, y, dim,
                                                                                out);
  return cudaGetLastError();
}

}  // namespace spw::kernels
