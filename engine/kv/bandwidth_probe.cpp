#include "engine/kv/bandwidth_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"

namespace spw::kv {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Eight-float vectors (GCC/Clang vector extension): one AVX register where the target has it,
// two SSE or NEON registers elsewhere. Four independent accumulators hide the add latency.
// The same body is compiled twice, for the baseline target and for AVX2. Precondition: n is a
// multiple of 32.
typedef float v8f __attribute__((vector_size(32)));

#define SPW_SUM_BODY                         \
  v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};    \
  for (int64_t i = 0; i < n; i += 32) {      \
    v8f x0, x1, x2, x3;                      \
    std::memcpy(&x0, p + i, sizeof x0);      \
    std::memcpy(&x1, p + i + 8, sizeof x1);  \
    std::memcpy(&x2, p + i + 16, sizeof x2); \
    std::memcpy(&x3, p + i + 24, sizeof x3); \
    a0 += x0;                                \
    a1 += x1;                                \
    a2 += x2;                                \
    a3 += x3;                                \
  }                                          \
  const v8f a = (a0 + a1) + (a2 + a3);       \
  float s = 0;                               \
  for (int k = 0; k < 8; ++k) s += a[k];     \
  return s;

__attribute__((noinline)) float sum_floats_generic(const float* p, int64_t n) { SPW_SUM_BODY }

#if defined(__x86_64__) || defined(__i386__)
__attribute__((noinline, target("avx2"))) float sum_floats_avx2(const float* p, int64_t n) {
  SPW_SUM_BODY
}
#endif

#undef SPW_SUM_BODY

float sum_floats(const float* p, int64_t n, bool avx2) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return sum_floats_avx2(p, n);
#endif
  (void)avx2;
  return sum_floats_generic(p, n);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

double probe_ram_read_gb_per_s(int n_threads, int64_t bytes) {
  constexpr int64_t kBlock = int64_t{1} << 16;  // floats per work item (256 KiB)
  const int64_t n_blocks = std::max<int64_t>(1, bytes / (kBlock * 4));
  const int64_t n_floats = n_blocks * kBlock;
  const int64_t n_bytes = n_floats * 4;
  std::unique_ptr<float[]> buf(new float[n_floats]);
  cpu::ThreadPool pool(std::max(1, n_threads));
  pool.parallel_for(n_blocks, [&](int64_t b, int64_t e) {
    for (int64_t i = b * kBlock; i < e * kBlock; ++i) buf[i] = static_cast<float>(i & 1023);
  });
  const bool avx2 =
      cpu::simd_level() == cpu::SimdLevel::Avx2 || cpu::simd_level() == cpu::SimdLevel::Avx512;
  std::vector<float> partial(static_cast<size_t>(n_blocks));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(n_blocks, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) partial[k] = sum_floats(&buf[k * kBlock], kBlock, avx2);
    });
    const double dt = seconds_since(t0);
    float total = 0;
    for (float x : partial) total += x;
    if (!(total > 0)) return 0;
    best = std::max(best, static_cast<double>(n_bytes) / dt / 1e9);
  }
  return best;
}

Expected<DiskProbe> probe_disk(const std::string& dir, int64_t bytes) {
  constexpr size_t kChunk = size_t{4} << 20;
  const int64_t n_chunks =
      std::max<int64_t>(1, (bytes + kChunk - 1) / static_cast<int64_t>(kChunk));
  const auto fail = [&](int err) {
    return make_error("cannot measure the disk of {}: {}", dir, std::strerror(err));
  };
  std::string path = dir + "/.spillway-disk-probe-XXXXXX";
  Fd f{::mkstemp(path.data())};
  if (f.fd < 0) return fail(errno);
  struct Unlink {
    const std::string& p;
    ~Unlink() { ::unlink(p.c_str()); }
  } unlink_at_exit{path};

  // Bytes that no filesystem compresses or deduplicates away (a xorshift stream).
  std::vector<uint8_t> chunk(kChunk);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= kChunk; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&chunk[i], &x, 8);
  }
  DiskProbe r;
  r.bytes = n_chunks * static_cast<int64_t>(kChunk);
  auto t0 = Clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    chunk[0] = static_cast<uint8_t>(c);
    size_t done = 0;
    while (done < kChunk) {
      const ssize_t w = ::write(f.fd, chunk.data() + done, kChunk - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return fail(errno);
      done += static_cast<size_t>(w);
    }
  }
  if (::fsync(f.fd) != 0) return fail(errno);
  r.write_gb_per_s = static_cast<double>(r.bytes) / seconds_since(t0) / 1e9;

  // Clean pages only can be dropped, hence after the fsync.
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  t0 = Clock::now();
  uint64_t check = 0;
  for (int64_t off = 0; off < r.bytes;) {
    const ssize_t n = ::pread(f.fd, chunk.data(), kChunk, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno);
    if (n == 0) return fail(EIO);
    check += chunk[0];
    off += n;
  }
  r.read_gb_per_s = static_cast<double>(r.bytes) / seconds_since(t0) / 1e9;
  (void)check;
  return r;
}

}  // namespace spw::kv
