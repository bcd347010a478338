#include "app/cli/bench.h"

#include "app/cli/option_checks.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/cpu/compute_probe.h"
#include "engine/cpu/simd.h"
#if defined(SPILLWAY_HAVE_CUDA)
#include "engine/backend/cuda/cuda_session.h"
#include "engine/backend/cuda/device.h"
#endif
#include "engine/backend/device.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/common/huge_pages.h"
#include "engine/common/size.h"
#include "engine/kv/bandwidth_probe.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/planner.h"
#include "engine/model/model.h"
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
  cpu::CpuSession* fast = nullptr;  // the same object when the fast CPU path is timed
#if defined(SPILLWAY_HAVE_CUDA)
  cuda::CudaSession* gpu = nullptr;  // the same object when the CUDA path is timed
#endif
  DeviceKind device = DeviceKind::Cpu;  // where it runs
  std::string backend;                  // "cpu (avx2, 2 threads)", "cuda (NVIDIA H200, ...)"
  std::string note;                     // create_session's note (a CPU fallback's reason)
};

// `device` is what the user asked for on the first call, then the device that call chose, so
// every repeat runs where the first did.
// `kv` carries the ubatch size and the paged KV cache's settings.
Expected<BenchSession> make_session(const Model& model, const SessionParams& sp, bool reference,
                                    DeviceKind device, const BackendOptions& kv) {
  BenchSession b;
  if (reference) {
    auto r = ReferenceSession::create(model, sp);
    if (!r) return r.error();
    b.session = std::move(*r);
    b.backend = "reference (float64)";
    return b;
  }
  BackendOptions opts = kv;
  opts.device = device;
  auto choice = create_session(model, sp, opts);
  if (!choice) return choice.error();
  b.device = choice->device;
  b.backend = std::move(choice->backend);
  b.note = std::move(choice->note);
  b.session = std::move(choice->session);
  if (b.device == DeviceKind::Cpu) b.fast = dynamic_cast<cpu::CpuSession*>(b.session.get());
#if defined(SPILLWAY_HAVE_CUDA)
  if (b.device == DeviceKind::Cuda) b.gpu = dynamic_cast<cuda::CudaSession*>(b.session.get());
#endif
  return b;
}

