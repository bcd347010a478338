// Query-tiled exact attention of the CPU attention scheduler (tiered_attention.h has the plan's
// rules; engine/cpu/attention_tile.h the tile kernel and its determinism).
#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/backend/cpu/tiered_attention.h"
#include "engine/cpu/attention_tile.h"

namespace spw::cpu {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point a) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a).count();
}

// A thread's f32 copy of one KV head's K and V rows in the blocks of one key range (K or V not
// F32): the tiles of a range run one after another on a thread (plan_tiled's order), and each
// would otherwise convert the same rows chunk by chunk. Valid for one run_tiled call (its id):
// blocks are written between calls. [range_blocks][block size][head_dim] and [head_dim_v].
struct RangeF32 {
  uint64_t call = 0;
  int64_t g = -1;
  std::vector<int64_t> block;  // per slot b % range_blocks: the block it holds, or -1
  std::vector<float> k, v;
};

std::atomic<uint64_t> g_tiled_calls{0};

}  // namespace

void TieredAttention::plan_tiled(int64_t pos0, int64_t n) {
  pos0_ = pos0;
  n_ = n;
  const int64_t n_kv = d_.n_head_kv, hdv = d_.head_dim_v;
  tile_tok_ = tile_tokens(n_rep_);
  tile_rows_ = (std::min(tile_tok_, n) * n_rep_ + 15) / 16 * 16;
  const int64_t n_tiles = kv::ceil_div(n, tile_tok_);
  // Key ranges at fixed positions: multiples of range_blocks blocks, whatever the ubatch.
  const int64_t range_blocks = std::max<int64_t>(1, kRangeTokens / bs_);
  const auto slot_floats = static_cast<size_t>(tile_rows_ * (hdv + 2));
  tile_jobs_.clear();
  tile_waves_.clear();
  tile_first_slot_.assign(static_cast<size_t>(n_tiles * n_kv + 1), 0);
  int64_t slot = 0, wave_slot0 = 0, max_wave_slots = 1, wave_job0 = 0;
  // A wave's jobs run KV head by KV head and key range by key range (the tiles of one range
  // consecutive): a thread's run of jobs then reads one range's K and V (2,048 keys: 512 KiB of
  // f16 K and V at head_dim 64) from L2 tile after tile, where tile by tile it read the whole
  // causal range of every head again, from L3 or memory at long context. Results do not depend
  // on the order: each job writes its own slot, merged in slot order.
  const auto order_wave = [&] {
    std::stable_sort(tile_jobs_.begin() + wave_job0, tile_jobs_.end(),
                     [&](const TileJob& a, const TileJob& b) {
                       const int64_t ra = a.b0 / range_blocks, rb = b.b0 / range_blocks;
                       return a.g != b.g ? a.g < b.g : ra < rb;
                     });
    wave_job0 = static_cast<int64_t>(tile_jobs_.size());
  };
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t t0 = i * tile_tok_, nt = std::min(tile_tok_, n - t0);
    const int64_t bf = lowest(pos0 + t0) / bs_, bl = (pos0 + t0 + nt - 1) / bs_;
    // A wave's slots stay within kMaxWaveBytes (always at least one tile).
    const int64_t tile_slots = n_kv * (bl / range_blocks - bf / range_blocks + 1);
    if (slot > wave_slot0 &&
        static_cast<size_t>(slot - wave_slot0 + tile_slots) * slot_floats * sizeof(float) >
            static_cast<size_t>(kMaxWaveBytes)) {
      order_wave();
      tile_waves_.push_back(Wave{static_cast<int64_t>(tile_jobs_.size()), i * n_kv, wave_slot0});
      max_wave_slots = std::max(max_wave_slots, slot - wave_slot0);
      wave_slot0 = slot;
    }
    for (int64_t g = 0; g < n_kv; ++g) {
      tile_first_slot_[static_cast<size_t>(i * n_kv + g)] = slot;
      for (int64_t b = bf; b <= bl;) {
        const int64_t next = std::min(bl + 1, (b / range_blocks + 1) * range_blocks);
        tile_jobs_.push_back(TileJob{g, t0, nt, b, next, slot++});
        b = next;
      }
    }
  }
  tile_first_slot_.back() = slot;
  order_wave();
  tile_waves_.push_back(Wave{static_cast<int64_t>(tile_jobs_.size()), n_tiles * n_kv, wave_slot0});
  max_wave_slots = std::max(max_wave_slots, slot - wave_slot0);
  tile_state_.resize(static_cast<size_t>(max_wave_slots) * slot_floats);
  tile_out_.resize(static_cast<size_t>(n * d_.n_head * hdv));
}

