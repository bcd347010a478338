#include "engine/backend/cpu/cpu_session.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/quant_dot.h"
#include "engine/kv/limits.h"
#include "engine/kv/snapshot.h"

namespace spw::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// Cold blocks are split so that one ubatch's attention has about this many jobs (decode: a
// few per KV head, spread over the workers), but a chunk never holds fewer than
// kMinChunkTokens positions (a job must outweigh its scheduling). A function of the ubatch
// size and the shapes only, never of the thread count: results stay bit-identical.
constexpr int64_t kTargetJobs = 64;
constexpr int64_t kMinChunkTokens = 256;
// Exact attention keeps one partial per (token, query head, block) when it splits a decode step
// by block; above this many it runs one job per (token, KV head) instead (same arithmetic).
constexpr int64_t kMaxBlockPartials = int64_t{1} << 16;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

int resolve_threads(int n) {
  if (n > 0) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

// Window / cold split of the blocks before a query at position p (see cpu_session.h): the
// window is [0, sink_end) and [cold_end, last + 1); the cold blocks are [sink_end, cold_end).
struct QueryBlocks {
  int64_t last = 0;      // the query's own block
  int64_t sink_end = 0;  // min(sink blocks, last + 1)
  int64_t cold_end = 0;  // first recent-window block (>= sink_end)
};

QueryBlocks query_blocks(int64_t p, int64_t bs, int64_t sink_blocks, int64_t window_blocks) {
  QueryBlocks q;
  q.last = p / bs;
  q.sink_end = std::min(sink_blocks, q.last + 1);
  q.cold_end = std::max(q.sink_end, q.last - window_blocks + 1);
  return q;
}

}  // namespace

Expected<std::unique_ptr<CpuSession>> CpuSession::create(const Model& model,
                                                         const SessionParams& params,
                                                         const CpuSessionParams& cpu) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  if (params.n_threads < 0)
    return make_error("thread count {} must not be negative", params.n_threads);
  if (cpu.n_ubatch < 1) return make_error("ubatch size {} must be at least 1", cpu.n_ubatch);
  if (cpu.paging.attention == KvAttention::TopK && cpu.paging.top_k < 1)
    return make_error("topk attention needs K >= 1 (got {})", cpu.paging.top_k);
  const ModelConfig& c = model.config();
  if (auto st = check_kv_types(params, c.head_dim, c.head_dim_v); !st) return st.error();

  kv::KvCacheConfig kc;
  kc.n_layer = c.n_layer;
  kc.n_kv_heads = c.n_head_kv;
  kc.head_dim = c.head_dim;
  kc.head_dim_v = c.head_dim_v;
  kc.n_ctx = params.n_ctx > 0 ? params.n_ctx : c.n_ctx_train;
  kc.type_k = kv_ggml_type(params.kv_type_k);
  kc.type_v = kv_ggml_type(params.kv_type_v);
  kc.block_size = cpu.paging.block_size;
  kc.n_sinks = cpu.paging.n_sinks;
  kc.window_tokens = cpu.paging.window_tokens;
  kc.host_budget = cpu.paging.host_budget;
  kc.disk_budget = cpu.paging.disk_budget;
  kc.spill_dir = cpu.paging.spill_dir;
  auto cache = kv::KvCache::create(kc);
  if (!cache) return cache.error();
  return std::unique_ptr<CpuSession>(new CpuSession(model, params, cpu, std::move(*cache)));
}

