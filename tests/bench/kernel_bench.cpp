// kernel_bench: throughput of the CPU matrix kernels (engine/cpu) for a 4096 x 4096
// matrix of each weight type, per SIMD level and thread count. A tool, not a test.
//
//   kernel_bench [--types Q4_K,Q8_0,...] [--threads 1,2] [--seconds 0.3] [--no-scalar]
//                [--no-matmul] [--tokens 64]
//
// matvec "hot": one matrix, repeated (it stays in the last-level cache when it fits there);
// matvec "stream": a rotation of copies totalling >= 256 MB, so every call reads DRAM, as a
// decode step does. GB/s counts weight bytes only. matmul: n_tokens rows at once (prefill),
// in GFLOP/s (2 n_in n_out n_tokens) and rows x tokens per second. "read" is a plain
// multi-threaded read of a 256 MB buffer: the bandwidth the stream figures should approach.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf/ggml_types.h"

namespace {

using spw::GgmlType;
using namespace spw::cpu;
using Clock = std::chrono::steady_clock;

constexpr int64_t kN = 4096;
constexpr size_t kStreamBytes = size_t{256} << 20;

struct Options {
  std::vector<GgmlType> types = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,  GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,  GgmlType::Q5_1,
                                 GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,  GgmlType::Q2_K,
                                 GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};
  std::vector<int> threads = {1, 2};
  double seconds = 0.3;
  bool scalar = true;
  bool matmul = true;
  int64_t tokens = 64;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--types" && has_value) {
      o.types.clear();
      for (const auto& name : split(argv[++i])) {
        bool found = false;
        for (uint32_t t = 0; t <= 30; ++t) {
          if (spw::type_name(t) == name && spw::is_supported_type(static_cast<GgmlType>(t))) {
            o.types.push_back(static_cast<GgmlType>(t));
            found = true;
          }
        }
        if (!found) {
          std::fprintf(stderr, "unknown or unsupported type '%s'\n", name.c_str());
          return false;
        }
      }
    } else if (a == "--threads" && has_value) {
      o.threads.clear();
      for (const auto& t : split(argv[++i])) o.threads.push_back(std::max(1, std::stoi(t)));
    } else if (a == "--seconds" && has_value) {
      o.seconds = std::stod(argv[++i]);
    } else if (a == "--tokens" && has_value) {
      o.tokens = std::max<int64_t>(2, std::stoll(argv[++i]));
    } else if (a == "--no-scalar") {
      o.scalar = false;
    } else if (a == "--no-matmul") {
      o.matmul = false;
    } else {
      std::fprintf(stderr,
                   "usage: kernel_bench [--types Q4_K,Q8_0] [--threads 1,2] [--seconds S] "
                   "[--tokens N] [--no-scalar] [--no-matmul]\n");
      return false;
    }
  }
  return true;
}

// Seconds per call of fn, averaged over as many calls as fit in `seconds` (at least 3).
template <typename Fn>
double time_per_call(double seconds, Fn&& fn) {
  fn();  // warm up: page faults, pool wake-up
  int reps = 0;
  const auto t0 = Clock::now();
  double el = 0.0;
  do {
    fn();
    ++reps;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < seconds || reps < 3);
  return el / reps;
}

std::vector<uint8_t> make_weights(GgmlType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t rs = spw::row_size(type, kN);
  std::vector<uint8_t> w(rs * kN);
  std::vector<float> row(kN);
  for (int64_t r = 0; r < kN; ++r) {
    for (auto& v : row) v = g(rng);
    spw::quantize_row(type, row.data(), w.data() + r * rs, kN);
  }
  return w;
}

