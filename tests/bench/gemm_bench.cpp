// gemm_bench: the int8 GEMM on repacked weights (engine/cpu/gemm.h) alone, for the matrix shapes
// of the 250M benchmark model, against the int8 dot-product probe. A tool, not a test.
//
//   gemm_bench [--tokens 512] [--threads 2] [--seconds 1] [--type Q8_0|Q4_K|Q5_K|Q6_K|Q4_0|Q4_1|
//              Q5_0|Q5_1|IQ4_NL|IQ4_XS|Q3_K|Q2_K] [--level scalar|avx2|avx512] [--matmul|--pack]
//
// --level runs another SIMD level than the CPU's best (types other than Q8_0 and Q4_K are
// packed only where the level has their tiles: elsewhere the portable tile runs); --matmul times
// quant_dot.h's matmul of the file's blocks (the path of a matrix that is not repacked) instead of
// the GEMM; --pack times the repack itself (pack_matrix: fresh memory each time, as at a
// matrix's first use) and prints GB/s of the file's bytes.
//
// GOP/s counts 2 x n_in x n_out x tokens (one multiply-add = 2 operations), as the probe and
// `bench`'s pp_gflops_per_s do; the activations' quantization is inside the timed call.
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/compute_probe.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf/ggml_types.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace spw::cpu;

// 64-byte aligned storage (pack_matrix_into's destination).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const {
    return true;
  }
};

struct Shape {
  const char* name;
  int64_t n_in, n_out;
};

}  // namespace

