#include "engine/backend/cuda/arena.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cassert>

namespace spw::cuda {

std::string format_gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

Expected<std::unique_ptr<DeviceArena>> DeviceArena::create(int64_t capacity) {
  assert(capacity >= 0);
  void* base = nullptr;
  if (capacity > 0) {
    if (const cudaError_t e = cudaMalloc(&base, static_cast<size_t>(capacity)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return make_error("cannot allocate {} on the GPU: {} ({})", format_gib(capacity),
                        cudaGetErrorString(e), cudaGetErrorName(e));
    }
  }
  return std::unique_ptr<DeviceArena>(new DeviceArena(base, capacity));
}

DeviceArena::~DeviceArena() {
  // cudaFree synchronises the device first, so no queued kernel still reads the region.
  if (base_ != nullptr) (void)cudaFree(base_);
}

Expected<void*> DeviceArena::alloc(int64_t bytes, ArenaPurpose purpose) {
  assert(bytes >= 0);
  const int64_t at = offset_.load(std::memory_order_relaxed);
  const int64_t size = aligned(bytes);
  if (bytes < 0 || at + size > capacity_) {
    return make_error("device arena exhausted: {} more bytes asked, {} of {} used", bytes, at,
                      capacity_);
  }
  offset_.store(at + size, std::memory_order_relaxed);
  used_[static_cast<size_t>(purpose)].fetch_add(bytes, std::memory_order_relaxed);
  return static_cast<void*>(static_cast<uint8_t*>(base_) + at);
}

}  // namespace spw::cuda
