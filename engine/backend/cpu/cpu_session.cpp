#include "engine/backend/cpu/cpu_session.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include "engine/common/machine.h"
#include "engine/common/size.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/quant_dot.h"
#include "engine/kv/snapshot.h"

namespace spw::cpu {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

int resolve_threads(int n) {
  if (n > 0) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// Rows [rows, block_size) of every (layer, KV head) K and V part of a block in the restore
// layout (kv_cache.h: per layer [n_kv_heads][block_size][row] K, then V) become copies of rows
// [0, rows) in turn, so a partly filled block can stand for a full one.
void fill_unwritten_rows(const kv::TierLayout& L, int64_t rows, std::span<uint8_t> block) {
  const int64_t bs = L.block_size;
  const int64_t n_layer = L.block_bytes / L.layer_bytes;
  const int64_t n_head = L.layer_k_bytes / (bs * L.row_k);
  for (int64_t il = 0; il < n_layer; ++il) {
    for (const bool is_v : {false, true}) {
      const int64_t row = is_v ? L.row_v : L.row_k;
      uint8_t* part = block.data() + il * L.layer_bytes + (is_v ? L.layer_k_bytes : 0);
      for (int64_t h = 0; h < n_head; ++h) {
        uint8_t* head = part + h * bs * row;
        for (int64_t r = rows; r < bs; ++r)
          std::memcpy(head + r * row, head + (r % rows) * row, static_cast<size_t>(row));
      }
    }
  }
}

}  // namespace

Expected<std::unique_ptr<CpuSession>> CpuSession::create(const Model& model,
                                                         const SessionParams& params,
                                                         const CpuSessionParams& cpu) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  if (params.n_threads < 0)
    return make_error("thread count {} must not be negative", params.n_threads);
  if (cpu.n_ubatch < 1) return make_error("ubatch size {} must be at least 1", cpu.n_ubatch);
  if (Status st = kv::validate(cpu.kv); !st) return st.error();
  const ModelConfig& c = model.config();
  if (auto st = check_kv_types(params, c.head_dim, c.head_dim_v); !st) return st.error();
  kv::KvCacheConfig kc = kv_cache_config(model, params, cpu.kv, kv::WindowHome::Ram);
  // The cold blocks are attended by the pool's threads: their node, where they have one.
  auto host_memory = host_memory_options(cpu.kv, cpu_attending_node());
  if (!host_memory) return host_memory.error();
  kc.host_memory = *host_memory;
  // One cache per attention span: the sliding-window layers' drops what they never attend.
  auto cache = kv::KvCacheSet::create(kc, c.layer_attn_span);
  if (!cache) return cache.error();
  std::unique_ptr<CpuSession> s;
  try {
    s.reset(new CpuSession(model, params, cpu, std::move(*cache)));
  } catch (const std::bad_alloc&) {
    return make_error(
        "cannot allocate RAM for the CPU session of {} (its norm weights, RoPE table and KV "
        "block views): out of memory; a shorter -c",
        model.config().arch_name);
  } catch (const std::runtime_error& e) {  // the repacked weights' address space (packed_weights.h)
    return make_error("{}", e.what());
  }
  if (Status st = s->reserve_scratch(); !st) return st.error();
  return s;
}

