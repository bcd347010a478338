#include "engine/session/device.h"

#include <fmt/format.h>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/cpu/simd.h"

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
  p.reason = "this build has no CUDA backend (nvcc was not found at configure time)";
#endif
  return p;
}

bool KvPaging::is_default() const {
  const KvPaging d;
  return block_size == d.block_size && n_sinks == d.n_sinks && window_tokens == d.window_tokens &&
         host_budget == d.host_budget && disk_budget == d.disk_budget && attention == d.attention;
}

Status parse_kv_attention(std::string_view s, KvPaging& p) {
  if (s == "exact" || s == "streaming") {
    p.attention = s == "exact" ? KvAttention::Exact : KvAttention::Streaming;
    p.top_k = 0;
    return Status::Ok();
  }
  constexpr std::string_view kTopK = "topk:";
  if (s.substr(0, kTopK.size()) == kTopK && s.size() > kTopK.size() &&
      s.size() <= kTopK.size() + 9) {
    int64_t k = 0;
    bool digits = true;
    for (const char c : s.substr(kTopK.size())) {
      digits &= c >= '0' && c <= '9';
      k = k * 10 + (c - '0');
    }
    if (digits && k >= 1) {
      p.attention = KvAttention::TopK;
      p.top_k = k;
      return Status::Ok();
    }
  }
  return make_error("unknown attention mode '{}' (accepted: exact, streaming, topk:K with K >= 1)",
                    s);
}

std::string kv_attention_name(const KvPaging& p, bool labelled) {
  switch (p.attention) {
    case KvAttention::Exact:
      return "exact";
    case KvAttention::Streaming:
      return labelled ? "streaming (approximate)" : "streaming";
    case KvAttention::TopK:
      return fmt::format("topk:{}{}", p.top_k, labelled ? " (approximate)" : "");
  }
  return "unknown";
}

namespace {

// Why a session with these paging settings cannot run on CUDA, or empty when it can.
std::string paging_needs_cpu(const KvPaging& p) {
  if (p.attention == KvAttention::Exact) return {};
  return fmt::format("--attention {} runs on the CPU only (the CUDA session attends exactly)",
                     kv_attention_name(p));
}

Expected<SessionChoice> make_cpu(const Model& model, const SessionParams& params,
                                 const BackendOptions& opts, std::string note) {
  cpu::CpuSessionParams cp;
  cp.n_ubatch = opts.n_ubatch;
  cp.paging = opts.paging;
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
  cp.paging = opts.paging;
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
#endif

}  // namespace

Expected<SessionChoice> create_session(const Model& model, const SessionParams& params,
                                       const BackendOptions& opts) {
  if (opts.device == DeviceKind::Cpu) return make_cpu(model, params, opts, {});
  const std::string cpu_only = paging_needs_cpu(opts.paging);
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
    auto c = make_cuda(model, params, opts, probe);
    if (!c) return make_error("--device cuda: {}", c.error().message);
    return c;
#endif
  }

  // Auto: CUDA when it is usable and the session can be made there, else the CPU, saying why.
  std::string reason = probe.reason;
#if defined(SPILLWAY_HAVE_CUDA)
  if (probe.usable) {
    auto c = make_cuda(model, params, opts, probe);
    if (c) return c;
    reason = c.error().message;
  }
#endif
  return make_cpu(model, params, opts,
                  fmt::format("CUDA unavailable ({}); running on the CPU", reason));
}

}  // namespace spw
