// The CUDA session: the forward pass of CpuSession (engine/backend/cpu/cpu_session.h; formulas
// in engine/model/reference_session.h) on one GPU.
//
// Memory (one DeviceArena, planned and checked against the device's free memory before the
// first byte is uploaded):
//   weights  every 2-D tensor byte for byte as in the GGUF file (quantized blocks stay
//            quantized; the kernels decode them); norms, biases and QK-norm weights as f32;
//   KV       per layer K [n_ctx][n_head_kv * head_dim] and V [n_ctx][n_head_kv * head_dim_v],
//            contiguous, f16 (default) or f32, allocated for the whole context at create();
//   scratch  activations of one ubatch (n_ubatch tokens), the f16 copies the prefill GEMMs
//            read, a bounded f16 weight tile, the cuBLAS workspace and the logits.
//
// Compute: one CUDA stream, a cuBLAS handle bound to it; every kernel, copy and GEMM of an eval
// is queued on that stream in order and eval() waits for it once at the end (between ubatches
// it only waits for the small upload of the previous RoPE table it refills). Decode (and any
// ubatch of fewer than gemm_min_tokens tokens) multiplies with the quantized matvec kernels in
// f32; longer ubatches (prefill) go through cuBLAS GEMMs on f16 copies of the activations and of
// the weights, decoded one bounded tile of rows at a time, accumulated in f32.
//
// Not (yet) supported, refused at create() so `--device auto` falls back to the CPU: q8_0 KV,
// different K and V cache types, head_dim or head_dim_v above 256.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "engine/backend/cuda/arena.h"
#include "engine/backend/cuda/cublas_library.h"
#include "engine/backend/cuda/device.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

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
};

/// Bytes a session will take on the GPU, by purpose (what create() checks and allocates).
struct CudaMemoryPlan {
  int64_t weights = 0, kv = 0, scratch = 0;
  int64_t total() const { return weights + kv + scratch; }
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

  /// Plans, checks, allocates and uploads. Errors, before any device work: n_ctx < 0,
  /// n_threads < 0, n_ubatch < 1, "q8_0 KV cache is not yet supported on CUDA", K and V cache
  /// types that differ, head_dim above 256; then the device's: not usable (names the reason),
  /// "cuBLAS could not be loaded: ...", "model needs X GiB on the GPU, Y GiB free (...)", any
  /// CUDA/cuBLAS failure (file:line and the call). `model` must outlive the session.
  static Expected<std::unique_ptr<CudaSession>> create(const Model& model,
                                                       const SessionParams& params,
                                                       const CudaSessionParams& cuda = {});

  /// The memory create() would ask for, without touching a device. Same parameter errors.
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
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t n_vocab() const override { return c_.n_vocab; }

  /// The device the session runs on (free_bytes as measured at create()).
  const DeviceInfo& device() const { return dev_; }
  /// The session's GPU memory, with bytes per purpose (weights / kv / scratch).
  const DeviceArena& arena() const { return *arena_; }
  /// Bytes of the KV cache on the device (allocated for the whole context).
  int64_t kv_bytes() const { return arena_->used(ArenaPurpose::Kv); }

 private:
  // A weight matrix on the device: n_out rows of n_in elements, row r at data + r * row_bytes.
  struct DevMatrix {
    GgmlType type = GgmlType::F32;
    const void* data = nullptr;
    int64_t row_bytes = 0, n_in = 0, n_out = 0;
  };
  struct DevLayer {
    DevMatrix q, k, v, o, gate, up, down;
    const float* attn_norm = nullptr;  // [n_embd]
    const float* ffn_norm = nullptr;   // [n_embd]
    const float* bq = nullptr;         // qwen2: [n_head * head_dim], else nullptr
    const float* bk = nullptr;         // qwen2: [n_head_kv * head_dim]
    const float* bv = nullptr;         // qwen2: [n_head_kv * head_dim_v]
    const float* q_norm = nullptr;     // qwen3: [head_dim], else nullptr
    const float* k_norm = nullptr;     // qwen3: [head_dim]
    void* k_cache = nullptr;           // [n_ctx][n_head_kv * head_dim] in kv_k_
    void* v_cache = nullptr;           // [n_ctx][n_head_kv * head_dim_v] in kv_v_
  };
  using StreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
  using CublasPtr = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;
  using EventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

  CudaSession(const Model& model, const SessionParams& params, const CudaSessionParams& cuda);
  Status init();
  Status upload_weights();
  Status carve_scratch();
  Status ubatch(std::span<const int32_t> tokens, int64_t pos0, bool want_logits);
  Status layer(const DevLayer& L, int64_t n, int64_t pos0);
  // Y [n][w.n_out] = X [n][w.n_in] W^T, f32 in and out.
  Status mul(const DevMatrix& w, const float* X, int64_t n, float* Y);
  Status gemm_f16(const DevMatrix& w, const float* X, int64_t n, float* Y);

  const Model& m_;
  const ModelConfig& c_;
  SessionParams p_;
  CudaSessionParams cp_;
  DeviceInfo dev_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  int64_t n_ub_ = 0;  // tokens the scratch holds: min(n_ubatch, n_ctx)
  GgmlType kv_k_ = GgmlType::F16, kv_v_ = GgmlType::F16;  // F16 or F32
  CudaMemoryPlan plan_;

  // Declaration order is destruction order reversed: the cuBLAS handle goes first, then the
  // stream, the library handle, and the arena (whose memory the others may reference).
  std::unique_ptr<DeviceArena> arena_;
  std::unique_ptr<CublasLibrary> blas_;  // cuBLAS entry points (dlopen'd)
  StreamPtr stream_;
  EventPtr cs_copied_;  // recorded after each upload of cs_host_: it may be refilled after it
  CublasPtr cublas_;

  DevMatrix tok_embd_, output_;         // output_ is tok_embd_ when the embeddings are tied
  const float* output_norm_ = nullptr;  // [n_embd]
  std::vector<DevLayer> layers_;

  // Scratch for one ubatch of n <= n_ub_ tokens (device, f32 unless said).
  float* x_ = nullptr;           // [n][n_embd] residual stream
  float* h_ = nullptr;           // [n][n_embd] normed input of a block
  float* q_ = nullptr;           // [n][n_head][head_dim]
  float* k_ = nullptr;           // [n][n_head_kv][head_dim]
  float* v_ = nullptr;           // [n][n_head_kv][head_dim_v]
  float* attn_ = nullptr;        // [n][n_head][head_dim_v]
  float* tmp_ = nullptr;         // [n][n_embd] output of attn_output / ffn_down
  float* gate_ = nullptr;        // [n][n_ff]
  float* up_ = nullptr;          // [n][n_ff]
  float* cs_ = nullptr;          // [n][n_rot] RoPE cos/sin table per token (ops.h rope_cos_sin)
  int32_t* ids_ = nullptr;       // [n] token ids
  float* logits_dev_ = nullptr;  // [n_vocab]
  uint16_t* act_f16_ = nullptr;  // [n][max n_in] f16 activations for the GEMMs
  uint16_t* w_f16_ = nullptr;    // [w_tile_elems_] f16 weight tile for the GEMMs
  int64_t w_tile_elems_ = 0;
  void* cublas_ws_ = nullptr;
  int64_t cublas_ws_bytes_ = 0;

  // Host side.
  std::vector<double> inv_freq_;    // [n_rot / 2]
  std::vector<float> cs_host_;      // [n_ub][n_rot]
  std::vector<float> logits_;       // [n_vocab], the last eval's
  std::vector<float> logits_next_;  // [n_vocab], filled by an eval before it succeeds
};

}  // namespace spw::cuda
