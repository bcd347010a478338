// Causal attention over a contiguous KV cache with an online softmax in f32 (Milakov &
// Gimelshein 2018; FlashAttention, Dao et al. 2022): no score matrix is ever materialised.
// The softmax bookkeeping (running max, rescaling, merges, -inf masking) is kernels/
// softmax_math.h, tested on the CPU.
//
// Two kernels:
// - attn_vec_kernel, for decode and a handful of queries: one CTA per (query token, query head),
//   its warps splitting the key range (each warp an independent partial, flash-decoding style)
//   and merging their partials through shared memory at the end.
// - attn_tile_kernel, for prefill: one CTA per (block of queries, query head) streaming
//   32-key tiles of K, then V, through shared memory; each warp owns a few query rows.
//
// Limitation: launch_attention has no scratch buffer, so the key range of one query head is
// never split across CTAs (true flash-decoding writes per-split partials to global memory and
// merges them in a second kernel). Decode therefore runs n_head CTAs per token, which leaves
// most SMs of a large GPU idle at long context; splitting across CTAs needs a scratch buffer
// of n_head * n_splits * (head_dim_v + 2) floats passed in by the caller.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/softmax_math.h"

namespace spw::kernels {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float load_kv(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_kv(const uint16_t* p) {
  return __half2float(__ushort_as_half(__ldg(p)));
}

__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;
}

// Shapes of one launch, positions as int (launch_attention checks pos0 + n_tok <= INT32_MAX).
struct AttnArgs {
  const float* q;                  // [n_tok][n_head][hd]
  const void* k;                   // [pos][n_kv_heads * hd]
  const void* v;                   // [pos][n_kv_heads * hdv]
  float* out;                      // [n_tok][n_head][hdv]
  int n_tok, pos0, n_head, n_rep;  // n_rep = n_head / n_kv_heads (GQA group size)
  int hd, hdv;
  int64_t k_stride, v_stride;  // elements per cache row: n_kv_heads * hd, n_kv_heads * hdv
  float scale;
};

// ---- decode: one CTA per (token, head), warps split the keys -----------------------------

// One CTA per SM is the expected case (n_head CTAs per token); the bound lets ptxas keep the
// U in-flight K/V rows in registers (about 160 at E = 4, 8) instead of spilling.
constexpr int kVecWarps = 8;

// E: dims per lane; lane l holds dims l + 32 e (e < E), so every load of a K or V row is one
// coalesced 32-element access per e. U keys per warp step: their loads are issued together
// to keep enough bytes in flight.
template <typename T, int E>
__global__ void __launch_bounds__(kVecWarps * 32, 1) attn_vec_kernel(AttnArgs a) {
  constexpr int U = E >= 8 ? 4 : (E >= 4 ? 8 : 16);
  __shared__ float s_m[kVecWarps], s_s[kVecWarps];
  __shared__ float s_o[kVecWarps][kMaxHeadDim];  // each warp's unnormalised o

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int h = blockIdx.x, t = blockIdx.y;
  const int kv_head = h / a.n_rep;    // GQA
  const int n_keys = a.pos0 + t + 1;  // causal: positions [0, pos0 + t]
  const T* kb = static_cast<const T*>(a.k) + int64_t{kv_head} * a.hd;
  const T* vb = static_cast<const T*>(a.v) + int64_t{kv_head} * a.hdv;

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
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      // Rows past the range are never read: the cache beyond pos0 + n_tok may hold anything.
      const bool valid = j < n_keys;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + 32 * e;
        kv[u][e] = valid && d < a.hd ? load_kv(kb + j * a.k_stride + d) : 0.0f;
        vv[u][e] = valid && d < a.hdv ? load_kv(vb + j * a.v_stride + d) : 0.0f;
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
      s[u] = j0 + u < n_keys ? s[u] * a.scale : -INFINITY;
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

  // Merge the warps' partials in warp order (deterministic). A warp that saw no key is the
  // empty partial (m = -inf, s = 0, o = 0), which the merge skips.
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
  float* out = a.out + (int64_t{t} * a.n_head + h) * a.hdv;
  for (int d = threadIdx.x; d < a.hdv; d += kVecWarps * 32) {
    SoftmaxState acc;
    float od = 0.0f;
    for (int w = 0; w < kVecWarps; ++w) {
      SoftmaxState pw;
      pw.m = s_m[w];
      pw.s = s_s[w];
      const SoftmaxMerge f = softmax_merge(acc, pw);
      od = od * f.alpha + s_o[w][d] * f.beta;
    }
    out[d] = od * softmax_inv_sum(acc);
  }
}

// ---- prefill: one CTA per (block of queries, head), K/V tiles in shared memory -----------

// At most 128 registers a thread, so four CTAs fit an SM's register file; shared memory
// (41.5 KB a CTA at hd 256, 25 KB at 128) then allows four on sm_90, two to four on sm_86.
constexpr int kTileWarps = 4;
constexpr int kTileKeys = 32;  // one key per lane in the score step

// Shared memory of attn_tile_kernel, in floats. sq: Q row stride (hd rounded up to 4, zero
// padded, so rows are float4 arrays); sk: K row stride, sq or sq + 4 so that sk / 4 is odd
// and the float4 reads of 8 lanes (one per key row) fall in distinct banks.
struct TileLayout {
  int sq, sk, bq;
  __host__ __device__ TileLayout(int hd, int bq_) : bq(bq_) {
    sq = (hd + 3) / 4 * 4;
    sk = (sq / 4) % 2 == 0 ? sq + 4 : sq;
  }
  __host__ __device__ int kv_floats(int hdv) const {
    return kTileKeys * (sk > hdv ? sk : hdv);  // the K tile, then the V tile [32][hdv]
  }
  __host__ __device__ size_t bytes(int hdv) const {
    return sizeof(float) * (static_cast<size_t>(bq) * sq + kv_floats(hdv));
  }
};

// C: 32-column chunks of hdv per lane (lane l holds columns l + 32 c); R = 16 / C query rows
// per warp, so every thread accumulates R * C = 16 outputs whatever the head size, and the
// shared memory stays under the 48 KB a launch gets without opting in (41.5 KB at hd 256).
template <int C>
constexpr int tile_rows() {
  return 16 / C * kTileWarps;
}

template <typename T, int C>
__global__ void __launch_bounds__(kTileWarps * 32, 4) attn_tile_kernel(AttnArgs a) {
  constexpr int R = 16 / C;
  constexpr int BQ = tile_rows<C>();
  extern __shared__ float4 smem4[];
  const TileLayout L(a.hd, BQ);
  float* sQ = reinterpret_cast<float*>(smem4);  // [BQ][sq]
  float* sKV = sQ + BQ * L.sq;                  // K tile [32][sk], later V tile [32][hdv]

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int h = blockIdx.y, t0 = blockIdx.x * BQ;
  const int kv_head = h / a.n_rep;  // GQA
  const T* kb = static_cast<const T*>(a.k) + int64_t{kv_head} * a.hd;
  const T* vb = static_cast<const T*>(a.v) + int64_t{kv_head} * a.hdv;

  for (int r = warp; r < BQ; r += kTileWarps) {
    const int t = t0 + r;
    const float* qr = a.q + (int64_t{t} * a.n_head + h) * a.hd;
    for (int d = lane; d < L.sq; d += 32) sQ[r * L.sq + d] = t < a.n_tok && d < a.hd ? qr[d] : 0.0f;
  }

  // This warp's rows: warp * R + r. A row past n_tok gets position -1: every key masked, its
  // state stays empty and it is never written.
  int qpos[R];
  float o[R][C];
  SoftmaxState st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = t0 + warp * R + r;
    qpos[r] = t < a.n_tok ? a.pos0 + t : -1;
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
  }

