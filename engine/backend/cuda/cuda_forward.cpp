// The CUDA session's forward pass (cuda_session.h): the ubatch loop, the block tables, one
// layer's kernels, and exact split attention (the GPU's window, the CPU's cold blocks, merged by
// the log-sum-exp rule). Planning, creation and uploads are in cuda_session.cpp.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_session.h"
#include "engine/cpu/ops.h"
#include "kernels/launch.h"

namespace spw::cuda {

namespace k = ::spw::kernels;

// ---- Forward pass ---------------------------------------------------------------------------

namespace {
using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}
}  // namespace

Status CudaSession::check_room(int64_t n) const {
  const int64_t cap = cache_->max_tokens();
  if (n_past_ + n <= cap || cap >= n_ctx_) return Status::Ok();  // n_ctx: check_batch's message
  return make_error(
      "context full: {} tokens fit in the budgets you set {}; {} used, {} more requested", cap,
      cache_->capacity_detail(), n_past_, n);
}

Status CudaSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  SPW_TRY(check_room(static_cast<int64_t>(tokens.size())));
  SPW_TRY(check_batch(tokens, c_.n_vocab, n_past_, cache_->max_tokens()));
  SPW_CUDA_CHECK(cudaSetDevice(dev_.index));  // the calling thread may not be create()'s
  const auto t0 = Clock::now();
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  const bool decode = n_tokens == 1 && n_past_ > 0;
  // Each ubatch is committed to the cache once queued (its blocks may then spill; the spill's
  // copy is ordered after its kernels). On an error the session keeps the ubatches committed
  // before it (n_past() says how many positions), as the CPU session does; logits change only
  // when the whole batch has run.
  for (int64_t b = 0; b < n_tokens; b += n_ub_) {
    const int64_t n = std::min(n_ub_, n_tokens - b);
    const bool last = b + n == n_tokens;
    SPW_TRY(cache_->reserve(n));
    SPW_TRY(ubatch(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(n)), n_past_,
                   want_logits && last));
    cache_->commit(n);
    n_past_ += n;
    if (!decode) tel_.prefill_tokens_computed.fetch_add(n, std::memory_order_relaxed);
    if (!last && !report_progress(b + n, n_tokens)) {
      SPW_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
      return Error{"cancelled"};
    }
  }
  SPW_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // also reports asynchronous errors
  if (want_logits) {
    logits_.swap(logits_next_);
    logits_next_.resize(static_cast<size_t>(c_.n_vocab));
  }
  const int64_t ns = ns_since(t0);
  if (decode) {
    tel_.decode_tokens.fetch_add(1, std::memory_order_relaxed);
    tel_.decode_ns.fetch_add(ns, std::memory_order_relaxed);
  } else {
    tel_.prefill_ns.fetch_add(ns, std::memory_order_relaxed);
  }
  (void)report_progress(n_tokens, n_tokens);
  return Status::Ok();
}

