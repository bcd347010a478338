// Matrix-vector products with weights in any supported GGUF type (launch.h: launch_matvec):
//   Y [n_tok][n_out] = X [n_tok][n_in] * W^T, W [n_out] rows of row_bytes.
//
// Built for decode, where the product streams the whole weight once per token and is bound by
// memory bandwidth. Layout of the work:
// - One warp per output row (kWarps rows per CTA); the warp walks its row tile by tile.
// - A tile is a whole number of blocks, a multiple of 16 bytes and of 32 8-element groups
//   (tile_blocks()). The warp copies it into its own shared-memory slice with the widest loads
//   the row's alignment allows (16 bytes when the weight pointer, row_bytes and the row's
//   length are multiples of 16; rows of 18/20/22/34/110/210-byte blocks often are not, and then 4-
//   or 2-byte loads fill the same slice), while the next tile's loads are already in flight
//   in registers. Each weight byte is read from DRAM once per call (n_tok <= kTokChunk), with
//   the streaming cache hint so the weights do not push the activations out of L1/L2.
// - Each lane then decodes whole 8-element groups from shared memory with the exact decoding
//   of quant_math.h, and multiplies them with the matching activations (two float4 loads per
//   token, served by L1/L2: every warp of the SM reads the same X). f32 accumulation with
//   FMA, then a butterfly warp reduction.
// - Tokens: n_tok == 1 has its own instantiation; otherwise a CTA handles up to kTokChunk
//   tokens with the decoded weights in registers, and larger n_tok uses more CTAs along y
//   (each re-reading the weights; the backend uses cuBLAS above a handful of tokens).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/quant_math.h"

