#include "app/runtime/backend_status.h"

#include <fmt/format.h>

#include "engine/backend/device.h"

namespace spw::app {

std::string backend_status_line() {
  const CudaProbe p = probe_cuda();
  if (p.usable) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return fmt::format("CUDA: {} (sm_{}{}), {:.1f} GiB of {:.1f} GiB free", p.name, p.sm_major,
                       p.sm_minor, static_cast<double>(p.free_bytes) / gib,
                       static_cast<double>(p.total_bytes) / gib);
  }
  return "CPU — " + (p.reason.empty() ? std::string("no usable CUDA device") : p.reason);
}

bool cuda_usable() { return probe_cuda().usable; }

}  // namespace spw::app
