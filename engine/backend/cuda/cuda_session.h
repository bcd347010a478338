// The CUDA session: the forward pass of CpuSession (engine/backend/cpu/cpu_session.h; formulas
// in engine/backend/reference/reference_session.h) on one GPU, on the tiered KV cache
// (engine/kv/kv_cache.h, docs/DESIGN.md §3.4, §4.3) with its window on the GPU. Not yet run on a
// GPU: compiled and unit-tested where the tests can run without one only.
//
// Files: cuda_session.cpp plans the memory, creates the device objects, uploads the weights and
// carves the scratch; cuda_forward.cpp runs the forward pass and the split attention;
// cuda_ffn.cpp the FFN variants and the mixture of experts.
//
// Architectures: every one the model loader reads (model.h), the same math as the CPU session:
// phi3's fused QKV and gate+up products split with strided copies, gemma3's embedding scale,
// post-norms, GeGLU and per-layer RoPE and span (sliding-window layers mask keys below
// pos - span + 1 in the paged kernels and skip cold blocks wholly before it). MoE: the router's
// logits go to the host (the stream is synchronised once per MoE layer), the host chooses the
// experts as the CPU does (cpu::route_experts), and each chosen expert runs once per ubatch
// over its tokens, gathered into a block (matvec for one token, cuBLAS above gemm_min_tokens);
// outputs are scattered to (token, choice) slots and summed in choice order.
//
// Memory (one DeviceArena, planned and checked against the device's free memory before the
// first byte is uploaded):
//   weights  every 2-D tensor byte for byte as in the GGUF file (quantized blocks stay
//            quantized; the kernels decode them); norms, biases and QK-norm weights as f32;
//   window   the KV cache's window: TierLayout::pool_slots() block slots (kv/tier_policy.h) of
//            block_bytes each, in the cache's block layout (kernels/paged_math.h), handed to the
//            cache as its DeviceWindow (gpu_window.h). With --kv-window auto (the default) the
//            window is sized to hold the whole context when it fits the free memory, and as
//            much of it as fits otherwise (the rest spills to host RAM);
//   scratch  activations of one ubatch, the f16 copies the prefill GEMMs read, a bounded f16
//            weight tile, the cuBLAS workspace, the logits, the block tables, the attention
//            partials and the prefill staging buffer for cold blocks.
// Cold blocks (Host, Disk) stay in host memory; blocks leave the window on the cache's copy
// thread through GpuWindow::copy_out (device -> pinned host on a copy stream, ordered by an
// event after the kernels that wrote them).
//
// Attention, per layer (exact split attention):
//   decode (a ubatch of fewer than 8 tokens): the query is copied to pinned host memory as soon
//     as it exists; the GPU attends the window blocks (flash-decoding over the block table,
//     split across CTAs) while the session's CPU threads attend the cold blocks where they lie
//     (cpu::attn_partial), and the CPU's partial (o, m, s per head) goes back to the GPU, where
//     attn_combine merges it with the GPU's splits by the log-sum-exp rule. Only queries and
//     partials cross PCIe during decode, never cold KV (telemetry: decode_cold_to_device_bytes
//     stays 0).
//   prefill (8 tokens or more, compute-bound): the GPU attends the window blocks, then the cold
//     blocks staged to the device in batches of at least 4096 tokens, merging the partials.
// Which blocks are on the GPU or cold for a step depends on when spills land, so the split can
// differ between two runs; the result is the same softmax up to float rounding.
//
// Compute: one CUDA stream, a cuBLAS handle bound to it; decode (and any ubatch of fewer than
// gemm_min_tokens tokens) multiplies with the quantized matvec kernels in f32; longer ubatches
// go through cuBLAS GEMMs on f16 copies, accumulated in f32.
//
// Not supported, refused at create() so `--device auto` falls back to the CPU: K and V cache
// types that differ, head_dim or head_dim_v above 256, the approximate attention modes
// (streaming, topk), more than 2^31 - 1 context positions.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/tiered_attention.h"
#include "engine/backend/cuda/arena.h"
#include "engine/backend/cuda/cublas_library.h"
#include "engine/backend/cuda/device.h"
#include "engine/backend/cuda/gpu_window.h"
#include "engine/backend/device.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/session/session.h"
#include "kernels/paged_math.h"