namespace spw::kernels {
namespace {

constexpr int kWarps = 4;  // output rows per CTA
constexpr int kThreads = 32 * kWarps;
constexpr int kTokChunk = 8;  // tokens per CTA when n_tok > 1
constexpr int kMaxGridY = 65535;

// Blocks per tile (elements for F32/F16/BF16): whole blocks, tile bytes % 16 == 0, tile
// groups % 32 == 0, about 1 KiB (Q6_K: 1680 bytes, its smallest such tile).
template <GgmlType T>
constexpr int tile_blocks() {
  switch (T) {
    case GgmlType::F32:
      return 256;  // 1024 B, 32 groups
    case GgmlType::F16:
      return 512;  // 1024 B, 64 groups
    case GgmlType::BF16:
      return 512;  // 1024 B, 64 groups
    case GgmlType::Q8_0:
      return 32;  // 1088 B, 128 groups
    case GgmlType::Q4_0:
      return 56;  // 1008 B, 224 groups
    case GgmlType::Q4_1:
      return 48;  // 960 B, 192 groups
    case GgmlType::Q5_0:
      return 48;  // 1056 B, 192 groups
    case GgmlType::Q5_1:
      return 40;  // 960 B, 160 groups
    case GgmlType::Q4_K:
      return 7;  // 1008 B, 224 groups
    case GgmlType::Q5_K:
      return 6;  // 1056 B, 192 groups
    case GgmlType::Q6_K:
      return 8;  // 1680 B, 256 groups
    case GgmlType::Q2_K:
      return 12;  // 1008 B, 384 groups
    case GgmlType::Q3_K:
      return 8;  // 880 B, 256 groups (110-byte blocks: 8 is the smallest multiple of 16 bytes)
    case GgmlType::IQ4_NL:
      return 56;  // 1008 B, 224 groups
    case GgmlType::IQ4_XS:
      return 8;  // 1088 B, 256 groups
    default:
      return 0;
  }
}

template <GgmlType T>
struct TileShape {
  using TR = BlockTraits<T>;
  static constexpr int kBytes = tile_blocks<T>() * TR::kBlockBytes;
  static constexpr int kElems = tile_blocks<T>() * TR::kBlockElems;
  static constexpr int kGroupsPerLane = kElems / 8 / 32;
  static constexpr int kChunksPerLane = (kBytes / 16 + 31) / 32;  // 16-byte chunks
  static_assert(kBytes % 16 == 0 && (kElems / 8) % 32 == 0, "tile shape");
};

// 16 bytes of weights at p (16-byte aligned) of which the first `valid` (a multiple of V,
// > 0) belong to the row, read with V-byte loads; bytes past `valid` are zero.
template <int V>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* p, int valid) {
  if constexpr (V == 16) {
    return __ldcs(reinterpret_cast<const uint4*>(p));
  } else if constexpr (V == 4) {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (4 * k < valid) w[k] = __ldcs(reinterpret_cast<const unsigned int*>(p) + k);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    static_assert(V == 2, "load width");
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (2 * k < valid) {
        const uint32_t h = __ldcs(reinterpret_cast<const unsigned short*>(p) + k);
        w[k / 2] |= h << (16 * (k % 2));
      }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The lane's chunks of the tile of `bytes` bytes at src (lane + 32 j, j < kChunksPerLane).
template <GgmlType T, int V>
__device__ __forceinline__ void load_tile(const uint8_t* src, int bytes, int lane,
                                          uint4 (&stage)[TileShape<T>::kChunksPerLane]) {
#pragma unroll
  for (int j = 0; j < TileShape<T>::kChunksPerLane; ++j) {
    const int off = 16 * (lane + 32 * j);
    if (off < bytes) stage[j] = load_chunk<V>(src + off, bytes - off);
  }
}

// Four activations at p: one float4 when `vec` (p 16-byte aligned), else four loads.
__device__ __forceinline__ float4 load_x4(const float* p, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const float4*>(p));
  return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

__device__ __forceinline__ float dot4(const float* v, float4 a) {
  return fmaf(v[3], a.w, fmaf(v[2], a.z, fmaf(v[1], a.y, v[0] * a.x)));
}

// acc[t] += the tile's weights . X[t] over the tile's groups this lane owns.
//   tile  the staged bytes; elems: valid elements in it (a whole number of blocks)
//   xt    X[t0][first element of the tile]; n_in: X's row stride
template <GgmlType T, int NT>
__device__ __forceinline__ void accumulate_tile(const uint8_t* tile, int elems, const float* xt,
                                                int64_t n_in, int nt, bool x_vec, int lane,
                                                float (&acc)[NT]) {
  using TR = BlockTraits<T>;
  // Two groups in flight per lane: enough independent loads and FMAs to overlap, few enough
  // registers (full unrolling of the K-quants' 7-8 groups costs ~150) for 8+ warps per SM
  // partition.
#pragma unroll 2
  for (int j = 0; j < TileShape<T>::kGroupsPerLane; ++j) {
    const int g = lane + 32 * j;
    float v[8];
    int e0, e1;
    if constexpr (TR::kFloat) {
      e0 = 8 * g;
      e1 = e0 + 4;
      if (e0 >= elems) break;  // groups are in ascending order
      if constexpr (T == GgmlType::F32) {
        const float4 a = *reinterpret_cast<const float4*>(tile + 4 * e0);
        const float4 b = *reinterpret_cast<const float4*>(tile + 4 * e0 + 16);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
      } else {
        const uint4 q = *reinterpret_cast<const uint4*>(tile + 2 * e0);
        const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const auto h = static_cast<uint16_t>(words[k / 2] >> (16 * (k % 2)));
          v[k] = T == GgmlType::F16 ? half_to_float(h) : bf16_to_float(h);
        }
      }
      if (e0 + 8 > elems) {  // the row's last, partial group: no weights or X past n_in
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= nt) break;
          const float* x = xt + t * n_in;
          float s = 0.0f;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            if (e0 + k < elems) s = fmaf(v[k], __ldg(x + e0 + k), s);
          }
          acc[t] += s;
        }
        continue;
      }
    } else {
      const int n_groups = elems / 8;
      if (g >= n_groups) break;
      const int b = g / TR::kGroups, gi = g % TR::kGroups;
      TR::decode_group(tile + b * TR::kBlockBytes, gi, v);
      e0 = b * TR::kBlockElems + TR::run_start(gi, 0);
      e1 = b * TR::kBlockElems + TR::run_start(gi, 1);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= nt) break;
      const float* x = xt + t * n_in;
      const float4 a = load_x4(x + e0, x_vec);
      const float4 c = load_x4(x + e1, x_vec);
      acc[t] += dot4(v, a) + dot4(v + 4, c);
    }
  }
}

