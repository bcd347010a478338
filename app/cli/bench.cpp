#include "app/cli/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/model/model.h"
#include "engine/model/reference_session.h"
#include "engine/session/device.h"
#include "engine/session/session.h"

namespace spw::cli {

namespace {

using Clock = std::chrono::steady_clock;

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Tokens/s over the repeats of one test.
struct Rate {
  double median = 0, min = 0, max = 0;
};

Rate summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return Rate{median, v.front(), v.back()};
}

// A fresh session (empty cache) of the engine under test.
struct BenchSession {
  std::unique_ptr<Session> session;
  cpu::CpuSession* fast = nullptr;      // the same object when the fast CPU path is timed
  DeviceKind device = DeviceKind::Cpu;  // where it runs
  std::string backend;                  // "cpu (avx2, 2 threads)", "cuda (NVIDIA H200, ...)"
  std::string note;                     // create_session's note (a CPU fallback's reason)
};

// `device` is what the user asked for on the first call, then the device that call chose, so
// every repeat runs where the first did.
Expected<BenchSession> make_session(const Model& model, const SessionParams& sp, bool reference,
                                    DeviceKind device) {
  BenchSession b;
  if (reference) {
    auto r = ReferenceSession::create(model, sp);
    if (!r) return r.error();
    b.session = std::move(*r);
    b.backend = "reference (float64)";
    return b;
  }
  BackendOptions opts;
  opts.device = device;
  auto choice = create_session(model, sp, opts);
  if (!choice) return choice.error();
  b.device = choice->device;
  b.backend = std::move(choice->backend);
  b.note = std::move(choice->note);
  b.session = std::move(choice->session);
  if (b.device == DeviceKind::Cpu) b.fast = dynamic_cast<cpu::CpuSession*>(b.session.get());
  return b;
}

// KV bytes the session holds now. ReferenceSession keeps exactly n_past positions (f16 bits);
// the CUDA session allocates f16 K and V for its whole context when it is created.
int64_t kv_bytes_of(const BenchSession& b, const ModelConfig& c) {
  if (b.fast != nullptr) return b.fast->kv_bytes();
  if (b.device == DeviceKind::Cuda) return c.kv_bytes_per_token(2) * b.session->n_ctx();
  return c.kv_bytes_per_token(2) * b.session->n_past();
}

// Bytes of weights one decode step reads: every layer matrix and the output matrix (which is
// token_embd.weight when the embeddings are tied). token_embd's single looked-up row and the
// 1-D norm and bias vectors are negligible and left out.
int64_t weight_bytes_per_token(const Model& m) {
  uint64_t total = m.output->n_bytes;
  for (const LayerWeights& w : m.layers) {
    for (const GgufTensorInfo* t :
         {w.attn_q, w.attn_k, w.attn_v, w.attn_output, w.ffn_gate, w.ffn_up, w.ffn_down}) {
      total += t->n_bytes;
    }
  }
  return static_cast<int64_t>(total);
}

// Peak resident set size of this process (VmHWM), in bytes; 0 where /proc is unavailable.
// Mapped model pages that were touched count, so this covers the weights as well.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // "N kB"
  }
  return 0;
}

// ---- Read-bandwidth probe -------------------------------------------------------------------

// Eight-float vectors (GCC/Clang vector extension): one AVX register where the target has it,
// two SSE or NEON registers elsewhere. Four independent accumulators hide the add latency.
// The same body is compiled twice, for the baseline target and for AVX2. Precondition: n is a
// multiple of 32.
typedef float v8f __attribute__((vector_size(32)));

#define SPW_SUM_BODY                         \
  v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};    \
  for (int64_t i = 0; i < n; i += 32) {      \
    v8f x0, x1, x2, x3;                      \
    std::memcpy(&x0, p + i, sizeof x0);      \
    std::memcpy(&x1, p + i + 8, sizeof x1);  \
    std::memcpy(&x2, p + i + 16, sizeof x2); \
    std::memcpy(&x3, p + i + 24, sizeof x3); \
    a0 += x0;                                \
    a1 += x1;                                \
    a2 += x2;                                \
    a3 += x3;                                \
  }                                          \
  const v8f a = (a0 + a1) + (a2 + a3);       \
  float s = 0;                               \
  for (int k = 0; k < 8; ++k) s += a[k];     \
  return s;

__attribute__((noinline)) float sum_floats_generic(const float* p, int64_t n) { SPW_SUM_BODY }

#if defined(__x86_64__) || defined(__i386__)
__attribute__((noinline, target("avx2"))) float sum_floats_avx2(const float* p, int64_t n) {
  SPW_SUM_BODY
}
#endif

#undef SPW_SUM_BODY