// The block tables of one ubatch of n tokens at pos0, from the cache's block table (layer 0's
// views: a slot's address is its layer-0 K part):
//   tbl_dev_[0, n_write_)             the blocks that hold [pos0, pos0 + n) (KV writes)
//   tbl_dev_[n_write_, + n_window_)   every block on the GPU (the window, attended there)
//   stage_tbl_dev_[i]                 cold block cold_[i], staged at stage_ + (i % batch) * layer
Status CudaSession::upload_tables(int64_t n, int64_t pos0) {
  const int64_t bs = plan_.layout.block_size;
  cache_->blocks(0, pos0 + n, views_);
  auto* host = static_cast<kernels::PagedBlock*>(tbl_host_.get());
  // The previous ubatch's upload must have been done before the pinned mirror is refilled.
  SPW_CUDA_CHECK(cudaEventSynchronize(tbl_copied_.get()));
  const auto entry = [&](const kv::BlockView& v, uint8_t* base) {
    return kernels::PagedBlock{base, static_cast<int32_t>(v.pos0),
                               static_cast<int32_t>(v.n_tokens)};
  };
  first_block_ = pos0 / bs;
  int64_t i = 0;
  for (int64_t b = first_block_; b < static_cast<int64_t>(views_.size()); ++b)
    host[i++] = entry(views_[static_cast<size_t>(b)],
                      const_cast<uint8_t*>(views_[static_cast<size_t>(b)].k));
  n_write_ = i;
  cold_.clear();
  for (size_t b = 0; b < views_.size(); ++b) {
    if (views_[b].tier == kv::Tier::Window) {
      host[i++] = entry(views_[b], const_cast<uint8_t*>(views_[b].k));
    } else {
      cold_.push_back(static_cast<int64_t>(b));
    }
  }
  n_window_ = i - n_write_;
  if (i > plan_.tbl_entries)
    return make_error("block table of {} entries, room for {}", i, plan_.tbl_entries);
  cudaStream_t s = stream_.get();
  SPW_CUDA_CHECK(cudaMemcpyAsync(tbl_dev_, host, static_cast<size_t>(i) * sizeof(*host),
                                 cudaMemcpyHostToDevice, s));
  if (n > kDecodeTokens && !cold_.empty()) {  // prefill stages the cold blocks
    if (static_cast<int64_t>(cold_.size()) > plan_.stage_entries)
      return make_error("{} cold blocks, staging table for {}", cold_.size(), plan_.stage_entries);
    kernels::PagedBlock* st = host + plan_.tbl_entries;
    for (size_t c = 0; c < cold_.size(); ++c) {
      const int64_t slot = static_cast<int64_t>(c) % plan_.stage_blocks;
      st[c] =
          entry(views_[static_cast<size_t>(cold_[c])], stage_ + slot * plan_.layout.layer_bytes);
    }
    SPW_CUDA_CHECK(
        cudaMemcpyAsync(stage_tbl_dev_, st, cold_.size() * sizeof(*st), cudaMemcpyHostToDevice, s));
  }
  SPW_CUDA_CHECK(cudaEventRecord(tbl_copied_.get(), s));
  return Status::Ok();
}