int main(int argc, char** argv) {
  // The types with a repacked layout (at some SIMD level).
  const std::string kTypes = "|Q8_0|Q4_K|Q5_K|Q6_K|Q4_0|Q4_1|Q5_0|Q5_1|IQ4_NL|IQ4_XS|Q3_K|Q2_K|";
  int64_t tokens = 512;
  int threads = 2;
  double seconds = 1.0;
  spw::GgmlType type = spw::GgmlType::Q8_0;
  bool use_matmul = false, time_pack = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gemm_bench [--tokens N] [--threads N] [--seconds S] [--type %s] "
          "[--level scalar|avx2|avx512] [--matmul|--pack]\n",
          kTypes.substr(1, kTypes.size() - 2).c_str());
      return 0;
    }
    if (a == "--matmul" || a == "--pack") {
      (a == "--pack" ? time_pack : use_matmul) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) break;
    std::string v = argv[i + 1];
    if (a == "--type") {  // q6_k as Q6_K
      for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    if (a == "--level" && (v == "scalar" || v == "avx2" || v == "avx512")) {
      const SimdLevel level = v == "scalar" ? SimdLevel::Scalar
                              : v == "avx2" ? SimdLevel::Avx2
                                            : SimdLevel::Avx512;
      if (!set_simd_level(level)) {
        std::fprintf(stderr, "gemm_bench: level %s does not run here\n", v.c_str());
        return 2;
      }
    } else if (a == "--tokens") {
      tokens = std::stoll(v);
    } else if (a == "--threads") {
      threads = std::stoi(v);
    } else if (a == "--seconds") {
      seconds = std::stod(v);
    } else if (a == "--type" && kTypes.find("|" + v + "|") != std::string::npos) {
      for (uint32_t t = 0; t < 64; ++t) {
        if (spw::type_name(t) == v) type = static_cast<spw::GgmlType>(t);
      }
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--tokens N] [--threads N] [--seconds S] "
                   "[--type %s] [--level scalar|avx2|avx512] [--matmul|--pack]\n",
                   kTypes.substr(1, kTypes.size() - 2).c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  const Shape shapes[] = {{"attn_q/attn_output 1024x1024", 1024, 1024},
                          {"attn_k/attn_v 1024x256", 1024, 256},
                          {"ffn_gate/ffn_up 1024x2816", 1024, 2816},
                          {"ffn_down 2816x1024", 2816, 1024}};
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  double total_ops = 0.0, total_s = 0.0, pack_bytes = 0.0, pack_s = 0.0, pack_warm_s = 0.0;
  for (const Shape& s : shapes) {
    const size_t rs = spw::row_size(type, s.n_in);
    std::vector<uint8_t> w(rs * s.n_out);
    std::vector<float> row(s.n_in);
    for (int64_t r = 0; r < s.n_out; ++r) {
      for (auto& v : row) v = g(rng);
      spw::quantize_row(type, row.data(), w.data() + r * rs, s.n_in);
    }
    if (time_pack) {
      // Into fresh memory (as pack_matrix allocates at a matrix's first use: page faults and
      // the kernel's zeroing included) and into memory already touched (the repack alone).
      std::vector<uint8_t, Aligned64<uint8_t>> warm(packed_size(type, s.n_in, s.n_out));
      std::memset(warm.data(), 0, warm.size());
      double mean[2], best[2];
      for (int fresh = 0; fresh < 2; ++fresh) {
        int reps = 0;
        double el = 0.0;
        best[fresh] = 1e30;
        do {
          const auto a = Clock::now();
          if (fresh == 1) {
            const PackedMatrix q = pack_matrix(type, w.data(), s.n_in, s.n_out, pool);
          } else {
            pack_matrix_into(warm.data(), type, w.data(), s.n_in, s.n_out, pool);
          }
          const double d = std::chrono::duration<double>(Clock::now() - a).count();
          best[fresh] = std::min(best[fresh], d);
          el += d;
          ++reps;
        } while (el < seconds / 2 || reps < 3);
        mean[fresh] = el / reps;
      }
      const double bytes = static_cast<double>(w.size());
      pack_bytes += bytes;
      pack_s += mean[1];
      pack_warm_s += mean[0];
      std::printf("%-30s pack %6.2f GB/s (best %6.2f); into touched memory %6.2f (best %6.2f)\n",
                  s.name, bytes / mean[1] / 1e9, bytes / best[1] / 1e9, bytes / mean[0] / 1e9,
                  bytes / best[0] / 1e9);
      continue;
    }
    const PackedMatrix p = pack_matrix(type, w.data(), s.n_in, s.n_out, pool);
    std::vector<float> X(static_cast<size_t>(s.n_in * tokens)),
        Y(static_cast<size_t>(s.n_out * tokens));
    for (auto& v : X) v = g(rng);
    const auto product = [&] {
      if (use_matmul) {
        matmul(type, w.data(), s.n_in, s.n_out, X.data(), tokens, Y.data(), pool);
      } else {
        gemm(p, X.data(), tokens, Y.data(), pool);
      }
    };
    product();  // warm up
    int reps = 0;
    double best = 1e30;
    const auto t0 = Clock::now();
    double el = 0.0;
    do {
      const auto a = Clock::now();
      product();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - a).count());
      ++reps;
      el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < seconds || reps < 3);
    const double ops = 2.0 * static_cast<double>(s.n_in * s.n_out * tokens);
    total_ops += ops;
    total_s += el / reps;
    std::printf("%-30s mean %8.3f ms  best %8.3f ms  %7.1f GOP/s (best %7.1f)\n", s.name,
                el / reps * 1e3, best * 1e3, ops / (el / reps) / 1e9, ops / best / 1e9);
  }
  if (time_pack) {
    std::printf("pack, %s: all shapes %6.2f GB/s of the file's bytes; into touched memory %6.2f\n",
                std::string(simd_level_name(simd_level())).c_str(), pack_bytes / pack_s / 1e9,
                pack_bytes / pack_warm_s / 1e9);
    return 0;
  }
  std::printf("%s, %s, %s\n", use_matmul ? "matmul (not repacked)" : "gemm",
              std::string(simd_level_name(simd_level())).c_str(),
              gemm_packable(type) ? "packable at this level" : "not packable at this level");
  const double probe = probe_int8_gops_per_s(threads, 0.2);
  std::printf("all shapes %7.1f GOP/s; int8 probe %7.1f GOP/s: %.0f %%\n",
              total_ops / total_s / 1e9, probe, 100.0 * total_ops / total_s / 1e9 / probe);
  return 0;
}
