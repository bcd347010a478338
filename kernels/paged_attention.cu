// Attention over the paged KV cache's GPU window (docs/DESIGN.md §4.3): partial results (o
// unnormalised, running max m, running sum s) over the blocks of a block table, and their
// log-sum-exp combination with other partials (more splits of the table, a batch of cold blocks
// staged for prefill, the CPU's partial over the cold tiers). The arithmetic is
// kernels/softmax_math.h; the addressing and element loads are kernels/paged_math.h (both tested
// on the CPU).
//
// - paged_vec_kernel (decode, a handful of queries): flash-decoding (Dao et al. 2023). One CTA
//   per (query head, query token, split of the table); its warps split the split's keys and merge
//   through shared memory; each split writes one partial, combined later by attn_combine_kernel.
// - paged_tile_kernel (prefill): one CTA per (block of queries, query head) streaming 32-key
//   tiles of K, then V, through shared memory (FlashAttention, Dao et al. 2022), one partial.
// Keys are the table's blocks' valid rows in table order; a key attends a query when its position
// is <= the query's (causal), so a table may hold blocks in any order and with gaps (sinks, then
// the recent blocks).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/launch.h"
#include "kernels/paged_math.h"
#include "kernels/softmax_math.h"

namespace spw::kernels {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;
}

struct PagedArgs {
  const float* q;           // [n_tok][n_head][hd]
  const PagedBlock* table;  // [n_blocks]
  int n_blocks;
  PagedLayer L;
  float* part_o;   // [n_split][n_tok][n_head][hdv]
  float* part_ms;  // [n_split][n_tok][n_head][2]: m, s
  int n_tok, pos0, n_head, n_rep, hd, hdv, n_split;
  int span;  // sliding window: keys at positions <= qpos - span are masked; 0: none
  float scale;
};

// Whether a key at position kp is visible to a query at qpos: causal, and within the span.
__device__ __forceinline__ bool key_visible(int kp, int qpos, int span) {
  return kp <= qpos && (span == 0 || kp > qpos - span);
}

__device__ __forceinline__ void write_partial(const PagedArgs& a, int split, int t, int h,
                                              const SoftmaxState& st) {
  const int64_t i = (int64_t{split} * a.n_tok + t) * a.n_head + h;
  a.part_ms[2 * i] = st.m;
  a.part_ms[2 * i + 1] = st.s;
}
__device__ __forceinline__ float* partial_o(const PagedArgs& a, int split, int t, int h) {
  return a.part_o + ((int64_t{split} * a.n_tok + t) * a.n_head + h) * a.hdv;
}

// ---- decode ---------------------------------------------------------------------------------

constexpr int kVecWarps = 8;

