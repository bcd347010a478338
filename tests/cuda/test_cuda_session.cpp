// The CUDA session against the fast CPU session (itself tested against the float64 reference):
// every architecture x every weight type, prefill through cuBLAS and decode through the matvec
// kernels, f32 and f16 KV; plus the tiny real model, ubatch splitting, GEMM tiling, errors and
// the memory accounting. Every test skips without a usable CUDA device.
//
// How tokens are compared. Both sessions see the same token sequence: the CPU's greedy choices
// (teacher forcing), so every one of the steps is compared even after a disagreement. At each
// step the logits must agree within the stated tolerance, and the GPU's argmax must be the CPU's
// token unless the CPU's own margin (top-1 minus top-2 logit) is below that tolerance: a near tie
// that two correct backends may break differently (counted and printed). When there is no near
// tie, the GPU's free-running greedy continuation must equal the CPU's token for token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/cuda/cuda_session.h"
#include "engine/backend/device.h"
#include "engine/sampling/sampler.h"
#include "tests/cuda/cuda_test.h"
#include "tests/support/arch_specs.h"
#include "tests/support/compare.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

// After SPW_SKIP_WITHOUT_CUDA(): a device the runtime sees may still be unusable here (a GPU
// older than the architectures built); skip with the probe's reason then.
#define SPW_SKIP_UNLESS_CUDA_USABLE()                                                 \
  do {                                                                                \
    const CudaProbe spw_probe_ = probe_cuda();                                        \
    if (!spw_probe_.usable) GTEST_SKIP() << "CUDA not usable: " << spw_probe_.reason; \
  } while (0)

constexpr int kPromptTokens = 40;  // > 8: the prompt goes through the cuBLAS GEMMs
constexpr int kSteps = 24;

// Logits before each choice: [0] after the prompt, [i] after the i-th fed token.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;  // the greedy choice at each step
};

std::vector<float> copy_logits(const Session& s) { return {s.logits().begin(), s.logits().end()}; }

// Prefills `prompt` (as one eval, or token by token), then feeds `forced` tokens when given,
// else its own greedy choices, for `steps` steps.
Trace run(Session& s, const std::vector<int32_t>& prompt, int steps,
          const std::vector<int32_t>* forced = nullptr, bool token_by_token = false) {
  Trace t;
  if (token_by_token) {
    for (const int32_t id : prompt)
      EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1), true).ok());
  } else {
    const Status st = s.eval(prompt, true);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  }
  for (int i = 0; i < steps; ++i) {
    t.logits.push_back(copy_logits(s));
    const int32_t mine = argmax(s.logits());
    t.tokens.push_back(mine);
    const int32_t next = forced != nullptr ? (*forced)[static_cast<size_t>(i)] : mine;
    const Status st = s.eval(std::span<const int32_t>(&next, 1), true);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    if (!st.ok()) break;
  }
  return t;
}

