// DeviceArena: the GPU memory of one CUDA session, taken from the device in one cudaMalloc and
// handed out by aligned bump allocation. The session plans every buffer first (weights, KV
// cache, scratch), checks the total against the device's free memory, then creates the arena
// and carves it; nothing is freed piecemeal, everything goes back in the destructor.
//
// The bytes handed out are counted per purpose; the counters are atomics so that a dashboard
// thread may read them while the session's thread works.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/common/expected.h"

namespace spw::cuda {

/// What a block of device memory holds (the dashboard's VRAM split).
enum class ArenaPurpose { Weights = 0, Kv = 1, Scratch = 2 };
inline constexpr int kArenaPurposes = 3;

class DeviceArena {
 public:
  /// Every allocation starts at a multiple of this (bytes); cudaMalloc's own alignment.
  static constexpr int64_t kAlignment = 256;

  /// Rounds n up to kAlignment: the bytes alloc(n) consumes. Plan with it.
  static constexpr int64_t aligned(int64_t n) {
    return (n + kAlignment - 1) / kAlignment * kAlignment;
  }

  /// One region of `capacity` bytes on the current device. Error: the cudaMalloc failure,
  /// "cannot allocate 12.3 GiB on the GPU: out of memory (cudaErrorMemoryAllocation)".
  /// Precondition: capacity >= 0.
  static Expected<std::unique_ptr<DeviceArena>> create(int64_t capacity);

  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  /// The next `bytes` bytes (aligned to kAlignment), counted under `purpose`. Error when the
  /// arena is exhausted (a planning bug): "device arena exhausted: ...". bytes == 0 gives a
  /// valid, unique-enough pointer that must not be dereferenced.
  Expected<void*> alloc(int64_t bytes, ArenaPurpose purpose);

  /// Typed alloc of n elements of T.
  template <typename T>
  Expected<T*> alloc_n(int64_t n, ArenaPurpose purpose) {
    auto p = alloc(n * static_cast<int64_t>(sizeof(T)), purpose);
    if (!p) return p.error();
    return static_cast<T*>(*p);
  }

  int64_t capacity() const { return capacity_; }
  /// Bytes handed out so far (with alignment padding), all purposes.
  int64_t used() const { return offset_.load(std::memory_order_relaxed); }
  /// Bytes requested under one purpose (without padding).
  int64_t used(ArenaPurpose p) const {
    return used_[static_cast<size_t>(p)].load(std::memory_order_relaxed);
  }

 private:
  DeviceArena(void* base, int64_t capacity) : base_(base), capacity_(capacity) {}

  void* base_ = nullptr;
  int64_t capacity_ = 0;
  std::atomic<int64_t> offset_{0};
  std::array<std::atomic<int64_t>, kArenaPurposes> used_{};
};

/// "12.3 GiB" for messages.
std::string format_gib(int64_t bytes);

}  // namespace spw::cuda