template <GgmlType T, int E>
__global__ void __launch_bounds__(kVecWarps * 32, 1) paged_vec_kernel(PagedArgs a) {
  constexpr int U = E >= 8 ? 4 : (E >= 4 ? 8 : 16);
  __shared__ float s_m[kVecWarps], s_s[kVecWarps];
  __shared__ float s_o[kVecWarps][kMaxHeadDim];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
  const int g = h / a.n_rep;  // GQA: kv_head = head / n_rep
  const int qpos = a.pos0 + t;
  const int bs = a.L.block_size;
  const int per = (a.n_blocks + a.n_split - 1) / a.n_split;
  const int b0 = split * per;
  const int b1 = min(a.n_blocks, b0 + per);
  const int n_keys = b1 > b0 ? (b1 - b0) * bs : 0;  // rows of this split, valid or not

  float q[E], o[E];
  const float* qr = a.q + (int64_t{t} * a.n_head + h) * a.hd;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    q[e] = d < a.hd ? qr[d] : 0.0f;
    o[e] = 0.0f;
  }

  SoftmaxState st;
  for (int j0 = warp * U; j0 < n_keys; j0 += kVecWarps * U) {
    float kv[U][E], vv[U][E];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      ok[u] = false;
      const uint8_t* krow = nullptr;
      const uint8_t* vrow = nullptr;
      if (j < n_keys) {
        const PagedBlock blk = a.table[b0 + j / bs];
        const int r = j % bs;
        ok[u] = r < blk.n_rows && key_visible(blk.pos0 + r, qpos, a.span);
        if (ok[u]) {
          krow = paged_k_row(blk.base, a.L, g, r);
          vrow = paged_v_row(blk.base, a.L, g, r);
        }
      }
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        kv[u][e] = ok[u] && d < a.hd ? load_elem<T>(krow, d) : 0.0f;
        vv[u][e] = ok[u] && d < a.hdv ? load_elem<T>(vrow, d) : 0.0f;
      }
    }
    float s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      s[u] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) s[u] += q[e] * kv[u][e];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < U; ++u) s[u] += __shfl_xor_sync(kFull, s[u], off);
    }
    float block_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      s[u] = ok[u] ? s[u] * a.scale : -INFINITY;
      block_max = fmaxf(block_max, s[u]);
    }
    const float alpha = softmax_advance(st, block_max);
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] *= alpha;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float p = softmax_weight(s[u], st.m);
      st.s += p;
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += p * vv[u][e];
    }
  }

  if (lane == 0) {
    s_m[warp] = st.m;
    s_s[warp] = st.s;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d < a.hdv) s_o[warp][d] = o[e];
  }
  __syncthreads();
  // Merge the warps in warp order (deterministic); every thread derives the same state.
  SoftmaxState acc;
  float f[kVecWarps];
  for (int w = 0; w < kVecWarps; ++w) {
    SoftmaxState pw;
    pw.m = s_m[w];
    pw.s = s_s[w];
    const SoftmaxMerge m = softmax_merge(acc, pw);
    for (int v = 0; v < w; ++v) f[v] *= m.alpha;
    f[w] = m.beta;
  }
  float* out = partial_o(a, split, t, h);
  for (int d = threadIdx.x; d < a.hdv; d += kVecWarps * 32) {
    float od = 0.0f;
    for (int w = 0; w < kVecWarps; ++w) od += f[w] * s_o[w][d];
    out[d] = od;
  }
  if (threadIdx.x == 0) write_partial(a, split, t, h, acc);
}

// ---- prefill --------------------------------------------------------------------------------

constexpr int kTileWarps = 4;
constexpr int kTileKeys = 32;

struct TileLayout {
  int sq, sk, bq;
  __host__ __device__ TileLayout(int hd, int bq_) : bq(bq_) {
    sq = (hd + 3) / 4 * 4;
    sk = (sq / 4) % 2 == 0 ? sq + 4 : sq;
  }
  __host__ __device__ int kv_floats(int hdv) const { return kTileKeys * (sk > hdv ? sk : hdv); }
  __host__ __device__ size_t bytes(int hdv) const {
    return sizeof(float) * (static_cast<size_t>(bq) * sq + kv_floats(hdv)) +
           sizeof(int) * kTileKeys;  // key positions
  }
};

template <int C>
constexpr int tile_rows() {
  return 16 / C * kTileWarps;
}