// top-1 minus top-2.
double margin(const std::vector<float>& l) {
  float a = -INFINITY, b = -INFINITY;
  for (const float x : l) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return static_cast<double>(a) - b;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (const float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// The comparison described at the top of the file. `cpu` ran free (greedy), `gpu` was fed the
// CPU's tokens. Returns the number of near ties.
int compare_traces(const Trace& gpu, const Trace& cpu, double tol, const std::string& what) {
  EXPECT_EQ(gpu.logits.size(), cpu.logits.size()) << what;
  int near_ties = 0;
  double worst = 0;
  for (size_t i = 0; i < std::min(gpu.logits.size(), cpu.logits.size()); ++i) {
    size_t w = 0;
    const double e = rel_err(gpu.logits[i], cpu.logits[i], &w);
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << what << " step " << i << ": worst logit " << w << " gpu "
                      << gpu.logits[i][w] << " cpu " << cpu.logits[i][w];
    if (gpu.tokens[i] != cpu.tokens[i]) {
      const double gap = margin(cpu.logits[i]), allowed = tol * max_abs(cpu.logits[i]);
      EXPECT_LT(gap, allowed) << what << " step " << i << ": gpu chose " << gpu.tokens[i]
                              << ", cpu " << cpu.tokens[i] << " with a clear margin " << gap;
      ++near_ties;
    }
  }
  std::printf("[ %s ] max rel err %.2e over %zu steps, %d near ties\n", what.c_str(), worst,
              cpu.logits.size(), near_ties);
  return near_ties;
}

std::unique_ptr<Session> cpu_session(const Model& m, KvType kv) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = kv;
  sp.n_threads = 4;
  auto s = cpu::CpuSession::create(m, sp);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<cuda::CudaSession> gpu_session(const Model& m, KvType kv,
                                               cuda::CudaSessionParams cp = {}) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = kv;
  cp.device = probe_cuda().index;
  auto s = cuda::CudaSession::create(m, sp, cp);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Model> load(const TempDir& dir, const TestModelSpec& spec) {
  const std::string path = dir.file("model.gguf");
  const Status st = write_test_model(spec, path);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

// ---- Every architecture x every weight type ------------------------------------------------

struct TypeCase {
  std::string name;  // "Q4_K" or "q4_k_m"
  GgmlType type = GgmlType::F32;
  std::string mix;
};

// Printed by GoogleTest (and so in ctest's test names) as its name, not as raw bytes.
void PrintTo(const TypeCase& c, std::ostream* os) { *os << c.name; }

std::vector<TypeCase> type_cases() {
  std::vector<TypeCase> v;
  for (const GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
        GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,
        GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    v.push_back({type_name(static_cast<uint32_t>(t)), t, ""});
  for (const char* mix : {"q4_k_m", "q3_k_m", "iq4_xs"}) v.push_back({mix, GgmlType::Q4_K, mix});
  return v;
}

class CudaVsCpu : public ::testing::TestWithParam<std::tuple<std::string, TypeCase>> {};

TEST_P(CudaVsCpu, GreedyTokensAndLogitsAgree) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  const auto& [arch, tc] = GetParam();
  // arch_specs.h: every arch's own parts, K-quant sizes for K-quant types and the mix.
  TestModelSpec spec = arch_test_spec(arch, tc.mix.empty() ? tc.type : GgmlType::Q4_K);
  spec.weight_type = tc.type;
  spec.mix = tc.mix;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  // Tolerance on max|gpu - cpu| / max|cpu| of the logits. Float weights: the CPU is f32
  // throughout; the GPU rounds weights and activations to f16 in the prefill GEMMs (2^-11
  // relative each), so 1e-2. Integer formats: the CPU quantizes activations to 8 bits per block
  // for its dot products (about 1e-2 of the logit range on these random models; its own
  // tolerance against the reference is 5e-2), the GPU keeps them in f32: 5e-2.
  const bool float_type = tc.mix.empty() && (tc.type == GgmlType::F32 || tc.type == GgmlType::F16 ||
                                             tc.type == GgmlType::BF16);
  const double tol = float_type ? 1e-2 : 5e-2;
  const std::vector<int32_t> prompt = test_prompt(kPromptTokens, spec.n_vocab, 12345);

  for (const KvType kv : {KvType::F32, KvType::F16}) {
    const std::string what = arch + " " + tc.name + " kv " + std::string(kv_type_name(kv));
    auto cpu = cpu_session(*model, kv);
    auto gpu = gpu_session(*model, kv);
    ASSERT_TRUE(cpu && gpu) << what;
    const Trace c = run(*cpu, prompt, kSteps);
    const Trace g = run(*gpu, prompt, kSteps, &c.tokens);
    const int near_ties = compare_traces(g, c, tol, what);
    if (near_ties == 0) {  // free-running greedy on the GPU: the same tokens
      auto gpu2 = gpu_session(*model, kv);
      ASSERT_TRUE(gpu2);
      EXPECT_EQ(run(*gpu2, prompt, kSteps).tokens, c.tokens) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchsAllTypes, CudaVsCpu,
                         ::testing::Combine(::testing::ValuesIn(test_arch_names()),
                                            ::testing::ValuesIn(type_cases())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// ---- The tiny real model --------------------------------------------------------------------

TEST(CudaSession, StoriesGreedyEqualsCpu) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  const fs::path dir = fs::path(SPILLWAY_SHARED_DIR) / "models";
  if (!fs::exists(dir / "stories260K.gguf"))
    GTEST_SKIP() << "shared test data not found at " << dir;
  auto model = Model::load((dir / "stories260K.gguf").string());
  ASSERT_TRUE(model.ok()) << model.error().message;
  // The reference's prompt ("Once upon a time") and continuation when present.
  std::vector<int32_t> prompt = test_prompt(5, (*model)->config().n_vocab, 12345);
  std::vector<int32_t> expected;
  if (std::ifstream in(dir / "stories260K.reference.json"); in) {
    const auto ref = nlohmann::json::parse(in);
    prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
    expected = ref["generated_tokens"].get<std::vector<int32_t>>();
  }
  for (const KvType kv : {KvType::F32, KvType::F16}) {
    auto cpu = cpu_session(**model, kv);
    auto gpu = gpu_session(**model, kv);
    ASSERT_TRUE(cpu && gpu);
    const Trace c = run(*cpu, prompt, 64);
    const Trace g = run(*gpu, prompt, 64);
    EXPECT_EQ(g.tokens, c.tokens) << kv_type_name(kv);
    if (!expected.empty()) EXPECT_EQ(g.tokens, expected) << kv_type_name(kv);
    EXPECT_LE(rel_err(g.logits[0], c.logits[0]), 1e-2) << kv_type_name(kv);
  }
}

// ---- Ubatches, token by token, GEMM tiles -------------------------------------------------

TEST(CudaSession, OneUbatchTokenByTokenAndSplitUbatchesAgree) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q8_0;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> prompt = test_prompt(kPromptTokens, spec.n_vocab, 12345);
  // One eval of 40 tokens: one ubatch through the GEMMs.
  auto whole = gpu_session(*model, KvType::F32);
  ASSERT_TRUE(whole);
  const Trace a = run(*whole, prompt, kSteps);
  // Token by token: matvec only.
  auto single = gpu_session(*model, KvType::F32);
  ASSERT_TRUE(single);
  const Trace b = run(*single, prompt, kSteps, &a.tokens, /*token_by_token=*/true);
  compare_traces(b, a, 1e-2, "one ubatch vs token by token");
  // Ubatches of 16, 16 and 8 tokens: GEMM, GEMM, then matvec (8 < gemm_min_tokens).
  cuda::CudaSessionParams cp;
  cp.n_ubatch = 16;
  auto split = gpu_session(*model, KvType::F32, cp);
  ASSERT_TRUE(split);
  const Trace c = run(*split, prompt, kSteps, &a.tokens);
  compare_traces(c, a, 1e-2, "ubatches of 16 vs one ubatch");
  EXPECT_EQ(split->n_past(), whole->n_past());
}

TEST(CudaSession, WeightTilesDoNotChangeTheProduct) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q4_0;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> prompt = test_prompt(kPromptTokens, spec.n_vocab, 12345);
  auto one_tile = gpu_session(*model, KvType::F32);
  cuda::CudaSessionParams cp;
  cp.max_weight_tile_bytes = 3 * 64 * 2 + 10;  // tiles of 3 rows of 64, 2 rows of n_ff = 96
  auto many_tiles = gpu_session(*model, KvType::F32, cp);
  ASSERT_TRUE(one_tile && many_tiles);
  ASSERT_TRUE(one_tile->eval(prompt, true).ok());
  ASSERT_TRUE(many_tiles->eval(prompt, true).ok());
  const double e = rel_err(copy_logits(*many_tiles), copy_logits(*one_tile));
  EXPECT_LE(e, 1e-5) << "tiling changes only which rows a GEMM covers, not their sums";
}

// ---- Errors, memory, the factory ----------------------------------------------------------

TEST(CudaSession, EvalErrorsLeaveTheSessionUnchanged) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  spec.n_ctx = 48;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  auto s = gpu_session(*model, KvType::F16);
  ASSERT_TRUE(s);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(spec.n_vocab)};
  EXPECT_FALSE(s->eval(bad, true).ok());
  EXPECT_EQ(s->n_past(), 0);
  const std::vector<int32_t> prompt = test_prompt(40, spec.n_vocab, 12345);
  ASSERT_TRUE(s->eval(prompt, true).ok());
  const std::vector<float> before = copy_logits(*s);
  const std::vector<int32_t> nine(9, 5);  // 40 + 9 > 48
  const Status st = s->eval(nine, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context full"), std::string::npos) << st.error().message;
  EXPECT_FALSE(s->eval(std::vector<int32_t>{}, true).ok());
  EXPECT_EQ(s->n_past(), 40);
  EXPECT_EQ(copy_logits(*s), before);
  // Still usable: the same next token gives the same logits as a fresh session.
  const std::vector<int32_t> eight(8, 5);
  ASSERT_TRUE(s->eval(eight, true).ok());
  auto fresh = gpu_session(*model, KvType::F16);
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->eval(prompt, false).ok());
  ASSERT_TRUE(fresh->eval(eight, true).ok());
  EXPECT_LE(rel_err(copy_logits(*s), copy_logits(*fresh)), 1e-5);
}

TEST(CudaSession, CreateRefusesWhatItCannotRun) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  spec.head_dim = 32;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  SessionParams sp;
  // The approximate attention modes run on the CPU only; auto falls back, saying why.
  cuda::CudaSessionParams cp;
  cp.device = probe_cuda().index;
  ASSERT_TRUE(kv::parse_kv_attention("streaming", cp.kv).ok());
  auto streaming = cuda::CudaSession::create(*model, sp, cp);
  ASSERT_FALSE(streaming.ok());
  EXPECT_EQ(streaming.error().message,
            "--attention streaming runs on the CPU only (the CUDA session attends exactly)");
  BackendOptions opts;
  opts.kv = cp.kv;
  auto choice = create_session(*model, sp, opts);
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->device, DeviceKind::Cpu);
  EXPECT_NE(choice->note.find("runs on the CPU only"), std::string::npos) << choice->note;
  // Different K and V types are refused; q8_0 for both is supported.
  sp.kv_type_k = KvType::Q8_0;
  sp.kv_type_v = KvType::F16;
  EXPECT_FALSE(cuda::CudaSession::create(*model, sp, cuda::CudaSessionParams{}).ok());
  sp.kv_type_v = KvType::Q8_0;
  EXPECT_TRUE(cuda::CudaSession::create(*model, sp, cuda::CudaSessionParams{}).ok());

  // Explicit paging settings whose window cannot fit: refused by the fit check.
  sp.kv_type_k = sp.kv_type_v = KvType::F16;
  sp.n_ctx = int64_t{1} << 30;
  cuda::CudaSessionParams big;
  big.device = probe_cuda().index;
  big.kv.window_tokens = int64_t{1} << 30;  // 2 x 2 layers x 2^30 x 64 x 2 B = 512 GiB
  big.kv.host_budget = 0;
  auto huge = cuda::CudaSession::create(*model, sp, big);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().message.rfind("model needs ", 0), 0u) << huge.error().message;
  EXPECT_NE(huge.error().message.find("GiB free"), std::string::npos) << huge.error().message;
}