namespace spw::cuda {

struct CudaSessionParams {
  int device = 0;          // CUDA device ordinal
  int64_t n_ubatch = 512;  // tokens per forward step (bounds the scratch memory)
  /// Ubatches of at least this many tokens multiply through cuBLAS (f16 in, f32 accumulate);
  /// shorter ones through the f32 matvec kernels. Default: more than 8 tokens.
  int64_t gemm_min_tokens = 9;
  /// Upper bound of the f16 weight tile a prefill GEMM decodes at once (bytes): a 128256 x
  /// 4096 matrix is multiplied in tiles of 8192 rows with the default 64 MiB.
  int64_t max_weight_tile_bytes = int64_t{64} << 20;
  /// The tiered KV cache: block size, window, sinks, host and disk budgets, spill folder.
  /// Exact attention only. --kv-window auto (the default): the window is sized to the whole
  /// context, or to what fits the device's free memory; an explicit window is kept as given.
  kv::KvSettings kv;
  /// Prefill stages cold blocks to the GPU in batches of at least this many tokens.
  int64_t stage_tokens = 4096;
};

/// Bytes a session will take on the GPU, by purpose (what create() checks and allocates).
struct CudaMemoryPlan {
  int64_t weights = 0, kv = 0, scratch = 0;  // kv: the window's block slots
  int64_t total() const { return weights + kv + scratch; }
  // The paged layout the bytes were planned for; the session allocates and runs by it.
  kv::TierLayout layout;      // the tier policy's: block size as applied, a block's bytes
  int64_t window_tokens = 0;  // the window as planned (sinks excluded)
  int64_t window_slots = 0;   // block slots of the device window pool
  int64_t tbl_entries = 0;    // block-table entries of one ubatch: its blocks + the window
  int64_t stage_entries = 0;  // staging-table entries: every cold block (0: nothing is cold)
  int64_t stage_blocks = 0;   // blocks of one prefill staging batch (0: nothing is cold)
  int64_t part_rows = 0;      // (token, head) rows of the attention partials' workspace
};

/// RAII deleters of the session's stream, event and cuBLAS handle.
struct StreamDeleter {
  void operator()(cudaStream_t s) const;
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const;
};
struct CublasDeleter {
  decltype(::cublasDestroy_v2)* destroy = nullptr;  // from the loaded library
  void operator()(cublasHandle_t h) const;
};

class CudaSession final : public Session {
 public:
  /// Device memory left free for the CUDA runtime, cuBLAS's own buffers and kernel modules
  /// loaded lazily: the fit check asks for plan + this much.
  static constexpr int64_t kReserveBytes = int64_t{256} << 20;
  /// Ubatches of at most this many tokens attend split GPU || CPU (decode); longer ones stage
  /// cold blocks to the GPU (prefill). Below the paged kernels' tile threshold (8 queries).
  static constexpr int64_t kDecodeTokens = 7;

  /// Plans, checks, allocates and uploads. Errors, before any device work: n_ctx < 0,
  /// n_threads < 0, n_ubatch < 1, K and V cache types that differ, head_dim above 256, an
  /// approximate attention mode, the KV cache's own (q8_0 with head_dim % 32 != 0, bad paging
  /// settings, spill folder); then the device's: not usable (names the reason),
  /// "cuBLAS could not be loaded: ...", "model needs X GiB on the GPU, Y GiB free (...)", any
  /// CUDA/cuBLAS failure (file:line and the call). `model` must outlive the session.
  static Expected<std::unique_ptr<CudaSession>> create(const Model& model,
                                                       const SessionParams& params,
                                                       const CudaSessionParams& cuda = {});

  /// The memory create() would ask for, without touching a device, for the window of
  /// cuda.kv (auto: the whole context). Same parameter errors.
  static Expected<CudaMemoryPlan> plan(const Model& model, const SessionParams& params,
                                       const CudaSessionParams& cuda = {});

