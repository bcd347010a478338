// Choosing the backend a Session runs on: `--device cpu|cuda|auto` (default auto) on every
// command that runs a model. auto uses CUDA when this build has it, a usable device is present
// and the CUDA self-test (self_test.h) has passed on that device, driver and build, and
// otherwise the fast CPU engine, with the reason in `note` for the user to see.
// The choice is made once per session; nothing switches backends mid-sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/common/expected.h"
#include "engine/common/machine.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/tier_policy.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw {

enum class DeviceKind { Auto, Cpu, Cuda };

/// "auto" | "cpu" | "cuda" -> DeviceKind; the error lists the accepted values.
Expected<DeviceKind> parse_device(std::string_view s);
std::string_view device_name(DeviceKind d);

/// What CUDA offers this process. Filled by probe_cuda(); never throws, never aborts.
struct CudaProbe {
  bool usable = false;             // a device exists, the driver works and our kernels load on it
  int index = -1;                  // CUDA device ordinal used (the first usable one)
  std::string name;                // "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;  // compute capability
  int64_t free_bytes = 0, total_bytes = 0;  // device memory (cudaMemGetInfo)
  /// cudaDriverGetVersion / cudaRuntimeGetVersion (12040: CUDA 12.4); 0 when unknown.
  int driver_version = 0, runtime_version = 0;
  /// Why CUDA is not usable, for the user: "this build has no CUDA backend (nvcc was not
  /// found at configure time)", "no CUDA driver: ...", "no CUDA device", "device 0 (NAME,
  /// compute capability 7.5) cannot run this build's kernels (built for 8.6, 8.9, 9.0)".
  std::string reason;
};

/// Probes once per call (cheap after the first: the CUDA runtime caches its state).
CudaProbe probe_cuda();

/// True when this binary was built with the CUDA backend (SPILLWAY_CUDA).
bool cuda_built();

/// A session's KV cache config: the tier policy's input (engine/kv/tier_policy.h) with the
/// model's KV shape, the context (params.n_ctx, or the trained context when 0), the KV types and
/// the settings `kv` with the window resolved for `home`. Both sessions make their cache from it.
kv::KvCacheConfig kv_cache_config(const Model& model, const SessionParams& params,
                                  const kv::KvSettings& kv, kv::WindowHome home);

/// The Host arena's mapping options from the settings (kv.huge_pages, kv.numa), the NUMA node
/// resolved against this machine's topology (numa.h choose_numa_node): `attending` is the node of
/// what reads the cold blocks, the CPU threads (cpu_attending_node()) or the GPU (its PCI
/// device's numa_node). An explicit node binds strictly; auto prefers its node. Errors:
/// choose_numa_node's ("--numa-node 3: this machine has 1 NUMA node (0 to 0)").
Expected<kv::HostMemoryOptions> host_memory_options(const kv::KvSettings& kv,
                                                    std::optional<int> attending);

/// The node every CPU this process may run on belongs to (the thread pool inherits the
/// affinity), none when they span nodes.
std::optional<int> cpu_attending_node();

/// Bytes of the model's tensors: the weights mapped while it runs (the default context's RAM
/// budget takes them off the available memory).
int64_t mapped_weight_bytes(const Model& model);

/// The context and KV settings a session of `model` runs (kv::choose_context, docs/DESIGN.md
/// §4.2): params.n_ctx when given (0: the trained context, or the largest that fits the
/// default budgets on `machine`), `kv` as given or with the default host budget filled in.
/// generate, ask, serve, bench, plan and the app's runtime all take their context from here.
/// Errors: the KV types' and settings' (plan_tiers()).
Expected<kv::ContextChoice> choose_session_context(const Model& model, const SessionParams& params,
                                                   const kv::KvSettings& kv,
                                                   const MachineMemory& machine);

struct BackendOptions {
  DeviceKind device = DeviceKind::Auto;
  int64_t n_ubatch = 512;  // tokens per prefill step
  kv::KvSettings kv;       // the tiered KV cache (both sessions; approximate modes: CPU only)
  /// The cache folder: the CUDA self-test's result is kept there (self_test_file()); empty:
  /// not kept, so the test runs for every CUDA session this makes.
  std::string cache_dir;
};

struct SessionChoice {
  std::unique_ptr<Session> session;
  DeviceKind device = DeviceKind::Cpu;  // Cpu or Cuda: where it actually runs
  std::string backend;                  // "cpu (avx2, 2 threads)" / "cuda (NVIDIA H200, sm_90)"
  /// Empty, or a line the user must see: "CUDA unavailable (no CUDA device); running on the CPU".
  std::string note;
};

/// Creates a session on the chosen backend. auto: CUDA when probe_cuda().usable, the self-test
/// passes (gate_cuda(): cached in opts.cache_dir, else run now, a few seconds) and the model
/// fits in the device's free memory, else the CPU with `note` saying why ("CUDA self-test failed
/// on NVIDIA H200 (sm_90): logits NMSE ...; running on the CPU (...)"). cpu: the fast CPU
/// session. cuda: the self-test too, then CUDA, or an error "--device cuda: <reason>" (never a
/// silent CPU fallback).
/// The approximate attention modes (streaming, topk) run on the CPU only: auto picks the CPU and
/// says so in `note`; cuda is refused with that reason. Every other KV setting runs on both
/// (CUDA: the window on the GPU).
/// Errors otherwise as the backend's create() (bad n_ctx, q8_0 KV on head_dim % 32 != 0, ...).
Expected<SessionChoice> create_session(const Model& model, const SessionParams& params,
                                       const BackendOptions& opts = {});

}  // namespace spw