template <GgmlType T, int C>
__global__ void __launch_bounds__(kTileWarps * 32, 4) paged_tile_kernel(PagedArgs a) {
  constexpr int R = 16 / C;
  constexpr int BQ = tile_rows<C>();
  extern __shared__ float4 smem4[];
  const TileLayout Ly(a.hd, BQ);
  float* sQ = reinterpret_cast<float*>(smem4);  // [BQ][sq]
  float* sKV = sQ + BQ * Ly.sq;                 // K tile [32][sk], later V tile [32][hdv]
  int* sPos = reinterpret_cast<int*>(sKV + Ly.kv_floats(a.hdv));  // [32] key positions

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int h = blockIdx.y, t0 = blockIdx.x * BQ;
  const int g = h / a.n_rep;  // GQA
  const int bs = a.L.block_size;

  for (int r = warp; r < BQ; r += kTileWarps) {
    const int t = t0 + r;
    const float* qr = a.q + (int64_t{t} * a.n_head + h) * a.hd;
    for (int d = lane; d < Ly.sq; d += 32) {
      sQ[r * Ly.sq + d] = t < a.n_tok && d < a.hd ? qr[d] : 0.0f;
    }
  }

  int qpos[R];
  float o[R][C];
  SoftmaxState st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = t0 + warp * R + r;
    qpos[r] = t < a.n_tok ? a.pos0 + t : -1;  // -1: every key masked
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
  }

  const int n_keys = a.n_blocks * bs;
  for (int j0 = 0; j0 < n_keys; j0 += kTileKeys) {
    __syncthreads();  // Q stored (first tile); the previous V tile consumed
    for (int row = warp; row < kTileKeys; row += kTileWarps) {
      const int j = j0 + row;
      const uint8_t* krow = nullptr;
      int kp = INT_MAX;  // masked for every query
      if (j < n_keys) {
        const PagedBlock blk = a.table[j / bs];
        const int r = j % bs;
        if (r < blk.n_rows) {
          kp = blk.pos0 + r;
          krow = paged_k_row(blk.base, a.L, g, r);
        }
      }
      if (lane == 0) sPos[row] = kp;
      for (int d = lane; d < Ly.sq; d += 32) {
        sKV[row * Ly.sk + d] = krow != nullptr && d < a.hd ? load_elem<T>(krow, d) : 0.0f;
      }
    }
    __syncthreads();

    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = 0.0f;
    const float4* k4 = reinterpret_cast<const float4*>(sKV + lane * Ly.sk);
    for (int d4 = 0; d4 < Ly.sq / 4; ++d4) {
      const float4 kk = k4[d4];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 qq = reinterpret_cast<const float4*>(sQ + (warp * R + r) * Ly.sq)[d4];
        s[r] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
      }
    }
    const int kp = sPos[lane];
    float p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // Causal and sliding-window mask (kp = INT_MAX for an empty row, qpos = -1 for no query).
      const float x = key_visible(kp, qpos[r], a.span) ? s[r] * a.scale : -INFINITY;
      const float alpha = softmax_advance(st[r], warp_max(x));
      p[r] = softmax_weight(x, st[r].m);
      st[r].s += warp_sum(p[r]);
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= alpha;
    }
    __syncthreads();  // K tile consumed

    for (int row = warp; row < kTileKeys; row += kTileWarps) {
      const int j = j0 + row;
      const uint8_t* vrow = nullptr;
      if (j < n_keys) {
        const PagedBlock blk = a.table[j / bs];
        const int r = j % bs;
        if (r < blk.n_rows) vrow = paged_v_row(blk.base, a.L, g, r);
      }
      for (int d = lane; d < a.hdv; d += 32) {
        sKV[row * a.hdv + d] = vrow != nullptr ? load_elem<T>(vrow, d) : 0.0f;
      }
    }
    __syncthreads();

#pragma unroll 4
    for (int jj = 0; jj < kTileKeys; ++jj) {
      float pj[R];
#pragma unroll
      for (int r = 0; r < R; ++r) pj[r] = __shfl_sync(kFull, p[r], jj);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int d = lane + 32 * c;
        if (d < a.hdv) {
          const float vv = sKV[jj * a.hdv + d];
#pragma unroll
          for (int r = 0; r < R; ++r) o[r][c] += pj[r] * vv;
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = t0 + warp * R + r;
    if (t >= a.n_tok) continue;
    float* out = partial_o(a, 0, t, h);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int d = lane + 32 * c;
      if (d < a.hdv) out[d] = o[r][c];
    }
    if (lane == 0) write_partial(a, 0, t, h, st[r]);
  }
}

constexpr int64_t kMinTileQueries = 8;

