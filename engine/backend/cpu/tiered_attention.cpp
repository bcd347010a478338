#include "engine/backend/cpu/tiered_attention.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>

namespace spw::cpu {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

}  // namespace

TieredAttention::TieredAttention(const AttnDims& dims, const kv::WindowRule& rule,
                                 kv::KvAttention mode, int64_t top_k)
    : d_(dims),
      rule_(rule),
      mode_(mode),
      top_k_(top_k),
      n_rep_(dims.n_head / dims.n_head_kv),
      bs_(rule.block_size) {
  if (mode_ == kv::KvAttention::TopK) {
    kmin_.resize(static_cast<size_t>(d_.n_layer));
    kmax_.resize(static_cast<size_t>(d_.n_layer));
  }
}

template <typename BlocksOf>
void TieredAttention::plan_exact(int64_t n, int64_t max_blocks, int n_threads, BlocksOf blocks_of) {
  const int64_t n_kv = d_.n_head_kv;
  const bool per_block = n * n_kv < 4 * static_cast<int64_t>(n_threads) &&
                         n * n_kv * max_blocks * n_rep_ <= kMaxBlockPartials;
  int64_t slot = 0;
  for (int64_t t = 0; t < n; ++t) {
    const auto [b0, b1] = blocks_of(t);
    for (int64_t g = 0; g < n_kv; ++g) {
      first_slot_[static_cast<size_t>(t * n_kv + g)] = slot;
      if (per_block && b1 > b0) {
        for (int64_t b = b0; b < b1; ++b) jobs_.push_back(Job{t, g, false, b, b + 1, slot++});
      } else {
        jobs_.push_back(Job{t, g, false, b0, b1, slot++});
      }
    }
  }
  first_slot_.back() = slot;
}

void TieredAttention::plan(int64_t pos0, int64_t n, int n_threads) {
  given_ = false;
  const kv::QueryBlocks qlast = rule_.query(pos0 + n - 1);
  // Exact attention, and an approximate mode with no cold block yet (a later query has at
  // least the cold blocks of an earlier one), run query-tiled (see the top of the header).
  tiled_ = mode_ == kv::KvAttention::Exact || qlast.cold_end <= qlast.sink_end;
  if (tiled_) return plan_tiled(pos0, n);
  pos0_ = pos0;
  n_ = n;
  const int64_t n_kv = d_.n_head_kv;
  jobs_.clear();
  first_slot_.assign(static_cast<size_t>(n * n_kv + 1), 0);
  const int64_t cold_max = qlast.cold_end - qlast.sink_end;
  const int64_t chunks_wanted = std::max<int64_t>(1, kTargetJobs / (n * n_kv));
  const int64_t chunk_blocks =
      std::max(kv::ceil_div(kMinChunkTokens, bs_),
               kv::ceil_div(std::max<int64_t>(cold_max, 1), chunks_wanted));
  int64_t slot = 0;
  for (int64_t t = 0; t < n; ++t) {
    const kv::QueryBlocks qb = rule_.query(pos0 + t);
    // Cold blocks wholly before the span are not attended.
    const int64_t cold0 = std::max(qb.sink_end, lowest(pos0 + t) / bs_);
    for (int64_t g = 0; g < n_kv; ++g) {
      first_slot_[static_cast<size_t>(t * n_kv + g)] = slot;
      jobs_.push_back(Job{t, g, false, 0, 0, slot++});
      if (qb.cold_end <= cold0 || mode_ == kv::KvAttention::Streaming) continue;
      const int64_t step = mode_ == kv::KvAttention::TopK ? qb.cold_end - cold0 : chunk_blocks;
      for (int64_t b0 = cold0; b0 < qb.cold_end; b0 += step)
        jobs_.push_back(Job{t, g, true, b0, std::min(b0 + step, qb.cold_end), slot++});
    }
  }
  first_slot_.back() = slot;
  const auto need = static_cast<size_t>(first_slot_.back() * n_rep_);
  if (parts_.size() < need) parts_.resize(need);
}

