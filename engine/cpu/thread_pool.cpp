#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <exception>
#include <system_error>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace spw::cpu {
namespace {

// How long an idle worker spins before sleeping. Between two matrix products of one decode
// step the gap is microseconds; a sleeping worker costs a futex wake-up (tens of us) instead.
constexpr auto kSpinTime = std::chrono::microseconds(200);

// Chunks per thread: a few, so a thread slowed by another process does not hold up the rest.
constexpr int64_t kChunksPerThread = 4;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Index of a closed generation: no job has this many chunks, so nothing can be claimed.
constexpr uint64_t kClosedIndex = 0xFFFFFFFFu;

inline uint32_t gen_of(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
inline int64_t index_of(uint64_t v) { return static_cast<int64_t>(v & 0xFFFFFFFFu); }

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  const int n = std::max(1, n_threads);
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    // A thread the system refuses (its stack does not fit under ulimit -v, a process limit):
    // the pool runs with the threads it got. Results never depend on the thread count, and
    // size() says how many there are.
    try {
      workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error&) {
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(sleep_mu_);
    stop_.store(true, std::memory_order_relaxed);
    // A new generation with no chunks wakes every spinner; sleepers see stop_.
    const uint64_t cur = next_.load(std::memory_order_relaxed);
    n_chunks_.store(0, std::memory_order_relaxed);
    next_.store(static_cast<uint64_t>(gen_of(cur) + 1) << 32, std::memory_order_release);
  }
  sleep_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::chunk_count(int64_t n, int n_threads) {
  if (n <= 0) return 0;
  return std::min<int64_t>(n, std::max(1, n_threads) * kChunksPerThread);
}

void ThreadPool::work_chunks(uint32_t gen) {
  uint64_t cur = next_.load(std::memory_order_acquire);
  for (;;) {
    if (gen_of(cur) != gen) return;  // a newer job: the caller of this one is gone
    // Read the job, then claim: if the claim succeeds the job was still current when it did,
    // so it had not finished and its fields had not been replaced.
    const int64_t n_chunks = n_chunks_.load(std::memory_order_relaxed);
    const TaskFn fn = fn_.load(std::memory_order_relaxed);
    void* const ctx = ctx_.load(std::memory_order_relaxed);
    const int64_t n = n_.load(std::memory_order_relaxed);
    // Pairs with the release fence in run(): if any field above already belongs to a newer
    // job, the claim below sees that job's closing of this generation and fails.
    std::atomic_thread_fence(std::memory_order_acquire);
    const int64_t c = index_of(cur);
    if (c >= n_chunks) return;
    if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;  // cur now holds the fresh value
    }
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        fn(ctx, c * n / n_chunks, (c + 1) * n / n_chunks);
      } catch (...) {  // rethrown by run() on the calling thread
        std::lock_guard lk(error_mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    done_.fetch_add(1, std::memory_order_release);
    cur = next_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = gen_of(next_.load(std::memory_order_acquire));
    const auto spin_start = std::chrono::steady_clock::now();
    for (uint32_t i = 1; gen == seen; ++i) {
      cpu_relax();
      gen = gen_of(next_.load(std::memory_order_acquire));
      if (gen != seen) break;
      if (i % 1024 == 0) {
        // Give the core away now and then: with more threads than free cores (another
        // process busy), a spinner would otherwise delay the threads doing the work.
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() - spin_start > kSpinTime) {
          std::unique_lock lk(sleep_mu_);
          ++sleepers_;
          sleep_cv_.wait(lk, [&] { return gen_of(next_.load(std::memory_order_acquire)) != seen; });
          --sleepers_;
          gen = gen_of(next_.load(std::memory_order_acquire));
        }
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;  // published with the last generation
    work_chunks(gen);
  }
}

void ThreadPool::run(int64_t n, TaskFn fn, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(ctx, 0, n);
    return;
  }
  std::lock_guard submit(submit_mu_);
  const int64_t n_chunks = chunk_count(n, size());
  // Close the previous generation before touching the job fields. A worker still inside
  // work_chunks() for the old job may read the new fields; without this it could then claim
  // an old chunk index against the new job, run a chunk twice and push done_ past n_chunks,
  // so the wait below would never end. The closed generation has an index no job reaches.
  const uint32_t closed_gen = gen_of(next_.load(std::memory_order_relaxed)) + 1;
  next_.store((static_cast<uint64_t>(closed_gen) << 32) | kClosedIndex, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  n_chunks_.store(n_chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  uint32_t gen;
  bool wake;
  {
    std::lock_guard lk(sleep_mu_);
    gen = closed_gen + 1;
    next_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) sleep_cv_.notify_all();
  work_chunks(gen);
  // All chunks are claimed; wait for the ones other threads are still running. Nothing is
  // waited for from workers that never woke up.
  for (uint32_t i = 1; done_.load(std::memory_order_acquire) != n_chunks; ++i) {
    cpu_relax();
    if (i % 1024 == 0) std::this_thread::yield();
  }
  if (failed_.load(std::memory_order_relaxed)) {
    std::exception_ptr e;
    {
      std::lock_guard lk(error_mu_);
      e = std::exchange(error_, nullptr);
    }
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(e);
  }
}

}  // namespace spw::cpu
