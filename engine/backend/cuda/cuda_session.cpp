#include "engine/backend/cuda/cuda_session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/kv/limits.h"
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
  if (cp.paging.attention != KvAttention::Exact) {
    return make_error("--attention {} runs on the CPU only (the CUDA session attends exactly)",
                      kv_attention_name(cp.paging));
  }
  if (cp.stage_tokens < 1) return make_error("stage_tokens {} must be at least 1", cp.stage_tokens);
  if (auto st = check_kv_types(params, model.config().head_dim, model.config().head_dim_v); !st)
    return st;
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

KvGeometry kv_geometry(const ModelConfig& c, const SessionParams& params, int64_t block_size) {
  KvGeometry g;
  g.row_k = static_cast<int64_t>(row_size(kv_ggml_type(params.kv_type_k), c.head_dim));
  g.row_v = static_cast<int64_t>(row_size(kv_ggml_type(params.kv_type_v), c.head_dim_v));
  g.layer_k_bytes = c.n_head_kv * block_size * g.row_k;
  g.layer_bytes = g.layer_k_bytes + c.n_head_kv * block_size * g.row_v;
  g.block_bytes = c.n_layer * g.layer_bytes;
  return g;
}

// ---- Planning -------------------------------------------------------------------------------

Expected<CudaMemoryPlan> CudaSession::plan(const Model& model, const SessionParams& params,
                                           const CudaSessionParams& cp) {
  const int64_t n_ctx = params.n_ctx > 0 ? params.n_ctx : model.config().n_ctx_train;
  return plan_window(model, params, cp, cp.paging.is_default() ? n_ctx : cp.paging.window_tokens);
}