  const int t_last = (t0 + BQ < a.n_tok ? t0 + BQ : a.n_tok) - 1;
  const int n_keys = a.pos0 + t_last + 1;  // keys any row of this CTA attends
  for (int j0 = 0; j0 < n_keys; j0 += kTileKeys) {
    __syncthreads();  // Q stored (first tile); the previous V tile consumed
    // Rows past n_keys are zeros, never cache contents (which may be anything there).
    for (int row = warp; row < kTileKeys; row += kTileWarps) {
      const int j = j0 + row;
      for (int d = lane; d < L.sq; d += 32) {
        sKV[row * L.sk + d] = j < n_keys && d < a.hd ? load_kv(kb + j * a.k_stride + d) : 0.0f;
      }
    }
    __syncthreads();

    // Scores of key j0 + lane against this warp's rows.
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = 0.0f;
    const float4* k4 = reinterpret_cast<const float4*>(sKV + lane * L.sk);
    for (int d4 = 0; d4 < L.sq / 4; ++d4) {
      const float4 kk = k4[d4];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 qq = reinterpret_cast<const float4*>(sQ + (warp * R + r) * L.sq)[d4];
        s[r] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
      }
    }
    const int j = j0 + lane;
    float p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float x = j <= qpos[r] ? s[r] * a.scale : -INFINITY;  // causal mask
      const float alpha = softmax_advance(st[r], warp_max(x));
      p[r] = softmax_weight(x, st[r].m);
      st[r].s += warp_sum(p[r]);
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= alpha;
    }
    __syncthreads();  // K tile consumed

    for (int row = warp; row < kTileKeys; row += kTileWarps) {
      const int jr = j0 + row;
      for (int d = lane; d < a.hdv; d += 32) {
        sKV[row * a.hdv + d] = jr < n_keys ? load_kv(vb + jr * a.v_stride + d) : 0.0f;
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
    const float inv = softmax_inv_sum(st[r]);
    float* out = a.out + (int64_t{t} * a.n_head + h) * a.hdv;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int d = lane + 32 * c;
      if (d < a.hdv) out[d] = o[r][c] * inv;
    }
  }
}

