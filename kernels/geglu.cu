// GeGLU's gating (Shazeer 2020, "GLU Variants Improve Transformer"; Gemma's FFN):
// y = gelu_tanh(g) * u, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;           // grid-stride beyond this
constexpr float kGeluC1 = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kGeluC2 = 1.5957691216057308f * 0.044715f;

// y may alias g or u: each element is read and written by one thread. The CPU's form
// (engine/cpu ops: x / (1 + exp(-2 z)), the same value as 0.5 x (1 + tanh z)), with expf
// within 2 ulp of std::exp.
__global__ void __launch_bounds__(kThreads)
    geglu_kernel(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float x = g[i];
    const float t = x * (kGeluC1 + kGeluC2 * (x * x));
    y[i] = x / (1.0f + expf(-t)) * u[i];
  }
}

}  // namespace

cudaError_t launch_geglu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!g || !u || !y) return cudaErrorInvalidValue;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  geglu_kernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreads, 0,
                 stream>>>(g, u, y, n);
  return cudaGetLastError();
}

}  // namespace spw::kernels