Expected<CudaMemoryPlan> CudaSession::plan_window(const Model& model, const SessionParams& params,
                                                  const CudaSessionParams& cp,
                                                  int64_t window_tokens) {
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
  const int64_t k_dim = c.n_head_kv * c.head_dim, v_dim = c.n_head_kv * c.head_dim_v;
  const int64_t n = std::min(cp.n_ubatch, n_ctx);
  const KvPaging& pg = cp.paging;
  if (Status st = kv::check_paging_settings(n_ctx, pg.block_size, window_tokens, pg.n_sinks); !st)
    return st.error();
  int64_t bs = pg.block_size, window = window_tokens, sinks = pg.n_sinks;
  kv::clamp_paging_to_context(n_ctx, bs, window, sinks);
  p.block_size = bs;
  p.geometry = kv_geometry(c, params, bs);
  p.window_tokens = window;
  p.window_slots = kv::window_pool_slots(n_ctx, bs, window, sinks, n);
  p.kv = A(p.window_slots * p.geometry.block_bytes);
  const int64_t n_blocks = kv::ceil_div(n_ctx, bs);
  const bool cold_possible = p.window_slots - kv::kSpareWindowSlots < n_blocks;
  p.stage_blocks = cold_possible ? std::min(n_blocks, kv::ceil_div(cp.stage_tokens, bs)) : 0;
  p.stage_entries = cold_possible ? n_blocks : 0;
  p.tbl_entries = kv::ceil_div(n, bs) + 1 + p.window_slots;
  p.part_rows =
      std::max((kernels::kMaxPagedSplits + 1) * std::min(n, kDecodeTokens), 2 * n) * c.n_head;
  const int64_t pb = sizeof(kernels::PagedBlock);
  p.scratch += A(p.tbl_entries * pb) + A(p.stage_entries * pb) +
               A(p.stage_blocks * p.geometry.layer_bytes) +
               A(p.part_rows * c.head_dim_v * int64_t{sizeof(float)}) +
               A(p.part_rows * 2 * int64_t{sizeof(float)});

  const int64_t f = sizeof(float);
  const int64_t q_dim = c.n_head * c.head_dim, o_dim = c.n_head * c.head_dim_v;
  p.scratch += 3 * A(n * c.n_embd * f)  // x, h, tmp
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
  cublasHandle_t handle = nullptr;
  SPW_CUBLAS_CHECK(blas_->create(&handle));
  cublas_ = CublasPtr(handle, CublasDeleter{blas_->destroy});
  // cublasSetStream resets the workspace to cuBLAS's default pool, so the workspace is set
  // after it (carve_scratch).
  SPW_CUBLAS_CHECK(blas_->set_stream(cublas_.get(), stream_.get()));

  for (EventPtr* e : {&cs_copied_, &tbl_copied_, &q_ready_, &cold_copied_}) {
    cudaEvent_t ev = nullptr;
    SPW_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    e->reset(ev);
  }
  SPW_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, dev_.index));

  // Fit check: free memory now, after the context, the stream and the handle exist. With the
  // default paging settings the window shrinks to what fits (the rest of the context spills to
  // host RAM) instead of failing.
  size_t free_b = 0, total_b = 0;
  SPW_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  dev_.free_bytes = static_cast<int64_t>(free_b);
  if (plan_.total() + kReserveBytes > dev_.free_bytes && cp_.paging.is_default()) {
    // The slots a one-token window plan leaves room for become recent blocks (the sink blocks
    // and the ubatch's blocks are part of the pool in either plan).
    auto smallest = plan_window(m_, p_, cp_, 1);
    if (!smallest) return smallest.error();
    const int64_t bs = smallest->block_size;
    const int64_t sinks = std::min(cp_.paging.n_sinks, n_ctx_);
    const int64_t spare = dev_.free_bytes - kReserveBytes - smallest->total() + smallest->kv;
    const int64_t slots = spare / std::max<int64_t>(1, smallest->geometry.block_bytes);
    const int64_t fixed = smallest->window_slots - kv::window_blocks(sinks, 1, bs).total();
    const int64_t recent = slots - fixed - kv::ceil_div(sinks, bs);
    if (recent >= 1) {
      auto fit = plan_window(m_, p_, cp_, recent * bs);
      if (!fit) return fit.error();
      plan_ = *fit;
    }
  }
  const int64_t need = plan_.total() + kReserveBytes;
  if (need > dev_.free_bytes) {
    return make_error(
        "model needs {} on the GPU, {} free (weights {}, KV window {} for {} tokens, scratch {}, "
        "{} kept for the CUDA runtime) on device {} ({})",
        format_gib(need), format_gib(dev_.free_bytes), format_gib(plan_.weights),
        format_gib(plan_.kv), plan_.window_tokens, format_gib(plan_.scratch),
        format_gib(kReserveBytes), dev_.index, dev_.name);
  }
  auto arena = DeviceArena::create(plan_.total());
  if (!arena) return arena.error();
  arena_ = std::move(*arena);

  SPW_TRY(upload_weights());
  SPW_TRY(make_cache());
  SPW_TRY(carve_scratch());
  const unsigned hw = std::thread::hardware_concurrency();
  pool_ = std::make_unique<cpu::ThreadPool>(p_.n_threads > 0 ? p_.n_threads
                                                             : std::max(1, static_cast<int>(hw)));

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

  // Block tables, attention partials, the prefill staging buffer, as planned.
  auto tbl = arena_->alloc_n<kernels::PagedBlock>(plan_.tbl_entries, ArenaPurpose::Scratch);
  if (!tbl) return tbl.error();
  tbl_dev_ = *tbl;
  auto stbl = arena_->alloc_n<kernels::PagedBlock>(plan_.stage_entries, ArenaPurpose::Scratch);
  if (!stbl) return stbl.error();
  stage_tbl_dev_ = *stbl;
  auto stage = arena_->alloc_n<uint8_t>(plan_.stage_blocks * plan_.geometry.layer_bytes,
                                        ArenaPurpose::Scratch);
  if (!stage) return stage.error();
  stage_ = *stage;
  SPW_TRY(f32(plan_.part_rows * c_.head_dim_v, part_o_));
  SPW_TRY(f32(plan_.part_rows * 2, part_ms_));
  const auto pinned = [](int64_t bytes, PinnedPtr& out) -> Status {
    void* p = nullptr;
    SPW_CUDA_CHECK(
        cudaHostAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault));
    out.reset(p);
    return Status::Ok();
  };
  const int64_t fb = sizeof(float);
  SPW_TRY(pinned(kDecodeTokens * q_dim * fb, q_host_));
  SPW_TRY(pinned(kDecodeTokens * c_.n_head * (c_.head_dim_v + 2) * fb, cold_host_));
  SPW_TRY(pinned((plan_.tbl_entries + plan_.stage_entries) * int64_t{sizeof(kernels::PagedBlock)},
                 tbl_host_));

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