// Below this many queries each (token, head) gets its own CTA (attn_vec_kernel): a query tile
// of the prefill kernel would be mostly empty rows, and a few long-context queries need the
// vector kernel's 8 warps per head to keep the memory busy.
constexpr int64_t kMinTileQueries = 8;

template <typename T>
cudaError_t launch_typed(const AttnArgs& a, cudaStream_t stream) {
  const int width = a.hd > a.hdv ? a.hd : a.hdv;
  if (a.n_tok < kMinTileQueries) {
    const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tok));
    const dim3 block(kVecWarps * 32);
    if (width <= 32) {
      attn_vec_kernel<T, 1><<<grid, block, 0, stream>>>(a);
    } else if (width <= 64) {
      attn_vec_kernel<T, 2><<<grid, block, 0, stream>>>(a);
    } else if (width <= 128) {
      attn_vec_kernel<T, 4><<<grid, block, 0, stream>>>(a);
    } else {
      attn_vec_kernel<T, 8><<<grid, block, 0, stream>>>(a);
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
    tile(attn_tile_kernel<T, 2>, tile_rows<2>());
  } else if (width <= 128) {
    tile(attn_tile_kernel<T, 4>, tile_rows<4>());
  } else {
    tile(attn_tile_kernel<T, 8>, tile_rows<8>());
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention(const float* q, const void* k, const void* v, GgmlType kv_type,
                             float* out, int64_t n_tok, int64_t pos0, int64_t n_head,
                             int64_t n_kv_heads, int64_t head_dim, int64_t head_dim_v, float scale,
                             cudaStream_t stream) {
  if (kv_type != GgmlType::F32 && kv_type != GgmlType::F16) return cudaErrorInvalidValue;
  if (n_tok < 0 || pos0 < 0 || n_head < 1 || n_kv_heads < 1 || n_head % n_kv_heads != 0 ||
      n_head > 65535 || head_dim < 1 || head_dim > kMaxHeadDim || head_dim_v < 1 ||
      head_dim_v > kMaxHeadDim || pos0 + n_tok > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  if (n_tok == 0) return cudaSuccess;
  if (!q || !k || !v || !out) return cudaErrorInvalidValue;
  AttnArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.n_tok = static_cast<int>(n_tok);
  a.pos0 = static_cast<int>(pos0);
  a.n_head = static_cast<int>(n_head);
  a.n_rep = static_cast<int>(n_head / n_kv_heads);
  a.hd = static_cast<int>(head_dim);
  a.hdv = static_cast<int>(head_dim_v);
  a.k_stride = n_kv_heads * head_dim;
  a.v_stride = n_kv_heads * head_dim_v;
  a.scale = scale;
  return kv_type == GgmlType::F32 ? launch_typed<float>(a, stream)
                                  : launch_typed<uint16_t>(a, stream);
}

}  // namespace spw::kernels
