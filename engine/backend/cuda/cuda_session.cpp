#include "engine/backend/cuda/cuda_session.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/cuda_check.h"
#include "kernels/launch.h"

namespace spw::cuda {

namespace {

namespace k = ::spw::kernels;

// cuBLAS workspace: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB suffices before it).
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;


// The 2-D matrices of one layer, in a fixed order.
std::array<const GgufTensorInfo*, 7> layer_matrices(const LayerWeights& w) {
  return {w.attn_q, w.attn_k, w.attn_v, w.attn_output, w.ffn_gate, w.ffn_up, w.ffn_down};
}

// The 1-D vectors of one layer (nullptr where the architecture has none).
std::array<const GgufTensorInfo*, 7> layer_vectors(const LayerWeights& w) {
  return {w.attn_norm,   w.ffn_norm,    w.attn_q_bias, w.attn_k_bias,
          w.attn_v_bias, w.attn_q_norm, w.attn_k_norm};
}

int64_t vector_bytes(const GgufTensorInfo* t) {
  return t == nullptr ? 0 : DeviceArena::aligned(t->ne[0] * int64_t{sizeof(float)});
}

// Widest input of any layer matrix (the f16 activation buffer's row).
int64_t max_layer_n_in(const Model& m) {
  int64_t n = 0;
  for (const LayerWeights& w : m.layers)
    for (const GgufTensorInfo* t : layer_matrices(w)) n = std::max(n, t->ne[0]);
  return n;
}

// Elements of the f16 weight tile: the largest layer matrix, capped at max_tile_bytes, but at
// least one row of the widest matrix.
int64_t weight_tile_elems(const Model& m, int64_t max_tile_bytes) {
  int64_t largest = 0;
  for (const LayerWeights& w : m.layers)
    for (const GgufTensorInfo* t : layer_matrices(w))
      largest = std::max(largest, t->ne[0] * t->ne[1]);
  const int64_t cap = max_tile_bytes / int64_t{sizeof(uint16_t)};
  return std::max(max_layer_n_in(m), std::min(largest, cap));
}

// Everything create() refuses before touching a device.
Status check_params(const Model& model, const SessionParams& params, const CudaSessionParams& cp) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  if (params.n_threads < 0)
    return make_error("thread count {} must not be negative", params.n_threads);
  if (cp.n_ubatch < 1) return make_error("ubatch size {} must be at least 1", cp.n_ubatch);
  if (cp.gemm_min_tokens < 1)
    return make_error("gemm_min_tokens {} must be at least 1", cp.gemm_min_tokens);
  if (cp.max_weight_tile_bytes < 1)
    return make_error("max_weight_tile_bytes {} must be positive", cp.max_weight_tile_bytes);
  if (params.kv_type_k == KvType::Q8_0 || params.kv_type_v == KvType::Q8_0)
    return make_error("q8_0 KV cache is not yet supported on CUDA");
  if (params.kv_type_k != params.kv_type_v) {
    return make_error("different K and V cache types ({} and {}) are not yet supported on CUDA",
                      kv_type_name(params.kv_type_k), kv_type_name(params.kv_type_v));
  }
  const ModelConfig& c = model.config();
  if (c.head_dim > 256 || c.head_dim_v > 256) {
    return make_error("head_dim {} / head_dim_v {}: the CUDA attention kernel takes at most 256",
                      c.head_dim, c.head_dim_v);
  }
  // cuBLAS takes int sizes; no real model comes near, but say so rather than wrap around.
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : layer_matrices(w)) {
      if (t->ne[0] > INT_MAX || t->ne[1] > INT_MAX)
        return make_error("tensor '{}' {} is too large for cuBLAS", t->name, t->shape_string());
    }
  }
  return Status::Ok();
}

}  // namespace

// ---- Planning -------------------------------------------------------------------------------

