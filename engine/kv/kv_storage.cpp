#include "engine/kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

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

Expected<std::unique_ptr<HostArena>> HostArena::create(int64_t n_slots, int64_t slot_bytes) {
  assert(n_slots >= 0 && slot_bytes > 0);
  const int64_t per_chunk = std::max<int64_t>(1, kChunkBytes / slot_bytes);
  const int64_t n_chunks = ceil_div(n_slots, per_chunk);
  std::vector<uint8_t*> chunks;
  try {
    chunks.assign(static_cast<size_t>(n_chunks), nullptr);
  } catch (const std::bad_alloc&) {
    return make_error(
        "cannot allocate {} for the host KV tier's chunk table ({} chunks): out of memory; set "
        "--host-budget or a shorter -c",
        format_size(n_chunks * static_cast<int64_t>(sizeof(uint8_t*))), n_chunks);
  }
  return std::unique_ptr<HostArena>(
      new HostArena(n_slots, slot_bytes, per_chunk, std::move(chunks)));
}

int64_t HostArena::chunk_bytes(size_t c) const {
  const int64_t first = static_cast<int64_t>(c) * per_chunk_;
  return std::min(per_chunk_, n_slots_ - first) * slot_bytes_;
}

Expected<uint8_t*> HostArena::acquire(int64_t i) {
  assert(i >= 0 && i < n_slots_);
  const auto c = static_cast<size_t>(i / per_chunk_);
  if (chunks_[c] == nullptr) {
    const int64_t bytes = chunk_bytes(c);
    // Not MAP_NORESERVE: the chunk is about to be filled, so let the kernel's overcommit
    // accounting refuse it now rather than a page fault kill the process later.
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return make_error(
          "cannot allocate {} of RAM for the host KV tier (it holds {} so far): {}; set "
          "--host-budget (and --disk-budget for the rest) or a shorter -c",
          format_size(bytes), format_size(mapped_bytes()),
          std::error_code(errno, std::generic_category()).message());
    }
    chunks_[c] = static_cast<uint8_t*>(p);
    mapped_.fetch_add(bytes, std::memory_order_relaxed);
  }
  return slot(i);
}

HostArena::~HostArena() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c] != nullptr) ::munmap(chunks_[c], static_cast<size_t>(chunk_bytes(c)));
  }
}

}  // namespace spw::kv
