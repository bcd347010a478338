#include "engine/backend/self_test.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "engine/backend/device.h"
#include "engine/gguf/gguf_writer.h"

namespace spw {

namespace fs = std::filesystem;

namespace {

// The tiny model's shape: rows of 128 and 256 are whole Q8_0 blocks (32), head_dim 32 allows a
// q8_0 KV cache, and 48 prompt tokens make three blocks of 16 for the split step.
constexpr int64_t kEmbd = 128, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kFf = 256,
                  kVocab = 512, kCtx = 256;
constexpr int64_t kPrompt = 48, kGreedySteps = 8;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
float uniform(uint64_t& state) {
  return static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
}

std::vector<float> random_values(uint64_t& state, int64_t n, float center, float spread) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + spread * uniform(state);
  return v;
}

// The index of the largest logit and its lead over the second largest.
std::pair<int32_t, float> top1(std::span<const float> logits) {
  int32_t best = 0;
  float first = -std::numeric_limits<float>::infinity(), second = first;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > first) {
      second = first;
      first = logits[i];
      best = static_cast<int32_t>(i);
    } else if (logits[i] > second) {
      second = logits[i];
    }
  }
  return {best, first - second};
}

SelfTestResult failed(std::string reason) {
  SelfTestResult r;
  r.reason = std::move(reason);
  return r;
}

// The two sessions of one phase, fed the same tokens.
struct Pair {
  std::unique_ptr<Session> device, cpu;
};

Expected<Pair> make_sessions(const Model& model, const SessionParams& sp, const kv::KvSettings& kv,
                             const SelfTestSessionMaker& device, const SelfTestSessionMaker& cpu) {
  Pair p;
  auto d = device(model, sp, kv);
  if (!d) return make_error("cannot create the device session: {}", d.error().message);
  auto c = cpu(model, sp, kv);
  if (!c) return make_error("cannot create the CPU session: {}", c.error().message);
  p.device = std::move(*d);
  p.cpu = std::move(*c);
  return p;
}

Status eval_both(Pair& p, std::span<const int32_t> tokens, bool want_logits) {
  if (auto st = p.device->eval(tokens, want_logits); !st)
    return make_error("the device session failed: {}", st.error().message);
  if (auto st = p.cpu->eval(tokens, want_logits); !st)
    return make_error("the CPU session failed: {}", st.error().message);
  return {};
}

SelfTestResult run_checks(const fs::path& model_path, const SelfTestSessionMaker& device,
                          const SelfTestSessionMaker& cpu) {
  auto loaded = Model::load(model_path.string());
  if (!loaded) return failed(fmt::format("cannot load the test model: {}", loaded.error().message));
  const Model& model = **loaded;
  SessionParams sp;
  sp.n_ctx = kCtx;
  sp.n_threads = 2;
  uint64_t seed = 7;
  std::vector<int32_t> prompt(kPrompt);
  for (int32_t& t : prompt) t = static_cast<int32_t>(splitmix64(seed) % kVocab);
  SelfTestResult r;

  // Phase 1: the default settings (on the device the whole context is its window): prefill,
  // then greedy steps on the CPU's tokens.
  auto plain = make_sessions(model, sp, kv::KvSettings{}, device, cpu);
  if (!plain) return failed(plain.error().message);
  if (auto st = eval_both(*plain, prompt, true); !st) return failed(st.error().message);
  for (int64_t step = 0;; ++step) {
    const double e = logits_nmse(plain->device->logits(), plain->cpu->logits());
    r.logits_nmse = std::max(r.logits_nmse, e);
    const std::string where =
        step == 0 ? std::string("the prefill's last token") : fmt::format("decode step {}", step);
    if (!(e <= kSelfTestMaxNmse))
      return failed(fmt::format("logits NMSE {:.1e} > {:.1e} at {}", e, kSelfTestMaxNmse, where));
    const auto [want, margin] = top1(plain->cpu->logits());
    const int32_t got = top1(plain->device->logits()).first;
    // A lead smaller than the error allowed may flip without a fault.
    if (got != want && margin > 1e-2f) {
      return failed(
          fmt::format("greedy token {} is {} on the device, {} on the CPU (the CPU's "
                      "lead {:.3f})",
                      step, got, want, margin));
    }
    ++r.tokens;
    if (step == kGreedySteps) break;
    const int32_t one[1] = {want};
    if (auto st = eval_both(*plain, one, true); !st) return failed(st.error().message);
  }

  // Phase 2: blocks of 16, a window of one block, no sinks: after the prompt the decode step's
  // attention reads three cold blocks (on CUDA: the CPU's part, merged on the GPU).
  kv::KvSettings split;
  split.block_size = 16;
  split.n_sinks = 0;
  split.window_tokens = 16;
  auto spl = make_sessions(model, sp, split, device, cpu);
  if (!spl) return failed(spl.error().message);
  if (auto st = eval_both(*spl, prompt, false); !st) return failed(st.error().message);
  const int32_t next[1] = {top1(plain->cpu->logits()).first};
  if (auto st = eval_both(*spl, next, true); !st) return failed(st.error().message);
  r.split_nmse = logits_nmse(spl->device->logits(), spl->cpu->logits());
  if (!(r.split_nmse <= kSelfTestMaxNmse)) {
    return failed(
        fmt::format("split attention: logits NMSE {:.1e} > {:.1e} at the decode step after {} "
                    "tokens (window 16, blocks of 16)",
                    r.split_nmse, kSelfTestMaxNmse, kPrompt));
  }
  r.passed = true;
  return r;
}