template <GgmlType T>
cudaError_t launch_typed(const PagedArgs& a, cudaStream_t stream) {
  const int width = a.hd > a.hdv ? a.hd : a.hdv;
  if (a.n_tok < kMinTileQueries) {
    const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tok),
                    static_cast<unsigned>(a.n_split));
    const dim3 block(kVecWarps * 32);
    if (width <= 32) {
      paged_vec_kernel<T, 1><<<grid, block, 0, stream>>>(a);
    } else if (width <= 64) {
      paged_vec_kernel<T, 2><<<grid, block, 0, stream>>>(a);
    } else if (width <= 128) {
      paged_vec_kernel<T, 4><<<grid, block, 0, stream>>>(a);
    } else {
      paged_vec_kernel<T, 8><<<grid, block, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
  const auto tile = [&](auto kernel, int bq) {
    const dim3 grid(static_cast<unsigned>((a.n_tok + bq - 1) / bq),
                    static_cast<unsigned>(a.n_head));
    const size_t bytes = TileLayout(a.hd, bq).bytes(a.hdv);
    kernel<<<grid, kTileWarps * 32, bytes, stream>>>(a);
  };
  if (width <= 64) {
    tile(paged_tile_kernel<T, 2>, tile_rows<2>());
  } else if (width <= 128) {
    tile(paged_tile_kernel<T, 4>, tile_rows<4>());
  } else {
    tile(paged_tile_kernel<T, 8>, tile_rows<8>());
  }
  return cudaGetLastError();
}

// ---- combine --------------------------------------------------------------------------------

constexpr int kCombineThreads = 128;

// One CTA per (head, token): merges parts 0..n_parts-1 in part order (deterministic).
__global__ void __launch_bounds__(kCombineThreads)
    attn_combine_kernel(const float* part_o, const float* part_ms, int n_parts, int n_tok,
                        int n_head, int hdv, float* out_o, float* out_ms) {
  const int h = blockIdx.x, t = blockIdx.y;
  const int64_t th = int64_t{t} * n_head + h;
  const int64_t stride = int64_t{n_tok} * n_head;  // (t, h) pairs per part
  SoftmaxState acc;
  // Every thread derives the same merged state; o is merged per column.
  float od[kMaxHeadDim / kCombineThreads];
#pragma unroll
  for (int c = 0; c < kMaxHeadDim / kCombineThreads; ++c) od[c] = 0.0f;
  for (int p = 0; p < n_parts; ++p) {
    const int64_t i = p * stride + th;
    SoftmaxState pp;
    pp.m = part_ms[2 * i];
    pp.s = part_ms[2 * i + 1];
    const SoftmaxMerge f = softmax_merge(acc, pp);
#pragma unroll
    for (int c = 0; c < kMaxHeadDim / kCombineThreads; ++c) {
      const int d = threadIdx.x + kCombineThreads * c;
      if (d < hdv) od[c] = od[c] * f.alpha + part_o[i * hdv + d] * f.beta;
    }
  }
  __syncthreads();  // every read of part_ms done before out_ms (which may alias part 0) changes
  const float inv = out_ms == nullptr ? softmax_inv_sum(acc) : 1.0f;
#pragma unroll
  for (int c = 0; c < kMaxHeadDim / kCombineThreads; ++c) {
    const int d = threadIdx.x + kCombineThreads * c;
    if (d < hdv) out_o[th * hdv + d] = od[c] * inv;
  }
  if (out_ms != nullptr && threadIdx.x == 0) {
    out_ms[2 * th] = acc.m;
    out_ms[2 * th + 1] = acc.s;
  }
}

}  // namespace

