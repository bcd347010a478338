// Element-wise adds and scales: the residual connection, qwen2's Q/K/V biases, gemma3's
// embedding scale.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// y may alias a or b: each element is read and written by one thread.
__global__ void __launch_bounds__(kThreads)
    add_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    y[i] = a[i] + b[i];
  }
}

// x [n_rows][n] += bias [n], over the flattened index.
__global__ void __launch_bounds__(kThreads)
    add_bias_kernel(float* __restrict__ x, const float* __restrict__ bias, int64_t n,
                    int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    x[i] += bias[i % n];
  }
}

// x[i] *= a.
__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, float a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    x[i] *= a;
  }
}

}  // namespace

cudaError_t launch_scale(float* x, float a, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x) return cudaErrorInvalidValue;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, a, n);
  return cudaGetLastError();
}

cudaError_t launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!a || !b || !y) return cudaErrorInvalidValue;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, y, n);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* x, const float* bias, int64_t n, int64_t n_rows,
                            cudaStream_t stream) {
  if (n < 0 || n_rows < 0) return cudaErrorInvalidValue;
  if (n == 0 || n_rows == 0) return cudaSuccess;
  if (!x || !bias) return cudaErrorInvalidValue;
  add_bias_kernel<<<blocks_for(n * n_rows), kThreads, 0, stream>>>(x, bias, n, n * n_rows);
  return cudaGetLastError();
}

}  // namespace spw::kernels
