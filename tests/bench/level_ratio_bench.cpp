// level_ratio_bench: speed of each SIMD level of the CPU dot products relative to the scalar
// level, per weight type: median time of a single-thread matvec (or matmul of --tokens rows) of an
// n_out x n_in matrix, the levels interleaved round by round so that a change in machine load
// hits them alike. Small by default (512 x 4096) so that it finishes under an emulator
// (qemu-aarch64, tests/cross/aarch64.sh), where absolute times mean little but ratios still
// compare instruction counts. --min reports the fastest round instead of the median: on a
// machine that others load, the fastest of many rounds is the one they disturbed least (two
// builds compared that way, alternated, give the ratio of their kernels). A tool, not a test.
//
//   level_ratio_bench [--types Q8_0,Q4_0,Q4_K,Q6_K,F16] [--rounds 7] [--n-out 512]
//                     [--n-in 4096] [--tokens 1] [--min]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
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

struct Options {
  std::vector<GgmlType> types = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K,
                                 GgmlType::F16};
  int rounds = 7;
  bool min = false;  // the fastest round instead of the median
  int64_t n_out = 512;
  int64_t n_in = 4096;  // a multiple of 256 (the K-quants' super-block)
  int64_t tokens = 1;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--types" && has_value) {
      o.types.clear();
      const std::string list = argv[++i];
      size_t p = 0;
      while (p <= list.size()) {
        const size_t q = std::min(list.find(',', p), list.size());
        const std::string name = list.substr(p, q - p);
        p = q + 1;
        if (name.empty()) continue;
        bool found = false;
        for (uint32_t t = 0; t <= 30 && !found; ++t) {
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
    } else if (a == "--min") {
      o.min = true;
    } else if (a == "--rounds" && has_value) {
      o.rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--n-out" && has_value) {
      o.n_out = std::max<int64_t>(1, std::stoll(argv[++i]));
    } else if (a == "--n-in" && has_value) {
      o.n_in = std::max<int64_t>(256, std::stoll(argv[++i]) / 256 * 256);
    } else if (a == "--tokens" && has_value) {
      o.tokens = std::max<int64_t>(1, std::stoll(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: level_ratio_bench [--types Q8_0,Q4_K] [--rounds N] [--n-out N] "
                   "[--n-in N] [--tokens N] [--min]\n");
      return false;
    }
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double statistic(const std::vector<double>& v, bool min) {
  return min ? *std::min_element(v.begin(), v.end()) : median(v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 1;
  std::vector<SimdLevel> levels;
  for (SimdLevel l : kAllSimdLevels) {
    if (simd_level_supported(l)) levels.push_back(l);
  }
  std::printf(
      "level_ratio_bench: %lld x %lld, %lld token(s), 1 thread, %s of %d rounds; "
      "detected level %s\n",
      static_cast<long long>(o.n_out), static_cast<long long>(o.n_in),
      static_cast<long long>(o.tokens), o.min ? "fastest" : "median", o.rounds,
      std::string(simd_level_name(detected_simd_level())).c_str());
  std::printf("%-6s %-13s %10s %9s\n", "type", "level", o.min ? "min ms" : "median ms", "xscalar");

  ThreadPool pool(1);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> X(static_cast<size_t>(o.n_in * o.tokens)), row(static_cast<size_t>(o.n_in));
  for (auto& v : X) v = g(rng);
  std::vector<float> Y(static_cast<size_t>(o.n_out * o.tokens));
  for (GgmlType type : o.types) {
    const size_t rs = spw::row_size(type, o.n_in);
    std::vector<uint8_t> W(rs * static_cast<size_t>(o.n_out));
    for (int64_t r = 0; r < o.n_out; ++r) {
      for (auto& v : row) v = g(rng);
      spw::quantize_row(type, row.data(), W.data() + r * rs, o.n_in);
    }
    std::vector<std::vector<double>> ms(levels.size());
    for (int round = 0; round < o.rounds + 1; ++round) {  // round 0 warms up, not counted
      for (size_t li = 0; li < levels.size(); ++li) {
        set_simd_level(levels[li]);
        const auto t0 = Clock::now();
        matmul(type, W.data(), o.n_in, o.n_out, X.data(), o.tokens, Y.data(), pool);
        const double el = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (round > 0) ms[li].push_back(el);
      }
    }
    const double scalar = statistic(ms[0], o.min);  // levels[0] is Scalar
    for (size_t li = 0; li < levels.size(); ++li) {
      const double m = statistic(ms[li], o.min);
      std::printf("%-6s %-13s %10.3f %9.2f\n", spw::type_name(static_cast<uint32_t>(type)).c_str(),
                  std::string(simd_level_name(levels[li])).c_str(), m, scalar / m);
    }
    std::fflush(stdout);
  }
  set_simd_level(detected_simd_level());
  return 0;
}