nlohmann::json to_json(const SelfTestResult& r) {
  return {{"passed", r.passed},         {"reason", r.reason}, {"logits_nmse", r.logits_nmse},
          {"split_nmse", r.split_nmse}, {"tokens", r.tokens}, {"seconds", r.seconds}};
}

}  // namespace

double logits_nmse(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (num == 0) return 0;
  return den > 0 ? num / den : std::numeric_limits<double>::infinity();
}

Status write_self_test_model(const fs::path& path) {
  using V = GgufWriteValue;
  GgufWriter w;
  const std::string a = "llama.";
  w.set("general.architecture", V::str("llama"));
  w.set("general.name", V::str("spillway-cuda-self-test"));
  w.set(a + "context_length", V::u32(kCtx));
  w.set(a + "embedding_length", V::u32(kEmbd));
  w.set(a + "block_count", V::u32(kLayers));
  w.set(a + "feed_forward_length", V::u32(kFf));
  w.set(a + "attention.head_count", V::u32(kHeads));
  w.set(a + "attention.head_count_kv", V::u32(kKvHeads));
  w.set(a + "attention.layer_norm_rms_epsilon", V::f32(1e-5f));
  w.set(a + "rope.freq_base", V::f32(10000.0f));
  w.set(a + "rope.dimension_count", V::u32(kHeadDim));
  uint64_t seed = 1;
  // Weights of a matrix with n_in inputs spread as 1/sqrt(n_in): activations stay O(1).
  const auto mat = [&](const std::string& name, int64_t n_in, int64_t n_out) {
    const float spread = std::sqrt(3.0f / static_cast<float>(n_in));
    w.add_tensor_f32(name, GgmlType::Q8_0, {n_in, n_out},
                     random_values(seed, n_in * n_out, 0.0f, spread));
  };
  const auto norm = [&](const std::string& name) {
    w.add_tensor_f32(name, GgmlType::F32, {kEmbd}, random_values(seed, kEmbd, 1.0f, 0.1f));
  };
  mat("token_embd.weight", kEmbd, kVocab);
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    norm(p + "attn_norm.weight");
    mat(p + "attn_q.weight", kEmbd, kHeads * kHeadDim);
    mat(p + "attn_k.weight", kEmbd, kKvHeads * kHeadDim);
    mat(p + "attn_v.weight", kEmbd, kKvHeads * kHeadDim);
    mat(p + "attn_output.weight", kHeads * kHeadDim, kEmbd);
    norm(p + "ffn_norm.weight");
    mat(p + "ffn_gate.weight", kEmbd, kFf);
    mat(p + "ffn_up.weight", kEmbd, kFf);
    mat(p + "ffn_down.weight", kFf, kEmbd);
  }
  norm("output_norm.weight");
  mat("output.weight", kEmbd, kVocab);
  return w.write(path.string());
}

