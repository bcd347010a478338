// The online-softmax arithmetic of the attention kernels (kernels/paged_attention.cu), shared
// with the CPU tests (tests/unit/test_kernel_softmax_math.cpp), so the rules that keep it exact
// and NaN-free are checked without a GPU.
//
// A softmax-weighted sum over scores x_j and values v_j is carried as a *partial*
//   m = max_j x_j,  s = sum_j exp(x_j - m),  o = sum_j exp(x_j - m) v_j   (o unnormalised)
// and softmax(x) v = o / s. Scores are streamed one at a time or a block at a time (online
// softmax, Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"), and two
// partials over disjoint ranges merge exactly by the log-sum-exp rule (FlashAttention, Dao et
// al. 2022; flash-decoding, Dao et al. 2023):
//   m = max(m_a, m_b),  alpha = exp(m_a - m),  beta = exp(m_b - m),
//   s = alpha s_a + beta s_b,  o = alpha o_a + beta o_b.
// These are the rules of spw::cpu::attn_partial / attn_merge (engine/cpu/attention.h).
//
// The empty partial is m = -inf, s = 0, o = 0. A masked score is -inf and has weight 0. The
// helpers never form (-inf) - (-inf), so masked scores and empty partials never give NaN.
// Scores must be finite or -inf: +inf scores or NaN propagate NaN, as in the CPU path.
//
// exp is expf in device code and std::exp on the host; the two may differ by an ulp or so
// (CUDA's expf has a maximum error of 2 ulp), so host and device results agree to rounding,
// not bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common.h"

namespace spw::kernels {

/// exp in f32: expf on the device, std::exp on the host (see above: not bit-identical).
SPW_HD float softmax_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

/// max(a, b) in f32 (fmaxf on the device, std::fmax on the host).
SPW_HD float softmax_max(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return std::fmax(a, b);
#endif
}

/// Running max and running sum of a partial; the o vector is the caller's.
struct SoftmaxState {
  float m = -INFINITY;  // max of the scores seen (-inf: none, or all masked)
  float s = 0.0f;       // sum of exp(score - m)
};

/// The factor that rescales a sum taken against max m_old to one against m_new >= m_old:
/// exp(m_old - m_new), and exactly 1 when they are equal (also when both are -inf, where the
/// plain formula gives NaN).
SPW_HD float softmax_rescale(float m_old, float m_new) {
  return m_old == m_new ? 1.0f : softmax_exp(m_old - m_new);
}

/// The weight of score x against the running max m >= x: exp(x - m), and 0 for a masked
/// score (x == -inf, also when m == -inf).
SPW_HD float softmax_weight(float x, float m) { return x == -INFINITY ? 0.0f : softmax_exp(x - m); }

/// First half of a block update: raises st.m to cover a block whose largest score is
/// block_max (-inf for an all-masked block) and rescales st.s. Returns alpha, the factor the
/// caller applies to its o; it then adds the block's weights softmax_weight(x_j, st.m) to st.s
/// and their weighted values to o.
SPW_HD float softmax_advance(SoftmaxState& st, float block_max) {
  const float m_new = softmax_max(st.m, block_max);
  const float alpha = softmax_rescale(st.m, m_new);
  st.m = m_new;
  st.s *= alpha;
  return alpha;
}

/// One step of the online softmax.
struct SoftmaxStep {
  float alpha;  // rescales the o accumulated so far
  float p;      // weight of the new value: o = alpha * o + p * v
};

/// Pushes one score x into st: o <- alpha * o + p * v.
SPW_HD SoftmaxStep softmax_push(SoftmaxState& st, float x) {
  const float alpha = softmax_advance(st, x);
  const float p = softmax_weight(x, st.m);
  st.s += p;
  return {alpha, p};
}

/// Pushes a block of n scores x[0..n) into st: p[j] receives each score's weight against the
/// new max, and the return value is alpha: o <- alpha * o + sum_j p[j] v_j. Sums the weights
/// left to right, as a single thread would.
SPW_HD float softmax_push_block(SoftmaxState& st, const float* x, int64_t n, float* p) {
  float block_max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) block_max = softmax_max(block_max, x[j]);
  const float alpha = softmax_advance(st, block_max);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = softmax_weight(x[j], st.m);
    sum += p[j];
  }
  st.s += sum;
  return alpha;
}

/// The factors of a merge: o_a <- alpha * o_a + beta * o_b.
struct SoftmaxMerge {
  float alpha;
  float beta;
};

/// Merges partial b into partial a (a becomes the partial of the union of both ranges) and
/// returns the factors for the o vectors. An empty side (s == 0, as attn_merge tests it)
/// contributes nothing: merging an empty b gives (1, 0) and leaves a unchanged, merging into
/// an empty a gives (0, 1) and a = b; two empty sides stay empty with (1, 0).
SPW_HD SoftmaxMerge softmax_merge(SoftmaxState& a, const SoftmaxState& b) {
  if (b.s == 0.0f) return {1.0f, 0.0f};
  if (a.s == 0.0f) {
    a = b;
    return {0.0f, 1.0f};
  }
  const float m = softmax_max(a.m, b.m);
  const float alpha = softmax_rescale(a.m, m), beta = softmax_rescale(b.m, m);
  a.s = a.s * alpha + b.s * beta;
  a.m = m;
  return {alpha, beta};
}

/// 1 / s, the factor that turns o into the softmax-weighted sum; 0 for an empty partial
/// (its output is zeros, as attn_finalize).
SPW_HD float softmax_inv_sum(const SoftmaxState& st) { return st.s > 0.0f ? 1.0f / st.s : 0.0f; }

}  // namespace spw::kernels