float sum_floats(const float* p, int64_t n, bool avx2) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return sum_floats_avx2(p, n);
#endif
  (void)avx2;
  return sum_floats_generic(p, n);
}

// Best of 3 timed multi-threaded sums over a 512 MiB buffer, in GB/s (1e9 bytes/s). The
// buffer is filled by the same threads first (its pages land near the threads that read them).
double probe_read_gb_per_s(int n_threads) {
  constexpr int64_t kBytes = int64_t{512} << 20;
  constexpr int64_t kFloats = kBytes / 4;
  constexpr int64_t kBlock = int64_t{1} << 16;  // floats per work item (256 KiB)
  constexpr int64_t kBlocks = kFloats / kBlock;
  std::unique_ptr<float[]> buf(new float[kFloats]);
  cpu::ThreadPool pool(n_threads);
  pool.parallel_for(kBlocks, [&](int64_t b, int64_t e) {
    for (int64_t i = b * kBlock; i < e * kBlock; ++i) buf[i] = static_cast<float>(i & 1023);
  });
  const bool avx2 = cpu::simd_level() != cpu::SimdLevel::Scalar;
  std::vector<float> partial(kBlocks);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(kBlocks, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) partial[k] = sum_floats(&buf[k * kBlock], kBlock, avx2);
    });
    const double dt = seconds_since(t0);
    // The sum is used (printed nowhere, but checked) so the reads cannot be optimised away.
    float total = 0;
    for (float x : partial) total += x;
    if (!(total > 0)) return 0;
    best = std::max(best, static_cast<double>(kBytes) / dt / 1e9);
  }
  return best;
}

// ---- Timed tests ----------------------------------------------------------------------------

struct Measurement {
  Rate pp, tg;
  int64_t kv_bytes = 0;  // the most any session held
  DeviceKind device = DeviceKind::Cpu;
  std::string backend;
};

Expected<Measurement> measure(const Model& model, const SessionParams& sp, const BenchArgs& a,
                              DeviceKind device, const std::vector<int32_t>& ids) {
  const ModelConfig& c = model.config();
  const std::span<const int32_t> prompt(ids.data(), static_cast<size_t>(a.n_prompt));
  const std::span<const int32_t> gen(ids.data() + a.n_prompt, static_cast<size_t>(a.n_gen));
  Measurement m;

  {  // Warm-up (not timed): touches every weight page and starts the threads, as llama-bench.
    // It also settles the device: the timed sessions run where this one did.
    auto s = make_session(model, sp, a.reference, device);
    if (!s) return s.error();
    if (!s->note.empty()) std::fprintf(stderr, "note: %s\n", s->note.c_str());
    m.device = s->device;
    m.backend = s->backend;
    device = s->device;
    if (auto st = s->session->eval(prompt.first(std::min<size_t>(prompt.size(), 2)), true); !st)
      return st.error();
  }

  std::vector<double> pp, tg;
  for (int r = 0; r < a.reps; ++r) {
    auto s = make_session(model, sp, a.reference, device);
    if (!s) return s.error();
    const auto t0 = Clock::now();
    if (auto st = s->session->eval(prompt, true); !st) return st.error();
    pp.push_back(a.n_prompt / seconds_since(t0));
    m.kv_bytes = std::max(m.kv_bytes, kv_bytes_of(*s, c));
    std::fprintf(stderr, "pp%d rep %d/%d: %.2f t/s\n", a.n_prompt, r + 1, a.reps, pp.back());
  }
  for (int r = 0; r < a.reps; ++r) {
    auto s = make_session(model, sp, a.reference, device);
    if (!s) return s.error();
    const auto t0 = Clock::now();
    for (size_t i = 0; i < gen.size(); ++i) {
      if (auto st = s->session->eval(gen.subspan(i, 1), true); !st) return st.error();
    }
    tg.push_back(a.n_gen / seconds_since(t0));
    m.kv_bytes = std::max(m.kv_bytes, kv_bytes_of(*s, c));
    std::fprintf(stderr, "tg%d rep %d/%d: %.2f t/s\n", a.n_gen, r + 1, a.reps, tg.back());
  }
  m.pp = summarize(pp);
  m.tg = summarize(tg);
  return m;
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

}  // namespace

