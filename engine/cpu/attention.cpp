#include "engine/cpu/attention.h"

#include <algorithm>
#include <cassert>

#include "engine/cpu/kernels.h"

namespace spw::cpu {
namespace {

// Positions per step of the online softmax: the K and V rows of one step (64 x 128 dims in
// f16: 16 KB each) stay in L1 between the score pass and the accumulation pass.
constexpr int64_t kChunk = 64;

KvFormat format_of(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return KvFormat::F16;
    case GgmlType::Q8_0:
      return KvFormat::Q8_0;
    default:
      return KvFormat::F32;
  }
}

const void* row_ptr(const KvSpan& s, int64_t j) {
  const auto* base = static_cast<const uint8_t*>(s.data);
  const auto e = static_cast<size_t>(j * s.stride);
  switch (s.type) {
    case GgmlType::F16:
      return base + e * 2;
    case GgmlType::Q8_0:
      return base + e / 32 * sizeof(BlockQ8_0);
    default:
      return base + e * 4;
  }
}

[[maybe_unused]] bool valid_span(const KvSpan& s, int64_t row_len) {
  if (s.type == GgmlType::Q8_0) return s.stride % 32 == 0 && row_len % 32 == 0;
  return s.type == GgmlType::F32 || s.type == GgmlType::F16;
}

}  // namespace

void attn_partial(const AttnShape& shape, const float* q, KvSpan k, KvSpan v, int64_t n_kv,
                  AttnPartial* out) {
  assert(valid_span(k, shape.head_dim));
  assert(valid_span(v, shape.head_dim_v));
  const KvFormat kf = format_of(k.type), vf = format_of(v.type);
  const OpKernels& K = active_op_kernels();
  const int64_t n_q = shape.n_q, hdv = shape.head_dim_v;
  thread_local std::vector<float> scores, o;  // [n_q][kChunk], [n_q][hdv]
  scores.resize(static_cast<size_t>(n_q * kChunk));
  o.assign(static_cast<size_t>(n_q * hdv), 0.0f);
  for (int64_t h = 0; h < n_q; ++h) {
    out[h].m = -INFINITY;
    out[h].s = 0.0f;
  }
  for (int64_t j0 = 0; j0 < n_kv; j0 += kChunk) {
    const int64_t nc = std::min(kChunk, n_kv - j0);
    K.attn_scores(q, n_q, shape.head_dim, row_ptr(k, j0), kf, k.stride, nc, shape.scale,
                  scores.data(), kChunk);
    for (int64_t h = 0; h < n_q; ++h) {
      float* sc = scores.data() + h * kChunk;
      const float m_new = std::max(out[h].m, *std::max_element(sc, sc + nc));
      if (out[h].s > 0.0f && m_new > out[h].m) {
        const float alpha = std::exp(out[h].m - m_new);
        K.scale(o.data() + h * hdv, alpha, hdv);
        out[h].s *= alpha;
      }
      out[h].s += K.exp_sum(sc, nc, m_new);
      out[h].m = m_new;
    }
    K.attn_accum(scores.data(), kChunk, n_q, row_ptr(v, j0), vf, v.stride, nc, hdv, o.data());
  }
  for (int64_t h = 0; h < n_q; ++h) {
    out[h].o.assign(o.begin() + h * hdv, o.begin() + (h + 1) * hdv);
  }
}

void attn_merge(AttnPartial& into, const AttnPartial& other) {
  if (other.s == 0.0f) return;  // empty range: nothing to add
  if (into.s == 0.0f) {
    into = other;
    return;
  }
  assert(into.o.size() == other.o.size());
  const float m = std::max(into.m, other.m);
  const float a = std::exp(into.m - m), b = std::exp(other.m - m);
  for (size_t i = 0; i < into.o.size(); ++i) into.o[i] = into.o[i] * a + other.o[i] * b;
  into.s = into.s * a + other.s * b;
  into.m = m;
}

void attn_finalize(const AttnPartial& p, float* out) {
  const float inv = p.s > 0.0f ? 1.0f / p.s : 0.0f;
  for (size_t i = 0; i < p.o.size(); ++i) out[i] = p.o[i] * inv;
}

}  // namespace spw::cpu
