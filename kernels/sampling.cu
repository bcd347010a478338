// Greedy and top-k selection over the logits, each in one CTA: a row of logits (32k-152k
// floats) is a few hundred KB, read from L2 in microseconds, and one CTA needs no scratch
// and no second launch.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxK = 256;

// ---- argmax -------------------------------------------------------------------------------

// A candidate maximum; idx < 0 means none yet (every value so far NaN).
struct Best {
  float val;
  int32_t idx;
};

// The larger value wins; equal values go to the lower index; "none" loses to anything.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.idx < 0) return b;
  if (b.idx < 0) return a;
  if (a.val != b.val) return a.val > b.val ? a : b;
  return a.idx < b.idx ? a : b;
}

// out[0] = argmax of x[0..n); NaN is skipped; 0 when every value is NaN.
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* __restrict__ x, int32_t n, int32_t* __restrict__ out) {
  __shared__ Best warp_best[kWarps];
  Best b{0.0f, -1};
  for (int32_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = x[i];
    if (v == v && (b.idx < 0 || v > b.val)) b = {v, i};  // ascending i: ties keep the first
  }
  for (int off = 16; off > 0; off >>= 1) {
    const Best o{__shfl_xor_sync(0xffffffffu, b.val, off),
                 __shfl_xor_sync(0xffffffffu, b.idx, off)};
    b = better(b, o);
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best r = warp_best[0];
    for (int w = 1; w < kWarps; ++w) r = better(r, warp_best[w]);
    out[0] = r.idx < 0 ? 0 : r.idx;
  }
}

// ---- top-k --------------------------------------------------------------------------------

// An unsigned key ordered as the floats: larger float, larger key. -0 and +0 share a key (they
// are equal values, so the lower index wins between them); NaN is 0, below -inf (0x007FFFFF),
// so it is only chosen when fewer than k values are not NaN.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0u;
  const uint32_t b = v == 0.0f ? 0u : __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Radix select (most significant byte first) of the k-th largest key T, then a gather of
// every key > T and of the lowest-indexed keys == T, then a rank sort of those k candidates.
// Four passes over x for the select, one for the gather.
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const float* __restrict__ x, int32_t n, int k, int32_t* __restrict__ out_idx,
                float* __restrict__ out_val) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_krem;
  __shared__ int32_t cand[kMaxK];
  __shared__ uint32_t cand_key[kMaxK];
  __shared__ uint32_t warp_eq[kWarps];
  __shared__ uint32_t s_n_gt, s_eq_taken;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // Select: after the pass at `shift`, prefix holds the top bytes of T down to `shift` and
  // k_rem how many of the keys matching the prefix still belong to the top k.
  uint32_t prefix = 0, mask = 0, k_rem = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int32_t base = 0; base < n; base += kThreads) {  // uniform trip count: full warps
      const int32_t i = base + tid;
      const uint32_t key = i < n ? order_key(x[i]) : 0u;
      const bool in = i < n && (key & mask) == prefix;
      const uint32_t digit = in ? (key >> shift) & 0xFFu : 0x100u;  // 0x100: no bin
      const uint32_t same = __match_any_sync(0xffffffffu, digit);
      if (in && lane == __ffs(same) - 1)
        atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(same)));
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l owns digits 255 - 8l down to 248 - 8l; lanes before it own the larger digits.
      uint32_t c[8], total = 0;
      for (int j = 0; j < 8; ++j) total += c[j] = hist[255 - 8 * lane - j];
      uint32_t incl = total;
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      uint32_t above = incl - total;  // keys with a larger digit
      if (above < k_rem && k_rem <= incl) {
        for (int j = 0; j < 8; ++j) {
          if (above + c[j] >= k_rem) {
            s_prefix = prefix | (static_cast<uint32_t>(255 - 8 * lane - j) << shift);
            s_krem = k_rem - above;
            break;
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix = s_prefix;
    k_rem = s_krem;
    mask |= 0xFFu << shift;
    __syncthreads();  // s_prefix is rewritten by the next pass
  }
  const uint32_t T = prefix;  // the k-th largest key; k_rem of the keys == T are taken

  // Gather: keys > T (exactly k - k_rem of them) in any order into cand[0, k - k_rem); keys
  // == T by ascending index into the rest while they last.
  const uint32_t n_gt = static_cast<uint32_t>(k) - k_rem;
  if (tid == 0) s_n_gt = s_eq_taken = 0;
  __syncthreads();
  for (int32_t base = 0; base < n; base += kThreads) {
    const int32_t i = base + tid;
    const uint32_t key = i < n ? order_key(x[i]) : 0u;
    if (i < n && key > T) cand[atomicAdd(&s_n_gt, 1u)] = i;
    const bool eq = i < n && key == T;
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_eq[warp] = __popc(ballot);
    __syncthreads();
    uint32_t rank = s_eq_taken + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) rank += warp_eq[w];
    if (eq && rank < k_rem) cand[n_gt + rank] = i;
    __syncthreads();
    if (tid == 0) {
      uint32_t sum = 0;
      for (int w = 0; w < kWarps; ++w) sum += warp_eq[w];
      s_eq_taken += sum;
    }
    __syncthreads();
  }

  // Rank sort of the k candidates: by key descending, then index ascending (ranks distinct).
  if (tid < k) cand_key[tid] = order_key(x[cand[tid]]);
  __syncthreads();
  if (tid < k) {
    const int32_t ii = cand[tid];
    const uint32_t ki = cand_key[tid];
    int r = 0;
    for (int j = 0; j < k; ++j) {
      const uint32_t kj = cand_key[j];
      r += (kj > ki || (kj == ki && cand[j] < ii)) ? 1 : 0;
    }
    out_idx[r] = ii;
    out_val[r] = x[ii];
  }
}

}  // namespace

cudaError_t launch_argmax(const float* x, int64_t n, int32_t* out, cudaStream_t stream) {
  if (n < 1 || n > INT32_MAX || !x || !out) return cudaErrorInvalidValue;
  argmax_kernel<<<1, kThreads, 0, stream>>>(x, static_cast<int32_t>(n), out);
  return cudaGetLastError();
}

cudaError_t launch_topk(const float* x, int64_t n, int k, int32_t* idx, float* val,
                        cudaStream_t stream) {
  if (k < 1 || k > kMaxK || k > n || n > INT32_MAX || !x || !idx || !val) {
    return cudaErrorInvalidValue;
  }
  topk_kernel<<<1, kThreads, 0, stream>>>(x, static_cast<int32_t>(n), k, idx, val);
  return cudaGetLastError();
}

}  // namespace spw::kernels