CpuSession::CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu,
                       std::unique_ptr<kv::KvCache> cache)
    : m_(model),
      c_(model.config()),
      p_(params),
      cp_(cpu),
      pool_(resolve_threads(params.n_threads)),
      cache_(std::move(cache)) {
  // The cache cuts a block, window or sink count longer than the context to it
  // (engine/kv/limits.h); the attention code must use the settings as applied.
  cp_.paging.block_size = cache_->config().block_size;
  cp_.paging.n_sinks = cache_->config().n_sinks;
  cp_.paging.window_tokens = cache_->config().window_tokens;
  kv_k_ = kv_ggml_type(p_.kv_type_k);
  kv_v_ = kv_ggml_type(p_.kv_type_v);
  lv_.resize(static_cast<size_t>(c_.n_layer));
  for (size_t il = 0; il < lv_.size(); ++il) {
    const LayerWeights& w = m_.layers[il];
    LayerVectors& v = lv_[il];
    v.attn_norm = dequantize_vector(w.attn_norm);
    v.ffn_norm = dequantize_vector(w.ffn_norm);
    v.bq = dequantize_vector(w.attn_q_bias);
    v.bk = dequantize_vector(w.attn_k_bias);
    v.bv = dequantize_vector(w.attn_v_bias);
    v.q_norm = dequantize_vector(w.attn_q_norm);
    v.k_norm = dequantize_vector(w.attn_k_norm);
  }
  output_norm_ = dequantize_vector(m_.output_norm);
  const std::vector<float> factors = dequantize_vector(m_.rope_freqs);
  inv_freq_ = rope_inv_freq(c_.n_rot, c_.rope_freq_base, c_.rope_freq_scale,
                            factors.empty() ? nullptr : factors.data());
  if (cp_.paging.attention == KvAttention::TopK) {
    kmin_.resize(static_cast<size_t>(c_.n_layer));
    kmax_.resize(static_cast<size_t>(c_.n_layer));
  }
}

int64_t CpuSession::n_ctx() const { return cache_->max_tokens(); }

int64_t CpuSession::kv_bytes() const {
  const kv::KvStats s = cache_->stats();
  return s.window_bytes + s.host_bytes + s.disk_bytes;
}

SessionUsage CpuSession::usage() const {
  const CpuSessionStats st = stats();
  SessionUsage u;
  u.n_past = st.n_past;
  u.n_ctx = n_ctx();
  u.prefill_tokens_computed = st.prefill_tokens_computed;
  u.decode_tokens = st.decode_tokens;
  u.prefill_s = st.prefill_s;
  u.decode_s = st.decode_s;
  set_kv_usage(u, st.kv);
  return u;
}

CpuSessionStats CpuSession::stats() const {
  const auto rd = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  CpuSessionStats s;
  s.n_past = n_past_;
  s.prefill_tokens_computed = rd(tel_.prefill_tokens_computed);
  s.prefill_s = static_cast<double>(rd(tel_.prefill_ns)) * 1e-9;
  s.decode_tokens = rd(tel_.decode_tokens);
  s.decode_s = static_cast<double>(rd(tel_.decode_ns)) * 1e-9;
  if (s.prefill_s > 0)
    s.prefill_tokens_per_s = static_cast<double>(s.prefill_tokens_computed) / s.prefill_s;
  if (s.decode_s > 0) s.decode_tokens_per_s = static_cast<double>(s.decode_tokens) / s.decode_s;
  s.window_attn_s = static_cast<double>(rd(tel_.window_attn_ns)) * 1e-9;
  s.cold_attn_s = static_cast<double>(rd(tel_.cold_attn_ns)) * 1e-9;
  s.merge_s = static_cast<double>(rd(tel_.merge_ns)) * 1e-9;
  s.kv = cache_->stats();
  s.rss_bytes = rss_bytes();
  return s;
}

void CpuSession::mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y) {
  if (n == 1) {
    matvec(w.type, w.data, w.ne[0], w.ne[1], X, Y, pool_);
  } else {
    matmul(w.type, w.data, w.ne[0], w.ne[1], X, n, Y, pool_);
  }
}

Status CpuSession::check_room(std::span<const int32_t> tokens, int64_t n_past) const {
  const int64_t cap = cache_->max_tokens();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n_past + n <= cap) return Status::Ok();
  if (cap < cache_->config().n_ctx) {  // the window and the budgets limit, not n_ctx
    return make_error(
        "context full: {} tokens fit in the budgets you set {}; {} used, {} more "
        "requested",
        cap, cache_->capacity_detail(), n_past, n);
  }
  return check_batch(tokens, c_.n_vocab, n_past, cap);
}

