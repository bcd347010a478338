#include "engine/kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <system_error>

#include "engine/common/numa.h"
#include "engine/common/size.h"
#include "engine/kv/tier_policy.h"

namespace spw::kv {

int32_t WindowPool::take() {
  assert(!free_.empty());
  const int32_t s = free_.back();
  free_.pop_back();
  zero(s);
  return s;
}

void WindowPool::zero(int32_t s) {
  if (device_ == nullptr) {
    std::memset(slot(s), 0, static_cast<size_t>(slot_bytes_));
    return;
  }
  // A failure here is a device error the session's next CUDA call reports (errors are sticky).
  (void)device_->zero(s);
}

Expected<int32_t> WindowPool::grow() {
  assert(can_grow());
  if (device_ != nullptr) {
    const auto s = static_cast<int32_t>(n_device_slots_++);
    zero(s);
    return s;
  }
  try {
    slots_.reserve(slots_.size() + 1);
    // make_unique<T[]> value-initialises: the new slot is already zero.
    slots_.push_back(std::make_unique<uint8_t[]>(static_cast<size_t>(slot_bytes_)));
  } catch (const std::bad_alloc&) {
    const auto n = static_cast<int64_t>(slots_.size());
    return make_error(
        "cannot allocate {} of RAM for a KV window block (the window holds {} blocks, {}): out "
        "of memory; a smaller --kv-window or --ubatch, or a shorter -c",
        format_size(slot_bytes_), n, format_size(n * slot_bytes_));
  }
  return static_cast<int32_t>(slots_.size() - 1);
}

void WindowPool::give_back(int32_t slot) {
  assert(slot >= 0 && slot < size());
  free_.push_back(slot);
}

void WindowPool::release_all() {
  free_.clear();
  // Highest first, so take() hands out slot 0 first.
  for (int64_t i = size() - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

Expected<std::unique_ptr<HostArena>> HostArena::create(int64_t n_slots, int64_t slot_bytes,
                                                       const HostMemoryOptions& options) {
  assert(n_slots >= 0 && slot_bytes > 0);
  const int64_t per_chunk = std::max<int64_t>(1, kChunkBytes / slot_bytes);
  const int64_t n_chunks = ceil_div(n_slots, per_chunk);
  std::unique_ptr<std::atomic<uint8_t*>[]> chunks;
  try {
    // Value-initialised: every chunk nullptr.
    chunks = std::make_unique<std::atomic<uint8_t*>[]>(static_cast<size_t>(n_chunks));
  } catch (const std::bad_alloc&) {
    return make_error(
        "cannot allocate {} for the host KV tier's chunk table ({} chunks): out of memory; set "
        "--host-budget or a shorter -c",
        format_size(n_chunks * static_cast<int64_t>(sizeof(uint8_t*))), n_chunks);
  }
  return std::unique_ptr<HostArena>(
      new HostArena(n_slots, slot_bytes, per_chunk, n_chunks, std::move(chunks), options));
}

HostArena::HostArena(int64_t n_slots, int64_t slot_bytes, int64_t per_chunk, int64_t n_chunks,
                     std::unique_ptr<std::atomic<uint8_t*>[]> chunks,
                     const HostMemoryOptions& options)
    : n_slots_(n_slots),
      slot_bytes_(slot_bytes),
      per_chunk_(per_chunk),
      n_chunks_(n_chunks),
      chunks_(std::move(chunks)),
      options_(options),
      thp_(read_thp_mode()) {}

int64_t HostArena::chunk_bytes(size_t c) const {
  const int64_t first = static_cast<int64_t>(c) * per_chunk_;
  return std::min(per_chunk_, n_slots_ - first) * slot_bytes_;
}

int64_t HostArena::map_bytes(size_t c) const {
  const int64_t bytes = chunk_bytes(c);
  return wants_huge_pages() ? ceil_div(bytes, kHugePageBytes) * kHugePageBytes : bytes;
}

Expected<uint8_t*> HostArena::acquire(int64_t i) {
  assert(i >= 0 && i < n_slots_);
  acquired_.fetch_add(1, std::memory_order_relaxed);
  const auto c = static_cast<size_t>(i / per_chunk_);
  if (chunks_[c].load(std::memory_order_relaxed) == nullptr) {
    const int64_t bytes = map_bytes(c);
    // THP backs only 2 MiB-aligned runs of a mapping: map one huge page more and trim both ends
    // to the aligned part (mmap itself only promises 4 KiB alignment).
    const bool huge = wants_huge_pages();
    const int64_t slack = huge ? kHugePageBytes : 0;
    // Not MAP_NORESERVE: the chunk is about to be filled, so let the kernel's overcommit
    // accounting refuse it now rather than a page fault kill the process later.
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes + slack), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return make_error(
          "cannot allocate {} of RAM for the host KV tier (it holds {} so far): {}; set "
          "--host-budget (and --disk-budget for the rest) or a shorter -c",
          format_size(bytes), format_size(mapped_bytes()),
          std::error_code(errno, std::generic_category()).message());
    }
    auto* base = static_cast<uint8_t*>(p);
    if (huge) {
      const auto addr = reinterpret_cast<uintptr_t>(p);
      const uintptr_t aligned = (addr + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
      const size_t head = aligned - addr;
      const size_t tail = static_cast<size_t>(slack) - head;
      if (head > 0) ::munmap(p, head);
      if (tail > 0)
        ::munmap(reinterpret_cast<void*>(aligned + static_cast<uintptr_t>(bytes)), tail);
      base = reinterpret_cast<uint8_t*>(aligned);
      // Advice, not a promise: where it fails (a kernel without THP) the chunk has 4 KiB
      // pages and huge_page_bytes() says 0.
      (void)::madvise(base, static_cast<size_t>(bytes), MADV_HUGEPAGE);
    } else if (!options_.huge_pages) {
      (void)::madvise(base, static_cast<size_t>(bytes), MADV_NOHUGEPAGE);
    }
    if (options_.numa_node >= 0) {
      if (Status st =
              numa_bind(base, static_cast<size_t>(bytes), options_.numa_node, options_.numa_strict);
          !st) {
        ::munmap(base, static_cast<size_t>(bytes));
        return st.error();
      }
    }
    chunks_[c].store(base, std::memory_order_release);
    mapped_.fetch_add(bytes, std::memory_order_relaxed);
  }
  return slot(i);
}

int64_t HostArena::huge_page_bytes_now() const {
  // A figure for telemetry: where RAM is too short even to read smaps, 0 rather than a throw.
  try {
    std::vector<AddressRange> ranges;
    for (size_t c = 0; c < static_cast<size_t>(n_chunks_); ++c) {
      const uint8_t* p = chunks_[c].load(std::memory_order_acquire);
      if (p == nullptr) continue;
      const auto b = reinterpret_cast<uintptr_t>(p);
      ranges.push_back({b, b + static_cast<uintptr_t>(map_bytes(c))});
    }
    if (ranges.empty()) return 0;
    return anon_huge_bytes(read_self_smaps(), ranges);
  } catch (const std::bad_alloc&) {
    return 0;
  }
}

int64_t HostArena::huge_page_bytes() const {
  if (mapped_bytes() == 0) return 0;
  const int64_t acquired = acquired_.load(std::memory_order_relaxed);
  std::unique_lock lock(smaps_mutex_, std::try_to_lock);
  // Another thread is reading smaps: its figure or the last one will do for a sample.
  if (!lock.owns_lock()) return smaps_huge_.load(std::memory_order_relaxed);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (acquired != smaps_acquired_ || now - smaps_read_ns_ >= 1'000'000'000) {
    smaps_huge_.store(huge_page_bytes_now(), std::memory_order_relaxed);
    smaps_acquired_ = acquired;
    smaps_read_ns_ = now;
  }
  return smaps_huge_.load(std::memory_order_relaxed);
}

HostArena::~HostArena() {
  for (size_t c = 0; c < static_cast<size_t>(n_chunks_); ++c) {
    uint8_t* p = chunks_[c].load(std::memory_order_relaxed);
    if (p != nullptr) ::munmap(p, static_cast<size_t>(map_bytes(c)));
  }
}

}  // namespace spw::kv