void TieredAttention::plan_given(int64_t pos0, int64_t n, std::span<const kv::BlockView> blocks,
                                 int n_threads) {
  assert(mode_ == kv::KvAttention::Exact);
  given_ = true;
  tiled_ = false;
  pos0_ = pos0;
  n_ = n;
  jobs_.clear();
  first_slot_.assign(static_cast<size_t>(n * d_.n_head_kv + 1), 0);
  const auto n_blocks = static_cast<int64_t>(blocks.size());
  // The first given block that ends after position lo (blocks are in position order).
  const auto first_after = [&](int64_t lo) {
    int64_t b = 0;
    while (b < n_blocks &&
           blocks[static_cast<size_t>(b)].pos0 + blocks[static_cast<size_t>(b)].n_tokens <= lo) {
      ++b;
    }
    return b;
  };
  plan_exact(n, n_blocks, n_threads, [&](int64_t t) {
    return std::pair<int64_t, int64_t>{first_after(lowest(pos0 + t)), n_blocks};
  });
  const auto need = static_cast<size_t>(first_slot_.back() * n_rep_);
  if (parts_.size() < need) parts_.resize(need);
}

// TopK's choice among cold blocks [b0, b1) for the GQA group of q (n_rep query heads) on KV
// head g: the top_k blocks by Quest's upper bound of q . k, in position order.
void TieredAttention::select_top_k(int64_t il, const float* q, int64_t g, int64_t b0, int64_t b1,
                                   std::vector<int64_t>& out) const {
  const int64_t hd = d_.head_dim, n_kv = d_.n_head_kv;
  const int64_t k = top_k_;
  out.clear();
  if (b1 - b0 <= k) {
    for (int64_t b = b0; b < b1; ++b) out.push_back(b);
    return;
  }
  thread_local std::vector<std::pair<float, int64_t>> scored;
  scored.clear();
  const std::vector<float>& mn = kmin_[static_cast<size_t>(il)];
  const std::vector<float>& mx = kmax_[static_cast<size_t>(il)];
  for (int64_t b = b0; b < b1; ++b) {
    const float* lo = &mn[static_cast<size_t>((b * n_kv + g) * hd)];
    const float* hi = &mx[static_cast<size_t>((b * n_kv + g) * hd)];
    float bound = 0.0f;
    for (int64_t r = 0; r < n_rep_; ++r) {
      const float* qr = q + r * hd;
      for (int64_t dd = 0; dd < hd; ++dd) bound += std::max(qr[dd] * lo[dd], qr[dd] * hi[dd]);
    }
    scored.emplace_back(bound, b);
  }
  std::partial_sort(scored.begin(), scored.begin() + k, scored.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  for (int64_t i = 0; i < k; ++i) out.push_back(scored[static_cast<size_t>(i)].second);
  std::sort(out.begin(), out.end());
}

void TieredAttention::update_key_bounds(int64_t il, std::span<const kv::BlockView> blocks,
                                        int64_t p0, int64_t p1) {
  if (!keeps_key_bounds()) return;
  const int64_t hd = d_.head_dim, n_kv = d_.n_head_kv;
  std::vector<float>& mn = kmin_[static_cast<size_t>(il)];
  std::vector<float>& mx = kmax_[static_cast<size_t>(il)];
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t pos = p0; pos < p1; ++pos) {
    const int64_t b = pos / bs_, j = pos % bs_;
    const auto need = static_cast<size_t>((b + 1) * n_kv * hd);
    if (mn.size() < need) {
      mn.resize(need, INFINITY);
      mx.resize(need, -INFINITY);
    }
    const kv::BlockView& view = blocks[static_cast<size_t>(b)];
    for (int64_t g = 0; g < n_kv; ++g) {
      float* lo = &mn[static_cast<size_t>((b * n_kv + g) * hd)];
      float* hi = &mx[static_cast<size_t>((b * n_kv + g) * hd)];
      if (j == 0) {
        std::fill(lo, lo + hd, INFINITY);
        std::fill(hi, hi + hd, -INFINITY);
      }
      dequantize_row(d_.type_k, view.k + row_size(d_.type_k, (g * bs_ + j) * hd), row.data(), hd);
      for (int64_t dd = 0; dd < hd; ++dd) {
        lo[dd] = std::min(lo[dd], row[static_cast<size_t>(dd)]);
        hi[dd] = std::max(hi[dd], row[static_cast<size_t>(dd)]);
      }
    }
  }
}

