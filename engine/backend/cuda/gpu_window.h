// The KV cache's window on the GPU (docs/DESIGN.md §4.1, §4.3): a fixed pool of block
// slots carved from the session's device arena, handed to kv::KvCache as its DeviceWindow. The
// cache keeps the bookkeeping (block table, tiers, spills, budgets); this class only moves a
// slot's bytes:
//   zero      cudaMemsetAsync on the compute stream (ordered before the block's KV writes);
//   copy_out  a spill (copy thread) or a snapshot read: an event recorded on the compute stream
//             at the call orders the copy after every kernel queued so far, so after the
//             block's last write (a block is spilled only after its ubatch was queued); the
//             device -> host copy runs on the copy stream into a pinned staging buffer (DMA at
//             full PCIe speed, overlapped with compute), then lands in the host tier (RAM arena
//             or spill file) by memcpy;
//   copy_in   a snapshot restore: through the pinned buffer, on the compute stream, synchronously.
// Thread safety: copy_out and copy_in serialise on one mutex (one staging buffer); zero is the
// writer thread's.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/common/expected.h"
#include "engine/kv/kv_storage.h"

namespace spw::cuda {

class GpuWindow final : public kv::DeviceWindow {
 public:
  /// base: n_slots * slot_bytes bytes of device memory (the arena's Kv region); compute: the
  /// session's stream. Creates the copy stream, the event and the pinned staging buffer
  /// (slot_bytes). Errors: the CUDA call that failed.
  static Expected<std::unique_ptr<GpuWindow>> create(int device, uint8_t* base, int64_t n_slots,
                                                     int64_t slot_bytes, cudaStream_t compute);
  ~GpuWindow() override;
  GpuWindow(const GpuWindow&) = delete;
  GpuWindow& operator=(const GpuWindow&) = delete;

  int64_t n_slots() const override { return n_slots_; }
  uint8_t* slot(int32_t i) const override { return base_ + int64_t{i} * slot_bytes_; }
  Status zero(int32_t i) override;
  Status copy_out(int32_t i, uint8_t* dst) override;
  Status copy_in(int32_t i, const uint8_t* src) override;

  /// Bytes moved device -> host (spills, snapshot reads) and host -> device (restores).
  int64_t d2h_bytes() const { return d2h_bytes_.load(std::memory_order_relaxed); }
  int64_t h2d_bytes() const { return h2d_bytes_.load(std::memory_order_relaxed); }

 private:
  GpuWindow(int device, uint8_t* base, int64_t n_slots, int64_t slot_bytes, cudaStream_t compute)
      : device_(device),
        base_(base),
        n_slots_(n_slots),
        slot_bytes_(slot_bytes),
        compute_(compute) {}

  int device_;
  uint8_t* base_;
  int64_t n_slots_, slot_bytes_;
  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t queued_ = nullptr;  // recorded on compute_ by copy_out
  uint8_t* staging_ = nullptr;    // pinned, slot_bytes_
  std::mutex mu_;
  std::atomic<int64_t> d2h_bytes_{0}, h2d_bytes_{0};
};

}  // namespace spw::cuda
