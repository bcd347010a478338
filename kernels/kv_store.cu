// Appends K or V rows to the paged KV cache of the GPU window (kernels/paged_math.h layout),
// in F32, F16 or Q8_0.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/paged_math.h"

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

struct PagedStoreArgs {
  const float* src;          // [n_tok][n_kv_heads][row_dim]
  const PagedBlock* blocks;  // the blocks holding positions [pos0, pos0 + n_tok), in order
  int first_block;           // logical block of blocks[0]
  int block_size, n_kv, row_dim, pos0, n_tok;
  int64_t part_off, row_bytes;  // the layer's K or V part in a slot; bytes of one row
};

__device__ __forceinline__ uint8_t* paged_row(const PagedStoreArgs& a, int t, int g) {
  const int pos = a.pos0 + t;
  const PagedBlock blk = a.blocks[pos / a.block_size - a.first_block];
  return blk.base + a.part_off +
         (static_cast<int64_t>(g) * a.block_size + pos % a.block_size) * a.row_bytes;
}

// F32 / F16: one thread per element.
template <typename T>
__global__ void __launch_bounds__(kThreads) kv_store_paged_kernel(PagedStoreArgs a) {
  const int64_t n = int64_t{a.n_tok} * a.n_kv * a.row_dim;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const int d = static_cast<int>(i % a.row_dim);
    const int g = static_cast<int>((i / a.row_dim) % a.n_kv);
    const int t = static_cast<int>(i / (int64_t{a.row_dim} * a.n_kv));
    store_as(reinterpret_cast<T*>(paged_row(a, t, g)) + d, a.src[i]);
  }
}

// Q8_0: one warp per 32-element block of a row; the scale from the warp's exact max of |x|,
// each lane one int8, the same arithmetic as quantize_q8_0_block (paged_math.h).
__global__ void __launch_bounds__(kThreads) kv_store_paged_q8_0_kernel(PagedStoreArgs a) {
  const int lane = threadIdx.x % 32;
  const int blocks_per_row = a.row_dim / kQK8_0;
  const int64_t n_warps = int64_t{a.n_tok} * a.n_kv * blocks_per_row;
  for (int64_t w = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / 32; w < n_warps;
       w += int64_t{gridDim.x} * kThreads / 32) {
    const int qb = static_cast<int>(w % blocks_per_row);
    const int g = static_cast<int>((w / blocks_per_row) % a.n_kv);
    const int t = static_cast<int>(w / (int64_t{blocks_per_row} * a.n_kv));
    const float x = a.src[(int64_t{t} * a.n_kv + g) * a.row_dim + qb * kQK8_0 + lane];
    float amax = fabsf(x);
    for (int off = 16; off > 0; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const Q8Scale s = q8_0_scale(amax);
    uint8_t* blk = paged_row(a, t, g) + qb * static_cast<int64_t>(sizeof(BlockQ8_0));
    if (lane == 0) *reinterpret_cast<uint16_t*>(blk) = float_to_half_rne(s.d);
    blk[2 + lane] = static_cast<uint8_t>(q8_0_quant(x, s.id));
  }
}

}  // namespace

cudaError_t launch_kv_store_paged(const float* src, GgmlType kv_type, int64_t row_dim,
                                  int64_t n_kv_heads, const PagedBlock* blocks, int64_t first_block,
                                  int64_t block_size, int64_t part_off, int64_t pos0, int64_t n_tok,
                                  cudaStream_t stream) {
  if (kv_type != GgmlType::F32 && kv_type != GgmlType::F16 && kv_type != GgmlType::Q8_0) {
    return cudaErrorInvalidValue;
  }
  if (row_dim < 1 || n_kv_heads < 1 || first_block < 0 || block_size < 1 || part_off < 0 ||
      pos0 < 0 || n_tok < 0 || pos0 + n_tok > INT32_MAX || block_size > 65536 ||
      row_dim * n_kv_heads > INT32_MAX || pos0 / block_size != first_block ||
      (kv_type == GgmlType::Q8_0 && row_dim % kQK8_0 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (n_tok == 0) return cudaSuccess;
  if (!src || !blocks) return cudaErrorInvalidValue;
  PagedStoreArgs a{};
  a.src = src;
  a.blocks = blocks;
  a.first_block = static_cast<int>(first_block);
  a.block_size = static_cast<int>(block_size);
  a.n_kv = static_cast<int>(n_kv_heads);
  a.row_dim = static_cast<int>(row_dim);
  a.pos0 = static_cast<int>(pos0);
  a.n_tok = static_cast<int>(n_tok);
  a.part_off = part_off;
  a.row_bytes = kv_type == GgmlType::F32   ? 4 * row_dim
                : kv_type == GgmlType::F16 ? 2 * row_dim
                                           : row_dim / kQK8_0 * int64_t{sizeof(BlockQ8_0)};
  const int64_t n = n_tok * n_kv_heads * row_dim;  // elements (Q8_0: one lane each)
  const int64_t b = (n + kThreads - 1) / kThreads;
  const auto grid = static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
  switch (kv_type) {
    case GgmlType::F32:
      kv_store_paged_kernel<float><<<grid, kThreads, 0, stream>>>(a);
      break;
    case GgmlType::F16:
      kv_store_paged_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      kv_store_paged_q8_0_kernel<<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

}  // namespace spw::kernels