int run_bench(const BenchArgs& a) {
  if (a.n_prompt < 1)
    return fail(make_error("-p {}: the prompt needs at least 1 token", a.n_prompt));
  if (a.n_gen < 1) return fail(make_error("-n {}: generate at least 1 token", a.n_gen));
  if (a.reps < 1) return fail(make_error("-r {}: at least 1 repeat", a.reps));
  if (a.n_threads < 0) return fail(make_error("-t {} must not be negative", a.n_threads));
  auto device = parse_device(a.device);
  if (!device) return fail(make_error("--device: {}", device.error().message));
  if (a.reference && *device == DeviceKind::Cuda) {
    return fail(Error{
        "--reference times the float64 oracle on the CPU; it cannot be combined with --device "
        "cuda"});
  }

  auto loaded = Model::load(a.model);
  if (!loaded) return fail(loaded.error());
  const Model& model = **loaded;
  const ModelConfig& c = model.config();
  if (static_cast<int64_t>(a.n_prompt) + a.n_gen > c.n_ctx_train) {
    return fail(make_error("-p {} + -n {} = {} tokens do not fit the model's context of {}",
                           a.n_prompt, a.n_gen, static_cast<int64_t>(a.n_prompt) + a.n_gen,
                           c.n_ctx_train));
  }

  SessionParams sp;
  sp.n_ctx = c.n_ctx_train;
  if (a.n_threads > 0) {
    sp.n_threads = a.n_threads;
  } else {
    const unsigned hw = std::thread::hardware_concurrency();
    sp.n_threads = hw == 0 ? 1 : static_cast<int>(hw);
  }

  // Random but seeded ids, the same on every run: prompt first, then the generated tokens.
  std::mt19937 rng(1234);
  std::vector<int32_t> ids(static_cast<size_t>(a.n_prompt + a.n_gen));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.n_vocab));

  auto m = measure(model, sp, a, *device, ids);
  if (!m) return fail(m.error());
  // Read before the probe, whose 512 MiB buffer is not part of running the model.
  const int64_t peak_rss = peak_rss_bytes();
  const double probe = probe_read_gb_per_s(sp.n_threads);

  // Step i of tg (0-based, from an empty cache) reads i + 1 cached positions.
  const int64_t weights = weight_bytes_per_token(model);
  const double kv_read = static_cast<double>(c.kv_bytes_per_token(2)) * (a.n_gen + 1) / 2.0;
  const double bytes_per_token = static_cast<double>(weights) + kv_read;
  const double tg_gb_per_s = bytes_per_token * m->tg.median / 1e9;
  const auto model_bytes = static_cast<int64_t>(model.file().file_size());
  const std::string simd(cpu::simd_level_name(cpu::simd_level()));
  const char* engine = a.reference ? "reference" : "fast";

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["engine"] = engine;
    j["simd"] = simd;
    j["device"] = device_name(m->device);
    j["backend"] = m->backend;
    j["n_threads"] = sp.n_threads;
    j["n_prompt"] = a.n_prompt;
    j["n_gen"] = a.n_gen;
    j["reps"] = a.reps;
    j["pp_tokens_per_s"] = m->pp.median;
    j["pp_tokens_per_s_min"] = m->pp.min;
    j["pp_tokens_per_s_max"] = m->pp.max;
    j["tg_tokens_per_s"] = m->tg.median;
    j["tg_tokens_per_s_min"] = m->tg.min;
    j["tg_tokens_per_s_max"] = m->tg.max;
    j["tg_gb_per_s"] = tg_gb_per_s;
    j["tg_bytes_per_token"] = bytes_per_token;
    j["weight_bytes_per_token"] = weights;
    j["probe_gb_per_s"] = probe;
    j["peak_rss_bytes"] = peak_rss;
    j["model_bytes"] = model_bytes;
    j["kv_bytes"] = m->kv_bytes;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  fmt::print("model      {} ({} bytes, {})\n", a.model, model_bytes, mib(model_bytes));
  fmt::print("shape      {}, {} layers, n_embd {}, n_ff {}, {} heads ({} KV), n_vocab {}\n",
             c.arch_name, c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.n_vocab);
  fmt::print("engine     {} ({}), {} threads, KV f16, {} repeats\n", engine, simd, sp.n_threads,
             a.reps);
  fmt::print("device     {}: {}\n", device_name(m->device), m->backend);
  fmt::print("\n{:<8} {:>12} {:>12} {:>12} {:>10}\n", "test", "t/s median", "min", "max", "GB/s");
  fmt::print("{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10}\n", fmt::format("pp{}", a.n_prompt),
             m->pp.median, m->pp.min, m->pp.max, "");
  fmt::print("{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10.2f}\n", fmt::format("tg{}", a.n_gen),
             m->tg.median, m->tg.min, m->tg.max, tg_gb_per_s);
  fmt::print("\nper token  {} weights + {} KV (average) read per generated token\n", mib(weights),
             mib(static_cast<int64_t>(kv_read)));
  fmt::print("probe      {:.2f} GB/s read bandwidth ({} threads, 512 MiB, best of 3)\n", probe,
             sp.n_threads);
  fmt::print("memory     peak RSS {} bytes ({}), KV {} bytes ({})\n", peak_rss, mib(peak_rss),
             m->kv_bytes, mib(m->kv_bytes));
  return 0;
}

}  // namespace spw::cli