Status CpuSession::reserve_scratch() {
  const int64_t n = std::min(cp_.n_ubatch, cache_->max_tokens());  // tokens of a ubatch at most
  const int64_t q_dim = c_.n_head * c_.head_dim, k_dim = c_.n_head_kv * c_.head_dim,
                v_dim = c_.n_head_kv * c_.head_dim_v, attn_dim = c_.n_head * c_.head_dim_v;
  // A dense FFN's gate and up scratch holds kFfnChunkTokens tokens (cpu_ffn.cpp), phi3's fused up
  // two rows of n_ff per token; a MoE layer's the ubatch's tokens of an expert.
  bool moe = false, fused_up = false;
  for (const LayerWeights& w : m_.layers) {
    moe = moe || w.ffn_gate_inp != nullptr;
    fused_up = fused_up || (w.ffn_gate_inp == nullptr && w.ffn_gate == nullptr);
  }
  const int64_t ffn_n = moe ? n : std::min(n, kFfnChunkTokens);
  // {vector, tokens, floats per token}, as layer() and ubatch() size them.
  const std::tuple<std::vector<float>*, int64_t, int64_t> per_token[] = {
      {&x_, n, c_.n_embd},
      {&h_, n, c_.n_embd},
      {&q_, n, q_dim},
      {&k_cur_, n, k_dim},
      {&v_cur_, n, v_dim},
      {&attn_, n, attn_dim},
      {&tmp_, n, c_.n_embd},
      {&gate_, ffn_n, c_.n_ff},
      {&up_, ffn_n, fused_up ? 2 * c_.n_ff : c_.n_ff},
      // Fused attn_qkv (phi3) only.
      {&qkv_, n, c_.fused_qkv ? q_dim + k_dim + v_dim : 0}};
  int64_t floats = c_.n_vocab;  // logits_
  for (const auto& [v, tokens, width] : per_token) floats += tokens * width;
  floats += static_cast<int64_t>(ropes_.size()) * n * c_.n_rot;  // each RoPE's cos/sin table
  try {
    for (const auto& [v, tokens, width] : per_token)
      v->reserve(static_cast<size_t>(tokens * width));
    for (RopeTable& r : ropes_) r.cs.reserve(static_cast<size_t>(n * c_.n_rot));
    logits_.reserve(static_cast<size_t>(c_.n_vocab));
  } catch (const std::exception&) {  // bad_alloc, or length_error past the vector's max_size
    return make_error(
        "cannot allocate {} of RAM for the CPU session's scratch (a ubatch of {} tokens, {} "
        "bytes per token): out of memory; a smaller --ubatch",
        format_size(floats * static_cast<int64_t>(sizeof(float))), n,
        (floats - c_.n_vocab) / std::max<int64_t>(1, n) * static_cast<int64_t>(sizeof(float)));
  }
  return Status::Ok();
}

CpuSession::CpuSession(const Model& model, const SessionParams& params, const CpuSessionParams& cpu,
                       std::unique_ptr<kv::KvCacheSet> cache)
    : m_(model),
      c_(model.config()),
      packed_(PackedWeights::of(model)),
      p_(params),
      cp_(cpu),
      pool_(resolve_threads(params.n_threads)),
      cache_(std::move(cache)) {
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
    v.attn_post_norm = dequantize_vector(w.attn_post_norm);
    v.ffn_post_norm = dequantize_vector(w.ffn_post_norm);
    v.shexp_gate = dequantize_vector(w.ffn_gate_inp_shexp);
  }
  output_norm_ = dequantize_vector(m_.output_norm);

  // RoPE tables: one per distinct RoPE among the layers; the session's rope factors (llama3's
  // rope_freqs, or LongRoPE's long/short set chosen by this context) apply to all of them.
  const std::vector<float> factors =
      dequantize_vector(m_.rope_factors(cache_->primary().config().n_ctx));
  layer_rope_.resize(static_cast<size_t>(c_.n_layer));
  std::vector<const RopeParams*> seen;
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const RopeParams* rp = &c_.rope_of(il);
    size_t i = 0;
    while (i < seen.size() && seen[i] != rp) ++i;
    if (i == seen.size()) {
      seen.push_back(rp);
      ropes_.push_back(
          RopeTable{rope_inv_freq(c_.n_rot, *rp, factors.empty() ? nullptr : factors.data()),
                    rope_mscale(*rp),
                    {}});
    }
    layer_rope_[static_cast<size_t>(il)] = i;
  }
  // Attention schedulers: one per distinct span. The cache cuts a block, window or sink count
  // longer than the context to it (engine/kv/tier_policy.h); attention follows the rule as
  // applied.
  layer_sched_.resize(static_cast<size_t>(c_.n_layer));
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const int64_t span = c_.attn_span(il);
    size_t i = 0;
    while (i < scheds_.size() && scheds_[i]->span() != span) ++i;
    if (i == scheds_.size()) {
      AttnDims d{c_.n_layer,
                 c_.n_head,
                 c_.n_head_kv,
                 c_.head_dim,
                 c_.head_dim_v,
                 kv_ggml_type(params.kv_type_k),
                 kv_ggml_type(params.kv_type_v),
                 static_cast<float>(c_.attn_scale),
                 span};
      scheds_.push_back(std::make_unique<TieredAttention>(d, cache_->cache_of(il).layout().window,
                                                          cpu.kv.attention, cpu.kv.top_k));
    }
    layer_sched_[static_cast<size_t>(il)] = i;
  }
}

int64_t CpuSession::n_ctx() const { return cache_->max_tokens(); }