Expected<CudaMemoryPlan> CudaSession::plan(const Model& model, const SessionParams& params,
                                           const CudaSessionParams& cp) {
  SPW_TRY(check_params(model, params, cp));
  const ModelConfig& c = model.config();
  const auto A = [](int64_t bytes) { return DeviceArena::aligned(bytes); };
  CudaMemoryPlan p;

  p.weights += A(static_cast<int64_t>(model.token_embd->n_bytes));
  if (model.output != model.token_embd) p.weights += A(static_cast<int64_t>(model.output->n_bytes));
  p.weights += vector_bytes(model.output_norm);
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : layer_matrices(w))
      p.weights += A(static_cast<int64_t>(t->n_bytes));
    for (const GgufTensorInfo* t : layer_vectors(w)) p.weights += vector_bytes(t);
  }

  const int64_t n_ctx = params.n_ctx > 0 ? params.n_ctx : c.n_ctx_train;
  const GgmlType kt = kv_ggml_type(params.kv_type_k), vt = kv_ggml_type(params.kv_type_v);
  const int64_t k_dim = c.n_head_kv * c.head_dim, v_dim = c.n_head_kv * c.head_dim_v;
  p.kv = c.n_layer * (A(static_cast<int64_t>(row_size(kt, n_ctx * k_dim))) +
                      A(static_cast<int64_t>(row_size(vt, n_ctx * v_dim))));

  const int64_t n = std::min(cp.n_ubatch, n_ctx);
  const int64_t f = sizeof(float);
  const int64_t q_dim = c.n_head * c.head_dim, o_dim = c.n_head * c.head_dim_v;
  p.scratch = 3 * A(n * c.n_embd * f)  // x, h, tmp
              + A(n * q_dim * f) + A(n * k_dim * f) + A(n * v_dim * f) + A(n * o_dim * f) +
              2 * A(n * c.n_ff * f)                                   // gate, up
              + A(n * c.n_rot * f) + A(n * int64_t{sizeof(int32_t)})  // cs, ids
              + A(c.n_vocab * f);                                     // logits
  if (n >= cp.gemm_min_tokens) {  // the GEMM path can run: f16 copies and cuBLAS workspace
    p.scratch += A(n * max_layer_n_in(model) * 2) +
                 A(weight_tile_elems(model, cp.max_weight_tile_bytes) * 2) +
                 A(kCublasWorkspaceBytes);
  }
  return p;
}

// ---- Lifetime -------------------------------------------------------------------------------

void StreamDeleter::operator()(cudaStream_t s) const {
  if (s != nullptr) (void)cudaStreamDestroy(s);
}
void EventDeleter::operator()(cudaEvent_t e) const {
  if (e != nullptr) (void)cudaEventDestroy(e);
}
void CublasDeleter::operator()(cublasHandle_t h) const {
  if (h != nullptr && destroy != nullptr) (void)destroy(h);
}

CudaSession::CudaSession(const Model& model, const SessionParams& params,
                         const CudaSessionParams& cuda)
    : m_(model), c_(model.config()), p_(params), cp_(cuda) {
  dev_.index = cuda.device;
  n_ctx_ = p_.n_ctx > 0 ? p_.n_ctx : c_.n_ctx_train;
  n_ub_ = std::min(cp_.n_ubatch, n_ctx_);
  kv_k_ = kv_ggml_type(p_.kv_type_k);
  kv_v_ = kv_ggml_type(p_.kv_type_v);
}

CudaSession::~CudaSession() {
  // Work still queued must finish before the handle, the stream and the memory go (members are
  // destroyed after this body, cuBLAS handle first). Errors cannot be reported from here.
  if (stream_) {
    (void)cudaSetDevice(dev_.index);
    (void)cudaStreamSynchronize(stream_.get());
    (void)cudaGetLastError();
  }
}

Expected<std::unique_ptr<CudaSession>> CudaSession::create(const Model& model,
                                                           const SessionParams& params,
                                                           const CudaSessionParams& cuda) {
  auto planned = plan(model, params, cuda);  // every parameter error, before any device work
  if (!planned) return planned.error();
  std::unique_ptr<CudaSession> s(new CudaSession(model, params, cuda));
  s->plan_ = *planned;
  SPW_TRY(s->init());  // on failure the destructor releases whatever init() created
  return s;
}

