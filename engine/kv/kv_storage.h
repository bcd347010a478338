// Where the bytes of the KV cache's RAM tiers live: the window's slot pool and the Host arena.
// Both hold whole logical blocks (block_bytes each, in the read_block layout of kv_cache.h);
// which block sits in which slot is the block table's business (kv_cache.cpp), not theirs.
// A session that keeps the window elsewhere (the CUDA session: on the GPU) hands the cache a
// DeviceWindow; the cache then only does the window's bookkeeping and moves bytes through it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/common/expected.h"
#include "engine/common/huge_pages.h"

namespace spw::kv {

/// A window whose slots live outside RAM (the CUDA session's: in the device arena). The cache never
/// dereferences slot(i); it hands those addresses out in BlockView (tier Window) and moves a
/// slot's bytes with copy_out / copy_in. Each slot is block_bytes long in the read_block layout,
/// so a slot and a Host slot are byte for byte the same.
class DeviceWindow {
 public:
  virtual ~DeviceWindow() = default;
  /// Slots in the pool; fixed (the session sizes it with window_pool_slots(), limits.h).
  virtual int64_t n_slots() const = 0;
  /// Slot i's address in the device's address space. Precondition: 0 <= i < n_slots().
  virtual uint8_t* slot(int32_t i) const = 0;
  /// Zeroes slot i, ordered before every later write of the session into it (called by the
  /// cache's writer thread when it hands the slot to a new block).
  virtual Status zero(int32_t i) = 0;
  /// Copies slot i into dst (host memory, block_bytes), after every write the session queued
  /// into the slot before the block was spilled; returns once dst holds the bytes. Called from
  /// the copy thread (spills) and the writer thread (snapshots), never concurrently for one slot.
  virtual Status copy_out(int32_t i, uint8_t* dst) = 0;
  /// Copies src (host memory, block_bytes) into slot i and returns once it is there (restore).
  virtual Status copy_in(int32_t i, const uint8_t* src) = 0;
};

/// The window's slots, allocated on demand (a window sized for 128K tokens costs nothing until
/// it fills) and kept, so a slot's address never changes while it exists. A slot handed out by
/// take() is zeroed: rows past the last position of a partial block read as zeros, which keeps
/// snapshots deterministic.
class WindowPool {
 public:
  /// device == nullptr: slots in RAM, grown on demand. Otherwise the device's fixed pool: slot
  /// indices are handed out up to device->n_slots() and their bytes stay on the device.
  explicit WindowPool(int64_t slot_bytes, DeviceWindow* device = nullptr)
      : slot_bytes_(slot_bytes), device_(device) {}

  int64_t size() const {
    return device_ != nullptr ? n_device_slots_ : static_cast<int64_t>(slots_.size());
  }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }

  /// A free slot, zeroed. Precondition: n_free() > 0.
  int32_t take();
  /// Whether grow() may be called (always in RAM; below n_slots() on a device).
  bool can_grow() const { return device_ == nullptr || size() < device_->n_slots(); }
  /// A new slot (size() grows by one), zeroed and taken. Precondition: can_grow(). Error (RAM
  /// is out): "cannot allocate 160.0 KiB of RAM for a KV window block (the window holds 17
  /// blocks, 2.7 MiB): out of memory; a smaller --kv-window or --ubatch, or a shorter -c".
  Expected<int32_t> grow();
  /// Returns a taken slot to the free list.
  void give_back(int32_t slot);
  /// Every slot free again (none released to the system).
  void release_all();

  /// Slot i's bytes: RAM, or the device address (never dereference it then).
  uint8_t* slot(int32_t i) const {
    return device_ != nullptr ? device_->slot(i) : slots_[static_cast<size_t>(i)].get();
  }
  DeviceWindow* device() const { return device_; }

 private:
  void zero(int32_t s);

  int64_t slot_bytes_;
  DeviceWindow* device_;
  std::vector<std::unique_ptr<uint8_t[]>> slots_;  // each [slot_bytes]; empty on a device
  int64_t n_device_slots_ = 0;                     // slots handed out so far on a device
  std::vector<int32_t> free_;
};

/// How the Host arena maps its chunks (KvCacheConfig::host_memory, resolved by the session from
/// --huge-pages and --numa-node).
struct HostMemoryOptions {
  /// On: each chunk is mapped 2 MiB-aligned in whole 2 MiB pages and madvise(MADV_HUGEPAGE)d
  /// where THP is in madvise or always mode (ThpMode), so the kernel backs it with huge pages
  /// as it is touched (fewer TLB misses when attention walks cold blocks). Off:
  /// madvise(MADV_NOHUGEPAGE), 4 KiB pages even in always mode.
  bool huge_pages = true;
  /// >= 0: each chunk is bound (mbind, numa.h) to this NUMA node before it is touched; -1: the
  /// kernel's first-touch placement (a single-node machine, --numa-node off, no libnuma).
  int numa_node = -1;
  bool numa_strict = false;  // MPOL_BIND (an explicit --numa-node N), else MPOL_PREFERRED