void TieredAttention::run_tiled(ThreadPool& pool, const float* q_all,
                                std::span<const kv::BlockView> blocks, AttnTimes& times) {
  const int64_t hd = d_.head_dim, hdv = d_.head_dim_v, q_dim = d_.n_head * hd;
  const int64_t n_kv = d_.n_head_kv, rows = tile_rows_;
  const AttnShape shape{
      n_rep_, hd, hdv,
      d_.scale != 0.0f ? d_.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
  // A slot's state: o [rows][hdv], then m [rows], then s [rows].
  const auto slot_floats = static_cast<size_t>(rows * (hdv + 2));
  std::atomic<int64_t> window_total{0}, cold_total{0};
  int64_t job0 = 0, pair0 = 0, merge_ns = 0;
  const bool to_f32 = d_.type_k != GgmlType::F32 || d_.type_v != GgmlType::F32;
  const uint64_t call = g_tiled_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t range_blocks = std::max<int64_t>(1, kRangeTokens / bs_);
  for (const Wave& w : tile_waves_) {
    const int64_t slot0 = w.slot0;
    pool.parallel_for(w.job_end - job0, [&](int64_t jb, int64_t je) {
      thread_local TileQueries tq;
      thread_local RangeF32 rf;
      int64_t window_ns = 0, cold_ns = 0;
      for (int64_t ji = job0 + jb; ji < job0 + je; ++ji) {
        const TileJob& job = tile_jobs_[static_cast<size_t>(ji)];
        const int64_t p_first = pos0_ + job.t0;
        tile_prepare(shape, q_all + job.t0 * q_dim + job.g * n_rep_ * hd, q_dim, job.nt, p_first,
                     d_.span, tq);
        float* o = &tile_state_[static_cast<size_t>(job.slot - slot0) * slot_floats];
        float* m = o + rows * hdv;
        float* s = m + rows;
        tile_state_reset(tq.rows, hdv, o, m, s);
        // Telemetry: a block is window or cold as the tile's last query sees it.
        const kv::QueryBlocks qb = rule_.query(p_first + job.nt - 1);
        // KV head job.g's K and V rows of a block (head-major within the block, bs_ rows each).
        const auto head_spans = [&](const kv::BlockView& bv) {
          return std::pair{KvSpan{bv.k + row_size(d_.type_k, job.g * bs_ * hd), d_.type_k, hd},
                           KvSpan{bv.v + row_size(d_.type_v, job.g * bs_ * hdv), d_.type_v, hdv}};
        };
        if (to_f32 && (rf.call != call || rf.g != job.g)) {
          rf.call = call;
          rf.g = job.g;
          rf.block.assign(static_cast<size_t>(range_blocks), -1);
          rf.k.resize(static_cast<size_t>(range_blocks * bs_ * hd));
          rf.v.resize(static_cast<size_t>(range_blocks * bs_ * hdv));
        }
        const auto held = [&](int64_t b) {
          return to_f32 && rf.block[static_cast<size_t>(b % range_blocks)] == b;
        };
        for (int64_t b = job.b0; b < job.b1; ++b) {
          const auto t0 = Clock::now();
          const kv::BlockView& view = blocks[static_cast<size_t>(b)];
          auto [k, v] = head_spans(view);
          if (to_f32) {  // the range's rows in f32, converted by the first tile that needs them
            const auto slot = static_cast<size_t>(b % range_blocks);
            float* kf = &rf.k[slot * static_cast<size_t>(bs_ * hd)];
            float* vf = &rf.v[slot * static_cast<size_t>(bs_ * hdv)];
            if (!held(b)) {
              tile_rows_f32(k, hd, view.n_tokens, kf);
              tile_rows_f32(v, hdv, view.n_tokens, vf);
              rf.block[slot] = b;
            }
            k = KvSpan{kf, GgmlType::F32, hd};
            v = KvSpan{vf, GgmlType::F32, hdv};
          }
          if (b + 1 < job.b1 && !held(b + 1)) {  // the next block's first chunk comes in now
            const kv::BlockView& next = blocks[static_cast<size_t>(b + 1)];
            const auto [nk, nv] = head_spans(next);
            tile_prefetch_block(nk, nv, next.n_tokens);
          }
          tile_attend_block(shape, tq, k, v, view.pos0, view.n_tokens, o, m, s);
          (qb.cold(b) ? cold_ns : window_ns) += ns_since(t0);
        }
      }
      window_total.fetch_add(window_ns, std::memory_order_relaxed);
      cold_total.fetch_add(cold_ns, std::memory_order_relaxed);
    });
    // Each (tile, KV head) pair's ranges merged in range order by the log-sum-exp rule (the
    // arithmetic of attn_merge()), then normalised into tile_out_ [n][n_head][head_dim_v].
    const auto t_merge = Clock::now();
    pool.parallel_for(w.pair_end - pair0, [&](int64_t pb, int64_t pe) {
      for (int64_t pair = pair0 + pb; pair < pair0 + pe; ++pair) {
        const int64_t tile = pair / n_kv, g = pair % n_kv;
        const int64_t tt0 = tile * tile_tok_, nt = std::min(tile_tok_, n_ - tt0);
        const int64_t s0 = tile_first_slot_[static_cast<size_t>(pair)] - slot0;
        const int64_t s1 = tile_first_slot_[static_cast<size_t>(pair + 1)] - slot0;
        const auto state = [&](int64_t sl) {
          return &tile_state_[static_cast<size_t>(sl) * slot_floats];
        };
        for (int64_t i = 0; i < nt * n_rep_; ++i) {
          float* o = state(s0) + i * hdv;
          float& m = state(s0)[rows * hdv + i];
          float& s = state(s0)[rows * hdv + rows + i];
          for (int64_t sl = s0 + 1; sl < s1; ++sl) {
            const float* o2 = state(sl) + i * hdv;
            const float m2 = state(sl)[rows * hdv + i], s2 = state(sl)[rows * hdv + rows + i];
            if (s2 == 0.0f) continue;
            if (s == 0.0f) {
              std::copy(o2, o2 + hdv, o);
              m = m2;
              s = s2;
              continue;
            }
            const float mm = std::max(m, m2);
            const float a = std::exp(m - mm), b = std::exp(m2 - mm);
            for (int64_t d = 0; d < hdv; ++d) o[d] = o[d] * a + o2[d] * b;
            s = s * a + s2 * b;
            m = mm;
          }
          const int64_t t = tt0 + i / n_rep_, h = g * n_rep_ + i % n_rep_;
          float* dst = &tile_out_[static_cast<size_t>((t * d_.n_head + h) * hdv)];
          const float inv = s > 0.0f ? 1.0f / s : 0.0f;
          for (int64_t d = 0; d < hdv; ++d) dst[d] = o[d] * inv;
        }
      }
    });
    merge_ns += ns_since(t_merge);
    job0 = w.job_end;
    pair0 = w.pair_end;
  }
  times.window_ns += window_total.load(std::memory_order_relaxed);
  times.cold_ns += cold_total.load(std::memory_order_relaxed);
  times.merge_ns += merge_ns;
}

void TieredAttention::finalize_tiled(float* out, AttnTimes& times) {
  const auto t0 = Clock::now();
  std::copy(tile_out_.begin(), tile_out_.end(), out);
  times.merge_ns += ns_since(t0);
}

}  // namespace spw::cpu