int64_t CpuSession::kv_bytes() const {
  const kv::KvStats s = cache_->stats();
  return s.window_bytes + s.host_bytes + s.disk_bytes;
}

SessionUsage CpuSession::usage() const {
  SessionUsage u;
  u.n_past = n_past_;
  u.n_ctx = n_ctx();
  read_counters(tel_, u);
  u.kv = cache_->stats();
  u.rss_bytes = process_rss_bytes();
  return u;
}

void CpuSession::mul(const GgufTensorInfo& w, const float* X, int64_t n, float* Y,
                     cpu::GemmInput input) {
  // Types with a repacked layout run the int8 GEMM for decode and prefill alike (gemm.h).
  if (const PackedMatrix* p = packed_->get(w, pool_)) return gemm(*p, X, n, Y, pool_, input);
  cpu::gemm_forget_input();  // X may change before a later SameAsLast product of it
  mul(matrix_of(w), X, n, Y);
}

void CpuSession::mul_expert(const GgufTensorInfo& w, int64_t e, const float* X, int64_t n,
                            float* Y) {
  if (const PackedMatrix* p = packed_->get_expert(w, e, pool_)) return gemm(*p, X, n, Y, pool_);
  cpu::gemm_forget_input();
  mul(expert_of(w, e), X, n, Y);
}

void CpuSession::mul(const MatrixView& w, const float* X, int64_t n, float* Y) {
  if (n == 1) {
    matvec(w.type, w.data, w.n_in, w.n_out, X, Y, pool_);
  } else {
    matmul(w.type, w.data, w.n_in, w.n_out, X, n, Y, pool_);
  }
}

Status CpuSession::check_room(std::span<const int32_t> tokens, int64_t n_past) const {
  const int64_t cap = cache_->max_tokens();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n_past + n <= cap) {
    // A prompt whose host-tier KV cannot be mapped under the address-space limit fails now,
    // not after minutes of prefill at the ubatch that reaches it (RAM that is merely short is
    // left to the kernel: it may reclaim page cache, and a late failure still names the bytes).
    const int64_t more =
        n > 1 ? cache_->host_bytes_at(n_past + n) - cache_->host_bytes_at(n_past) : 0;
    if (more > 0) {
      const MachineMemory mm = read_machine_memory();
      if (mm.address_space_left >= 0 && more > mm.address_space_left) {
        return make_error(
            "the {} tokens need {} more RAM for the host KV tier, but the address-space limit "
            "(ulimit -v) leaves {}; use a smaller -c, a --host-budget with a --disk-budget for "
            "the rest, or raise ulimit -v",
            n, format_size(more), format_size(mm.address_space_left));
      }
    }
    return Status::Ok();
  }
  if (cap < cache_->primary().config().n_ctx) {  // the window and the budgets limit, not n_ctx
    return make_error(
        "context full: {} tokens fit in the budgets you set {}; {} used, {} more "
        "requested",
        cap, cache_->capacity_detail(), n_past, n);
  }
  return check_batch(tokens, c_.n_vocab, n_past, cap);
}

Status CpuSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  try {
    return eval_unguarded(tokens, want_logits);
  } catch (const std::bad_alloc&) {
    // What scales with a step: the attention plan's jobs and partials (the ubatch times the
    // blocks before it), the blocks' views, the activations' quantized copies. A step that
    // failed left nothing committed: the cache releases its reservation at the next reserve().
    const kv::KvStats st = cache_->stats();
    return make_error(
        "out of memory in a step of {} tokens at position {} (--ubatch {}; KV held: {} in the "
        "window, {} in RAM, {} on disk): a smaller --ubatch, --host-budget with --disk-budget, or "
        "a shorter -c",
        tokens.size(), n_past_, cp_.n_ubatch, format_size(st.window_bytes),
        format_size(st.host_bytes), format_size(st.disk_bytes));
  }
}