Status CudaSession::init() {
  auto dev = query_device(cp_.device);  // makes the device current
  if (!dev) return dev.error();
  dev_ = *dev;
  if (!dev_.usable()) return Error{unusable_reason(dev_)};

  auto blas = CublasLibrary::open();
  if (!blas) return blas.error();
  blas_ = std::move(*blas);
  cudaStream_t stream = nullptr;
  SPW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_.reset(stream);
  cudaEvent_t event = nullptr;
  SPW_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cs_copied_.reset(event);
  cublasHandle_t handle = nullptr;
  SPW_CUBLAS_CHECK(blas_->create(&handle));
  cublas_ = CublasPtr(handle, CublasDeleter{blas_->destroy});
  // cublasSetStream resets the workspace to cuBLAS's default pool, so the workspace is set
  // after it (carve_scratch).
  SPW_CUBLAS_CHECK(blas_->set_stream(cublas_.get(), stream_.get()));

  // Fit check: free memory now, after the context, the stream and the handle exist.
  size_t free_b = 0, total_b = 0;
  SPW_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  dev_.free_bytes = static_cast<int64_t>(free_b);
  const int64_t need = plan_.total() + kReserveBytes;
  if (need > dev_.free_bytes) {
    return make_error(
        "model needs {} on the GPU, {} free (weights {}, KV cache {} for {} tokens, scratch {}, "
        "{} kept for the CUDA runtime) on device {} ({})",
        format_gib(need), format_gib(dev_.free_bytes), format_gib(plan_.weights),
        format_gib(plan_.kv), n_ctx_, format_gib(plan_.scratch), format_gib(kReserveBytes),
        dev_.index, dev_.name);
  }
  auto arena = DeviceArena::create(plan_.total());
  if (!arena) return arena.error();
  arena_ = std::move(*arena);

  SPW_TRY(upload_weights());
  layers_.resize(static_cast<size_t>(c_.n_layer));
  const int64_t k_dim = c_.n_head_kv * c_.head_dim, v_dim = c_.n_head_kv * c_.head_dim_v;
  for (DevLayer& L : layers_) {
    auto kc =
        arena_->alloc(static_cast<int64_t>(row_size(kv_k_, n_ctx_ * k_dim)), ArenaPurpose::Kv);
    if (!kc) return kc.error();
    auto vc =
        arena_->alloc(static_cast<int64_t>(row_size(kv_v_, n_ctx_ * v_dim)), ArenaPurpose::Kv);
    if (!vc) return vc.error();
    L.k_cache = *kc;
    L.v_cache = *vc;
  }
  SPW_TRY(carve_scratch());

  const std::vector<float> factors = dequantize_vector(m_.rope_freqs);
  inv_freq_ = cpu::rope_inv_freq(c_.n_rot, c_.rope_freq_base, c_.rope_freq_scale,
                                 factors.empty() ? nullptr : factors.data());
  cs_host_.resize(static_cast<size_t>(n_ub_ * c_.n_rot));
  logits_next_.resize(static_cast<size_t>(c_.n_vocab));
  return Status::Ok();
}