Status CpuSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  // Ids and emptiness first (no context limit here), then room.
  if (auto st = check_batch(tokens, c_.n_vocab, 0, std::numeric_limits<int64_t>::max()); !st)
    return st;
  const auto t0 = Clock::now();
  const auto n_tokens = static_cast<int64_t>(tokens.size());

  if (awaiting_prompt_) {  // after load_kv: tokens is the whole sequence from position 0
    const auto n_saved = static_cast<int64_t>(history_.size());
    const bool extends =
        n_tokens >= n_saved && std::equal(history_.begin(), history_.end(), tokens.begin());
    if (extends && n_tokens == n_saved) {
      // Every position is stored: only the last one's logits are recomputed, from its token
      // and the stored KV (nothing is stored again, so no prefill token is computed).
      awaiting_prompt_ = false;
      if (want_logits) {
        base_ = n_past_ - 1;
        ubatch(tokens.last(1), true, /*store_kv=*/false);
        tel_.prefill_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
      }
      return Status::Ok();
    }
    if (extends) {
      const auto rest = tokens.subspan(static_cast<size_t>(n_saved));
      if (auto st = check_room(rest, n_past_); !st) return st;
      awaiting_prompt_ = false;
      auto st = compute(rest, want_logits, true);
      tel_.prefill_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
      return st;
    }
    // Another prompt: nothing of the snapshot is reused.
    if (auto st = check_room(tokens, 0); !st) return st;
    awaiting_prompt_ = false;
    cache_->clear();
    n_past_ = 0;
    history_.clear();
    for (auto& v : kmin_) v.clear();
    for (auto& v : kmax_) v.clear();
  }

  if (auto st = check_room(tokens, n_past_); !st) return st;
  const bool decode = n_tokens == 1 && n_past_ > 0;
  auto st = compute(tokens, want_logits, !decode);
  const int64_t ns = ns_since(t0);
  if (decode) {
    if (st) tel_.decode_tokens.fetch_add(1, std::memory_order_relaxed);
    tel_.decode_ns.fetch_add(ns, std::memory_order_relaxed);
  } else {
    tel_.prefill_ns.fetch_add(ns, std::memory_order_relaxed);
  }
  return st;
}

Status CpuSession::compute(std::span<const int32_t> tokens, bool want_logits, bool prefill) {
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  for (int64_t b = 0; b < n_tokens; b += cp_.n_ubatch) {
    const int64_t n = std::min(cp_.n_ubatch, n_tokens - b);
    const bool last = b + n == n_tokens;
    const auto part = tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(n));
    // A failed reserve (an earlier spill's I/O error) leaves the cache as it was: the session
    // keeps the ubatches already committed, and n_past() says how many positions that is.
    if (auto st = cache_->reserve(n); !st) return st;
    base_ = n_past_;
    ubatch(part, want_logits && last, /*store_kv=*/true);
    cache_->commit(n);
    n_past_ += n;
    history_.insert(history_.end(), part.begin(), part.end());
    if (prefill) tel_.prefill_tokens_computed.fetch_add(n, std::memory_order_relaxed);
    if (!report_progress(b + n, n_tokens)) return Error{"cancelled"};
  }
  return Status::Ok();
}

void CpuSession::ubatch(std::span<const int32_t> tokens, bool want_logits, bool store_kv) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = c_.n_embd;
  x_.resize(static_cast<size_t>(n * n_embd));  // [n][n_embd]
  for (int64_t t = 0; t < n; ++t) {
    const auto id = static_cast<size_t>(tokens[static_cast<size_t>(t)]);
    dequantize_row(m_.token_embd->type, m_.token_embd->data + id * m_.token_embd->row_bytes(),
                   &x_[static_cast<size_t>(t * n_embd)], n_embd);
  }
  rope_cs_.resize(static_cast<size_t>(n * c_.n_rot));  // one cos/sin table per position
  for (int64_t t = 0; t < n; ++t) {
    rope_cos_sin(inv_freq_.data(), c_.n_rot, base_ + t, 1.0f,
                 &rope_cs_[static_cast<size_t>(t * c_.n_rot)]);
  }
  plan_attention(n);
  for (int64_t il = 0; il < c_.n_layer; ++il) layer(il, n, store_kv);

  if (want_logits) {  // prefill is a flag: logits only for the last token
    std::vector<float> last(static_cast<size_t>(n_embd));
    rms_norm(&x_[static_cast<size_t>((n - 1) * n_embd)], output_norm_.data(),
             static_cast<float>(c_.rms_eps), n_embd, last.data());
    logits_.resize(static_cast<size_t>(c_.n_vocab));
    mul(*m_.output, last.data(), 1, logits_.data());
  }
}