Status CpuSession::eval_unguarded(std::span<const int32_t> tokens, bool want_logits) {
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
    for (auto& a : scheds_) a->clear_key_bounds();
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
  const auto embd_scale = static_cast<float>(c_.embd_scale);
  for (int64_t t = 0; t < n; ++t) {
    const auto id = static_cast<size_t>(tokens[static_cast<size_t>(t)]);
    float* row = &x_[static_cast<size_t>(t * n_embd)];
    dequantize_row(m_.token_embd->type, m_.token_embd->data + id * m_.token_embd->row_bytes(), row,
                   n_embd);
    if (c_.embd_scale != 1.0) {  // gemma3: sqrt(n_embd)
      for (int64_t i = 0; i < n_embd; ++i) row[i] *= embd_scale;
    }
  }
  for (RopeTable& r : ropes_) {  // one cos/sin table per position and RoPE
    r.cs.resize(static_cast<size_t>(n * c_.n_rot));
    for (int64_t t = 0; t < n; ++t) {
      rope_cos_sin(r.inv_freq.data(), c_.n_rot, base_ + t, r.mscale,
                   &r.cs[static_cast<size_t>(t * c_.n_rot)]);
    }
  }
  for (auto& a : scheds_) a->plan(base_, n, pool_.size());  // the same jobs for every layer
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
  if (w.attn_qkv != nullptr) {  // phi3: one product, rows Q | K | V
    const int64_t n_qkv = q_dim + k_dim + v_dim;
    qkv_.resize(sz(n * n_qkv));
    mul(*w.attn_qkv, h_.data(), n, qkv_.data());  // [n][q_dim + k_dim + v_dim]
    for (int64_t t = 0; t < n; ++t) {
      const float* r = &qkv_[sz(t * n_qkv)];
      std::copy(r, r + q_dim, &q_[sz(t * q_dim)]);
      std::copy(r + q_dim, r + q_dim + k_dim, &k_cur_[sz(t * k_dim)]);
      std::copy(r + q_dim + k_dim, r + n_qkv, &v_cur_[sz(t * v_dim)]);
    }
  } else {
    mul(*w.attn_q, h_.data(), n, q_.data());  // [n][q_dim]
    if (store_kv) {
      mul(*w.attn_k, h_.data(), n, k_cur_.data(), cpu::GemmInput::SameAsLast);  // [n][k_dim]
      mul(*w.attn_v, h_.data(), n, v_cur_.data(), cpu::GemmInput::SameAsLast);  // [n][v_dim]
    }
  }
  const RopeTable& rt = ropes_[layer_rope_[sz(il)]];
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
    if (!lv.q_norm.empty()) {  // qwen3, gemma3: RMSNorm per head before RoPE
      for (int64_t hh = 0; hh < c_.n_head; ++hh)
        rms_norm(q + hh * hd, lv.q_norm.data(), eps, hd, q + hh * hd);
      if (store_kv) {
        for (int64_t hh = 0; hh < c_.n_head_kv; ++hh)
          rms_norm(k + hh * hd, lv.k_norm.data(), eps, hd, k + hh * hd);
      }
    }
    const float* cs = &rt.cs[sz(t * c_.n_rot)];
    rope(q, c_.n_head, hd, c_.n_rot, cs, c_.rope_type);
    if (store_kv) {
      rope(k, c_.n_head_kv, hd, c_.n_rot, cs, c_.rope_type);
      cache_->store(il, base_ + t, k, v);  // K and V of position base_ + t
    }
  }

  attend(il, n, store_kv);
  tmp_.resize(sz(n * n_embd));
  mul(*w.attn_output, attn_.data(), n, tmp_.data());
  if (!lv.attn_post_norm.empty()) {  // gemma3
    for (int64_t t = 0; t < n; ++t) {
      float* o = &tmp_[sz(t * n_embd)];
      rms_norm(o, lv.attn_post_norm.data(), eps, n_embd, o);
    }
  }
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];

  // Feed-forward block.
  for (int64_t t = 0; t < n; ++t)
    rms_norm(&x_[sz(t * n_embd)], lv.ffn_norm.data(), eps, n_embd, &h_[sz(t * n_embd)]);
  ffn(il, n);                       // tmp_ [n][n_embd]
  if (!lv.ffn_post_norm.empty()) {  // gemma3
    for (int64_t t = 0; t < n; ++t) {
      float* f = &tmp_[sz(t * n_embd)];
      rms_norm(f, lv.ffn_post_norm.data(), eps, n_embd, f);
    }
  }
  for (size_t i = 0; i < sz(n * n_embd); ++i) x_[i] += tmp_[i];
}