// One warp per row; see the top of the file. x_vec: X rows are 16-byte aligned (X itself is
// and n_in % 4 == 0). V: weight load width (16, 4 or 2), dividing the weight pointer,
// row_bytes and the row's data length.
template <GgmlType T, int V, int NT>
__global__ void __launch_bounds__(kThreads)
    matvec_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int64_t n_tok, float* __restrict__ y, bool x_vec) {
  using TR = BlockTraits<T>;
  using TS = TileShape<T>;
  __shared__ __align__(16) uint8_t smem[kWarps][TS::kBytes];

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = int64_t{blockIdx.x} * kWarps + warp;
  if (row >= n_out) return;  // whole warps only; no CTA-wide barrier below
  const uint8_t* wrow = w + row * row_bytes;
  const int64_t data_bytes = n_in / TR::kBlockElems * TR::kBlockBytes;
  const int64_t n_tiles = (n_in + TS::kElems - 1) / TS::kElems;
  uint8_t* tile = smem[warp];

  for (int64_t t0 = int64_t{blockIdx.y} * NT; t0 < n_tok; t0 += int64_t{gridDim.y} * NT) {
    const int nt = static_cast<int>(n_tok - t0 < NT ? n_tok - t0 : NT);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

    uint4 stage[TS::kChunksPerLane];
    load_tile<T, V>(wrow, static_cast<int>(data_bytes < TS::kBytes ? data_bytes : TS::kBytes), lane,
                    stage);
    for (int64_t ti = 0; ti < n_tiles; ++ti) {
      const int64_t off = ti * TS::kBytes;
      const int bytes =
          static_cast<int>(data_bytes - off < TS::kBytes ? data_bytes - off : TS::kBytes);
      __syncwarp();  // every lane is done with the previous tile
#pragma unroll
      for (int j = 0; j < TS::kChunksPerLane; ++j) {
        const int c = 16 * (lane + 32 * j);
        if (c < bytes) *reinterpret_cast<uint4*>(tile + c) = stage[j];
      }
      __syncwarp();
      if (ti + 1 < n_tiles) {  // next tile's loads fly while this one is decoded
        const int64_t left = data_bytes - off - TS::kBytes;
        load_tile<T, V>(wrow + off + TS::kBytes,
                        static_cast<int>(left < TS::kBytes ? left : TS::kBytes), lane, stage);
      }
      const int64_t e_tile = ti * TS::kElems;
      const int elems = static_cast<int>(n_in - e_tile < TS::kElems ? n_in - e_tile : TS::kElems);
      accumulate_tile<T, NT>(tile, elems, x + t0 * n_in + e_tile, n_in, nt, x_vec, lane, acc);
    }

#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[t] += __shfl_xor_sync(0xFFFFFFFFu, acc[t], o);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt && lane == t) y[(t0 + t) * n_out + row] = acc[t];
    }
  }
}

template <GgmlType T, int V>
cudaError_t launch_typed(const uint8_t* w, int64_t row_bytes, int64_t n_in, int64_t n_out,
                         const float* x, int64_t n_tok, float* y, bool x_vec, dim3 grid_x,
                         cudaStream_t stream) {
  dim3 grid = grid_x;
  if (n_tok == 1) {
    grid.y = 1;
    matvec_kernel<T, V, 1>
        <<<grid, kThreads, 0, stream>>>(w, row_bytes, n_in, n_out, x, n_tok, y, x_vec);
  } else {
    const int64_t chunks = (n_tok + kTokChunk - 1) / kTokChunk;
    grid.y = static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY);
    matvec_kernel<T, V, kTokChunk>
        <<<grid, kThreads, 0, stream>>>(w, row_bytes, n_in, n_out, x, n_tok, y, x_vec);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_matvec(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                          int64_t n_out, const float* x, int64_t n_tok, float* y,
                          cudaStream_t stream) {
  const BlockShape shape = block_shape(type);
  if (shape.elems == 0) return cudaErrorInvalidValue;  // not a weight type the kernels decode
  if (n_in <= 0 || n_out < 0 || n_tok < 0 || n_in % shape.elems != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t data_bytes = n_in / shape.elems * shape.bytes;
  if (row_bytes < data_bytes) return cudaErrorInvalidValue;
  if (n_out == 0 || n_tok == 0) return cudaSuccess;  // nothing to compute
  if (!w || !x || !y) return cudaErrorInvalidValue;
  const int64_t grid_x = (n_out + kWarps - 1) / kWarps;
  if (grid_x > 0x7FFFFFFF) return cudaErrorInvalidValue;

  // The widest load dividing every tile's start and end in every row.
  const auto align = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(w)) |
                     static_cast<uint64_t>(row_bytes) | static_cast<uint64_t>(data_bytes);
  const int v = align % 16 == 0 ? 16 : align % 4 == 0 ? 4 : align % 2 == 0 ? 2 : 0;
  if (v == 0) return cudaErrorInvalidValue;  // odd addresses: no block format has those
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && n_in % 4 == 0;
  const dim3 grid(static_cast<unsigned>(grid_x));
  const auto* wb = static_cast<const uint8_t*>(w);

  cudaError_t result = cudaErrorInvalidValue;
  dispatch_type(type, [&](auto tr) {
    constexpr GgmlType T = decltype(tr)::kType;
    switch (v) {
      case 16:
        result = launch_typed<T, 16>(wb, row_bytes, n_in, n_out, x, n_tok, y, x_vec, grid, stream);
        break;
      case 4:
        result = launch_typed<T, 4>(wb, row_bytes, n_in, n_out, x, n_tok, y, x_vec, grid, stream);
        break;
      default:
        result = launch_typed<T, 2>(wb, row_bytes, n_in, n_out, x, n_tok, y, x_vec, grid, stream);
        break;
    }
  });
  return result;
}

}  // namespace spw::kernels