void CpuSession::layer(int64_t il, int64_t n, bool store_kv) {
  const LayerWeights& w = m_.layers[static_cast<size_t>(il)];
  const LayerVectors& lv = lv_[static_cast<size_t>(il)];
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim;
  const int64_t q_dim = c_.n_head * hd, k_dim = c_.n_head_kv * hd,
                v_dim = c_.n_head_kv * c_.head_dim_v;
  const auto eps = static_cast<float>(c_.rms_eps);
  const auto sz = [](int64_t a) { return static_cast<size_t>(a); };

  // Attention block.
  h_.resize(sz(n * n_embd));
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&x_[sz(t * n_embd)], lv.attn_norm.data(), eps, n_embd, &h_[sz(t * n_embd)]);
  q_.resize(sz(n * q_dim));
  k_cur_.resize(sz(n * k_dim));
  v_cur_.resize(sz(n * v_dim));
  mul(*w.attn_q, h_.data(), n, q_.data());  // [n][q_dim]
  if (store_kv) {
    mul(*w.attn_k, h_.data(), n, k_cur_.data());  // [n][k_dim]
    mul(*w.attn_v, h_.data(), n, v_cur_.data());  // [n][v_dim]
  }
  for (int64_t t = 0; t < n; ++t) {
    float* q = &q_[sz(t * q_dim)];
    float* k = &k_cur_[sz(t * k_dim)];
    float* v = &v_cur_[sz(t * v_dim)];
    if (!lv.bq.empty()) {
      for (int64_t i = 0; i < q_dim; ++i) q[i] += lv.bq[sz(i)];
      if (store_kv) {
        for (int64_t i = 0; i < k_dim; ++i) k[i] += lv.bk[sz(i)];
        for (int64_t i = 0; i < v_dim; ++i) v[i] += lv.bv[sz(i)];
      }
    }
    if (!lv.q_norm.empty()) {  // qwen3: RMSNorm per head before RoPE
      for (int64_t hh = 0; hh < c_.n_head; ++hh)
        rms_norm(q + hh * hd, lv.q_norm.data(), eps, hd, q + hh * hd);
      if (store_kv) {
        for (int64_t hh = 0; hh < c_.n_head_kv; ++hh)
          rms_norm(k + hh * hd, lv.k_norm.data(), eps, hd, k + hh * hd);
      }
    }
    const float* cs = &rope_cs_[sz(t * c_.n_rot)];
    rope(q, c_.n_head, hd, c_.n_rot, cs, c_.rope_type);
    if (store_kv) {
      rope(k, c_.n_head_kv, hd, c_.n_rot, cs, c_.rope_type);
      cache_->store(il, base_ + t, k, v);  // K and V of position base_ + t
    }
  }

  attend(il, n, store_kv);
  tmp_.resize(sz(n * n_embd));
  mul(*w.attn_output, attn_.data(), n, tmp_.data());
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];

  // Feed-forward block (SwiGLU).
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&x_[sz(t * n_embd)], lv.ffn_norm.data(), eps, n_embd, &h_[sz(t * n_embd)]);
  gate_.resize(sz(n * c_.n_ff));
  up_.resize(sz(n * c_.n_ff));
  mul(*w.ffn_gate, h_.data(), n, gate_.data());
  mul(*w.ffn_up, h_.data(), n, up_.data());
  swiglu(gate_.data(), up_.data(), gate_.data(), n * c_.n_ff);
  mul(*w.ffn_down, gate_.data(), n, tmp_.data());
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];
}

