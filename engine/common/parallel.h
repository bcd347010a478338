// A minimal fork-join helper for the reference path: splits [0, n) into contiguous chunks,
// one per thread. (The fast CPU path replaces this with a persistent pool.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace spw {

/// Calls fn(begin, end) over disjoint chunks covering [0, n), on up to n_threads threads
/// (the calling thread takes the first chunk). Results must not depend on n_threads.
template <typename Fn>
void parallel_for(int64_t n, int n_threads, Fn&& fn) {
  const int64_t t = std::clamp<int64_t>(n_threads, 1, std::max<int64_t>(n, 1));
  if (t <= 1 || n < 64) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + t - 1) / t;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(t - 1));
  for (int64_t i = 1; i < t; ++i) {
    const int64_t b = i * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    workers.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (auto& w : workers) w.join();
}

}  // namespace spw