void TieredAttention::clear_key_bounds() {
  for (auto& v : kmin_) v.clear();
  for (auto& v : kmax_) v.clear();
}

void TieredAttention::run(ThreadPool& pool, int64_t il, const float* q_all,
                          std::span<const kv::BlockView> blocks, AttnTimes& times) {
  if (tiled_) return run_tiled(pool, q_all, blocks, times);
  const int64_t hd = d_.head_dim, hdv = d_.head_dim_v, n_rep = n_rep_;
  const int64_t q_dim = d_.n_head * hd;
  const bool exact = mode_ == kv::KvAttention::Exact;
  const bool top_k = mode_ == kv::KvAttention::TopK;
  const AttnShape shape{
      n_rep, hd, hdv,
      d_.scale != 0.0f ? d_.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
  std::atomic<int64_t> window_total{0}, cold_total{0};

  pool.parallel_for(static_cast<int64_t>(jobs_.size()), [&](int64_t jb, int64_t je) {
    thread_local std::vector<AttnPartial> tmp;
    thread_local std::vector<int64_t> chosen;
    tmp.resize(static_cast<size_t>(n_rep));
    int64_t window_ns = 0, cold_ns = 0;
    for (int64_t ji = jb; ji < je; ++ji) {
      const auto t0 = Clock::now();
      const Job& job = jobs_[static_cast<size_t>(ji)];
      const int64_t p = pos0_ + job.t;
      const int64_t lo = lowest(p);
      const float* q = q_all + job.t * q_dim + job.g * n_rep * hd;
      AttnPartial* out = &parts_[static_cast<size_t>(job.slot * n_rep)];
      bool first = true;
      const auto block = [&](int64_t b) {
        const kv::BlockView& view = blocks[static_cast<size_t>(b)];
        // Rows [r0, r1): causal, and within the span (the boundary block's earlier rows
        // masked; a block wholly outside it contributes nothing).
        const int64_t r0 = std::max<int64_t>(0, lo - view.pos0);
        const int64_t r1 = std::min(view.n_tokens, p + 1 - view.pos0);
        if (r1 <= r0) return;
        const KvSpan k{view.k + row_size(d_.type_k, (job.g * bs_ + r0) * hd), d_.type_k, hd};
        const KvSpan v{view.v + row_size(d_.type_v, (job.g * bs_ + r0) * hdv), d_.type_v, hdv};
        attn_partial(shape, q, k, v, r1 - r0, first ? out : tmp.data());
        if (!first) {
          for (int64_t r = 0; r < n_rep; ++r) attn_merge(out[r], tmp[static_cast<size_t>(r)]);
        }
        first = false;
      };
      // Time goes to window or cold attention by the tier of the blocks attended: one segment
      // per job, except that an exact job's position-order walk may cross the window rule's
      // boundaries (sinks | cold | recent), each crossing closing a segment. Given blocks are
      // all cold.
      auto seg0 = t0;
      bool seg_cold = job.cold || given_;
      if (exact) {
        const kv::QueryBlocks qb = rule_.query(p);
        const auto is_cold = [&](int64_t b) { return given_ || qb.cold(b); };
        seg_cold = is_cold(job.b0);
        for (int64_t b = job.b0; b < job.b1; ++b) {
          if (is_cold(b) != seg_cold) {
            const auto now = Clock::now();
            (seg_cold ? cold_ns : window_ns) += ns_between(seg0, now);
            seg0 = now;
            seg_cold = !seg_cold;
          }
          block(b);
        }
      } else if (!job.cold) {
        const kv::QueryBlocks qb = rule_.query(p);
        for (int64_t b = 0; b < qb.sink_end; ++b) block(b);
        for (int64_t b = qb.cold_end; b <= qb.last; ++b) block(b);
      } else if (top_k) {
        select_top_k(il, q, job.g, job.b0, job.b1, chosen);
        for (const int64_t b : chosen) block(b);
      } else {
        for (int64_t b = job.b0; b < job.b1; ++b) block(b);
      }
      if (first) {  // nothing attended: an empty partial
        for (int64_t r = 0; r < n_rep; ++r) {
          out[r].m = -INFINITY;
          out[r].s = 0.0f;
        }
      }
      (seg_cold ? cold_ns : window_ns) += ns_between(seg0, Clock::now());
    }
    window_total.fetch_add(window_ns, std::memory_order_relaxed);
    cold_total.fetch_add(cold_ns, std::memory_order_relaxed);
  });
  times.window_ns += window_total.load(std::memory_order_relaxed);
  times.cold_ns += cold_total.load(std::memory_order_relaxed);
}

// Query head r of (query, KV head) pair `pair`: its partials merged in slot order (window first,
// then the cold chunks by position), fixed, so the result does not depend on which thread ran
// which job. The merge accumulates into the pair's first slot.
const AttnPartial& TieredAttention::merged(int64_t pair, int64_t r) {
  const int64_t s0 = first_slot_[static_cast<size_t>(pair)];
  const int64_t s1 = first_slot_[static_cast<size_t>(pair + 1)];
  AttnPartial& acc = parts_[static_cast<size_t>(s0 * n_rep_ + r)];
  for (int64_t s = s0 + 1; s < s1; ++s)
    attn_merge(acc, parts_[static_cast<size_t>(s * n_rep_ + r)]);
  return acc;
}

void TieredAttention::finalize(ThreadPool& pool, float* out, AttnTimes& times) {
  if (tiled_) return finalize_tiled(out, times);
  const auto t0 = Clock::now();
  const int64_t n_kv = d_.n_head_kv, hdv = d_.head_dim_v;
  const auto merge = [&](int64_t b, int64_t e) {
    for (int64_t pair = b; pair < e; ++pair) {
      const int64_t t = pair / n_kv, g = pair % n_kv;
      for (int64_t r = 0; r < n_rep_; ++r)
        attn_finalize(merged(pair, r), out + t * d_.n_head * hdv + (g * n_rep_ + r) * hdv);
    }
  };
  if (n_ == 1) {
    merge(0, n_kv);  // a handful of heads: not worth waking the workers
  } else {
    pool.parallel_for(n_ * n_kv, merge);
  }
  times.merge_ns += ns_between(t0, Clock::now());
}

void TieredAttention::write_partials(float* o, float* ms) {
  assert(!tiled_);  // plan_given() plans per-block partials
  const int64_t n_kv = d_.n_head_kv, hdv = d_.head_dim_v;
  for (int64_t pair = 0; pair < n_ * n_kv; ++pair) {
    const int64_t t = pair / n_kv, g = pair % n_kv;
    for (int64_t r = 0; r < n_rep_; ++r) {
      const AttnPartial& acc = merged(pair, r);
      const int64_t h = t * d_.n_head + g * n_rep_ + r;
      if (acc.s > 0.0f && static_cast<int64_t>(acc.o.size()) == hdv) {
        std::copy(acc.o.begin(), acc.o.end(), o + h * hdv);
      } else {  // nothing attended (s == 0): the empty partial
        std::fill(o + h * hdv, o + (h + 1) * hdv, 0.0f);
      }
      ms[2 * h] = acc.m;
      ms[2 * h + 1] = acc.s;
    }
  }
}

}  // namespace spw::cpu
