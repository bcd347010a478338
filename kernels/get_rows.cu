// Embedding lookup (launch.h: launch_get_rows): dst [n][n_in] f32 = decode(W row ids[t]).
// Block types: one thread per 8-element group (quant_math.h's exact decoding, so the rows
// equal dequantize_row's bit for bit), writing its two 4-element runs as float4 when dst
// allows. F32/F16/BF16: one thread per element.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/quant_math.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 1 << 20;  // grid-stride beyond this
constexpr int kMaxGridY = 65535;

__device__ __forceinline__ void store_f4(float* p, const float* v, bool vec) {
  if (vec) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    p[0] = v[0], p[1] = v[1], p[2] = v[2], p[3] = v[3];
  }
}

// grid.x strides over one row's units (groups or elements), grid.y over the n lookups.
// vec: dst rows are 16-byte aligned (dst is and n_in % 4 == 0).
template <GgmlType T>
__global__ void __launch_bounds__(kThreads)
    get_rows_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_in,
                    const int32_t* __restrict__ ids, int64_t n, float* __restrict__ dst, bool vec) {
  using TR = BlockTraits<T>;
  const int64_t units = TR::kFloat ? n_in : n_in / 8;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    const uint8_t* row = w + int64_t{ids[t]} * row_bytes;
    float* out = dst + t * n_in;
    for (int64_t u = int64_t{blockIdx.x} * kThreads + threadIdx.x; u < units;
         u += int64_t{gridDim.x} * kThreads) {
      if constexpr (TR::kFloat) {
        out[u] = TR::decode(row + u * TR::kBlockBytes);
      } else {
        float v[8];
        int64_t e0, e1;
        decode_row_group<TR>(row, u, v, e0, e1);
        store_f4(out + e0, v, vec);
        store_f4(out + e1, v + 4, vec);
      }
    }
  }
}

}  // namespace

cudaError_t launch_get_rows(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                            const int32_t* ids, int64_t n, float* dst, cudaStream_t stream) {
  const BlockShape shape = block_shape(type);
  if (shape.elems == 0) return cudaErrorInvalidValue;  // not a weight type the kernels decode
  if (n_in <= 0 || n < 0 || n_in % shape.elems != 0) return cudaErrorInvalidValue;
  const int64_t data_bytes = n_in / shape.elems * shape.bytes;
  if (row_bytes < data_bytes) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!w || !ids || !dst) return cudaErrorInvalidValue;
  // Every field sits at an even offset; F32 elements need 4-byte alignment.
  const auto align = reinterpret_cast<uintptr_t>(w) | static_cast<uintptr_t>(row_bytes);
  if (align % (type == GgmlType::F32 ? 4 : 2) != 0) return cudaErrorInvalidValue;

  const int64_t units = shape.elems == 1 ? n_in : n_in / 8;
  const int64_t bx = (units + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < kMaxGridX ? bx : kMaxGridX),
                  static_cast<unsigned>(n < kMaxGridY ? n : kMaxGridY));
  const bool vec = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && n_in % 4 == 0;
  const auto* wb = static_cast<const uint8_t*>(w);
  dispatch_type(type, [&](auto tr) {
    constexpr GgmlType T = decltype(tr)::kType;
    get_rows_kernel<T><<<grid, kThreads, 0, stream>>>(wb, row_bytes, n_in, ids, n, dst, vec);
  });
  return cudaGetLastError();
}

}  // namespace spw::kernels
