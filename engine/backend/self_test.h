// The CUDA self-test (docs/DESIGN.md §3.4): before `--device auto` trusts a GPU, the CUDA
// session must reproduce the CPU session on a generated tiny model on this device, this driver
// and this build: the logits of a prefill and of greedy decode steps (normalised mean squared
// error), the greedy tokens, and one decode step whose attention is split between the GPU
// window and cold blocks the CPU attends. The result is kept in the cache folder, keyed by the
// device, the driver and the build, so it runs once per key (a few seconds), not per session.
// `auto` uses CUDA only after a pass and otherwise runs on the CPU with the reason in its note;
// `--device cuda` runs the test too and stops on a failure.
//
// The comparison and the decision are plain functions of sessions and results, so they are
// tested without a GPU: run_self_test() with any two session makers, gate_cuda() with an
// injected test.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/common/expected.h"
#include "engine/kv/tier_policy.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw {

struct CudaProbe;

/// What the self-test found.
struct SelfTestResult {
  bool passed = false;
  /// Empty when passed; else the first check that failed, with its numbers: "logits NMSE
  /// 2.1e-02 > 1.0e-03 at decode step 3", "greedy token 5 is 17 on the device, 40 on the CPU",
  /// "split attention: logits NMSE ...", or the error that stopped it ("cannot create the
  /// device session: ...").
  std::string reason;
  double logits_nmse = 0;  // the worst over the prefill and the greedy decode steps
  double split_nmse = 0;   // the decode step with split attention
  int64_t tokens = 0;      // greedy tokens compared
  double seconds = 0;      // how long the test took

  bool operator==(const SelfTestResult&) const = default;
};

/// The largest normalised mean squared error the logits may have: sum (a - b)^2 / sum b^2, b the
/// CPU's. The CPU and the GPU both quantize activations per block and sum in other orders; a
/// kernel that is wrong gives errors of order 1.
inline constexpr double kSelfTestMaxNmse = 1e-3;

/// NMSE of `got` against `want` (sum (got - want)^2 / sum want^2; 0 for two zero vectors, +inf
/// for lengths that differ).
double logits_nmse(std::span<const float> got, std::span<const float> want);

/// Makes a session of `model` with `kv` (the self-test's settings) on one backend.
using SelfTestSessionMaker = std::function<Expected<std::unique_ptr<Session>>(
    const Model& model, const SessionParams& params, const kv::KvSettings& kv)>;

/// Writes the self-test's tiny model to `path` (a llama-shaped GGUF with seeded random Q8_0
/// matrices: 2 layers, n_embd 128, 4 query and 2 KV heads of 32, n_ff 256, 512 tokens of
/// vocabulary, a context of 256; about 0.5 MiB), replacing what is there. Errors name the path.
Status write_self_test_model(const std::filesystem::path& path);

/// Runs the checks with the model at `model_path` (write_self_test_model's): a 48-token prompt
/// and 8 greedy steps on a session of each maker with the default KV settings (CPU's tokens fed
/// to both, so one differing token does not shift the rest); then, with blocks of 16 tokens and
/// a window of one block and no sinks, the same prompt and one decode step, whose attention
/// reads two cold blocks. Never throws; errors become a failed result with the reason.
SelfTestResult run_self_test(const std::filesystem::path& model_path,
                             const SelfTestSessionMaker& device, const SelfTestSessionMaker& cpu);

/// What the result is cached under: the device's name and compute capability, the driver and
/// runtime versions, and `build` ("NVIDIA H200|sm_90|driver 12040|runtime 12040|<build>").
std::string self_test_key(const CudaProbe& probe, std::string_view build);

/// This build's identity: the size and modification time of the running executable (the
/// engine and its kernels are linked into it, so a rebuild changes it) and the project version;
/// "unknown" when /proc/self/exe cannot be read (the result is then not cached).
std::string build_identity();

/// `<cache_dir>/cuda-self-test.json`.
std::filesystem::path self_test_file(const std::filesystem::path& cache_dir);

/// The cached result under `key`; nullopt when there is none: no file, no entry for the key, or
/// a file that is not the cache's JSON (it is then rewritten by the next write).
std::optional<SelfTestResult> read_self_test(const std::filesystem::path& file,
                                             std::string_view key);

/// Stores `r` under `key`, keeping the other keys' entries (other devices, drivers, builds);
/// written to a temporary file and renamed. Errors name the file and the system's reason.
Status write_self_test(const std::filesystem::path& file, std::string_view key,
                       const SelfTestResult& r);

/// What gate_cuda() decides from.
struct CudaGateInput {
  bool required = false;                // --device cuda (else auto)
  std::string device;                   // "NVIDIA H200 (sm_90)", for the messages
  std::filesystem::path cache;          // self_test_file(); empty: no cache (the test runs)
  std::string key;                      // self_test_key()
  std::function<SelfTestResult()> run;  // runs the test on this device
};

struct CudaGate {
  bool use_cuda = false;
  /// auto falling back: "CUDA self-test failed on NVIDIA H200 (sm_90): <reason>; running on the
  /// CPU (result kept in FILE: delete it to test again)"; else empty.
  std::string note;
  bool ran = false;  // the test ran now (false: the cached result decided)
  SelfTestResult result;
};

/// auto: a cached result decides; without one the test runs and its result is cached (a write
/// that fails is only said in the note). A pass uses CUDA; a failure falls back, with the note.
/// required (--device cuda): a cached pass uses CUDA; otherwise the test runs (a cached failure
/// is tested again: the user asked for this device), and a failure is the error "--device cuda:
/// the CUDA self-test failed on DEVICE: REASON; use --device cpu or auto".
Expected<CudaGate> gate_cuda(const CudaGateInput& in);

}  // namespace spw
