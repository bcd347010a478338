#include "engine/backend/cuda/cuda_session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/common/numa.h"
#include "engine/cpu/ops.h"
#include "kernels/launch.h"

namespace spw::cuda {

namespace {

namespace k = ::spw::kernels;

// cuBLAS workspace: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB suffices before it).
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

// The 1-D vectors of one layer (nullptr where the architecture has none).
std::array<const GgufTensorInfo*, 10> layer_vectors(const LayerWeights& w) {
  return {w.attn_norm,   w.ffn_norm,    w.attn_q_bias,    w.attn_k_bias,   w.attn_v_bias,
          w.attn_q_norm, w.attn_k_norm, w.attn_post_norm, w.ffn_post_norm, w.ffn_gate_inp_shexp};
}

// Widest FFN activation a ubatch row needs (gate_, up_): the dense width (phi3's fused
// product: twice it), the experts' and the shared expert's.
int64_t ffn_width(const ModelConfig& c) {
  return std::max({c.fused_gate_up ? 2 * c.n_ff : c.n_ff, c.n_ff_exp, c.n_ff_shexp});
}

// The distinct RoPEs (rope_of) of the layers, and each layer's index among them.
std::vector<size_t> rope_groups(const ModelConfig& c, std::vector<const RopeParams*>& ropes) {
  std::vector<size_t> layer(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const RopeParams* rp = &c.rope_of(il);
    size_t i = 0;
    while (i < ropes.size() && ropes[i] != rp) ++i;
    if (i == ropes.size()) ropes.push_back(rp);
    layer[static_cast<size_t>(il)] = i;
  }
  return layer;
}

int64_t vector_bytes(const GgufTensorInfo* t) {
  return t == nullptr ? 0 : DeviceArena::aligned(t->ne[0] * int64_t{sizeof(float)});
}

// Widest input of any layer matrix (the f16 activation buffer's row).
int64_t max_layer_n_in(const Model& m) {
  int64_t n = 0;
  for (const LayerWeights& w : m.layers)
    for (const GgufTensorInfo* t : w.matrices()) n = std::max(n, t->ne[0]);
  return n;
}

// Elements of the f16 weight tile: the largest layer matrix, capped at max_tile_bytes, but at
// least one row of the widest matrix.
int64_t weight_tile_elems(const Model& m, int64_t max_tile_bytes) {
  int64_t largest = 0;
  for (const LayerWeights& w : m.layers)
    for (const GgufTensorInfo* t : w.matrices()) largest = std::max(largest, t->ne[0] * t->ne[1]);
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
  if (Status st = kv::validate(cp.kv); !st) return st;
  if (cp.kv.attention != kv::KvAttention::Exact) {
    return make_error("--attention {} runs on the CPU only (the CUDA session attends exactly)",
                      kv::kv_attention_name(cp.kv));
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
    for (const GgufTensorInfo* t : w.matrices()) {
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
  return plan_window(model, params, cp, std::nullopt);
}

Expected<CudaMemoryPlan> CudaSession::plan_window(const Model& model, const SessionParams& params,
                                                  const CudaSessionParams& cp,
                                                  std::optional<int64_t> window_tokens) {
  SPW_TRY(check_params(model, params, cp));
  const ModelConfig& c = model.config();
  const auto A = [](int64_t bytes) { return DeviceArena::aligned(bytes); };
  CudaMemoryPlan p;

  p.weights += A(static_cast<int64_t>(model.token_embd->n_bytes));
  if (model.output != model.token_embd) p.weights += A(static_cast<int64_t>(model.output->n_bytes));
  p.weights += vector_bytes(model.output_norm);
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : w.matrices()) p.weights += A(static_cast<int64_t>(t->n_bytes));
    for (const GgufTensorInfo* t : layer_vectors(w)) p.weights += vector_bytes(t);
  }

  // The window (auto: the whole context) in the tier policy's layout.
  kv::KvCacheConfig kc = kv_cache_config(model, params, cp.kv, kv::WindowHome::Device);
  if (window_tokens) kc.window_tokens = *window_tokens;
  auto laid = kv::plan_tiers(kc);
  if (!laid) return laid.error();
  const kv::TierLayout& L = *laid;
  const int64_t n_ctx = L.n_ctx;
  const int64_t k_dim = c.n_head_kv * c.head_dim, v_dim = c.n_head_kv * c.head_dim_v;
  const int64_t n = std::min(cp.n_ubatch, n_ctx);
  const int64_t bs = L.block_size;
  p.layout = L;
  p.window_tokens = L.window_tokens;
  p.window_slots = L.pool_slots(n);
  p.kv = A(p.window_slots * L.block_bytes);
  const bool cold_possible = L.cold_blocks > 0;
  p.stage_blocks = cold_possible ? std::min(L.n_blocks, kv::ceil_div(cp.stage_tokens, bs)) : 0;
  p.stage_entries = cold_possible ? L.n_blocks : 0;
  p.tbl_entries = kv::ceil_div(n, bs) + 1 + p.window_slots;
  p.part_rows =
      std::max((kernels::kMaxPagedSplits + 1) * std::min(n, kDecodeTokens), 2 * n) * c.n_head;
  const int64_t pb = sizeof(kernels::PagedBlock);
  p.scratch += A(p.tbl_entries * pb) + A(p.stage_entries * pb) + A(p.stage_blocks * L.layer_bytes) +
               A(p.part_rows * c.head_dim_v * int64_t{sizeof(float)}) +
               A(p.part_rows * 2 * int64_t{sizeof(float)});

  const int64_t f = sizeof(float);
  const int64_t q_dim = c.n_head * c.head_dim, o_dim = c.n_head * c.head_dim_v;
  std::vector<const RopeParams*> ropes;
  (void)rope_groups(c, ropes);
  const auto n_ropes = static_cast<int64_t>(ropes.size());
  p.scratch += 3 * A(n * c.n_embd * f)  // x, h, tmp
               + A(n * q_dim * f) + A(n * k_dim * f) + A(n * v_dim * f) + A(n * o_dim * f) +
               2 * A(n * ffn_width(c) * f)                                       // gate, up
               + A(n_ropes * n * c.n_rot * f) + A(n * int64_t{sizeof(int32_t)})  // cs, ids
               + A(c.n_vocab * f);                                               // logits
  if (c.fused_qkv) p.scratch += A(n * (q_dim + k_dim + v_dim) * f);
  if (c.is_moe()) {  // router logits, gathered rows and outputs, slots, rows and weights
    const int64_t nk = n * c.n_expert_used;
    p.scratch += A(n * c.n_expert * f) + 2 * A(n * c.n_embd * f) + A(nk * c.n_embd * f) +
                 A(2 * nk * int64_t{sizeof(int32_t)}) + A(nk * f);
  }
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
  n_ctx_ = kv_cache_config(model, params, cuda.kv, kv::WindowHome::Device).n_ctx;
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
  if (plan_.total() + kReserveBytes > dev_.free_bytes && !cp_.kv.window_tokens) {
    // --kv-window auto: the slots a one-token window plan leaves room for become recent blocks
    // (the sink blocks and the ubatch's blocks are part of the pool in either plan).
    auto smallest = plan_window(m_, p_, cp_, 1);
    if (!smallest) return smallest.error();
    const kv::TierLayout& L = smallest->layout;
    const int64_t spare = dev_.free_bytes - kReserveBytes - smallest->total() + smallest->kv;
    const int64_t slots = spare / std::max<int64_t>(1, L.block_bytes);
    const int64_t fixed = smallest->window_slots - L.window.total();
    const int64_t recent = kv::fit_recent_blocks(slots, fixed, L.window);
    if (recent >= 1) {
      auto fit = plan_window(m_, p_, cp_, recent * L.block_size);
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

  // The layers' RoPEs (the session's rope factors: llama3's, or LongRoPE's set for this context).
  std::vector<const RopeParams*> ropes;
  layer_rope_ = rope_groups(c_, ropes);
  const std::vector<float> factors = dequantize_vector(m_.rope_factors(n_ctx_));
  for (const RopeParams* rp : ropes) {
    ropes_.push_back(
        RopeTable{rope_inv_freq(c_.n_rot, *rp, factors.empty() ? nullptr : factors.data()),
                  rope_mscale(*rp)});
  }
  SPW_TRY(upload_weights());
  SPW_TRY(make_cache());
  SPW_TRY(carve_scratch());
  const unsigned hw = std::thread::hardware_concurrency();
  pool_ = std::make_unique<cpu::ThreadPool>(p_.n_threads > 0 ? p_.n_threads
                                                             : std::max(1, static_cast<int>(hw)));
  layer_attn_.resize(static_cast<size_t>(c_.n_layer));
  for (int64_t il = 0; il < c_.n_layer; ++il) {  // one cold-block scheduler per distinct span
    const int64_t span = c_.attn_span(il);
    size_t i = 0;
    while (i < cold_attn_.size() && cold_attn_[i]->span() != span) ++i;
    if (i == cold_attn_.size()) {
      cold_attn_.push_back(std::make_unique<cpu::TieredAttention>(
          cpu::AttnDims{c_.n_layer, c_.n_head, c_.n_head_kv, c_.head_dim, c_.head_dim_v, kv_k_,
                        kv_v_, static_cast<float>(c_.attn_scale), span},
          plan_.layout.window, kv::KvAttention::Exact, 0));
    }
    layer_attn_[static_cast<size_t>(il)] = i;
  }
  cs_host_.resize(ropes_.size() * static_cast<size_t>(n_ub_ * c_.n_rot));
  logits_next_.resize(static_cast<size_t>(c_.n_vocab));
  return Status::Ok();
}

Status CudaSession::upload_weights() {
  cudaStream_t s = stream_.get();
  // Host copies of the f32 vectors live until the stream synchronises below. (A pageable
  // cudaMemcpyAsync has staged its source before it returns; keeping them is belt and braces.)
  std::vector<std::vector<float>> staged;
  // A matrix (or expert stack) byte for byte; an absent one stays empty (data nullptr).
  const auto matrix = [&](const GgufTensorInfo* t, DevMatrix& out) -> Status {
    out = DevMatrix{};
    if (t == nullptr) return Status::Ok();
    const auto bytes = static_cast<int64_t>(t->n_bytes);
    auto p = arena_->alloc(bytes, ArenaPurpose::Weights);
    if (!p) return p.error();
    SPW_CUDA_CHECK(
        cudaMemcpyAsync(*p, t->data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s));
    out = DevMatrix{t->type, *p, static_cast<int64_t>(t->row_bytes()), t->ne[0], t->ne[1]};
    return Status::Ok();
  };
  const auto experts = [&](const GgufTensorInfo* t, DevExperts& out) -> Status {
    out = DevExperts{};
    if (t == nullptr) return Status::Ok();
    SPW_TRY(matrix(t, out.m));  // n_out as one expert's: the stack's ne[1]
    out.n_expert = t->ne[2];
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
    SPW_TRY(matrix(w.attn_qkv, L.qkv));
    SPW_TRY(matrix(w.attn_output, L.o));
    SPW_TRY(matrix(w.ffn_gate, L.gate));
    SPW_TRY(matrix(w.ffn_up, L.up));
    SPW_TRY(matrix(w.ffn_down, L.down));
    SPW_TRY(matrix(w.ffn_gate_inp, L.router));
    SPW_TRY(matrix(w.ffn_gate_shexp, L.gate_sh));
    SPW_TRY(matrix(w.ffn_up_shexp, L.up_sh));
    SPW_TRY(matrix(w.ffn_down_shexp, L.down_sh));
    SPW_TRY(experts(w.ffn_gate_exps, L.gate_exps));
    SPW_TRY(experts(w.ffn_up_exps, L.up_exps));
    SPW_TRY(experts(w.ffn_down_exps, L.down_exps));
    SPW_TRY(vector(w.attn_norm, L.attn_norm));
    SPW_TRY(vector(w.ffn_norm, L.ffn_norm));
    SPW_TRY(vector(w.attn_post_norm, L.attn_post_norm));
    SPW_TRY(vector(w.ffn_post_norm, L.ffn_post_norm));
    SPW_TRY(vector(w.ffn_gate_inp_shexp, L.shexp_gate));
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
  SPW_TRY(f32(n * ffn_width(c_), gate_));
  SPW_TRY(f32(n * ffn_width(c_), up_));
  SPW_TRY(f32(static_cast<int64_t>(ropes_.size()) * n * c_.n_rot, cs_));
  if (c_.fused_qkv) SPW_TRY(f32(n * (q_dim + k_dim + v_dim), qkv_));
  if (c_.is_moe()) {
    const int64_t nk = n * c_.n_expert_used;
    SPW_TRY(f32(n * c_.n_expert, router_dev_));
    SPW_TRY(f32(n * c_.n_embd, xe_));
    SPW_TRY(f32(n * c_.n_embd, ye_));
    SPW_TRY(f32(nk * c_.n_embd, slot_));
    auto rows = arena_->alloc_n<int32_t>(2 * nk, ArenaPurpose::Scratch);
    if (!rows) return rows.error();
    moe_rows_ = *rows;
    SPW_TRY(f32(nk, moe_w_));
  }
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
  auto stage = arena_->alloc_n<uint8_t>(plan_.stage_blocks * plan_.layout.layer_bytes,
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
  if (c_.is_moe()) {
    const int64_t nk = n * c_.n_expert_used;
    SPW_TRY(pinned(n * c_.n_expert * fb, router_host_));
    SPW_TRY(pinned(2 * nk * int64_t{sizeof(int32_t)} + nk * fb, moe_host_));
  }

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

// ---- The tiered KV cache --------------------------------------------------------------------

void CudaSession::PinnedDeleter::operator()(void* p) const {
  if (p != nullptr) (void)cudaFreeHost(p);
}

Status CudaSession::make_cache() {
  kv::KvCacheConfig kc = kv_cache_config(m_, p_, cp_.kv, kv::WindowHome::Device);
  kc.window_tokens = plan_.window_tokens;
  // Spills come off the GPU into the Host arena: the GPU's node (its PCI device's), where the
  // machine has more than one. The arena stays pageable memory; the pinned buffers are as they
  // were.
  auto host_memory = host_memory_options(cp_.kv, pci_numa_node(dev_.pci_bus_id));
  if (!host_memory) return host_memory.error();
  kc.host_memory = *host_memory;
  const kv::TierLayout& g = plan_.layout;
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
  const kv::TierLayout& g = plan_.layout;
  kernels::PagedLayer L;
  L.k_off = il * g.layer_bytes;
  L.v_off = il * g.layer_bytes + g.layer_k_bytes;
  L.row_k = g.row_k;
  L.row_v = g.row_v;
  L.block_size = static_cast<int32_t>(g.block_size);
  L.type_k = kv_k_;
  L.type_v = kv_v_;
  return L;
}

SessionUsage CudaSession::usage() const {
  SessionUsage u;
  u.gpu = true;
  u.n_past = n_past_;
  u.n_ctx = n_ctx();
  u.window_d2h_bytes = window_ ? window_->d2h_bytes() : 0;
  read_counters(tel_, u);
  u.kv = cache_->stats();
  u.vram_weights = arena_ ? arena_->used(ArenaPurpose::Weights) : 0;
  u.vram_window = arena_ ? arena_->used(ArenaPurpose::Kv) : 0;
  u.vram_scratch = arena_ ? arena_->used(ArenaPurpose::Scratch) : 0;
  u.rss_bytes = process_rss_bytes();
  return u;
}

}  // namespace spw::cuda
