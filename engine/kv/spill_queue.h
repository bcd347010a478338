// The KV cache's copy thread: blocks leaving the window are queued here and copied to their cold
// slot (Host arena or spill file) off the decode path. The thread never touches the block table:
// finished copies wait in a "landed" list until the cache's writer thread applies them
// (plan, then apply), so the table has a single writer and readers need no lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/common/expected.h"

namespace spw::kv {

/// One block to copy out of its window slot.
struct SpillJob {
  int64_t block = 0;             // logical block index, for the writer to find its table entry
  uint8_t tier = 0;              // destination kv::Tier (Host or Disk), as a number
  int64_t slot = 0;              // destination slot in that tier
  const uint8_t* src = nullptr;  // the block's window slot (block_bytes), unchanged until landed
  int32_t window_slot = -1;      // its index (a DeviceWindow copies by index, src is on the device)
};

/// A finished SpillJob and how it went.
struct SpillDone {
  SpillJob job;
  Status status;
};

class SpillQueue {
 public:
  /// copy runs each job on the copy thread, started here; its Status is reported in SpillDone.
  explicit SpillQueue(std::function<Status(const SpillJob&)> copy);
  /// Runs every queued job, then stops and joins the thread.
  ~SpillQueue();
  SpillQueue(const SpillQueue&) = delete;
  SpillQueue& operator=(const SpillQueue&) = delete;

  void push(const SpillJob& job);
  /// Jobs queued or running (not yet in the landed list).
  int64_t in_flight() const;
  /// Moves the landed jobs into out (appends); never blocks on a copy.
  void take_landed(std::vector<SpillDone>& out);
  /// Blocks until at least one job has landed since the last take_landed() or nothing is in
  /// flight.
  void wait_one();
  /// Blocks until nothing is in flight.
  void wait_all();

 private:
  void run();

  std::function<Status(const SpillJob&)> copy_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the copy thread waits for jobs
  std::condition_variable done_cv_;  // the writer waits for landings
  std::deque<SpillJob> queue_;
  std::vector<SpillDone> landed_;
  int64_t in_flight_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started after every other member exists
};

}  // namespace spw::kv