SessionUsage CudaSession::usage() const {
  const CudaSessionStats st = stats();
  SessionUsage u;
  u.gpu = true;
  u.n_past = st.n_past;
  u.n_ctx = n_ctx();
  u.prefill_tokens_computed = st.prefill_tokens_computed;
  u.decode_tokens = st.decode_tokens;
  u.prefill_s = st.prefill_s;
  u.decode_s = st.decode_s;
  set_kv_usage(u, st.kv);
  u.vram_weights = st.vram_weights;
  u.vram_window = st.vram_window;
  u.vram_scratch = st.vram_scratch;
  u.pcie_bytes =
      st.query_d2h_bytes + st.partial_h2d_bytes + st.prefill_stage_h2d_bytes + st.window_d2h_bytes;
  return u;
}

// ---- Forward pass ---------------------------------------------------------------------------

// ---- The tiered KV cache --------------------------------------------------------------------

void CudaSession::PinnedDeleter::operator()(void* p) const {
  if (p != nullptr) (void)cudaFreeHost(p);
}

Status CudaSession::make_cache() {
  kv::KvCacheConfig kc;
  kc.n_layer = c_.n_layer;
  kc.n_kv_heads = c_.n_head_kv;
  kc.head_dim = c_.head_dim;
  kc.head_dim_v = c_.head_dim_v;
  kc.n_ctx = n_ctx_;
  kc.type_k = kv_k_;
  kc.type_v = kv_v_;
  kc.block_size = cp_.paging.block_size;
  kc.n_sinks = cp_.paging.n_sinks;
  kc.window_tokens = plan_.window_tokens;
  kc.host_budget = cp_.paging.host_budget;
  kc.disk_budget = cp_.paging.disk_budget;
  kc.spill_dir = cp_.paging.spill_dir;
  const KvGeometry& g = plan_.geometry;
  auto mem = arena_->alloc(plan_.window_slots * g.block_bytes, ArenaPurpose::Kv);
  if (!mem) return mem.error();
  window_mem_ = static_cast<uint8_t*>(*mem);
  auto win =
      GpuWindow::create(dev_.index, window_mem_, plan_.window_slots, g.block_bytes, stream_.get());
  if (!win) return win.error();
  window_ = std::move(*win);
  kc.device_window = window_;
  auto cache = kv::KvCache::create(kc);
  if (!cache) return cache.error();
  cache_ = std::move(*cache);
  return Status::Ok();
}

kernels::PagedLayer CudaSession::paged_layer(int64_t il) const {
  const KvGeometry& g = plan_.geometry;
  kernels::PagedLayer L;
  L.k_off = il * g.layer_bytes;
  L.v_off = il * g.layer_bytes + g.layer_k_bytes;
  L.row_k = g.row_k;
  L.row_v = g.row_v;
  L.block_size = static_cast<int32_t>(plan_.block_size);
  L.type_k = kv_k_;
  L.type_v = kv_v_;
  return L;
}

