#include "engine/backend/device.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/self_test.h"
#include "engine/cpu/simd.h"

#if defined(SPILLWAY_HAVE_CUDA)
#include "engine/backend/cuda/arena.h"
#include "engine/backend/cuda/cuda_session.h"
#include "engine/backend/cuda/device.h"
#endif

namespace spw {

Expected<DeviceKind> parse_device(std::string_view s) {
  if (s == "auto") return DeviceKind::Auto;
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") return DeviceKind::Cuda;
  return make_error("unknown device '{}' (accepted: auto, cpu, cuda)", s);
}

std::string_view device_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::Auto:
      return "auto";
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Cuda:
      return "cuda";
  }
  return "unknown";
}

bool cuda_built() {
#if defined(SPILLWAY_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

CudaProbe probe_cuda() {
  CudaProbe p;
#if defined(SPILLWAY_HAVE_CUDA)
  (void)cudaDriverGetVersion(&p.driver_version);
  (void)cudaRuntimeGetVersion(&p.runtime_version);
  auto devices = cuda::list_devices();
  if (!devices) {
    p.reason = devices.error().message;
    return p;
  }
  for (const cuda::DeviceInfo& d : *devices) {
    if (!d.usable()) continue;
    p.usable = true;
    p.index = d.index;
    p.name = d.name;
    p.sm_major = d.sm_major;
    p.sm_minor = d.sm_minor;
    p.free_bytes = d.free_bytes;
    p.total_bytes = d.total_bytes;
    return p;
  }
  // Devices, none usable: report the first one's reason.
  p.reason =
      devices->empty() ? std::string("no CUDA device") : cuda::unusable_reason(devices->front());
#else
  p.reason =
      "this build has no CUDA backend (it was configured with SPILLWAY_CUDA=OFF or without "
      "nvcc; configure with -DSPILLWAY_CUDA=ON where the CUDA toolkit is installed)";
#endif
  return p;
}

kv::KvCacheConfig kv_cache_config(const Model& model, const SessionParams& params,
                                  const kv::KvSettings& kv, kv::WindowHome home) {
  const ModelConfig& c = model.config();
  const int64_t n_ctx = params.n_ctx > 0 ? params.n_ctx : c.n_ctx_train;
  kv::KvCacheConfig kc(kv::tier_config(kv, home, n_ctx));
  kc.n_layer = c.n_layer;
  kc.n_kv_heads = c.n_head_kv;
  kc.head_dim = c.head_dim;
  kc.head_dim_v = c.head_dim_v;
  kc.type_k = kv_ggml_type(params.kv_type_k);
  kc.type_v = kv_ggml_type(params.kv_type_v);
  kc.spill_dir = kv.spill_dir;
  return kc;
}

Expected<kv::HostMemoryOptions> host_memory_options(const kv::KvSettings& kv,
                                                    std::optional<int> attending) {
  kv::HostMemoryOptions o;
  o.huge_pages = kv.huge_pages;
  if (kv.numa.mode == NumaSetting::Mode::Off) return o;
  auto node = choose_numa_node(kv.numa, read_numa_topology(), attending);
  if (!node) return node.error();
  o.numa_node = *node;
  o.numa_strict = kv.numa.mode == NumaSetting::Mode::Node;
  return o;
}

std::optional<int> cpu_attending_node() {
  return node_of_cpus(read_numa_topology(), allowed_cpus());
}

int64_t mapped_weight_bytes(const Model& model) {
  uint64_t total = 0;
  for (const GgufTensorInfo& t : model.file().tensors()) total += t.n_bytes;
  return static_cast<int64_t>(total);
}

Expected<kv::ContextChoice> choose_session_context(const Model& model, const SessionParams& params,
                                                   const kv::KvSettings& kv,
                                                   const MachineMemory& machine) {
  if (params.n_ctx < 0) return make_error("context length {} must not be negative", params.n_ctx);
  const ModelConfig& c = model.config();
  if (auto st = check_kv_types(params, c.head_dim, c.head_dim_v); !st) return st.error();
  kv::ContextRequest r;
  r.shape.n_layer = c.n_layer;
  r.shape.n_kv_heads = c.n_head_kv;
  r.shape.head_dim = c.head_dim;
  r.shape.head_dim_v = c.head_dim_v;
  r.shape.type_k = kv_ggml_type(params.kv_type_k);
  r.shape.type_v = kv_ggml_type(params.kv_type_v);
  r.n_ctx = params.n_ctx;
  r.n_ctx_train = c.n_ctx_train;
  // The CPU session's sliding-window layers keep only their window (kv_cache_set.h); a CUDA
  // session keeps them in its one cache, so there the default context is an estimate.
  r.layer_span = c.layer_attn_span;
  r.kv = kv;
  r.weights_bytes = mapped_weight_bytes(model);
  r.machine = machine;
  return kv::choose_context(r);
}

namespace {

// Why a session with these KV settings cannot run on CUDA, or empty when it can.
std::string kv_needs_cpu(const kv::KvSettings& p) {
  if (p.attention == kv::KvAttention::Exact) return {};
  return fmt::format("--attention {} runs on the CPU only (the CUDA session attends exactly)",
                     kv::kv_attention_name(p));
}

Expected<SessionChoice> make_cpu(const Model& model, const SessionParams& params,
                                 const BackendOptions& opts, std::string note) {
  cpu::CpuSessionParams cp;
  cp.n_ubatch = opts.n_ubatch;
  cp.kv = opts.kv;
  auto s = cpu::CpuSession::create(model, params, cp);
  if (!s) return s.error();
  SessionChoice c;
  c.device = DeviceKind::Cpu;
  c.backend = fmt::format("cpu ({}, {} thread{})", cpu::simd_level_name(cpu::simd_level()),
                          (*s)->n_threads(), (*s)->n_threads() == 1 ? "" : "s");
  c.session = std::move(*s);
  c.note = std::move(note);
  return c;
}

#if defined(SPILLWAY_HAVE_CUDA)
Expected<SessionChoice> make_cuda(const Model& model, const SessionParams& params,
                                  const BackendOptions& opts, const CudaProbe& probe) {
  cuda::CudaSessionParams cp;
  cp.device = probe.index;
  cp.n_ubatch = opts.n_ubatch;
  cp.kv = opts.kv;
  auto s = cuda::CudaSession::create(model, params, cp);
  if (!s) return s.error();
  SessionChoice c;
  c.device = DeviceKind::Cuda;
  const cuda::DeviceInfo& d = (*s)->device();
  c.backend = fmt::format("cuda ({}, {}, {})", d.name, cuda::sm_name(d.sm_major, d.sm_minor),
                          cuda::format_gib(d.total_bytes));
  c.session = std::move(*s);
  return c;
}

// The self-test's verdict on this device (self_test.h): the cached one for this device, driver
// and build, or the test run now on a model written beside the cache (the temporary folder
// without one) and removed after.
Expected<CudaGate> self_test_gate(const CudaProbe& probe, const BackendOptions& opts,
                                  bool required) {
  CudaGateInput in;
  in.required = required;
  in.device = fmt::format("{} ({})", probe.name, cuda::sm_name(probe.sm_major, probe.sm_minor));
  const std::string build = build_identity();
  in.key = self_test_key(probe, build);
  if (!opts.cache_dir.empty() && build != "unknown") in.cache = self_test_file(opts.cache_dir);
  in.run = [&]() -> SelfTestResult {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir = opts.cache_dir.empty() ? fs::temp_directory_path(ec) : fs::path(opts.cache_dir);
    fs::create_directories(dir, ec);
    const fs::path path = dir / fmt::format("cuda-self-test.{}.gguf", ::getpid());
    SelfTestResult r;
    if (auto st = write_self_test_model(path); !st) {
      r.reason = fmt::format("cannot write its model: {}", st.error().message);
      return r;
    }
    const auto on = [&](bool cuda) {
      return [&, cuda](const Model& m, const SessionParams& sp,
                       const kv::KvSettings& kv) -> Expected<std::unique_ptr<Session>> {
        BackendOptions o = opts;
        o.kv = kv;
        auto c = cuda ? make_cuda(m, sp, o, probe) : make_cpu(m, sp, o, {});
        if (!c) return c.error();
        return std::move(c->session);
      };
    };
    r = run_self_test(path, on(true), on(false));
    fs::remove(path, ec);
    return r;
  };
  return gate_cuda(in);
}
#endif

}  // namespace

Expected<SessionChoice> create_session(const Model& model, const SessionParams& params,
                                       const BackendOptions& opts) {
  if (opts.device == DeviceKind::Cpu) return make_cpu(model, params, opts, {});
  const std::string cpu_only = kv_needs_cpu(opts.kv);
  if (opts.device == DeviceKind::Cuda && !cpu_only.empty())
    return make_error("--device cuda: {}; use --device cpu or auto", cpu_only);

  const CudaProbe probe = probe_cuda();
  if (opts.device == DeviceKind::Auto && !cpu_only.empty()) {
    return make_cpu(model, params, opts,
                    probe.usable
                        ? fmt::format("{}; running on the CPU", cpu_only)
                        : fmt::format("CUDA unavailable ({}); running on the CPU", probe.reason));
  }
  if (opts.device == DeviceKind::Cuda) {
    if (!probe.usable) return make_error("--device cuda: {}", probe.reason);
#if defined(SPILLWAY_HAVE_CUDA)
    auto gate = self_test_gate(probe, opts, /*required=*/true);
    if (!gate) return gate.error();
    auto c = make_cuda(model, params, opts, probe);
    if (!c) return make_error("--device cuda: {}", c.error().message);
    c->note = gate->note;  // only a result that could not be kept
    return c;
#endif
  }

  // Auto: CUDA when it is usable, has passed the self-test and the session can be made there,
  // else the CPU, saying why.
  std::string reason = probe.reason;
#if defined(SPILLWAY_HAVE_CUDA)
  if (probe.usable) {
    auto gate = self_test_gate(probe, opts, /*required=*/false);
    if (!gate) return gate.error();
    if (!gate->use_cuda) return make_cpu(model, params, opts, gate->note);
    auto c = make_cuda(model, params, opts, probe);
    if (c) {
      c->note = gate->note;
      return c;
    }
    reason = c.error().message;
  }
#endif
  return make_cpu(model, params, opts,
                  fmt::format("CUDA unavailable ({}); running on the CPU", reason));
}

}  // namespace spw