TEST(CudaSession, ArenaCountsWeightsKvAndScratch) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q4_1;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  SessionParams sp;
  auto plan = cuda::CudaSession::plan(*model, sp);
  ASSERT_TRUE(plan.ok());
  auto s = gpu_session(*model, KvType::F16);
  ASSERT_TRUE(s);
  const cuda::DeviceArena& a = s->arena();
  EXPECT_EQ(a.capacity(), plan->total());
  EXPECT_LE(a.used(), a.capacity());
  // Every weight byte is on the device (the 2-D tensors byte for byte, plus f32 vectors).
  int64_t file_weights = 0;
  for (const GgufTensorInfo* t : {model->token_embd, model->output})
    file_weights += static_cast<int64_t>(t->n_bytes);
  EXPECT_GE(a.used(cuda::ArenaPurpose::Weights), file_weights);
  EXPECT_LE(a.used(cuda::ArenaPurpose::Weights), plan->weights);
  // f16 K and V for the whole context (256 tokens, 2 KV heads of 16, 2 layers).
  EXPECT_EQ(s->kv_bytes(), 2 * 2 * 256 * (2 * 16) * 2);
  EXPECT_GT(a.used(cuda::ArenaPurpose::Scratch), 0);
}

TEST(CudaSession, FactoryPicksCudaWhenUsable) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  const CudaProbe probe = probe_cuda();
  TempDir dir;
  auto model = load(dir, TestModelSpec{});
  ASSERT_NE(model, nullptr);
  for (const DeviceKind d : {DeviceKind::Auto, DeviceKind::Cuda}) {
    BackendOptions opts;
    opts.device = d;
    auto choice = create_session(*model, SessionParams{}, opts);
    ASSERT_TRUE(choice.ok()) << choice.error().message;
    EXPECT_EQ(choice->device, DeviceKind::Cuda);
    EXPECT_TRUE(choice->note.empty()) << choice->note;
    EXPECT_EQ(choice->backend.rfind("cuda (" + probe.name + ", sm_", 0), 0u) << choice->backend;
  }
}