int64_t paged_attention_splits(int64_t n_tok, int64_t n_blocks, int64_t n_head, int n_sm) {
  if (n_tok >= kMinTileQueries || n_blocks <= 1) return 1;
  // Enough CTAs to fill every SM twice, but at least one block per split.
  const int64_t ctas = n_tok * n_head;
  int64_t s = (2 * int64_t{n_sm > 0 ? n_sm : 1} + ctas - 1) / ctas;
  if (s > n_blocks) s = n_blocks;
  if (s > kMaxPagedSplits) s = kMaxPagedSplits;
  return s < 1 ? 1 : s;
}

cudaError_t launch_paged_attention(const float* q, const PagedBlock* table, int64_t n_blocks,
                                   const PagedLayer& layer, int64_t n_tok, int64_t pos0,
                                   int64_t n_head, int64_t n_kv_heads, int64_t head_dim,
                                   int64_t head_dim_v, float scale, int64_t span, int64_t n_split,
                                   float* part_o, float* part_ms, cudaStream_t stream) {
  const GgmlType T = layer.type_k;
  if ((T != GgmlType::F32 && T != GgmlType::F16 && T != GgmlType::Q8_0) || layer.type_v != T) {
    return cudaErrorInvalidValue;
  }
  if (n_tok < 0 || pos0 < 0 || n_blocks < 0 || n_blocks > INT32_MAX / 65536 || n_head < 1 ||
      n_kv_heads < 1 || n_head % n_kv_heads != 0 || n_head > 65535 || head_dim < 1 ||
      head_dim > kMaxHeadDim || head_dim_v < 1 || head_dim_v > kMaxHeadDim ||
      pos0 + n_tok > INT32_MAX || layer.block_size < 1 || layer.block_size > 65536 || n_split < 1 ||
      n_split > kMaxPagedSplits || (n_tok >= kMinTileQueries && n_split != 1) || span < 0 ||
      span > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  if (T == GgmlType::Q8_0 && (head_dim % kQK8_0 != 0 || head_dim_v % kQK8_0 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (n_tok == 0) return cudaSuccess;
  if (!q || (n_blocks > 0 && !table) || !part_o || !part_ms) return cudaErrorInvalidValue;
  PagedArgs a{};
  a.q = q;
  a.table = table;
  a.n_blocks = static_cast<int>(n_blocks);
  a.L = layer;
  a.part_o = part_o;
  a.part_ms = part_ms;
  a.n_tok = static_cast<int>(n_tok);
  a.pos0 = static_cast<int>(pos0);
  a.n_head = static_cast<int>(n_head);
  a.n_rep = static_cast<int>(n_head / n_kv_heads);
  a.hd = static_cast<int>(head_dim);
  a.hdv = static_cast<int>(head_dim_v);
  a.n_split = static_cast<int>(n_split);
  a.span = static_cast<int>(span);
  a.scale = scale;
  switch (T) {
    case GgmlType::F32:
      return launch_typed<GgmlType::F32>(a, stream);
    case GgmlType::F16:
      return launch_typed<GgmlType::F16>(a, stream);
    default:
      return launch_typed<GgmlType::Q8_0>(a, stream);
  }
}

cudaError_t launch_attn_combine(const float* part_o, const float* part_ms, int64_t n_parts,
                                int64_t n_tok, int64_t n_head, int64_t head_dim_v, float* out_o,
                                float* out_ms, cudaStream_t stream) {
  if (n_parts < 1 || n_tok < 0 || n_tok > 65535 || n_head < 1 || n_head > INT32_MAX ||
      head_dim_v < 1 || head_dim_v > kMaxHeadDim) {
    return cudaErrorInvalidValue;
  }
  if (n_tok == 0) return cudaSuccess;
  if (!part_o || !part_ms || !out_o) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_head), static_cast<unsigned>(n_tok));
  attn_combine_kernel<<<grid, kCombineThreads, 0, stream>>>(
      part_o, part_ms, static_cast<int>(n_parts), static_cast<int>(n_tok), static_cast<int>(n_head),
      static_cast<int>(head_dim_v), out_o, out_ms);
  return cudaGetLastError();
}

}  // namespace spw::kernels
