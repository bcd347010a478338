// Appends K or V rows to a contiguous KV cache [n_ctx][row_elems] in F32 or F16.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

__device__ __forceinline__ void store_as(float* dst, float v) { *dst = v; }
// Round to nearest even, bit-identical to fp32_to_fp16 (engine/common/fp16.h) except for the
// NaN payload (__float2half_rn gives the canonical 0x7FFF).
__device__ __forceinline__ void store_as(uint16_t* dst, float v) {
  *dst = __half_as_ushort(__float2half_rn(v));
}

// src [n][...] flattened, written to dst (the cache already offset to row pos0).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    kv_store_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    store_as(dst + i, src[i]);
  }
}

}  // namespace

cudaError_t launch_kv_store(const float* src, void* cache, GgmlType kv_type, int64_t row_elems,
                            int64_t pos0, int64_t n_tok, cudaStream_t stream) {
  if (kv_type != GgmlType::F32 && kv_type != GgmlType::F16) return cudaErrorInvalidValue;
  if (row_elems < 0 || pos0 < 0 || n_tok < 0) return cudaErrorInvalidValue;
  const int64_t n = row_elems * n_tok;
  if (n == 0) return cudaSuccess;
  if (!src || !cache) return cudaErrorInvalidValue;
  const int64_t b = (n + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
  const int64_t offset = pos0 * row_elems;  // elements
  if (kv_type == GgmlType::F32) {
    kv_store_kernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<float*>(cache) + offset, n);
  } else {
    kv_store_kernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<uint16_t*>(cache) + offset,
                                                     n);
  }
  return cudaGetLastError();
}

}  // namespace spw::kernels