// ---- The tiered KV cache with the window on the GPU -----------------------------------------

// Spilling forced: a window of one 16-token block (plus the sink block), a host budget of two
// blocks, the rest on disk; prefill in ubatches of 16, so later ubatches stage cold blocks.
kv::KvSettings forced_spill(const std::string& spill_dir, int64_t block_bytes) {
  kv::KvSettings p;
  p.block_size = 16;
  p.window_tokens = 16;
  p.n_sinks = 4;
  p.host_budget = 2 * block_bytes;
  p.disk_budget = 64 * block_bytes;
  p.spill_dir = spill_dir;
  return p;
}

TEST(CudaTiered, SpilledGreedyEqualsCpuAndNoColdBytesReachTheGpuInDecode) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  for (const std::string& arch : test_arch_names()) {
    for (const KvType kv : {KvType::F32, KvType::F16, KvType::Q8_0}) {
      TestModelSpec spec = arch_test_spec(arch);
      spec.head_dim = 32;  // q8_0 KV needs head_dim % 32 == 0
      if (spec.n_rot > 0) spec.n_rot = 16;
      spec.weight_type = GgmlType::Q8_0;
      TempDir dir;
      auto model = load(dir, spec);
      ASSERT_NE(model, nullptr);
      SessionParams sp;
      sp.kv_type_k = sp.kv_type_v = kv;
      sp.n_threads = 4;
      kv::KvSettings block16;
      block16.block_size = 16;
      auto g = kv::plan_tiers(kv_cache_config(*model, sp, block16, kv::WindowHome::Device));
      ASSERT_TRUE(g.ok()) << g.error().message;
      const kv::KvSettings paging = forced_spill(dir.path(), g->block_bytes);
      cpu::CpuSessionParams cpp;
      cpp.n_ubatch = 16;
      cpp.kv = paging;
      auto cpu = cpu::CpuSession::create(*model, sp, cpp);
      ASSERT_TRUE(cpu.ok()) << cpu.error().message;
      cuda::CudaSessionParams cp;
      cp.device = probe_cuda().index;
      cp.n_ubatch = 16;
      cp.kv = paging;
      auto gpu = cuda::CudaSession::create(*model, sp, cp);
      ASSERT_TRUE(gpu.ok()) << gpu.error().message;
      const std::vector<int32_t> prompt = test_prompt(100, spec.n_vocab, 12345);
      const Trace c = run(**cpu, prompt, 60);
      const Trace gt = run(**gpu, prompt, 60, &c.tokens);
      const std::string what = arch + " " + std::string(kv_type_name(kv));
      const int ties = compare_traces(gt, c, kv == KvType::F32 ? 1e-3 : 1e-2, what);
      if (ties == 0) {
        auto free_gpu = cuda::CudaSession::create(*model, sp, cp);
        ASSERT_TRUE(free_gpu.ok());
        EXPECT_EQ(run(**free_gpu, prompt, 60).tokens, c.tokens) << what;
      }
      const SessionUsage st = (*gpu)->usage();
      EXPECT_GT(st.kv.host_blocks, 0) << what;
      EXPECT_GT(st.kv.disk_blocks, 0) << what;
      EXPECT_EQ(st.kv.cold_to_window_bytes, 0) << what;
      EXPECT_EQ(st.decode_cold_to_device_bytes, 0) << what;
      EXPECT_GT(st.prefill_stage_h2d_bytes, 0) << what << ": later prefill ubatches stage";
      EXPECT_GT(st.query_d2h_bytes, 0) << what << ": decode split GPU || CPU";
      EXPECT_EQ(st.window_d2h_bytes, st.kv.window_to_host_bytes + st.kv.window_to_disk_bytes)
          << what;
      // The window stays its size: sink block + recent block + the block in flight, spares.
      EXPECT_LE(st.kv.window_blocks, 1 + 1 + 2 + 2) << what;
    }
  }
}

TEST(CudaTiered, DefaultPagingKeepsTheWholeContextOnTheGpu) {
  SPW_SKIP_WITHOUT_CUDA();
  SPW_SKIP_UNLESS_CUDA_USABLE();
  TestModelSpec spec;
  TempDir dir;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  auto s = gpu_session(*model, KvType::F16);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->memory_plan().window_tokens, spec.n_ctx);
  EXPECT_EQ(s->n_ctx(), spec.n_ctx);
  const std::vector<int32_t> prompt = test_prompt(200, spec.n_vocab, 12345);
  run(*s, prompt, 20);
  const SessionUsage st = s->usage();
  EXPECT_EQ(st.kv.host_blocks + st.kv.disk_blocks, 0);
  EXPECT_EQ(st.query_d2h_bytes, 0);
  EXPECT_EQ(st.window_d2h_bytes, 0);
}

}  // namespace
}  // namespace spw