// Causal attention of the ubatch's n queries over the cache's blocks (the scheduler's jobs on the
// pool, then the log-sum-exp merge and the normalisation per query head).
void CpuSession::attend(int64_t il, int64_t n, bool store_kv) {
  TieredAttention& a = *scheds_[layer_sched_[static_cast<size_t>(il)]];
  cache_->blocks(il, base_ + n, views_);
  if (store_kv) a.update_key_bounds(il, views_, base_, base_ + n);  // rows just stored
  AttnTimes times;
  a.run(pool_, il, q_.data(), views_, times);
  attn_.resize(static_cast<size_t>(n * c_.n_head * c_.head_dim_v));
  a.finalize(pool_, attn_.data(), times);
  tel_.window_attn_ns.fetch_add(times.window_ns, std::memory_order_relaxed);
  tel_.cold_attn_ns.fetch_add(times.cold_ns, std::memory_order_relaxed);
  tel_.merge_ns.fetch_add(times.merge_ns, std::memory_order_relaxed);
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
      for (auto& a : scheds_) a->clear_key_bounds();
    }
    return tokens.error();
  }
  history_ = std::move(*tokens);
  n_past_ = static_cast<int64_t>(history_.size());
  assert(cache_->n_tokens() == n_past_);
  awaiting_prompt_ = true;
  logits_.clear();
  rebuild_key_bounds();
  return Status::Ok();
}

void CpuSession::rebuild_key_bounds() {
  for (auto& a : scheds_) a->clear_key_bounds();
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    TieredAttention& a = *scheds_[layer_sched_[static_cast<size_t>(il)]];
    if (!a.keeps_key_bounds()) continue;
    cache_->blocks(il, n_past_, views_);
    a.update_key_bounds(il, views_, 0, n_past_);
  }
}

Status CpuSession::repeat_kv(int64_t n_tokens) {
  if (n_tokens < 1 || n_tokens > n_ctx()) {
    return make_error("repeating the KV to {} tokens: the context holds 1 to {}", n_tokens,
                      n_ctx());
  }
  if (auto st = cache_->flush(); !st) return st;
  const auto sz = [](int64_t a) { return static_cast<size_t>(a); };
  // The source blocks of every layer group: its first whole blocks held, at most four, in the
  // restore layout (KvCache::read_block()).
  constexpr int64_t kMaxSourceBlocks = 4;
  std::vector<std::vector<std::vector<uint8_t>>> source(static_cast<size_t>(cache_->n_groups()));
  for (int64_t g = 0; g < cache_->n_groups(); ++g) {
    const kv::KvCache& c = cache_->group(g);
    const int64_t bs = c.layout().block_size;
    const int64_t first = c.first_held_block();
    int64_t end = std::min(c.n_tokens() / bs, first + kMaxSourceBlocks);
    // A sliding group may hold no whole block (its span is shorter than a block): its one held
    // block, partly filled, is the source, its unwritten rows copies of the written ones.
    const int64_t rows = c.n_tokens() - first * bs;
    const bool partial = end <= first && c.layout().span_tokens > 0 && rows > 0;
    if (partial) end = first + 1;
    if (end <= first) {
      return make_error("repeating the KV needs a whole {}-token block; {} positions are stored",
                        bs, n_past_);
    }
    for (int64_t b = first; b < end; ++b) {
      std::vector<uint8_t>& bytes = source[sz(g)].emplace_back(sz(c.block_bytes()));
      if (auto st = c.read_block(b, bytes); !st) return st;
      if (partial) fill_unwritten_rows(c.layout(), rows, bytes);
    }
  }
  for (int64_t g = 0; g < cache_->n_groups(); ++g) {
    const auto& blocks = source[sz(g)];
    const auto fill = [&](int64_t b, std::span<uint8_t> dst) {
      const std::vector<uint8_t>& src = blocks[sz(b % static_cast<int64_t>(blocks.size()))];
      std::copy(src.begin(), src.end(), dst.begin());
      return Status::Ok();
    };
    if (auto st = cache_->group(g).restore(n_tokens, fill); !st) {
      cache_->clear();
      n_past_ = 0;
      history_.clear();
      awaiting_prompt_ = false;
      logits_.clear();
      for (auto& a : scheds_) a->clear_key_bounds();
      return st;
    }
  }
  std::vector<int32_t> tokens(sz(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i)
    tokens[sz(i)] = history_[sz(i % static_cast<int64_t>(history_.size()))];
  history_ = std::move(tokens);
  n_past_ = n_tokens;
  awaiting_prompt_ = false;
  logits_.clear();
  rebuild_key_bounds();
  return Status::Ok();
}

}  // namespace spw::cpu