  ~CudaSession() override;
  CudaSession(const CudaSession&) = delete;
  CudaSession& operator=(const CudaSession&) = delete;

  /// As Session::eval. Beyond check_batch's errors, a CUDA failure returns its Error with
  /// n_past and logits unchanged (after a sticky device error, e.g. an illegal address, every
  /// later call fails too: the context is lost).
  Status eval(std::span<const int32_t> tokens, bool want_logits) override;
  std::span<const float> logits() const override { return logits_; }
  int64_t n_past() const override { return n_past_; }
  /// Tokens the cache holds at most: min(context, window + host + disk budgets).
  int64_t n_ctx() const override { return cache_->max_tokens(); }
  int64_t n_vocab() const override { return c_.n_vocab; }

  /// Everything the session counts (usage.h): the cache's tiers, the VRAM by purpose, the bytes
  /// over PCIe (decode_cold_to_device_bytes stays 0), the cold attention's CPU wall time.
  SessionUsage usage() const override;
  /// The tiered cache (tests, telemetry).
  const kv::KvCache& cache() const { return *cache_; }

  /// The device the session runs on (free_bytes as measured at create()).
  const DeviceInfo& device() const { return dev_; }
  /// The session's GPU memory, with bytes per purpose (weights / kv / scratch).
  const DeviceArena& arena() const { return *arena_; }
  /// Bytes of the KV window on the device (its block slots).
  int64_t kv_bytes() const { return arena_->used(ArenaPurpose::Kv); }
  /// The memory plan the session was created with.
  const CudaMemoryPlan& memory_plan() const { return plan_; }

 private:
  // A weight matrix on the device: n_out rows of n_in elements, row r at data + r * row_bytes.
  struct DevMatrix {
    GgmlType type = GgmlType::F32;
    const void* data = nullptr;
    int64_t row_bytes = 0, n_in = 0, n_out = 0;
  };
  // An expert stack: n_expert matrices of n_out rows, expert e's rows after expert e - 1's.
  struct DevExperts {
    DevMatrix m;  // expert 0 (n_in, n_out, row_bytes as for one expert)
    int64_t n_expert = 0;
    DevMatrix expert(int64_t e) const {
      DevMatrix x = m;
      x.data = static_cast<const uint8_t*>(m.data) + e * m.n_out * m.row_bytes;
      return x;
    }
  };
  struct DevLayer {
    DevMatrix q, k, v, o, gate, up, down;  // gate.data == nullptr: none (MoE, or phi3's fused up)
    DevMatrix qkv;                         // phi3: [q + k + v] rows; q, k, v unused then
    DevMatrix router, gate_sh, up_sh, down_sh;  // MoE: ffn_gate_inp; qwen2moe's shared expert
    DevExperts gate_exps, up_exps, down_exps;   // MoE
    const float* attn_norm = nullptr;           // [n_embd]
    const float* ffn_norm = nullptr;            // [n_embd]
    const float* attn_post_norm = nullptr;      // gemma3: [n_embd], else nullptr
    const float* ffn_post_norm = nullptr;       // gemma3: [n_embd]
    const float* shexp_gate = nullptr;          // qwen2moe: ffn_gate_inp_shexp [n_embd]
    const float* bq = nullptr;                  // qwen2: [n_head * head_dim], else nullptr
    const float* bk = nullptr;                  // qwen2: [n_head_kv * head_dim]
    const float* bv = nullptr;                  // qwen2: [n_head_kv * head_dim_v]
    const float* q_norm = nullptr;              // qwen3: [head_dim], else nullptr
    const float* k_norm = nullptr;              // qwen3: [head_dim]
  };
  // Pinned host memory (cudaHostAlloc), freed with cudaFreeHost.
  struct PinnedDeleter {
    void operator()(void* p) const;
  };
  using PinnedPtr = std::unique_ptr<void, PinnedDeleter>;
  using StreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
  using CublasPtr = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;
  using EventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

