// Weight rows decoded to binary16 (launch.h: launch_dequant_f16): the prefill path decodes a
// tile of a quantized weight and hands it to cuBLAS as an f16 matrix.
//   dst [n_rows][n_in] = f16(decode(W rows [row0, row0 + n_rows)))
// Block types: one thread per 8-element group (quant_math.h's exact decoding), writing its two
// 4-element runs as 8-byte stores when dst allows. F32/F16/BF16: one thread per element. The
// float -> f16 rounding is float_to_half_rne (round to nearest even, as fp32_to_fp16).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/quant_math.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 1 << 20;  // grid-stride beyond this
constexpr int kMaxGridY = 65535;

// Four halves as one 8-byte store at p (8-byte aligned) or four 2-byte stores.
__device__ __forceinline__ void store_h4(uint16_t* p, const float* v, bool vec) {
  const uint16_t h0 = float_to_half_rne(v[0]), h1 = float_to_half_rne(v[1]),
                 h2 = float_to_half_rne(v[2]), h3 = float_to_half_rne(v[3]);
  if (vec) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(h0 | (static_cast<uint32_t>(h1) << 16), h2 | (static_cast<uint32_t>(h3) << 16));
  } else {
    p[0] = h0, p[1] = h1, p[2] = h2, p[3] = h3;
  }
}

// grid.x strides over one row's units (groups or elements), grid.y over rows.
// vec: dst rows are 8-byte aligned (dst is and n_in % 4 == 0).
template <GgmlType T>
__global__ void __launch_bounds__(kThreads)
    dequant_f16_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_in, int64_t row0,
                       int64_t n_rows, uint16_t* __restrict__ dst, bool vec) {
  using TR = BlockTraits<T>;
  const int64_t units = TR::kFloat ? n_in : n_in / 8;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const uint8_t* row = w + (row0 + r) * row_bytes;
    uint16_t* out = dst + r * n_in;
    for (int64_t u = int64_t{blockIdx.x} * kThreads + threadIdx.x; u < units;
         u += int64_t{gridDim.x} * kThreads) {
      if constexpr (TR::kFloat) {
        out[u] = float_to_half_rne(TR::decode(row + u * TR::kBlockBytes));
      } else {
        float v[8];
        int64_t e0, e1;
        decode_row_group<TR>(row, u, v, e0, e1);
        store_h4(out + e0, v, vec);
        store_h4(out + e1, v + 4, vec);
      }
    }
  }
}

}  // namespace

cudaError_t launch_dequant_f16(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                               int64_t row0, int64_t n_rows, uint16_t* dst, cudaStream_t stream) {
  const BlockShape shape = block_shape(type);
  if (shape.elems == 0) return cudaErrorInvalidValue;  // not a weight type the kernels decode
  if (n_in <= 0 || row0 < 0 || n_rows < 0 || n_in % shape.elems != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t data_bytes = n_in / shape.elems * shape.bytes;
  if (row_bytes < data_bytes) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  if (!w || !dst) return cudaErrorInvalidValue;
  // Every field sits at an even offset; F32 elements need 4-byte alignment.
  const auto align = reinterpret_cast<uintptr_t>(w) | static_cast<uintptr_t>(row_bytes);
  if (align % (type == GgmlType::F32 ? 4 : 2) != 0) return cudaErrorInvalidValue;

  const int64_t units = shape.elems == 1 ? n_in : n_in / 8;
  const int64_t bx = (units + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < kMaxGridX ? bx : kMaxGridX),
                  static_cast<unsigned>(n_rows < kMaxGridY ? n_rows : kMaxGridY));
  const bool vec = reinterpret_cast<uintptr_t>(dst) % 8 == 0 && n_in % 4 == 0;
  const auto* wb = static_cast<const uint8_t*>(w);
  dispatch_type(type, [&](auto tr) {
    constexpr GgmlType T = decltype(tr)::kType;
    dequant_f16_kernel<T>
        <<<grid, kThreads, 0, stream>>>(wb, row_bytes, n_in, row0, n_rows, dst, vec);
  });
  return cudaGetLastError();
}

}  // namespace spw::kernels