// KV bytes the session holds now. ReferenceSession keeps exactly n_past positions (f16 bits);
// the CUDA session its GPU window (allocated when it is created) plus its cold tiers.
int64_t kv_bytes_of(const BenchSession& b, const ModelConfig& c) {
  if (b.fast != nullptr) return b.fast->kv_bytes();
#if defined(SPILLWAY_HAVE_CUDA)
  if (b.gpu != nullptr) {
    const kv::KvStats s = b.gpu->usage().kv;
    return b.gpu->kv_bytes() + s.host_bytes + s.disk_bytes;
  }
#endif
  return c.kv_bytes_per_token(2) * b.session->n_past();
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

// ---- Timed tests ----------------------------------------------------------------------------

struct Measurement {
  Rate pp, tg;
  // Prefill, summed over the pp repeats of the fast CPU session: attention thread-seconds
  // (window + cold jobs + merges, SessionUsage) and prefill thread-seconds (wall x threads).
  double pp_attn_thread_s = 0, pp_thread_s = 0;
  int64_t kv_bytes = 0;   // the most any session held
  kv::KvStats tiers;      // the paged cache's tiers after the last tg repeat
  int64_t kv_window = 0;  // the window as applied (auto resolved); 0 for --reference
  DeviceKind device = DeviceKind::Cpu;
  std::string backend;
  // CUDA, the last tg repeat: bytes crossing PCIe per generated token (queries down, the CPU's
  // partials up, spills down), the planner's VRAM figure and what the device lost to the session
  // (cudaMemGetInfo before creating it and after the tg test).
  bool cuda = false;
  double pcie_bytes_per_token = 0;
  int64_t vram_planned = 0, vram_used = 0, decode_cold_to_device = 0;
};

Expected<Measurement> measure(const Model& model, const SessionParams& sp, const BenchArgs& a,
                              DeviceKind device, const BackendOptions& kv,
                              const std::vector<int32_t>& ids) {
  const ModelConfig& c = model.config();
  const std::span<const int32_t> prompt(ids.data(), static_cast<size_t>(a.n_prompt));
  const std::span<const int32_t> gen(ids.data() + a.n_prompt, static_cast<size_t>(a.n_gen));
  // The -d prefix of every tg repeat, after the prompt and the generated ids.
  const std::span<const int32_t> depth(ids.data() + a.n_prompt + a.n_gen,
                                       static_cast<size_t>(a.depth));
  Measurement m;

  {  // Warm-up (not timed): touches every weight page and starts the threads, as llama-bench.
    // It also settles the device: the timed sessions run where this one did.
    auto s = make_session(model, sp, a.reference, device, kv);
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
    auto s = make_session(model, sp, a.reference, device, kv);
    if (!s) return s.error();
    const auto t0 = Clock::now();
    if (auto st = s->session->eval(prompt, true); !st) return st.error();
    const double pp_s = seconds_since(t0);
    // A broken file (NaN scales, garbage blocks) still runs at full speed: its figures would mean
    // nothing, so it is refused as generate refuses it.
    if (auto st = check_logits_finite(s->session->logits(), a.model, " in the pp test"); !st)
      return st.error();
    pp.push_back(a.n_prompt / pp_s);
    if (s->fast != nullptr) {
      const SessionUsage u = s->fast->usage();
      m.pp_attn_thread_s += u.window_attn_s + u.cold_attn_s + u.merge_s;
      m.pp_thread_s += pp_s * sp.n_threads;
    }
    m.kv_bytes = std::max(m.kv_bytes, kv_bytes_of(*s, c));
    std::fprintf(stderr, "pp%d rep %d/%d: %.2f t/s\n", a.n_prompt, r + 1, a.reps, pp.back());
  }
  for (int r = 0; r < a.reps; ++r) {
#if defined(SPILLWAY_HAVE_CUDA)
    int64_t free_before = 0;
    if (device == DeviceKind::Cuda) {
      if (auto d = cuda::query_device(probe_cuda().index); d) free_before = d->free_bytes;
    }
#endif
    auto s = make_session(model, sp, a.reference, device, kv);
    if (!s) return s.error();
    if (!depth.empty()) {  // untimed, as llama-bench's -d
      if (auto st = s->session->eval(depth, false); !st) return st.error();
      if (s->fast != nullptr) {  // spilling done before the clock starts
        if (auto st = s->fast->flush_kv(); !st) return st.error();
      }
    }
#if defined(SPILLWAY_HAVE_CUDA)
    const int64_t d2h_before_tg = s->gpu != nullptr ? s->gpu->usage().window_d2h_bytes : 0;
#endif
    const auto t0 = Clock::now();
    for (size_t i = 0; i < gen.size(); ++i) {
      if (auto st = s->session->eval(gen.subspan(i, 1), true); !st) return st.error();
    }
    tg.push_back(a.n_gen / seconds_since(t0));
    m.kv_bytes = std::max(m.kv_bytes, kv_bytes_of(*s, c));
    if (s->fast != nullptr && s->fast->flush_kv().ok()) m.tiers = s->fast->usage().kv;
    if (s->fast != nullptr) m.kv_window = s->fast->cache().layout().window_tokens;
#if defined(SPILLWAY_HAVE_CUDA)
    if (s->gpu != nullptr) {
      const SessionUsage st = s->gpu->usage();
      m.cuda = true;
      m.tiers = st.kv;
      m.kv_window = s->gpu->memory_plan().window_tokens;
      m.vram_planned = s->gpu->memory_plan().total();
      if (auto d = cuda::query_device(probe_cuda().index); d && free_before > 0)
        m.vram_used = free_before - d->free_bytes;
      m.decode_cold_to_device = st.decode_cold_to_device_bytes;
      // Queries and partials only move in decode; spills since the clock started.
      m.pcie_bytes_per_token = static_cast<double>(st.query_d2h_bytes + st.partial_h2d_bytes +
                                                   st.window_d2h_bytes - d2h_before_tg) /
                               std::max(1, a.n_gen);
    }
#endif
    std::fprintf(stderr, "tg%d @ d%d rep %d/%d: %.2f t/s\n", a.n_gen, a.depth, r + 1, a.reps,
                 tg.back());
  }
  m.pp = summarize(pp);
  m.tg = summarize(tg);
  return m;
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

// Attention's FLOPs in a prefill of n tokens into an empty cache: 2 x n_head x (head_dim +
// head_dim_v) per (query, key) pair per layer (Q.K and P.V) over the causal pairs n (n + 1) / 2.
double prefill_attention_flops(const ModelConfig& c, int64_t n) {
  const double pairs = static_cast<double>(n) * static_cast<double>(n + 1) / 2;
  return 2.0 * static_cast<double>(c.n_layer * c.n_head * (c.head_dim + c.head_dim_v)) * pairs;
}

// FLOPs of one prefill of n tokens into an empty cache: 2 x the multiply-adds of every layer
// matrix per token, output.weight once (logits of the last token only), and attention's
// 2 x n_head x (head_dim + head_dim_v) per (query, key) pair per layer (Q.K and P.V; the
// issue's 4 x n_head x head_dim where the two dims agree) over the causal pairs n (n + 1) / 2.
double prefill_flops(const Model& model, int64_t n) {
  const ModelConfig& c = model.config();
  double macs_per_token = 0;
  const auto macs = [](const GgufTensorInfo* t) {
    return static_cast<double>(t->ne[0]) * static_cast<double>(t->ne[1]);
  };
  // Every matrix a token goes through: split or fused (phi3) attention and FFN, a mixture's
  // router, its n_expert_used experts (one [n_embd, n_ff_exp] slice each) and shared expert.
  const double used = static_cast<double>(c.n_expert_used);
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : w.matrices())
      macs_per_token += (t->n_dims == 3 ? used : 1.0) * macs(t);  // a 3-D stack: the used experts
  }
  const double out_macs =
      static_cast<double>(model.output->ne[0]) * static_cast<double>(model.output->ne[1]);
  return 2.0 * macs_per_token * static_cast<double>(n) + 2.0 * out_macs +
         prefill_attention_flops(c, n);
}

}  // namespace

