// Where the bytes of the KV cache's RAM tiers live: the window's slot pool and the Host arena.
// Both hold whole logical blocks (block_bytes each, in the read_block layout of kv_cache.h);
// which block sits in which slot is the block table's business (kv_cache.cpp), not theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/common/expected.h"

namespace spw::kv {

/// The window's slots, allocated on demand (a window sized for 128K tokens costs nothing until
/// it fills) and kept, so a slot's address never changes while it exists. A slot handed out by
/// take() is zeroed: rows past the last position of a partial block read as zeros, which keeps
/// snapshots deterministic.
class WindowPool {
 public:
  explicit WindowPool(int64_t slot_bytes) : slot_bytes_(slot_bytes) {}

  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }

  /// A free slot, zeroed. Precondition: n_free() > 0.
  int32_t take();
  /// A new slot (size() grows by one), zeroed and taken.
  int32_t grow();
  /// Returns a taken slot to the free list.
  void give_back(int32_t slot);
  /// Every slot free again (none released to the system).
  void release_all();

  uint8_t* slot(int32_t i) { return slots_[static_cast<size_t>(i)].get(); }
  const uint8_t* slot(int32_t i) const { return slots_[static_cast<size_t>(i)].get(); }

 private:
  int64_t slot_bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> slots_;  // each [slot_bytes]
  std::vector<int32_t> free_;
};

/// The Host tier: one anonymous mapping of n_slots * slot_bytes bytes (MAP_NORESERVE, so an
/// unlimited budget sized for the whole context only costs the pages blocks really use).
class HostArena {
 public:
  /// Error: "cannot reserve SIZE of RAM for the host KV tier: REASON".
  static Expected<std::unique_ptr<HostArena>> create(int64_t n_slots, int64_t slot_bytes);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  int64_t n_slots() const { return n_slots_; }
  /// Slot i, slot_bytes long. Precondition: 0 <= i < n_slots().
  uint8_t* slot(int64_t i) const { return base_ + i * slot_bytes_; }

 private:
  HostArena(uint8_t* base, int64_t n_slots, int64_t slot_bytes)
      : base_(base), n_slots_(n_slots), slot_bytes_(slot_bytes) {}

  uint8_t* base_;  // [n_slots][slot_bytes]
  int64_t n_slots_;
  int64_t slot_bytes_;
};

}  // namespace spw::kv
