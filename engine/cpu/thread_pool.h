// A persistent thread pool for the fast CPU path: n - 1 worker threads created once, the
// calling thread taking part as the n-th. parallel_for() hands out contiguous chunks of
// [0, n); workers spin briefly between calls (decode issues hundreds of small parallel
// loops per token) and then sleep on a condition variable. The caller waits only for chunks
// that other threads have claimed, never for a worker that has not woken up yet, so a pool
// larger than the free cores (another process busy) degrades to fewer threads, not to
// waiting on the scheduler.
//
// Chunk boundaries are a pure function of n and size(); which thread runs a chunk is not.
// Callers that write each output element from one chunk only (every kernel here) therefore
// get bit-identical results for any scheduling, and for any thread count as long as each
// element's computation does not depend on the chunk it falls in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace spw::cpu {

class ThreadPool final {
 public:
  /// n_threads >= 1 counts the calling thread; 1 means no worker threads at all. Worker threads
  /// the system refuses to start (no address space for their stacks, a thread limit) are left
  /// out: size() is then smaller than n_threads.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads taking part in a parallel_for, the caller included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(begin, end) over disjoint chunks covering [0, n) and returns when all are done.
  /// fn must not call parallel_for on this pool. Calls from several threads at once are
  /// serialised. An exception fn throws, on any thread (std::bad_alloc of a worker's scratch),
  /// is rethrown here on the calling thread once every chunk has finished; chunks that had not
  /// started when it was thrown are skipped (the first exception wins).
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(
        n, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  /// The chunks parallel_for(n, ...) uses on a pool of `n_threads`: chunk c is
  /// [c * n / n_chunks, (c + 1) * n / n_chunks). Exposed for tests.
  static int64_t chunk_count(int64_t n, int n_threads);

 private:
  using TaskFn = void (*)(void* ctx, int64_t begin, int64_t end);

  void run(int64_t n, TaskFn fn, void* ctx);
  void worker_loop();
  // Claims and runs chunks of job `gen` until none is left or a newer job has started.
  void work_chunks(uint32_t gen);

  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // one parallel_for at a time

  // Sleeping workers wait here; a new job is published under sleep_mu_ so no wake-up is lost.
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  int sleepers_ = 0;  // guarded by sleep_mu_

  // The current job. Its fields are written before the job is published through next_
  // (release) and may be read by a worker that is late and sees the next job's fields: it
  // only uses them after claiming a chunk, and the claim fails unless the job it read is
  // still the current one (see work_chunks()).
  std::atomic<TaskFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> n_chunks_{0};
  std::atomic<bool> stop_{false};  // set before the last generation is published

  // (generation << 32) | index of the next unclaimed chunk. Claims are compare-exchanges, so
  // a claim against a finished job cannot take a chunk of the next one.
  alignas(64) std::atomic<uint64_t> next_{0};
  alignas(64) std::atomic<int64_t> done_{0};  // chunks of the current job finished
  // The current job's first exception (set before its chunk counts as done, so run() sees it).
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;  // guarded by error_mu_
};

}  // namespace spw::cpu