// The jobs of one ubatch's attention, the same for every layer: per (token, KV head) one window
// job and the cold jobs (none under Streaming, one under TopK, chunks of the cold blocks under
// Exact).
void CpuSession::plan_attention(int64_t n) {
  const KvPaging& pg = cp_.paging;
  const int64_t bs = pg.block_size, n_kv = c_.n_head_kv;
  const kv::WindowBlocks wb = kv::window_blocks(pg.n_sinks, pg.window_tokens, bs);
  const QueryBlocks qlast = query_blocks(base_ + n - 1, bs, wb.sinks, wb.recent);
  const int64_t cold_max = qlast.cold_end - qlast.sink_end;
  const int64_t chunks_wanted = std::max<int64_t>(1, kTargetJobs / (n * n_kv));
  const int64_t chunk_blocks =
      std::max(kv::ceil_div(kMinChunkTokens, bs),
               kv::ceil_div(std::max<int64_t>(cold_max, 1), chunks_wanted));

  jobs_.clear();
  first_slot_.assign(static_cast<size_t>(n * n_kv + 1), 0);
  int64_t slot = 0;
  if (pg.attention == KvAttention::Exact) {
    // Every block of the query's causal range in position order, tier-blind (see AttnJob).
    // Few (token, KV head) pairs (decode): one job per block, for parallelism, unless the
    // per-block partials would take too much memory; otherwise one job per pair.
    const int64_t n_rep = c_.n_head / n_kv;
    const bool per_block = n * n_kv < 4 * static_cast<int64_t>(pool_.size()) &&
                           n * n_kv * (qlast.last + 1) * n_rep <= kMaxBlockPartials;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t last = (base_ + t) / bs;
      for (int64_t g = 0; g < n_kv; ++g) {
        first_slot_[static_cast<size_t>(t * n_kv + g)] = slot;
        if (per_block) {
          for (int64_t b = 0; b <= last; ++b)
            jobs_.push_back(AttnJob{t, g, false, b, b + 1, slot++});
        } else {
          jobs_.push_back(AttnJob{t, g, false, 0, last + 1, slot++});
        }
      }
    }
    first_slot_.back() = slot;
    const auto need = static_cast<size_t>(slot * n_rep);
    if (parts_.size() < need) parts_.resize(need);
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const QueryBlocks qb = query_blocks(base_ + t, bs, wb.sinks, wb.recent);
    for (int64_t g = 0; g < n_kv; ++g) {
      first_slot_[static_cast<size_t>(t * n_kv + g)] = slot;
      jobs_.push_back(AttnJob{t, g, false, 0, 0, slot++});
      if (qb.cold_end == qb.sink_end || pg.attention == KvAttention::Streaming) continue;
      const int64_t step =
          pg.attention == KvAttention::TopK ? qb.cold_end - qb.sink_end : chunk_blocks;
      for (int64_t b0 = qb.sink_end; b0 < qb.cold_end; b0 += step)
        jobs_.push_back(AttnJob{t, g, true, b0, std::min(b0 + step, qb.cold_end), slot++});
    }
  }
  first_slot_.back() = slot;
  const auto need = static_cast<size_t>(slot * (c_.n_head / n_kv));
  if (parts_.size() < need) parts_.resize(need);
}