Status CudaSession::ubatch(std::span<const int32_t> tokens, int64_t pos0, bool want_logits) {
  cudaStream_t s = stream_.get();
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = c_.n_embd;
  SPW_TRY(upload_tables(n, pos0));
  // The caller's ids stay put until eval() has synchronised. cs_host_ is refilled per ubatch:
  // wait until the previous ubatch's copy of it has been done.
  SPW_CUDA_CHECK(
      cudaMemcpyAsync(ids_, tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice, s));
  SPW_CUDA_CHECK(cudaEventSynchronize(cs_copied_.get()));  // never recorded yet: returns at once
  // One RoPE table per position and RoPE, angles in double: cs_ [n_ropes][n][n_rot].
  for (size_t r = 0; r < ropes_.size(); ++r) {
    for (int64_t t = 0; t < n; ++t) {
      cpu::rope_cos_sin(ropes_[r].inv_freq.data(), c_.n_rot, pos0 + t, ropes_[r].mscale,
                        &cs_host_[(r * static_cast<size_t>(n) + static_cast<size_t>(t)) *
                                  static_cast<size_t>(c_.n_rot)]);
    }
  }
  SPW_CUDA_CHECK(cudaMemcpyAsync(cs_, cs_host_.data(),
                                 ropes_.size() * static_cast<size_t>(n * c_.n_rot) * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
  SPW_CUDA_CHECK(cudaEventRecord(cs_copied_.get(), s));
  SPW_CUDA_CHECK(k::launch_get_rows(tok_embd_.type, tok_embd_.data, tok_embd_.row_bytes, n_embd,
                                    ids_, n, x_, s));  // x [n][n_embd]
  if (c_.embd_scale != 1.0) {                          // gemma3: sqrt(n_embd)
    SPW_CUDA_CHECK(k::launch_scale(x_, static_cast<float>(c_.embd_scale), n * n_embd, s));
  }
  for (size_t il = 0; il < layers_.size(); ++il)
    SPW_TRY(layer(static_cast<int64_t>(il), layers_[il], n, pos0));

  if (want_logits) {  // prefill is a flag: logits only for the last token
    const float eps = static_cast<float>(c_.rms_eps);
    SPW_CUDA_CHECK(k::launch_rmsnorm(x_ + (n - 1) * n_embd, output_norm_, h_, n_embd, 1, eps, s));
    SPW_CUDA_CHECK(k::launch_matvec(output_.type, output_.data, output_.row_bytes, output_.n_in,
                                    output_.n_out, h_, 1, logits_dev_, s));
    SPW_CUDA_CHECK(cudaMemcpyAsync(logits_next_.data(), logits_dev_,
                                   static_cast<size_t>(c_.n_vocab) * sizeof(float),
                                   cudaMemcpyDeviceToHost, s));
  }
  return Status::Ok();
}

Status CudaSession::layer(int64_t il, const DevLayer& L, int64_t n, int64_t pos0) {
  cudaStream_t s = stream_.get();
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim, hdv = c_.head_dim_v;
  const int64_t n_head = c_.n_head, n_head_kv = c_.n_head_kv;
  const int64_t q_dim = n_head * hd, k_dim = n_head_kv * hd, v_dim = n_head_kv * hdv;
  const float eps = static_cast<float>(c_.rms_eps);
  const bool neox = c_.rope_type == RopeType::NeoX;

  // Attention block.
  SPW_CUDA_CHECK(k::launch_rmsnorm(x_, L.attn_norm, h_, n_embd, n, eps, s));  // h [n][n_embd]
  if (L.qkv.data != nullptr) {  // phi3: one product [n][q | k | v], split into q, k, v
    const int64_t n_qkv = q_dim + k_dim + v_dim;
    SPW_TRY(mul(L.qkv, h_, n, qkv_));
    SPW_TRY(split_cols(qkv_, n_qkv, 0, q_dim, n, q_));
    SPW_TRY(split_cols(qkv_, n_qkv, q_dim, k_dim, n, k_));
    SPW_TRY(split_cols(qkv_, n_qkv, q_dim + k_dim, v_dim, n, v_));
  } else {
    SPW_TRY(mul(L.q, h_, n, q_));  // q [n][n_head][hd]
    SPW_TRY(mul(L.k, h_, n, k_));  // k [n][n_head_kv][hd]
    SPW_TRY(mul(L.v, h_, n, v_));  // v [n][n_head_kv][hdv]
  }
  if (L.bq != nullptr) {  // qwen2
    SPW_CUDA_CHECK(k::launch_add_bias(q_, L.bq, q_dim, n, s));
    SPW_CUDA_CHECK(k::launch_add_bias(k_, L.bk, k_dim, n, s));
    SPW_CUDA_CHECK(k::launch_add_bias(v_, L.bv, v_dim, n, s));
  }
  if (L.q_norm != nullptr) {  // qwen3, gemma3: RMSNorm per head before RoPE
    SPW_CUDA_CHECK(k::launch_rmsnorm(q_, L.q_norm, q_, hd, n * n_head, eps, s));
    SPW_CUDA_CHECK(k::launch_rmsnorm(k_, L.k_norm, k_, hd, n * n_head_kv, eps, s));
  }
  const float* cs = cs_ + layer_rope_[static_cast<size_t>(il)] * n * c_.n_rot;  // the layer's RoPE
  SPW_CUDA_CHECK(k::launch_rope(q_, cs, n, n_head, hd, c_.n_rot, neox, s));
  SPW_CUDA_CHECK(k::launch_rope(k_, cs, n, n_head_kv, hd, c_.n_rot, neox, s));
  // K and V of positions [pos0, pos0 + n) into their window blocks, then attention over the
  // window (GPU) and the cold blocks (CPU in decode, staged in prefill).
  const kernels::PagedLayer PL = paged_layer(il);
  SPW_CUDA_CHECK(k::launch_kv_store_paged(k_, kv_k_, hd, n_head_kv, tbl_dev_, first_block_,
                                          plan_.layout.block_size, PL.k_off, pos0, n, s));
  SPW_CUDA_CHECK(k::launch_kv_store_paged(v_, kv_v_, hdv, n_head_kv, tbl_dev_, first_block_,
                                          plan_.layout.block_size, PL.v_off, pos0, n, s));
  SPW_TRY(attend(il, n, pos0));  // attn [n][n_head][hdv]
  SPW_TRY(mul(L.o, attn_, n, tmp_));
  if (L.attn_post_norm != nullptr)  // gemma3
    SPW_CUDA_CHECK(k::launch_rmsnorm(tmp_, L.attn_post_norm, tmp_, n_embd, n, eps, s));
  SPW_CUDA_CHECK(k::launch_add(x_, tmp_, x_, n * n_embd, s));

  // Feed-forward block.
  SPW_CUDA_CHECK(k::launch_rmsnorm(x_, L.ffn_norm, h_, n_embd, n, eps, s));
  SPW_TRY(ffn(L, n));              // tmp [n][n_embd]
  if (L.ffn_post_norm != nullptr)  // gemma3
    SPW_CUDA_CHECK(k::launch_rmsnorm(tmp_, L.ffn_post_norm, tmp_, n_embd, n, eps, s));
  SPW_CUDA_CHECK(k::launch_add(x_, tmp_, x_, n * n_embd, s));
  return Status::Ok();
}

// Exact split attention of one layer (see the header): partials in part_o_/part_ms_, merged by
// attn_combine into attn_.
Status CudaSession::attend(int64_t il, int64_t n, int64_t pos0) {
  cudaStream_t s = stream_.get();
  const int64_t hd = c_.head_dim, hdv = c_.head_dim_v, n_head = c_.n_head;
  const int64_t q_dim = n_head * hd;
  const auto scale = static_cast<float>(c_.attn_scale);
  const int64_t span = c_.attn_span(il);  // sliding layers mask keys before pos - span + 1
  const kernels::PagedLayer PL = paged_layer(il);
  const bool cpu_cold = !cold_.empty() && n <= kDecodeTokens;
  const bool staged_cold = !cold_.empty() && n > kDecodeTokens;
  const int64_t part_o_stride = n * n_head * hdv, part_ms_stride = n * n_head * 2;

  if (cpu_cold) {  // the query goes to the host first, so the CPU starts as early as it can
    SPW_CUDA_CHECK(cudaMemcpyAsync(q_host_.get(), q_,
                                   static_cast<size_t>(n * q_dim) * sizeof(float),
                                   cudaMemcpyDeviceToHost, s));
    SPW_CUDA_CHECK(cudaEventRecord(q_ready_.get(), s));
  }
  const int64_t n_split = k::paged_attention_splits(n, n_window_, n_head, n_sm_);
  SPW_CUDA_CHECK(k::launch_paged_attention(q_, tbl_dev_ + n_write_, n_window_, PL, n, pos0, n_head,
                                           c_.n_head_kv, hd, hdv, scale, span, n_split, part_o_,
                                           part_ms_, s));
  int64_t n_parts = n_split;

  if (cpu_cold) {
    const auto t0 = Clock::now();
    SPW_CUDA_CHECK(cudaEventSynchronize(q_ready_.get()));
    // The previous layer's partial must have left cold_host_ before it is overwritten.
    SPW_CUDA_CHECK(cudaEventSynchronize(cold_copied_.get()));
    const auto t1 = Clock::now();
    tel_.query_wait_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
        std::memory_order_relaxed);
    cold_attention(il, n, pos0);
    tel_.cold_attn_ns.fetch_add(ns_since(t1), std::memory_order_relaxed);
    auto* o = static_cast<float*>(cold_host_.get());
    const float* ms = o + n * n_head * hdv;
    SPW_CUDA_CHECK(cudaMemcpyAsync(part_o_ + n_parts * part_o_stride, o,
                                   static_cast<size_t>(part_o_stride) * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
    SPW_CUDA_CHECK(cudaMemcpyAsync(part_ms_ + n_parts * part_ms_stride, ms,
                                   static_cast<size_t>(part_ms_stride) * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
    SPW_CUDA_CHECK(cudaEventRecord(cold_copied_.get(), s));
    tel_.query_d2h_bytes.fetch_add(n * q_dim * int64_t{sizeof(float)}, std::memory_order_relaxed);
    tel_.partial_h2d_bytes.fetch_add((part_o_stride + part_ms_stride) * int64_t{sizeof(float)},
                                     std::memory_order_relaxed);
    ++n_parts;
  }

  if (staged_cold) {  // prefill: cold blocks to the GPU in batches, merged into part 0
    const auto n_cold = static_cast<int64_t>(cold_.size());
    // A sliding layer skips the cold blocks that end before the first query's span (from a
    // batch boundary: block c sits in stage slot c % stage_blocks, as the table says).
    int64_t c_first = 0;
    if (span > 0) {
      const int64_t lo = std::max<int64_t>(0, pos0 - span + 1);
      while (c_first < n_cold) {
        const kv::BlockView& v = views_[static_cast<size_t>(cold_[static_cast<size_t>(c_first)])];
        if (v.pos0 + v.n_tokens > lo) break;
        ++c_first;
      }
      c_first = c_first / plan_.stage_blocks * plan_.stage_blocks;
    }
    for (int64_t c0 = c_first; c0 < n_cold; c0 += plan_.stage_blocks) {
      const int64_t nb = std::min(plan_.stage_blocks, n_cold - c0);
      for (int64_t i = 0; i < nb; ++i) {  // a block's layer part: K then V, contiguous
        const kv::BlockView& v = views_[static_cast<size_t>(cold_[static_cast<size_t>(c0 + i)])];
        SPW_CUDA_CHECK(cudaMemcpyAsync(
            stage_ + i * plan_.layout.layer_bytes, v.k + il * plan_.layout.layer_bytes,
            static_cast<size_t>(plan_.layout.layer_bytes), cudaMemcpyHostToDevice, s));
      }
      tel_.prefill_stage_h2d_bytes.fetch_add(nb * plan_.layout.layer_bytes,
                                             std::memory_order_relaxed);
      kernels::PagedLayer SL = PL;  // staged: this layer's part at the start of a stage slot
      SL.k_off = 0;
      SL.v_off = plan_.layout.layer_k_bytes;
      SPW_CUDA_CHECK(k::launch_paged_attention(
          q_, stage_tbl_dev_ + c0, nb, SL, n, pos0, n_head, c_.n_head_kv, hd, hdv, scale, span, 1,
          part_o_ + part_o_stride, part_ms_ + part_ms_stride, s));
      SPW_CUDA_CHECK(
          k::launch_attn_combine(part_o_, part_ms_, 2, n, n_head, hdv, part_o_, part_ms_, s));
    }
  }
  SPW_CUDA_CHECK(
      k::launch_attn_combine(part_o_, part_ms_, n_parts, n, n_head, hdv, attn_, nullptr, s));
  return Status::Ok();
}

// The CPU's partials of the n queries at pos0 in q_host_ over the cold blocks (all before every
// query: no causal mask; a sliding layer's span bounds them below), by the CPU attention
// scheduler as the CPU session attends (merged per query
// head in position order, deterministic), written unnormalised: o [n][n_head][hdv], then m, s
// [n][n_head][2].
void CudaSession::cold_attention(int64_t il, int64_t n, int64_t pos0) {
  const int64_t layer_bytes = plan_.layout.layer_bytes;
  cold_views_.resize(cold_.size());
  for (size_t c = 0; c < cold_.size(); ++c) {  // layer 0's views, moved to layer il
    kv::BlockView v = views_[static_cast<size_t>(cold_[c])];
    v.k += il * layer_bytes;
    v.v += il * layer_bytes;
    cold_views_[c] = v;
  }
  cpu::TieredAttention& a = *cold_attn_[layer_attn_[static_cast<size_t>(il)]];
  a.plan_given(pos0, n, cold_views_, pool_->size());  // within the layer's span
  cpu::AttnTimes times;
  const auto* q = static_cast<const float*>(q_host_.get());
  a.run(*pool_, il, q, cold_views_, times);
  auto* o = static_cast<float*>(cold_host_.get());
  a.write_partials(o, o + n * c_.n_head * c_.head_dim_v);
}

Status CudaSession::mul(const DevMatrix& w, const float* X, int64_t n, float* Y) {
  if (n >= cp_.gemm_min_tokens && act_f16_ != nullptr) return gemm_f16(w, X, n, Y);
  SPW_CUDA_CHECK(
      k::launch_matvec(w.type, w.data, w.row_bytes, w.n_in, w.n_out, X, n, Y, stream_.get()));
  return Status::Ok();
}

// Y [n][n_out] = X [n][n_in] W^T through cuBLAS, one tile of weight rows at a time.
//
// Layouts (all row-major on our side; cuBLAS is column-major, and a row-major [R][C] matrix
// with row stride ld is, byte for byte, the column-major C x R matrix with leading dimension
// ld, i.e. its transpose):
//   Wt   = rows [r0, r0 + rows) of W, decoded to f16: row-major [rows][n_in]
//          = column-major n_in x rows (ld n_in)  = Wt^T   -> opA = T gives Wt (rows x n_in)
//   Xh   = X in f16: row-major [n][n_in]
//          = column-major n_in x n (ld n_in)     = Xh^T   -> opB = N gives Xh^T (n_in x n)
//   Yt   = columns [r0, r0 + rows) of Y: row-major [n][rows] with row stride n_out, at Y + r0
//          = column-major rows x n (ld n_out)    = Yt^T
// so  Yt^T (rows x n) = Wt (rows x n_in) * Xh^T (n_in x n):
//   cublasGemmEx(T, N, m = rows, n = n, k = n_in, A = Wt lda = n_in, B = Xh ldb = n_in,
//                C = Y + r0 ldc = n_out), f16 inputs, f32 compute and output, alpha 1, beta 0.
// Stream order: the dequant of tile i+1 overwrites w_f16_ only after GEMM i (same stream; the
// handle is bound to it), so one tile buffer suffices.
Status CudaSession::gemm_f16(const DevMatrix& w, const float* X, int64_t n, float* Y) {
  cudaStream_t s = stream_.get();
  SPW_CUDA_CHECK(k::launch_f32_to_f16(X, act_f16_, n * w.n_in, s));
  // Whole multiples of 64 rows when the tile holds that many: Y + r0 stays 256-byte aligned,
  // which the tensor-core GEMM kernels prefer.
  int64_t tile_rows = std::max<int64_t>(1, w_tile_elems_ / w.n_in);
  if (tile_rows >= 64) tile_rows = tile_rows / 64 * 64;
  tile_rows = std::min(tile_rows, w.n_out);
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t r0 = 0; r0 < w.n_out; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, w.n_out - r0);
    SPW_CUDA_CHECK(k::launch_dequant_f16(w.type, w.data, w.row_bytes, w.n_in, r0, rows, w_f16_, s));
    SPW_CUBLAS_CHECK(blas_->gemm_ex(
        cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
        static_cast<int>(w.n_in), &alpha, w_f16_, CUDA_R_16F, static_cast<int>(w.n_in), act_f16_,
        CUDA_R_16F, static_cast<int>(w.n_in), &beta, Y + r0, CUDA_R_32F, static_cast<int>(w.n_out),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return Status::Ok();
}

}  // namespace spw::cuda
