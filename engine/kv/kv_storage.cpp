#include "engine/kv/kv_storage.h"

#include <sys/mman.h>

#include <cassert>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "engine/common/size.h"

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

int32_t WindowPool::grow() {
  assert(can_grow());
  if (device_ != nullptr) {
    const auto s = static_cast<int32_t>(n_device_slots_++);
    zero(s);
    return s;
  }
  // make_unique<T[]> value-initialises: the new slot is already zero.
  slots_.push_back(std::make_unique<uint8_t[]>(static_cast<size_t>(slot_bytes_)));
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
  const int64_t bytes = n_slots * slot_bytes;
  if (bytes == 0) return std::unique_ptr<HostArena>(new HostArena(nullptr, 0, slot_bytes));
  void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return make_error("cannot reserve {} of RAM for the host KV tier: {}", format_size(bytes),
                      std::error_code(errno, std::generic_category()).message());
  }
  return std::unique_ptr<HostArena>(new HostArena(static_cast<uint8_t*>(p), n_slots, slot_bytes));
}

HostArena::~HostArena() {
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(n_slots_ * slot_bytes_));
}

}  // namespace spw::kv
