// Rotary position embedding in place: one thread per rotated pair (token, head, i).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;

// x [n_tok][n_heads][head_dim], cs [n_tok][n_rot] (cos at i, sin at half + i, i < half).
// Pair i of a head: neox ? (i, i + half) : (2i, 2i + 1).
__global__ void __launch_bounds__(kThreads)
    rope_kernel(float* __restrict__ x, const float* __restrict__ cs, int64_t n_heads,
                int64_t head_dim, int64_t half, bool neox, int64_t n_pairs) {
  for (int64_t p = blockIdx.x * int64_t{kThreads} + threadIdx.x; p < n_pairs;
       p += int64_t{gridDim.x} * kThreads) {
    const int64_t i = p % half;
    const int64_t th = p / half;  // token * n_heads + head
    const int64_t t = th / n_heads;
    const float c = cs[t * 2 * half + i], s = cs[t * 2 * half + half + i];
    float* v = x + th * head_dim;
    const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x1 * c + x0 * s;
  }
}

}  // namespace

cudaError_t launch_rope(float* x, const float* cs, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                        int64_t n_rot, bool neox, cudaStream_t stream) {
  if (n_tok < 0 || n_heads < 0 || head_dim < 0 || n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    return cudaErrorInvalidValue;
  }
  const int64_t half = n_rot / 2;
  const int64_t n_pairs = n_tok * n_heads * half;
  if (n_pairs == 0) return cudaSuccess;
  if (!x || !cs) return cudaErrorInvalidValue;
  const int64_t blocks = (n_pairs + kThreads - 1) / kThreads;
  rope_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
      x, cs, n_heads, head_dim, half, neox, n_pairs);
  return cudaGetLastError();
}

}  // namespace spw::kernels