CudaSessionStats CudaSession::stats() const {
  const auto rd = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  CudaSessionStats s;
  s.n_past = n_past_;
  s.prefill_tokens_computed = rd(tel_.prefill_tokens_computed);
  s.decode_tokens = rd(tel_.decode_tokens);
  s.prefill_s = static_cast<double>(rd(tel_.prefill_ns)) * 1e-9;
  s.decode_s = static_cast<double>(rd(tel_.decode_ns)) * 1e-9;
  s.cold_attn_s = static_cast<double>(rd(tel_.cold_attn_ns)) * 1e-9;
  s.query_wait_s = static_cast<double>(rd(tel_.query_wait_ns)) * 1e-9;
  s.query_d2h_bytes = rd(tel_.query_d2h_bytes);
  s.partial_h2d_bytes = rd(tel_.partial_h2d_bytes);
  s.prefill_stage_h2d_bytes = rd(tel_.prefill_stage_h2d_bytes);
  s.decode_cold_to_device_bytes = rd(tel_.decode_cold_to_device_bytes);
  s.window_d2h_bytes = window_ ? window_->d2h_bytes() : 0;
  s.vram_weights = arena_ ? arena_->used(ArenaPurpose::Weights) : 0;
  s.vram_window = arena_ ? arena_->used(ArenaPurpose::Kv) : 0;
  s.vram_scratch = arena_ ? arena_->used(ArenaPurpose::Scratch) : 0;
  s.kv = cache_->stats();
  return s;
}

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
  const int64_t bs = plan_.block_size;
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
          entry(views_[static_cast<size_t>(cold_[c])], stage_ + slot * plan_.geometry.layer_bytes);
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
  // K and V of positions [pos0, pos0 + n) into their window blocks, then attention over the
  // window (GPU) and the cold blocks (CPU in decode, staged in prefill).
  const kernels::PagedLayer PL = paged_layer(il);
  SPW_CUDA_CHECK(k::launch_kv_store_paged(k_, kv_k_, hd, n_head_kv, tbl_dev_, first_block_,
                                          plan_.block_size, PL.k_off, pos0, n, s));
  SPW_CUDA_CHECK(k::launch_kv_store_paged(v_, kv_v_, hdv, n_head_kv, tbl_dev_, first_block_,
                                          plan_.block_size, PL.v_off, pos0, n, s));
  SPW_TRY(attend(il, n, pos0));  // attn [n][n_head][hdv]
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

// Exact split attention of one layer (see the header): partials in part_o_/part_ms_, merged by
// attn_combine into attn_.
Status CudaSession::attend(int64_t il, int64_t n, int64_t pos0) {
  cudaStream_t s = stream_.get();
  const int64_t hd = c_.head_dim, hdv = c_.head_dim_v, n_head = c_.n_head;
  const int64_t q_dim = n_head * hd;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
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
                                           c_.n_head_kv, hd, hdv, scale, n_split, part_o_, part_ms_,
                                           s));
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
    cold_attention(il, n);
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
    for (int64_t c0 = 0; c0 < n_cold; c0 += plan_.stage_blocks) {
      const int64_t nb = std::min(plan_.stage_blocks, n_cold - c0);
      for (int64_t i = 0; i < nb; ++i) {  // a block's layer part: K then V, contiguous
        const kv::BlockView& v = views_[static_cast<size_t>(cold_[static_cast<size_t>(c0 + i)])];
        SPW_CUDA_CHECK(cudaMemcpyAsync(
            stage_ + i * plan_.geometry.layer_bytes, v.k + il * plan_.geometry.layer_bytes,
            static_cast<size_t>(plan_.geometry.layer_bytes), cudaMemcpyHostToDevice, s));
      }
      tel_.prefill_stage_h2d_bytes.fetch_add(nb * plan_.geometry.layer_bytes,
                                             std::memory_order_relaxed);
      kernels::PagedLayer SL = PL;  // staged: this layer's part at the start of a stage slot
      SL.k_off = 0;
      SL.v_off = plan_.geometry.layer_k_bytes;
      SPW_CUDA_CHECK(k::launch_paged_attention(
          q_, stage_tbl_dev_ + c0, nb, SL, n, pos0, n_head, c_.n_head_kv, hd, hdv, scale, 1,
          part_o_ + part_o_stride, part_ms_ + part_ms_stride, s));
      SPW_CUDA_CHECK(
          k::launch_attn_combine(part_o_, part_ms_, 2, n, n_head, hdv, part_o_, part_ms_, s));
    }
  }
  SPW_CUDA_CHECK(
      k::launch_attn_combine(part_o_, part_ms_, n_parts, n, n_head, hdv, attn_, nullptr, s));
  return Status::Ok();
}

