// SwiGLU's gating (Shazeer 2020, "GLU Variants Improve Transformer"): y = silu(g) * u.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// y may alias g or u: each element is read and written by one thread.
__global__ void __launch_bounds__(kThreads)
    swiglu_kernel(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float gi = g[i];
    // expf (not __expf): within 2 ulp of the CPU's std::exp. For g -> -inf, exp(-g) = inf and
    // g / inf = -0, as on the CPU.
    y[i] = gi / (1.0f + expf(-gi)) * u[i];
  }
}

}  // namespace

cudaError_t launch_swiglu(const float* g, const float* u, float* y, int64_t n,
                          cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!g || !u || !y) return cudaErrorInvalidValue;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  swiglu_kernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreads, 0,
                  stream>>>(g, u, y, n);
  return cudaGetLastError();
}

}  // namespace spw::kernels