void add_depth_option(CLI::App& sub, int& depth) {
  sub.add_option("-d,--depth", depth,
                 "Context depth of the tg test: tokens prefilled, untimed, before each repeat")
      ->capture_default_str()
      ->check(int_range("-d", 0, kMaxInt));
}

void add_bench_count_options(CLI::App& sub, BenchArgs& a) {
  sub.add_option("-p,--n-prompt", a.n_prompt, "Prompt tokens of the pp test")
      ->capture_default_str()
      ->check(int_range("-p", 1, kMaxInt));
  sub.add_option("-n,--n-gen", a.n_gen, "Generated tokens of the tg test")
      ->capture_default_str()
      ->check(int_range("-n", 1, kMaxInt));
  add_threads_option(sub, a.n_threads);
  sub.add_option("-r,--repetitions", a.reps, "Repeats of each test")
      ->capture_default_str()
      ->check(int_range("-r", 1, kMaxInt));
}

int run_bench(const BenchArgs& a) {
  if (a.n_prompt < 1)
    return fail(make_error("-p {}: the prompt needs at least 1 token", a.n_prompt));
  if (a.n_gen < 1) return fail(make_error("-n {}: generate at least 1 token", a.n_gen));
  if (a.reps < 1) return fail(make_error("-r {}: at least 1 repeat", a.reps));
  if (a.depth < 0) return fail(make_error("-d {} must not be negative", a.depth));
  if (a.n_threads < 0) return fail(make_error("-t {} must not be negative", a.n_threads));
  auto device = parse_device(a.device);
  if (!device) return fail(make_error("--device: {}", device.error().message));
  if (a.reference && *device == DeviceKind::Cuda) {
    return fail(Error{
        "--reference times the float64 oracle on the CPU; it cannot be combined with --device "
        "cuda"});
  }

  auto kv_settings = make_kv_settings(a.kv);
  if (!kv_settings) return fail(kv_settings.error());
  if (a.reference && kv_settings_given(*kv_settings)) {
    return fail(Error{
        "--reference keeps a contiguous KV cache; the paged KV options (--kv-*, --host-budget, "
        "--disk-budget, --attention) need the fast CPU session"});
  }
  BackendOptions kv;
  kv.n_ubatch = a.kv.n_ubatch;
  kv.kv = *kv_settings;
  kv.cache_dir = a.kv.default_spill_dir;  // the cache folder: the CUDA self-test's result

  auto loaded = Model::load(a.model);
  if (!loaded) return fail(loaded.error());
  const Model& model = **loaded;
  const ModelConfig& c = model.config();
  SessionParams sp;
  // The trained context if its KV fits this machine's default budgets (bench has no -c).
  auto context = choose_context_or_note(model, sp, kv.kv, a.kv);
  if (!context) return fail(context.error());
  sp.n_ctx = context->n_ctx;
  if (auto st = check_ubatch_fits(a.kv, sp.n_ctx, false); !st) return bad_value(st.error());
  kv.kv = context->kv;
  const char* whose =
      sp.n_ctx < c.n_ctx_train ? "context that fits this machine" : "model's context";
  // pp and tg run on sessions of their own, so each only has to fit the context by itself.
  if (a.n_prompt > sp.n_ctx) {
    return fail(make_error("-p {} tokens do not fit the {} of {}", a.n_prompt, whose, sp.n_ctx));
  }
  if (static_cast<int64_t>(a.depth) + a.n_gen > sp.n_ctx) {
    return fail(make_error("-d {} + -n {} = {} tokens do not fit the {} of {}", a.depth, a.n_gen,
                           static_cast<int64_t>(a.depth) + a.n_gen, whose, sp.n_ctx));
  }

  if (a.n_threads > 0) {
    sp.n_threads = a.n_threads;
  } else {
    const unsigned hw = std::thread::hardware_concurrency();
    sp.n_threads = hw == 0 ? 1 : static_cast<int>(hw);
  }

  // Random but seeded ids, the same on every run: prompt first, then the generated tokens.
  std::mt19937 rng(1234);
  // The -d prefix comes last, so the pp and tg ids do not depend on it.
  std::vector<int32_t> ids(static_cast<size_t>(a.n_prompt + a.n_gen) +
                           static_cast<size_t>(a.depth));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.n_vocab));

  auto m = measure(model, sp, a, *device, kv, ids);
  if (!m) return fail(m.error());
  // Read before the probe, whose 512 MiB buffer is not part of running the model.
  const int64_t peak_rss = peak_rss_bytes();
  const double probe = kv::probe_ram_read_gb_per_s(sp.n_threads);
  const double peak_gflops = cpu::probe_fp32_gflops_per_s(sp.n_threads);
  const double peak_int8 = cpu::probe_int8_gops_per_s(sp.n_threads);
  const double pp_flops = prefill_flops(model, a.n_prompt);
  const double pp_gflops = pp_flops * m->pp.median / a.n_prompt / 1e9;
  // Attention's share of the prefill thread-seconds; 0 off the fast CPU session.
  const double attn_share = m->pp_thread_s > 0 ? m->pp_attn_thread_s / m->pp_thread_s : 0.0;
  // Attention's own FLOP rate, all threads together (comparable with peak_gflops_per_s).
  const double attn_gflops = m->pp_attn_thread_s > 0
                                 ? prefill_attention_flops(c, a.n_prompt) * a.reps * sp.n_threads /
                                       m->pp_attn_thread_s / 1e9
                                 : 0.0;

  // Step i of tg (0-based, after the depth prefix) reads depth + i + 1 cached positions.
  const int64_t weights = kv::decode_weight_bytes(model);
  const double kv_read =
      static_cast<double>(c.kv_bytes_per_token(2)) * (a.depth + (a.n_gen + 1) / 2.0);
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
    j["depth"] = a.depth;
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
    j["peak_gflops_per_s"] = peak_gflops;
    j["peak_int8_gops_per_s"] = peak_int8;
    j["pp_flops"] = pp_flops;
    j["pp_gflops_per_s"] = pp_gflops;
    j["pp_attention_share"] = attn_share;
    j["pp_attention_gflops_per_s"] = attn_gflops;
    j["peak_rss_bytes"] = peak_rss;
    j["model_bytes"] = model_bytes;
    j["kv_bytes"] = m->kv_bytes;
    j["attention"] = kv::kv_attention_name(kv.kv);
    if (a.reference) {  // a contiguous cache: no blocks, window or sinks
      j["kv_block"] = j["kv_window"] = j["kv_sinks"] = nullptr;
    } else {
      j["kv_block"] = kv.kv.block_size;
      j["kv_window"] = m->kv_window;
      j["kv_sinks"] = kv.kv.n_sinks;
    }
    j["window_blocks"] = m->tiers.window_blocks;
    j["host_blocks"] = m->tiers.host_blocks;
    j["disk_blocks"] = m->tiers.disk_blocks;
    j["huge_pages"] = kv.kv.huge_pages;
    j["thp_mode"] = std::string(thp_mode_name(read_thp_mode()));
    j["host_mapped_bytes"] = m->tiers.host_mapped_bytes;
    j["host_huge_page_bytes"] = m->tiers.host_huge_page_bytes;
    if (m->cuda) {
      j["pcie_bytes_per_token"] = m->pcie_bytes_per_token;
      j["vram_planned_bytes"] = m->vram_planned;
      j["vram_used_bytes"] = m->vram_used;
      j["decode_cold_to_device_bytes"] = m->decode_cold_to_device;
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  fmt::print("model      {} ({} bytes, {})\n", a.model, model_bytes, mib(model_bytes));
  fmt::print("shape      {}, {} layers, n_embd {}, n_ff {}, {} heads ({} KV), n_vocab {}\n",
             c.arch_name, c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.n_vocab);
  // "1 thread", "2 threads".
  const auto count = [](int64_t n, const char* what) {
    return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
  };
  const std::string threads = count(sp.n_threads, "thread");
  fmt::print("engine     {} ({}), {}, KV f16, {}\n", engine, simd, threads,
             count(a.reps, "repeat"));
  fmt::print("device     {}: {}\n", device_name(m->device), m->backend);
  fmt::print(
      "KV         attention {}, block {}, window {} + {} sinks; after tg: {} window, {} "
      "host, {} disk blocks\n",
      kv::kv_attention_name(kv.kv, true), kv.kv.block_size, m->kv_window, kv.kv.n_sinks,
      m->tiers.window_blocks, m->tiers.host_blocks, m->tiers.disk_blocks);
  fmt::print("host arena {} mapped, {} in 2 MiB huge pages (--huge-pages {}, THP {})\n",
             mib(m->tiers.host_mapped_bytes), mib(m->tiers.host_huge_page_bytes),
             kv.kv.huge_pages ? "on" : "off", thp_mode_name(read_thp_mode()));
  fmt::print("\n{:<8} {:>12} {:>12} {:>12} {:>10}\n", "test", "t/s median", "min", "max", "GB/s");
  fmt::print(
      "{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10} {:>9.1f} GFLOP/s, attention {:.0f}% at {:.1f} "
      "GFLOP/s\n",
      fmt::format("pp{}", a.n_prompt), m->pp.median, m->pp.min, m->pp.max, "", pp_gflops,
      100 * attn_share, attn_gflops);
  fmt::print(
      "{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10.2f}\n",
      a.depth > 0 ? fmt::format("tg{} @ d{}", a.n_gen, a.depth) : fmt::format("tg{}", a.n_gen),
      m->tg.median, m->tg.min, m->tg.max, tg_gb_per_s);
  fmt::print("\nper token  {} weights + {} KV (average) read per generated token\n", mib(weights),
             mib(static_cast<int64_t>(kv_read)));
  fmt::print("probe      {:.2f} GB/s read bandwidth ({}, 512 MiB, best of 3)\n", probe, threads);
  fmt::print(
      "compute    {:.1f} GFLOP/s FP32 FMA, {:.1f} GOP/s int8 dot products ({}, {}, best "
      "of 3); pp at {:.0f}% of FP32, {:.0f}% of int8\n",
      peak_gflops, peak_int8, threads, simd, 100 * pp_gflops / peak_gflops,
      100 * pp_gflops / peak_int8);
  fmt::print("memory     peak RSS {} bytes ({}), KV {} bytes ({})\n", peak_rss, mib(peak_rss),
             m->kv_bytes, mib(m->kv_bytes));
  return 0;
}

}  // namespace spw::cli