double read_bandwidth(ThreadPool& pool, double seconds) {
  static std::vector<uint64_t> buf(kStreamBytes / 8, 1);
  const int64_t n_parts = pool.size() * 16;
  std::vector<uint64_t> sums(static_cast<size_t>(n_parts) * 8, 0);  // 64 B apart: no sharing
  const double t = time_per_call(seconds, [&] {
    pool.parallel_for(n_parts, [&](int64_t b, int64_t e) {
      const int64_t per = static_cast<int64_t>(buf.size()) / n_parts;
      for (int64_t part = b; part < e; ++part) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t i = part * per; i < (part + 1) * per; i += 4) {
          s0 += buf[i];
          s1 += buf[i + 1];
          s2 += buf[i + 2];
          s3 += buf[i + 3];
        }
        sums[static_cast<size_t>(part) * 8] += s0 + s1 + s2 + s3;
      }
    });
  });
  uint64_t check = 0;
  for (uint64_t v : sums) check += v;
  if (check == 0) std::printf("(empty read)\n");  // keeps the reads observable
  return static_cast<double>(kStreamBytes) / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 1;

  std::vector<SimdLevel> lv;
  for (SimdLevel l : kAllSimdLevels) {
    if (simd_level_supported(l) && (o.scalar || l != SimdLevel::Scalar)) lv.push_back(l);
  }
  std::printf("kernel_bench: %lld x %lld, detected SIMD level %s\n", static_cast<long long>(kN),
              static_cast<long long>(kN),
              std::string(simd_level_name(detected_simd_level())).c_str());

  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : o.threads) pools.push_back(std::make_unique<ThreadPool>(t));
  for (size_t p = 0; p < pools.size(); ++p) {
    std::printf("read %d thread(s): %.1f GB/s\n", o.threads[p],
                read_bandwidth(*pools[p], o.seconds));
  }
  std::printf("\n%-5s %8s %-6s %3s | %9s %7s %7s | %9s %7s %7s", "type", "MB", "level", "thr",
              "hot ms", "GB/s", "xscalar", "stream ms", "GB/s", "xscalar");
  if (o.matmul) std::printf(" | %5s %9s %8s %8s", "tok", "matmul ms", "GFLOP/s", "tok/s");
  std::printf("\n");

  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(kN), X(static_cast<size_t>(kN * o.tokens)), y(kN),
      Y(static_cast<size_t>(kN * o.tokens));
  for (auto& v : x) v = g(rng);
  for (auto& v : X) v = g(rng);

  for (GgmlType type : o.types) {
    const std::vector<uint8_t> w = make_weights(type, 7);
    const size_t bytes = w.size();
    const size_t n_copies = std::max<size_t>(2, (kStreamBytes + bytes - 1) / bytes);
    std::vector<std::vector<uint8_t>> copies(n_copies, w);
    for (size_t p = 0; p < pools.size(); ++p) {
      ThreadPool& pool = *pools[p];
      double scalar_hot = 0.0, scalar_stream = 0.0;
      for (SimdLevel level : lv) {
        set_simd_level(level);
        const double hot = time_per_call(
            o.seconds, [&] { matvec(type, w.data(), kN, kN, x.data(), y.data(), pool); });
        size_t c = 0;
        const double stream = time_per_call(o.seconds, [&] {
          matvec(type, copies[c].data(), kN, kN, x.data(), y.data(), pool);
          c = (c + 1) % n_copies;
        });
        if (level == SimdLevel::Scalar) scalar_hot = hot, scalar_stream = stream;
        const double hot_gbs = static_cast<double>(bytes) / hot / 1e9;
        const double str_gbs = static_cast<double>(bytes) / stream / 1e9;
        std::printf("%-5s %8.1f %-6s %3d | %9.3f %7.2f %7.2f | %9.3f %7.2f %7.2f",
                    spw::type_name(static_cast<uint32_t>(type)).c_str(), bytes / 1048576.0,
                    std::string(simd_level_name(level)).c_str(), o.threads[p], hot * 1e3, hot_gbs,
                    scalar_hot > 0 ? scalar_hot / hot : 0.0, stream * 1e3, str_gbs,
                    scalar_stream > 0 ? scalar_stream / stream : 0.0);
        if (o.matmul && level != SimdLevel::Scalar) {
          const double mm = time_per_call(o.seconds, [&] {
            matmul(type, w.data(), kN, kN, X.data(), o.tokens, Y.data(), pool);
          });
          const double flops = 2.0 * kN * kN * static_cast<double>(o.tokens);
          std::printf(" | %5lld %9.2f %8.1f %8.1f", static_cast<long long>(o.tokens), mm * 1e3,
                      flops / mm / 1e9, static_cast<double>(o.tokens) / mm);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  set_simd_level(detected_simd_level());
  return 0;
}