  CudaSession(const Model& model, const SessionParams& params, const CudaSessionParams& cuda);
  // The plan for a window of window_tokens tokens (the settings' own when not given).
  static Expected<CudaMemoryPlan> plan_window(const Model& model, const SessionParams& params,
                                              const CudaSessionParams& cuda,
                                              std::optional<int64_t> window_tokens);
  Status init();
  Status upload_weights();
  Status carve_scratch();
  Status make_cache();
  Status check_room(int64_t n) const;
  Status ubatch(std::span<const int32_t> tokens, int64_t pos0, bool want_logits);
  Status upload_tables(int64_t n, int64_t pos0);
  Status layer(int64_t il, const DevLayer& L, int64_t n, int64_t pos0);
  Status attend(int64_t il, int64_t n, int64_t pos0);
  // The FFN of layer il on h_ [n][n_embd], into tmp_ [n][n_embd] (cuda_ffn.cpp).
  Status ffn(const DevLayer& L, int64_t n);
  Status moe(const DevLayer& L, int64_t n);
  // y = act(g) * u (the model's FFN activation), n elements.
  Status gated(const float* g, const float* u, float* y, int64_t n);
  // The rows [n][cols] at src + col0 of a [n][ld] matrix into dst [n][cols] (splits phi3's
  // fused products).
  Status split_cols(const float* src, int64_t ld, int64_t col0, int64_t cols, int64_t n,
                    float* dst);
  // The CPU's partial over the cold blocks for the n queries at pos0 in q_host_, into
  // cold_host_.
  void cold_attention(int64_t il, int64_t n, int64_t pos0);
  kernels::PagedLayer paged_layer(int64_t il) const;
  // Y [n][w.n_out] = X [n][w.n_in] W^T, f32 in and out.
  Status mul(const DevMatrix& w, const float* X, int64_t n, float* Y);
  Status gemm_f16(const DevMatrix& w, const float* X, int64_t n, float* Y);

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  CudaSessionParams cp_;
  DeviceInfo dev_;
  int64_t n_ctx_ = 0;  // the context length asked for (the cache may hold fewer: n_ctx())
  int64_t n_past_ = 0;
  int64_t n_ub_ = 0;  // tokens the scratch holds: min(n_ubatch, n_ctx)
  GgmlType kv_k_ = GgmlType::F16, kv_v_ = GgmlType::F16;  // F32, F16 or Q8_0
  CudaMemoryPlan plan_;
  int n_sm_ = 1;  // multiprocessors (the decode kernel's split count)

  // Declaration order is destruction order reversed: the cuBLAS handle goes first, then the
  // stream, the library handle, and the arena (whose memory the others may reference).
  std::unique_ptr<DeviceArena> arena_;
  std::unique_ptr<CublasLibrary> blas_;  // cuBLAS entry points (dlopen'd)
  StreamPtr stream_;
  EventPtr cs_copied_;    // recorded after each upload of cs_host_: it may be refilled after it
  EventPtr tbl_copied_;   // the same for the block tables
  EventPtr q_ready_;      // a layer's query is in q_host_
  EventPtr cold_copied_;  // the CPU's partial has been copied to the device
  CublasPtr cublas_;
  // The window (its memory is the arena's), then the cache whose copy thread uses it: the
  // cache goes first.
  std::shared_ptr<GpuWindow> window_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<cpu::ThreadPool> pool_;  // CPU threads for the cold blocks
  // Their schedulers (exact, given blocks), one per distinct span, and each layer's.
  std::vector<std::unique_ptr<cpu::TieredAttention>> cold_attn_;
  std::vector<size_t> layer_attn_;  // [n_layer]: index into cold_attn_

  DevMatrix tok_embd_, output_;         // output_ is tok_embd_ when the embeddings are tied
  const float* output_norm_ = nullptr;  // [n_embd]
  std::vector<DevLayer> layers_;

