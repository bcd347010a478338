#include "engine/cpu/compute_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"

namespace spw::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// Independent chains per loop: enough to cover the FMA / VPDPBUSD latency (4-5 cycles) on two
// pipes, few enough to stay in registers (16 ymm at avx2).
constexpr int kChains = 10;

// One loop body: `iters` rounds of kChains operations; returns the operations done (FLOP or
// int8 ops, 2 per multiply-add) and a value that keeps the work from being optimised away.
struct Work {
  double ops;
  double sink;
};

#if defined(__x86_64__)
__attribute__((target("avx512f"), noinline)) Work fma_avx512(int64_t iters) {
  __m512 a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) a[c] = _mm512_fmadd_ps(a[c], m, b);
  }
  alignas(64) float v[16];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(v, a[c]);
    for (float x : v) s += x;
  }
  return {static_cast<double>(iters) * kChains * 16 * 2, s};
}

__attribute__((target("avx2,fma"), noinline)) Work fma_avx2(int64_t iters) {
  __m256 a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) a[c] = _mm256_fmadd_ps(a[c], m, b);
  }
  alignas(32) float v[8];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(v, a[c]);
    for (float x : v) s += x;
  }
  return {static_cast<double>(iters) * kChains * 8 * 2, s};
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) Work dot_avx512(int64_t iters) {
  __m512i a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = _mm512_set1_epi32(c);
  __m512i u = _mm512_set1_epi8(3);
  const __m512i s8 = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    // An operand the compiler cannot see through: otherwise it folds the constant products
    // into one vector add per chain.
    __asm__ volatile("" : "+v"(u));
    for (int c = 0; c < kChains; ++c) a[c] = _mm512_dpbusd_epi32(a[c], u, s8);
  }
  alignas(64) int32_t v[16];
  int64_t s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_si512(v, a[c]);
    for (int32_t x : v) s += x;
  }
  return {static_cast<double>(iters) * kChains * 64 * 2, static_cast<double>(s)};
}

__attribute__((target("avx2"), noinline)) Work dot_avx2(int64_t iters) {
  __m256i a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = _mm256_set1_epi32(c);
  __m256i u = _mm256_set1_epi8(3);
  const __m256i s8 = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
    // The products would be loop-invariant: an operand the compiler cannot see through keeps
    // them in the loop.
    __asm__ volatile("" : "+x"(u));
    for (int c = 0; c < kChains; ++c) {
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s8), one);
      a[c] = _mm256_add_epi32(a[c], p);
    }
  }
  alignas(32) int32_t v[8];
  int64_t s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(v), a[c]);
    for (int32_t x : v) s += x;
  }
  return {static_cast<double>(iters) * kChains * 32 * 2, static_cast<double>(s)};
}
#endif

__attribute__((noinline)) Work fma_scalar(int64_t iters) {
  float a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = 0.001f * static_cast<float>(c);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) a[c] = a[c] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (float x : a) s += x;
  return {static_cast<double>(iters) * kChains * 2, s};
}

__attribute__((noinline)) Work dot_scalar(int64_t iters) {
  int32_t a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = c;
  volatile int8_t vu = 3, vs = -2;
  const int32_t u = vu, s8 = vs;
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) {
      a[c] += u * (s8 + c);
      // Opaque to the optimizer: without it GCC sums the loop in closed form, and the probe
      // reported some 1e18 GOP/s at the scalar level.
      __asm__("" : "+r"(a[c]));
    }
  }
  int64_t s = 0;
  for (int32_t x : a) s += x;
  return {static_cast<double>(iters) * kChains * 2, static_cast<double>(s)};
}

using WorkFn = Work (*)(int64_t);

// Best of 3 of all threads running fn together; ops per second.
double run_probe(WorkFn fn, int n_threads, double seconds) {
  const int n = std::max(1, n_threads);
  // Calibrate one thread's iteration count to about `seconds`.
  int64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = Clock::now();
    fn(iters);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt >= seconds / 4 || iters >= (int64_t{1} << 40)) {
      iters = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(iters) * seconds / std::max(dt, 1e-9)));
      break;
    }
    iters *= 4;
  }
  ThreadPool pool(n);
  std::vector<Work> done(static_cast<size_t>(n));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) done[static_cast<size_t>(k)] = fn(iters);
    });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    double ops = 0;
    for (const Work& w : done) ops += w.ops + (w.sink == 12345.678 ? 1 : 0);
    best = std::max(best, ops / dt);
  }
  return best;
}

}  // namespace

double probe_fp32_gflops_per_s(int n_threads, double seconds) {
  WorkFn fn = &fma_scalar;
#if defined(__x86_64__)
  if (simd_level() == SimdLevel::Avx512) fn = &fma_avx512;
  if (simd_level() == SimdLevel::Avx2) fn = &fma_avx2;
#endif
  return run_probe(fn, n_threads, seconds) / 1e9;
}

double probe_int8_gops_per_s(int n_threads, double seconds) {
  WorkFn fn = &dot_scalar;
#if defined(__x86_64__)
  if (simd_level() == SimdLevel::Avx512) fn = &dot_avx512;
  if (simd_level() == SimdLevel::Avx2) fn = &dot_avx2;
#endif
  return run_probe(fn, n_threads, seconds) / 1e9;
}

}  // namespace spw::cpu