SelfTestResult run_self_test(const fs::path& model_path, const SelfTestSessionMaker& device,
                             const SelfTestSessionMaker& cpu) {
  const auto t0 = std::chrono::steady_clock::now();
  SelfTestResult r;
  try {
    r = run_checks(model_path, device, cpu);
  } catch (const std::exception& e) {
    r = failed(fmt::format("stopped by an exception: {}", e.what()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string self_test_key(const CudaProbe& probe, std::string_view build) {
  return fmt::format("{}|sm_{}{}|driver {}|runtime {}|{}", probe.name, probe.sm_major,
                     probe.sm_minor, probe.driver_version, probe.runtime_version, build);
}

std::string build_identity() {
  struct stat st = {};
  if (::stat("/proc/self/exe", &st) != 0) return "unknown";
  return fmt::format("exe {} bytes, modified {}.{:09}", static_cast<int64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec),
                     static_cast<int64_t>(st.st_mtim.tv_nsec));
}

fs::path self_test_file(const fs::path& cache_dir) { return cache_dir / "cuda-self-test.json"; }

std::optional<SelfTestResult> read_self_test(const fs::path& file, std::string_view key) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", 0) != 1 || !j.contains("results") ||
      !j["results"].is_object())
    return std::nullopt;
  const auto it = j["results"].find(std::string(key));
  if (it == j["results"].end() || !it->is_object()) return std::nullopt;
  const nlohmann::json& e = *it;
  if (!e.contains("passed") || !e["passed"].is_boolean()) return std::nullopt;
  SelfTestResult r;
  r.passed = e["passed"].get<bool>();
  r.reason = e.value("reason", std::string());
  r.logits_nmse = e.value("logits_nmse", 0.0);
  r.split_nmse = e.value("split_nmse", 0.0);
  r.tokens = e.value("tokens", int64_t{0});
  r.seconds = e.value("seconds", 0.0);
  return r;
}

Status write_self_test(const fs::path& file, std::string_view key, const SelfTestResult& r) {
  nlohmann::json j;
  {
    std::ifstream in(file);
    if (in) j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (!j.is_object() || j.value("format", 0) != 1 || !j.contains("results") ||
      !j["results"].is_object())
    j = {{"format", 1}, {"results", nlohmann::json::object()}};
  j["results"][std::string(key)] = to_json(r);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << '\n';
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return make_error("cannot write the CUDA self-test's result to {}: {}", tmp.string(),
                        std::generic_category().message(errno));
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error("cannot write the CUDA self-test's result to {}: {}", file.string(),
                      ec.message());
  }
  return {};
}

Expected<CudaGate> gate_cuda(const CudaGateInput& in) {
  CudaGate g;
  const std::optional<SelfTestResult> cached =
      in.cache.empty() ? std::nullopt : read_self_test(in.cache, in.key);
  const std::string kept =
      in.cache.empty()
          ? std::string()
          : fmt::format(" (result kept in {}: delete it to test again)", in.cache.string());
  std::string write_problem;
  if (cached && (cached->passed || !in.required)) {
    g.result = *cached;
  } else {
    g.result = in.run();
    g.ran = true;
    if (!in.cache.empty()) {
      if (auto st = write_self_test(in.cache, in.key, g.result); !st)
        write_problem = fmt::format("; {}", st.error().message);
    }
  }
  if (g.result.passed) {
    g.use_cuda = true;
    g.note = write_problem.empty() ? std::string() : write_problem.substr(2);
    return g;
  }
  if (in.required) {
    return make_error(
        "--device cuda: the CUDA self-test failed on {}: {}; use --device cpu or "
        "auto{}",
        in.device, g.result.reason, write_problem);
  }
  g.note =
      fmt::format("CUDA self-test failed on {}: {}; running on the CPU{}{}", in.device,
                  g.result.reason, write_problem.empty() ? kept : std::string(), write_problem);
  return g;
}

}  // namespace spw