  bool operator==(const HostMemoryOptions&) const = default;
};

/// The Host tier: slots of whole logical blocks in anonymous mappings of about kChunkBytes each
/// (at least one slot), mapped as blocks first spill into them, not at creation: an unlimited
/// budget sized for the whole context costs the address space of the blocks really spilled
/// (a 131072-token context does not reserve its gigabytes for a 5-token prompt). Chunks stay
/// mapped until the arena goes, so a slot's address never changes once it has one. With huge
/// pages a chunk's mapping is rounded up to whole 2 MiB pages (at most 2 MiB more per chunk,
/// counted in mapped_bytes()).
///
/// Threads: acquire() is called by one thread at a time (the cache's copy thread); slot(i) may be
/// read from any thread once acquire(i) has returned there or on a thread that happened before;
/// mapped_bytes() and huge_page_bytes() from any thread.
class HostArena {
 public:
  static constexpr int64_t kChunkBytes = int64_t{64} << 20;

  /// Maps nothing yet; reads the THP mode once. Error: "cannot allocate SIZE for the host KV
  /// tier's chunk table: ...".
  static Expected<std::unique_ptr<HostArena>> create(int64_t n_slots, int64_t slot_bytes,
                                                     const HostMemoryOptions& options = {});
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  int64_t n_slots() const { return n_slots_; }
  int64_t slots_per_chunk() const { return per_chunk_; }
  const HostMemoryOptions& options() const { return options_; }
  /// The kernel's THP mode when the arena was made.
  ThpMode thp_mode() const { return thp_; }
  /// Whether chunks are mapped for huge pages (options().huge_pages and THP usable).
  bool wants_huge_pages() const { return options_.huge_pages && thp_usable(thp_); }
  /// Bytes mapped so far (whole chunks).
  int64_t mapped_bytes() const { return mapped_.load(std::memory_order_relaxed); }
  /// Bytes of the mapped chunks backed by huge pages (AnonHugePages of /proc/self/smaps): read
  /// again when a slot was acquired (a block written) since the last read or a second has
  /// passed, else the last figure; 0 without reading smaps while nothing is mapped (a session
  /// that never spills pays nothing). A read costs about a millisecond per GiB mapped in the
  /// process (the kernel walks the page tables): once per spilled block at most.
  int64_t huge_page_bytes() const;
  /// The same, read from smaps now.
  int64_t huge_page_bytes_now() const;

  /// Slot i for writing, its chunk mapped first if this is the first of its slots used.
  /// Precondition: 0 <= i < n_slots(). Errors (the mapping failed: RAM or address space is
  /// out): "cannot allocate 64.0 MiB of RAM for the host KV tier (it holds 1.9 GiB so far):
  /// Cannot allocate memory; set --host-budget (and --disk-budget for the rest) or a shorter
  /// -c"; numa_bind()'s.
  Expected<uint8_t*> acquire(int64_t i);
  /// Slot i, slot_bytes long. Precondition: acquire(i) succeeded before.
  uint8_t* slot(int64_t i) const {
    return chunks_[static_cast<size_t>(i / per_chunk_)].load(std::memory_order_relaxed) +
           (i % per_chunk_) * slot_bytes_;
  }

 private:
  HostArena(int64_t n_slots, int64_t slot_bytes, int64_t per_chunk, int64_t n_chunks,
            std::unique_ptr<std::atomic<uint8_t*>[]> chunks, const HostMemoryOptions& options);
  int64_t chunk_bytes(size_t c) const;  // the slots' bytes
  int64_t map_bytes(size_t c) const;    // the mapping's: whole huge pages when wanted

  int64_t n_slots_;
  int64_t slot_bytes_;
  int64_t per_chunk_;  // slots per chunk (the last chunk may hold fewer)
  int64_t n_chunks_;
  // [n_chunks_]; nullptr until mapped. Atomic so huge_page_bytes() may list them from any
  // thread while the copy thread maps more.
  std::unique_ptr<std::atomic<uint8_t*>[]> chunks_;
  HostMemoryOptions options_;
  ThpMode thp_;
  std::atomic<int64_t> mapped_{0};
  std::atomic<int64_t> acquired_{0};  // acquire() calls so far
  // huge_page_bytes()'s last reading: when, after how many acquire() calls, the figure.
  mutable std::mutex smaps_mutex_;
  mutable int64_t smaps_read_ns_ = 0, smaps_acquired_ = -1;  // under smaps_mutex_
  mutable std::atomic<int64_t> smaps_huge_{0};
};

}  // namespace spw::kv