// TopK's choice among cold blocks [b0, b1) for the GQA group of q (n_rep query heads) on KV
// head g: the top_k blocks by Quest's upper bound of q . k, in position order.
void CpuSession::select_top_k(int64_t il, const float* q, int64_t g, int64_t b0, int64_t b1,
                              std::vector<int64_t>& out) const {
  const int64_t hd = c_.head_dim, n_kv = c_.n_head_kv, n_rep = c_.n_head / n_kv;
  const int64_t k = cp_.paging.top_k;
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
    for (int64_t r = 0; r < n_rep; ++r) {
      const float* qr = q + r * hd;
      for (int64_t d = 0; d < hd; ++d) bound += std::max(qr[d] * lo[d], qr[d] * hi[d]);
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

// Folds the stored keys of positions [p0, p1) of layer il into the per-block min/max (TopK).
// Read back from the cache, so the bounds are those of the stored (rounded) keys.
void CpuSession::update_key_bounds(int64_t il, int64_t p0, int64_t p1) {
  const int64_t bs = cp_.paging.block_size, hd = c_.head_dim, n_kv = c_.n_head_kv;
  std::vector<float>& mn = kmin_[static_cast<size_t>(il)];
  std::vector<float>& mx = kmax_[static_cast<size_t>(il)];
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t pos = p0; pos < p1; ++pos) {
    const int64_t b = pos / bs, j = pos % bs;
    const auto need = static_cast<size_t>((b + 1) * n_kv * hd);
    if (mn.size() < need) {
      mn.resize(need, INFINITY);
      mx.resize(need, -INFINITY);
    }
    const kv::BlockView& view = views_[static_cast<size_t>(b)];
    for (int64_t g = 0; g < n_kv; ++g) {
      float* lo = &mn[static_cast<size_t>((b * n_kv + g) * hd)];
      float* hi = &mx[static_cast<size_t>((b * n_kv + g) * hd)];
      if (j == 0) {
        std::fill(lo, lo + hd, INFINITY);
        std::fill(hi, hi + hd, -INFINITY);
      }
      dequantize_row(kv_k_, view.k + row_size(kv_k_, (g * bs + j) * hd), row.data(), hd);
      for (int64_t d = 0; d < hd; ++d) {
        lo[d] = std::min(lo[d], row[static_cast<size_t>(d)]);
        hi[d] = std::max(hi[d], row[static_cast<size_t>(d)]);
      }
    }
  }
}

// Causal attention of the ubatch's n queries over the cache's blocks: window and cold jobs on
// the pool, then the log-sum-exp merge and the normalisation per query head.
void CpuSession::attend(int64_t il, int64_t n, bool store_kv) {
  const int64_t hd = c_.head_dim, hdv = c_.head_dim_v, n_kv = c_.n_head_kv;
  const int64_t n_rep = c_.n_head / n_kv;  // GQA: kv_head = head / n_rep
  const int64_t q_dim = c_.n_head * hd, bs = cp_.paging.block_size;
  const kv::WindowBlocks wb = kv::window_blocks(cp_.paging.n_sinks, cp_.paging.window_tokens, bs);
  const bool top_k = cp_.paging.attention == KvAttention::TopK;
  const bool exact = cp_.paging.attention == KvAttention::Exact;
  cache_->blocks(il, base_ + n, views_);
  if (top_k && store_kv) update_key_bounds(il, base_, base_ + n);  // the rows just stored
  const AttnShape shape{n_rep, hd, hdv,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};

  pool_.parallel_for(static_cast<int64_t>(jobs_.size()), [&](int64_t jb, int64_t je) {
    thread_local std::vector<AttnPartial> tmp;
    thread_local std::vector<int64_t> chosen;
    tmp.resize(static_cast<size_t>(n_rep));
    int64_t window_ns = 0, cold_ns = 0;
    for (int64_t ji = jb; ji < je; ++ji) {
      const auto t0 = Clock::now();
      const AttnJob& job = jobs_[static_cast<size_t>(ji)];
      const int64_t p = base_ + job.t;
      const float* q = &q_[static_cast<size_t>(job.t * q_dim + job.g * n_rep * hd)];
      AttnPartial* out = &parts_[static_cast<size_t>(job.slot * n_rep)];
      bool first = true;
      const auto block = [&](int64_t b) {
        const kv::BlockView& view = views_[static_cast<size_t>(b)];
        const int64_t rows = std::min(bs, p + 1 - b * bs);
        const KvSpan k{view.k + row_size(kv_k_, job.g * bs * hd), kv_k_, hd};
        const KvSpan v{view.v + row_size(kv_v_, job.g * bs * hdv), kv_v_, hdv};
        attn_partial(shape, q, k, v, rows, first ? out : tmp.data());
        if (!first) {
          for (int64_t r = 0; r < n_rep; ++r) attn_merge(out[r], tmp[static_cast<size_t>(r)]);
        }
        first = false;
      };
      // Time goes to window or cold attention by the tier of the blocks attended: one segment
      // per job, except that an exact job's position-order walk may cross the window rule's
      // boundaries (sinks | cold | recent), each crossing closing a segment.
      auto seg0 = t0;
      bool seg_cold = job.cold;
      if (exact) {
        const QueryBlocks qb = query_blocks(p, bs, wb.sinks, wb.recent);
        const auto is_cold = [&](int64_t b) { return b >= qb.sink_end && b < qb.cold_end; };
        seg_cold = is_cold(job.b0);
        for (int64_t b = job.b0; b < job.b1; ++b) {
          if (is_cold(b) != seg_cold) {
            const auto now = Clock::now();
            (seg_cold ? cold_ns : window_ns) +=
                std::chrono::duration_cast<std::chrono::nanoseconds>(now - seg0).count();
            seg0 = now;
            seg_cold = !seg_cold;
          }
          block(b);
        }
      } else if (!job.cold) {
        const QueryBlocks qb = query_blocks(p, bs, wb.sinks, wb.recent);
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
      (seg_cold ? cold_ns : window_ns) += ns_since(seg0);
    }
    tel_.window_attn_ns.fetch_add(window_ns, std::memory_order_relaxed);
    tel_.cold_attn_ns.fetch_add(cold_ns, std::memory_order_relaxed);
  });

  // Merge in slot order (window first, then the cold chunks by position): fixed, so the result
  // does not depend on which thread ran which job.
  const auto t0 = Clock::now();
  attn_.resize(static_cast<size_t>(n * c_.n_head * hdv));
  const auto merge = [&](int64_t b, int64_t e) {
    for (int64_t pair = b; pair < e; ++pair) {
      const int64_t t = pair / n_kv, g = pair % n_kv;
      const int64_t s0 = first_slot_[static_cast<size_t>(pair)];
      const int64_t s1 = first_slot_[static_cast<size_t>(pair + 1)];
      for (int64_t r = 0; r < n_rep; ++r) {
        AttnPartial& acc = parts_[static_cast<size_t>(s0 * n_rep + r)];
        for (int64_t s = s0 + 1; s < s1; ++s)
          attn_merge(acc, parts_[static_cast<size_t>(s * n_rep + r)]);
        attn_finalize(acc,
                      &attn_[static_cast<size_t>(t * c_.n_head * hdv + (g * n_rep + r) * hdv)]);
      }
    }
  };
  if (n == 1) {
    merge(0, n_kv);  // a handful of heads: not worth waking the workers
  } else {
    pool_.parallel_for(n * n_kv, merge);
  }
  tel_.merge_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
}

Status CpuSession::save_kv(const std::string& path) {
  if (auto st = cache_->flush(); !st) return st;
  return kv::save_snapshot(path, m_, *cache_, history_);
}

Status CpuSession::load_kv(const std::string& path) {
  auto tokens = kv::load_snapshot(path, m_, *cache_);
  if (!tokens) {
    if (cache_->n_tokens() != n_past_) {  // the restore itself failed: the cache is empty
      n_past_ = 0;
      history_.clear();
      awaiting_prompt_ = false;
      for (auto& v : kmin_) v.clear();
      for (auto& v : kmax_) v.clear();
    }
    return tokens.error();
  }
  history_ = std::move(*tokens);
  n_past_ = static_cast<int64_t>(history_.size());
  assert(cache_->n_tokens() == n_past_);
  awaiting_prompt_ = true;
  logits_.clear();
  if (cp_.paging.attention == KvAttention::TopK) {
    for (int64_t il = 0; il < c_.n_layer; ++il) {
      kmin_[static_cast<size_t>(il)].clear();
      kmax_[static_cast<size_t>(il)].clear();
      cache_->blocks(il, n_past_, views_);
      update_key_bounds(il, 0, n_past_);
    }
  }
  return Status::Ok();
}

}  // namespace spw::cpu
