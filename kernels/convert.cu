// f32 -> binary16 conversion (launch.h: launch_f32_to_f16), round to nearest even with
// float_to_half_rne (quant_math.h), bit-identical to fp32_to_fp16 for every input.
// Memory-bound: float4 loads and 8-byte stores when both pointers allow.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/quant_math.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// vec: x 16-byte and y 8-byte aligned; four elements per step, the n % 4 tail one each.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    f32_to_f16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  const int64_t tid = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = tid; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      const uint32_t lo = float_to_half_rne(v.x) | (uint32_t{float_to_half_rne(v.y)} << 16);
      const uint32_t hi = float_to_half_rne(v.z) | (uint32_t{float_to_half_rne(v.w)} << 16);
      reinterpret_cast<uint2*>(y)[i] = make_uint2(lo, hi);
    }
    if (tid < n - 4 * n4) y[4 * n4 + tid] = float_to_half_rne(x[4 * n4 + tid]);
  } else {
    for (int64_t i = tid; i < n; i += stride) y[i] = float_to_half_rne(x[i]);
  }
}

}  // namespace

cudaError_t launch_f32_to_f16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !y) return cudaErrorInvalidValue;
  const bool vec =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
  const int64_t work = vec ? (n + 3) / 4 : n;
  const int64_t b = (work + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
  if (vec) {
    f32_to_f16_kernel<true><<<blocks, kThreads, 0, stream>>>(x, y, n);
  } else {
    f32_to_f16_kernel<false><<<blocks, kThreads, 0, stream>>>(x, y, n);
  }
  return cudaGetLastError();
}

}  // namespace spw::kernels