Status CudaSession::upload_weights() {
  cudaStream_t s = stream_.get();
  // Host copies of the f32 vectors live until the stream synchronises below. (A pageable
  // cudaMemcpyAsync has staged its source before it returns; keeping them is belt and braces.)
  std::vector<std::vector<float>> staged;
  const auto matrix = [&](const GgufTensorInfo* t, DevMatrix& out) -> Status {
    const auto bytes = static_cast<int64_t>(t->n_bytes);
    auto p = arena_->alloc(bytes, ArenaPurpose::Weights);
    if (!p) return p.error();
    SPW_CUDA_CHECK(
        cudaMemcpyAsync(*p, t->data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s));
    out = DevMatrix{t->type, *p, static_cast<int64_t>(t->row_bytes()), t->ne[0], t->ne[1]};
    return Status::Ok();
  };
  const auto vector = [&](const GgufTensorInfo* t, const float*& out) -> Status {
    out = nullptr;
    if (t == nullptr) return Status::Ok();
    staged.push_back(dequantize_vector(t));
    const std::vector<float>& v = staged.back();
    auto p = arena_->alloc_n<float>(static_cast<int64_t>(v.size()), ArenaPurpose::Weights);
    if (!p) return p.error();
    SPW_CUDA_CHECK(
        cudaMemcpyAsync(*p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
    out = *p;
    return Status::Ok();
  };

  SPW_TRY(matrix(m_.token_embd, tok_embd_));
  if (m_.output == m_.token_embd) {
    output_ = tok_embd_;  // tied embeddings: one copy serves both
  } else {
    SPW_TRY(matrix(m_.output, output_));
  }
  SPW_TRY(vector(m_.output_norm, output_norm_));
  layers_.resize(static_cast<size_t>(c_.n_layer));
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerWeights& w = m_.layers[il];
    DevLayer& L = layers_[il];
    SPW_TRY(matrix(w.attn_q, L.q));
    SPW_TRY(matrix(w.attn_k, L.k));
    SPW_TRY(matrix(w.attn_v, L.v));
    SPW_TRY(matrix(w.attn_output, L.o));
    SPW_TRY(matrix(w.ffn_gate, L.gate));
    SPW_TRY(matrix(w.ffn_up, L.up));
    SPW_TRY(matrix(w.ffn_down, L.down));
    SPW_TRY(vector(w.attn_norm, L.attn_norm));
    SPW_TRY(vector(w.ffn_norm, L.ffn_norm));
    SPW_TRY(vector(w.attn_q_bias, L.bq));
    SPW_TRY(vector(w.attn_k_bias, L.bk));
    SPW_TRY(vector(w.attn_v_bias, L.bv));
    SPW_TRY(vector(w.attn_q_norm, L.q_norm));
    SPW_TRY(vector(w.attn_k_norm, L.k_norm));
  }
  // Wait here, so `staged` may go (and a failed upload is reported as such).
  SPW_CUDA_CHECK(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status CudaSession::carve_scratch() {
  const int64_t n = n_ub_;
  const int64_t q_dim = c_.n_head * c_.head_dim, k_dim = c_.n_head_kv * c_.head_dim;
  const int64_t v_dim = c_.n_head_kv * c_.head_dim_v, o_dim = c_.n_head * c_.head_dim_v;
  const auto f32 = [&](int64_t elems, float*& out) -> Status {
    auto p = arena_->alloc_n<float>(elems, ArenaPurpose::Scratch);
    if (!p) return p.error();
    out = *p;
    return Status::Ok();
  };
  SPW_TRY(f32(n * c_.n_embd, x_));
  SPW_TRY(f32(n * c_.n_embd, h_));
  SPW_TRY(f32(n * c_.n_embd, tmp_));
  SPW_TRY(f32(n * q_dim, q_));
  SPW_TRY(f32(n * k_dim, k_));
  SPW_TRY(f32(n * v_dim, v_));
  SPW_TRY(f32(n * o_dim, attn_));
  SPW_TRY(f32(n * c_.n_ff, gate_));
  SPW_TRY(f32(n * c_.n_ff, up_));
  SPW_TRY(f32(n * c_.n_rot, cs_));
  auto ids = arena_->alloc_n<int32_t>(n, ArenaPurpose::Scratch);
  if (!ids) return ids.error();
  ids_ = *ids;
  SPW_TRY(f32(c_.n_vocab, logits_dev_));
  if (n >= cp_.gemm_min_tokens) {
    auto act = arena_->alloc_n<uint16_t>(n * max_layer_n_in(m_), ArenaPurpose::Scratch);
    if (!act) return act.error();
    act_f16_ = *act;
    w_tile_elems_ = weight_tile_elems(m_, cp_.max_weight_tile_bytes);
    auto tile = arena_->alloc_n<uint16_t>(w_tile_elems_, ArenaPurpose::Scratch);
    if (!tile) return tile.error();
    w_f16_ = *tile;
    auto ws = arena_->alloc(kCublasWorkspaceBytes, ArenaPurpose::Scratch);
    if (!ws) return ws.error();
    cublas_ws_ = *ws;
    cublas_ws_bytes_ = kCublasWorkspaceBytes;
    SPW_CUBLAS_CHECK(
        blas_->set_workspace(cublas_.get(), cublas_ws_, static_cast<size_t>(cublas_ws_bytes_)));
  }
  return Status::Ok();
}

// ---- Forward pass ---------------------------------------------------------------------------

Status CudaSession::eval(std::span<const int32_t> tokens, bool want_logits) {
  SPW_TRY(check_batch(tokens, c_.n_vocab, n_past_, n_ctx_));
  SPW_CUDA_CHECK(cudaSetDevice(dev_.index));  // the calling thread may not be create()'s
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  // n_past_ and logits_ change only once the whole batch has run: on an error the session is
  // as before (KV rows past n_past_ may have been written; nothing reads them).
  int64_t pos = n_past_;
  for (int64_t b = 0; b < n_tokens; b += n_ub_) {
    const int64_t n = std::min(n_ub_, n_tokens - b);
    const bool last = b + n == n_tokens;
    SPW_TRY(ubatch(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(n)), pos,
                   want_logits && last));
    pos += n;
  }
  SPW_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // also reports asynchronous errors
  n_past_ = pos;
  if (want_logits) {
    logits_.swap(logits_next_);
    logits_next_.resize(static_cast<size_t>(c_.n_vocab));
  }
  return Status::Ok();
}

Status CudaSession::ubatch(std::span<const int32_t> tokens, int64_t pos0, bool want_logits) {
  cudaStream_t s = stream_.get();
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = c_.n_embd;
  // The caller's ids stay put until eval() has synchronised. cs_host_ is refilled per ubatch:
  // wait until the previous ubatch's copy of it has been done (it is queued ahead of that
  // ubatch's kernels, so this rarely waits) instead of relying on how a pageable copy stages.
  SPW_CUDA_CHECK(
      cudaMemcpyAsync(ids_, tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice, s));
  SPW_CUDA_CHECK(cudaEventSynchronize(cs_copied_.get()));  // never recorded yet: returns at once
  for (int64_t t = 0; t < n; ++t) {  // one RoPE table per position, angles in double
    cpu::rope_cos_sin(inv_freq_.data(), c_.n_rot, pos0 + t, 1.0f,
                      &cs_host_[static_cast<size_t>(t * c_.n_rot)]);
  }
  SPW_CUDA_CHECK(cudaMemcpyAsync(cs_, cs_host_.data(),
                                 static_cast<size_t>(n * c_.n_rot) * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
  SPW_CUDA_CHECK(cudaEventRecord(cs_copied_.get(), s));
  SPW_CUDA_CHECK(k::launch_get_rows(tok_embd_.type, tok_embd_.data, tok_embd_.row_bytes, n_embd,
                                    ids_, n, x_, s));  // x [n][n_embd]
  for (const DevLayer& L : layers_) SPW_TRY(layer(L, n, pos0));

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

Status CudaSession::layer(const DevLayer& L, int64_t n, int64_t pos0) {
  cudaStream_t s = stream_.get();
  const int64_t n_embd = c_.n_embd, hd = c_.head_dim, hdv = c_.head_dim_v;
  const int64_t n_head = c_.n_head, n_head_kv = c_.n_head_kv;
  const int64_t q_dim = n_head * hd, k_dim = n_head_kv * hd, v_dim = n_head_kv * hdv;
  const float eps = static_cast<float>(c_.rms_eps);
  const bool neox = c_.rope_type == RopeType::NeoX;

  // Attention block.
  SPW_CUDA_CHECK(k::launch_rmsnorm(x_, L.attn_norm, h_, n_embd, n, eps, s));  // h [n][n_embd]
  SPW_TRY(mul(L.q, h_, n, q_));                                               // q [n][n_head][hd]
  SPW_TRY(mul(L.k, h_, n, k_));  // k [n][n_head_kv][hd]
  SPW_TRY(mul(L.v, h_, n, v_));  // v [n][n_head_kv][hdv]
  if (L.bq != nullptr) {         // qwen2
    SPW_CUDA_CHECK(k::launch_add_bias(q_, L.bq, q_dim, n, s));
    SPW_CUDA_CHECK(k::launch_add_bias(k_, L.bk, k_dim, n, s));
    SPW_CUDA_CHECK(k::launch_add_bias(v_, L.bv, v_dim, n, s));
  }
  if (L.q_norm != nullptr) {  // qwen3: RMSNorm per head before RoPE
    SPW_CUDA_CHECK(k::launch_rmsnorm(q_, L.q_norm, q_, hd, n * n_head, eps, s));
    SPW_CUDA_CHECK(k::launch_rmsnorm(k_, L.k_norm, k_, hd, n * n_head_kv, eps, s));
  }
  SPW_CUDA_CHECK(k::launch_rope(q_, cs_, n, n_head, hd, c_.n_rot, neox, s));
  SPW_CUDA_CHECK(k::launch_rope(k_, cs_, n, n_head_kv, hd, c_.n_rot, neox, s));
  // Append K and V at positions [pos0, pos0 + n), then attend [0, pos0 + t] for token t
  // (GQA inside the kernel: kv_head = head / (n_head / n_head_kv)).
  SPW_CUDA_CHECK(k::launch_kv_store(k_, L.k_cache, kv_k_, k_dim, pos0, n, s));
  SPW_CUDA_CHECK(k::launch_kv_store(v_, L.v_cache, kv_v_, v_dim, pos0, n, s));
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  SPW_CUDA_CHECK(k::launch_attention(q_, L.k_cache, L.v_cache, kv_k_, attn_, n, pos0, n_head,
                                     n_head_kv, hd, hdv, scale, s));  // attn [n][n_head][hdv]
  SPW_TRY(mul(L.o, attn_, n, tmp_));
  SPW_CUDA_CHECK(k::launch_add(x_, tmp_, x_, n * n_embd, s));

  // Feed-forward block (SwiGLU).
  SPW_CUDA_CHECK(k::launch_rmsnorm(x_, L.ffn_norm, h_, n_embd, n, eps, s));
  SPW_TRY(mul(L.gate, h_, n, gate_));  // [n][n_ff]
  SPW_TRY(mul(L.up, h_, n, up_));      // [n][n_ff]
  SPW_CUDA_CHECK(k::launch_swiglu(gate_, up_, gate_, n * c_.n_ff, s));
  SPW_TRY(mul(L.down, gate_, n, tmp_));
  SPW_CUDA_CHECK(k::launch_add(x_, tmp_, x_, n * n_embd, s));
  return Status::Ok();
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