  // Scratch for one ubatch of n <= n_ub_ tokens (device, f32 unless said).
  float* x_ = nullptr;     // [n][n_embd] residual stream
  float* h_ = nullptr;     // [n][n_embd] normed input of a block
  float* q_ = nullptr;     // [n][n_head][head_dim]
  float* k_ = nullptr;     // [n][n_head_kv][head_dim]
  float* v_ = nullptr;     // [n][n_head_kv][head_dim_v]
  float* attn_ = nullptr;  // [n][n_head][head_dim_v]
  float* tmp_ = nullptr;   // [n][n_embd] output of attn_output / ffn_down
  float* gate_ = nullptr;  // [n][ffn width]: n_ff, n_ff_exp or n_ff_shexp
  float* up_ = nullptr;    // [n][ffn width]; phi3: [n][2 n_ff], the fused product
  float* qkv_ = nullptr;   // phi3: [n][q + k + v], the fused product
  float* cs_ = nullptr;    // [n_ropes][n][n_rot] RoPE cos/sin table per token (ops.h rope_cos_sin)
  // MoE: router logits [n][n_expert]; one expert's tokens [n][n_embd] and outputs [n][n_embd];
  // (token, choice) outputs [n][k][n_embd]; gather rows, slot rows [2][n * k] and weights [n][k].
  float* router_dev_ = nullptr;
  float* xe_ = nullptr;
  float* ye_ = nullptr;
  float* slot_ = nullptr;
  int32_t* moe_rows_ = nullptr;
  float* moe_w_ = nullptr;
  int32_t* ids_ = nullptr;       // [n] token ids
  float* logits_dev_ = nullptr;  // [n_vocab]
  uint16_t* act_f16_ = nullptr;  // [n][max n_in] f16 activations for the GEMMs
  uint16_t* w_f16_ = nullptr;    // [w_tile_elems_] f16 weight tile for the GEMMs
  int64_t w_tile_elems_ = 0;
  void* cublas_ws_ = nullptr;
  int64_t cublas_ws_bytes_ = 0;
  uint8_t* window_mem_ = nullptr;                 // [window_slots][block_bytes]
  kernels::PagedBlock* tbl_dev_ = nullptr;        // [ubatch blocks + window slots]
  kernels::PagedBlock* stage_tbl_dev_ = nullptr;  // [cold blocks of the context]
  uint8_t* stage_ = nullptr;                      // [stage_blocks_][layer_bytes_]
  float* part_o_ = nullptr;                       // [n_parts][n][n_head][head_dim_v]
  float* part_ms_ = nullptr;                      // [n_parts][n][n_head][2]

  // Host side.
  PinnedPtr q_host_;                  // [kDecodeTokens][n_head * head_dim] a layer's queries
  PinnedPtr cold_host_;               // [kDecodeTokens][n_head][head_dim_v] o, then [..][2] m, s
  PinnedPtr tbl_host_;                // mirrors of tbl_dev_ and stage_tbl_dev_
  PinnedPtr router_host_;             // MoE: [n_ub][n_expert] router logits
  PinnedPtr moe_host_;                // MoE: mirror of moe_rows_, then moe_w_
  std::vector<kv::BlockView> views_;  // layer 0's blocks of the current ubatch
  std::vector<int64_t> cold_;         // indices into views_ of the cold blocks
  std::vector<kv::BlockView> cold_views_;  // the cold blocks of the layer being attended
  int64_t n_write_ = 0, n_window_ = 0, first_block_ = 0;  // the tables of the ubatch
  SessionCounters tel_;
  // The distinct RoPEs of the layers (rope, gemma3's rope_swa): angles and magnitude.
  struct RopeTable {
    std::vector<double> inv_freq;  // [n_rot / 2]
    double mscale = 1.0;
  };
  std::vector<RopeTable> ropes_;
  std::vector<size_t> layer_rope_;  // [n_layer]: index into ropes_ (and cs_)
  std::vector<float> cs_host_;      // [n_ropes][n_ub][n_rot]
  std::vector<float> logits_;       // [n_vocab], the last eval's
  std::vector<float> logits_next_;  // [n_vocab], filled by an eval before it succeeds
};

}  // namespace spw::cuda