// Partials of the n queries in q_host_ over the cold blocks (all before every query: no mask),
// one job per (token, KV head, chunk of blocks) on the pool, merged per query head in chunk
// order (deterministic), written unnormalised: o [n][n_head][hdv], then m, s [n][n_head][2].
void CudaSession::cold_attention(int64_t il, int64_t n) {
  const int64_t hd = c_.head_dim, hdv = c_.head_dim_v, n_kv = c_.n_head_kv;
  const int64_t n_rep = c_.n_head / n_kv, bs = plan_.block_size;
  const auto n_cold = static_cast<int64_t>(cold_.size());
  const int64_t chunk = std::max<int64_t>(1, kv::ceil_div(n_cold, 16));  // blocks per job
  const int64_t n_chunks = kv::ceil_div(n_cold, chunk);
  const int64_t n_jobs = n * n_kv * n_chunks;
  cold_parts_.resize(static_cast<size_t>(n_jobs * n_rep));
  const cpu::AttnShape shape{n_rep, hd, hdv,
                             static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
  const auto* q_all = static_cast<const float*>(q_host_.get());
  pool_->parallel_for(n_jobs, [&](int64_t jb, int64_t je) {
    thread_local std::vector<cpu::AttnPartial> tmp;
    tmp.resize(static_cast<size_t>(n_rep));
    for (int64_t j = jb; j < je; ++j) {
      const int64_t ch = j % n_chunks, g = (j / n_chunks) % n_kv, t = j / (n_chunks * n_kv);
      const float* q = q_all + t * c_.n_head * hd + g * n_rep * hd;
      cpu::AttnPartial* out = &cold_parts_[static_cast<size_t>(j * n_rep)];
      bool first = true;
      for (int64_t c = ch * chunk; c < std::min(n_cold, (ch + 1) * chunk); ++c) {
        const kv::BlockView& v = views_[static_cast<size_t>(cold_[static_cast<size_t>(c)])];
        const uint8_t* kb = v.k + il * plan_.geometry.layer_bytes;
        const uint8_t* vb = kb + plan_.geometry.layer_k_bytes;
        const cpu::KvSpan ks{kb + g * bs * plan_.geometry.row_k, kv_k_, hd};
        const cpu::KvSpan vs{vb + g * bs * plan_.geometry.row_v, kv_v_, hdv};
        cpu::attn_partial(shape, q, ks, vs, v.n_tokens, first ? out : tmp.data());
        if (!first) {
          for (int64_t r = 0; r < n_rep; ++r) cpu::attn_merge(out[r], tmp[static_cast<size_t>(r)]);
        }
        first = false;
      }
    }
  });
  auto* o = static_cast<float*>(cold_host_.get());
  float* ms = o + n * c_.n_head * hdv;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < n_kv; ++g) {
      for (int64_t r = 0; r < n_rep; ++r) {
        const int64_t base_job = (t * n_kv + g) * n_chunks;
        cpu::AttnPartial& acc = cold_parts_[static_cast<size_t>(base_job * n_rep + r)];
        for (int64_t ch = 1; ch < n_chunks; ++ch)
          cpu::attn_merge(acc, cold_parts_[static_cast<size_t>((base_job + ch) * n_rep + r)]);
        const int64_t h = g * n_rep + r;
        std::memcpy(o + (t * c_.n_head + h) * hdv, acc.o.data(),
                    static_cast<size_t>(hdv) * sizeof(float));
        ms[2 * (t * c_.n_head + h)] = acc.m;
        ms[2 * (t * c_.n_head + h) + 1] = acc.s;
      }
    }
  }
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
