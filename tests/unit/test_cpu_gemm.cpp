// Tests of the int8 GEMM on repacked weights (engine/cpu/gemm.h): against float64 on the same
// activation codes, against the existing matvec (quant_dot.h) row by row and against float64, over
// odd shapes and tails (rows not a multiple of the 16-row group, token counts not a multiple of the
// tile, 1-token decode), bit-identical across the SIMD levels this CPU has (each forced by
// set_simd_level), across token counts and thread counts; the per-model cache of repacked matrices.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/packed_weights.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf/ggml_types.h"
#include "engine/model/model.h"
#include "tests/support/simd_levels.h"
#include "tests/support/test_model.h"

namespace spw::cpu {
namespace {

std::vector<float> gaussian(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Rows of random block bytes (every code, Q8_0's -128, every Q4_K scale and min pattern, every
// Q6_K code and int8 scale) with sane binary16 scales (d, and Q4_K's dmin).
std::vector<uint8_t> random_matrix(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.001f, 0.02f);
  std::vector<uint8_t> bytes(row_size(type, n_in) * static_cast<size_t>(n_out));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const size_t bsz = row_size(type, type_traits(static_cast<uint32_t>(type))->block_size);
  const size_t d_at = type == GgmlType::Q6_K   ? offsetof(BlockQ6_K, d)
                      : type == GgmlType::Q3_K ? offsetof(BlockQ3_K, d)
                      : type == GgmlType::Q2_K ? offsetof(BlockQ2_K, d)
                                               : 0;
  // A second binary16 after d: Q2_K's, Q4_K's and Q5_K's dmin, Q4_1's and Q5_1's m (either sign).
  const bool second = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q2_K ||
                      type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
  for (size_t off = 0; off < bytes.size(); off += bsz) {
    const uint16_t h = fp32_to_fp16(d(rng));
    const float m = d(rng);
    const uint16_t hm = fp32_to_fp16(
        type == GgmlType::Q4_1 || type == GgmlType::Q5_1 ? (rng() % 2 != 0 ? -8 * m : 4 * m) : m);
    std::memcpy(bytes.data() + off + d_at, &h, 2);
    if (second) std::memcpy(bytes.data() + off + d_at + 2, &hm, 2);
  }
  return bytes;
}

// Writes `spec` into the test's temporary folder as `name` and loads it (null on failure, with the
// reason as a test failure).
std::unique_ptr<Model> write_and_load(const TestModelSpec& spec, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  EXPECT_TRUE(write_test_model(spec, path).ok());
  auto m = Model::load(path);
  EXPECT_TRUE(m) << m.error().message;
  return m ? std::move(*m) : nullptr;
}

struct Case {
  GgmlType type;
  int64_t n_in, n_out, n_tokens;
};

// Odd shapes: rows below, at and past a group; tokens below, at and past a tile and the
// 64-token block; 1-token decode; row lengths of 1 block up to 88 (n_ff 2816).
// The K-quants: 1 to 11 super-blocks.
constexpr GgmlType Q8 = GgmlType::Q8_0, Q4K = GgmlType::Q4_K, Q5K = GgmlType::Q5_K,
                   Q6K = GgmlType::Q6_K, Q40 = GgmlType::Q4_0, Q41 = GgmlType::Q4_1,
                   Q50 = GgmlType::Q5_0, Q51 = GgmlType::Q5_1, IQ4NL = GgmlType::IQ4_NL,
                   IQ4XS = GgmlType::IQ4_XS, Q3K = GgmlType::Q3_K, Q2K = GgmlType::Q2_K;
// The types whose GEMM takes the matvec's BlockQ8A codes (gemm.h).
bool b32_type(GgmlType t) {
  return t == Q40 || t == Q41 || t == Q50 || t == Q51 || t == IQ4NL || t == IQ4XS;
}
const Case kCases[] = {
    {Q8, 32, 1, 1},        {Q8, 32, 15, 3},      {Q8, 96, 16, 8},     {Q8, 224, 17, 9},
    {Q8, 224, 33, 13},     {Q8, 1024, 50, 1},    {Q8, 1024, 64, 67},  {Q8, 2816, 31, 5},
    {Q8, 256, 200, 130},   {Q4K, 256, 1, 1},     {Q4K, 256, 15, 3},   {Q4K, 512, 17, 5},
    {Q4K, 1024, 33, 9},    {Q4K, 2816, 16, 4},   {Q4K, 768, 70, 67},  {Q5K, 256, 1, 1},
    {Q5K, 512, 17, 9},     {Q5K, 1024, 33, 13},  {Q5K, 2816, 16, 3},  {Q5K, 768, 70, 67},
    {Q6K, 256, 1, 1},      {Q6K, 256, 15, 3},    {Q6K, 512, 17, 9},   {Q6K, 1024, 33, 13},
    {Q6K, 2816, 16, 8},    {Q6K, 768, 70, 67},   {Q40, 32, 1, 1},     {Q40, 96, 17, 9},
    {Q40, 1024, 33, 13},   {Q40, 2816, 16, 3},   {Q41, 32, 15, 2},    {Q41, 224, 33, 67},
    {Q41, 1024, 16, 8},    {Q50, 32, 1, 1},      {Q50, 224, 17, 9},   {Q50, 2816, 33, 13},
    {Q51, 64, 15, 3},      {Q51, 1024, 70, 67},  {IQ4NL, 32, 1, 1},   {IQ4NL, 224, 17, 9},
    {IQ4NL, 1024, 33, 67}, {IQ4XS, 256, 1, 1},   {IQ4XS, 512, 17, 9}, {IQ4XS, 1024, 33, 13},
    {IQ4XS, 2816, 16, 3},  {IQ4XS, 768, 70, 67}, {Q3K, 256, 1, 1},    {Q3K, 512, 17, 9},
    {Q3K, 1024, 33, 13},   {Q3K, 2816, 16, 3},   {Q3K, 768, 70, 67},  {Q2K, 256, 1, 1},
    {Q2K, 512, 17, 9},     {Q2K, 1024, 33, 13},  {Q2K, 2816, 16, 3},  {Q2K, 768, 70, 67}};

// Per element: sum_i |w_i x_i| with dequantized weights and unquantized activations.
double abs_dot(const std::vector<float>& wd, const float* x, int64_t n_in, int64_t r) {
  double a = 0;
  for (int64_t i = 0; i < n_in; ++i) a += std::fabs(static_cast<double>(wd[r * n_in + i]) * x[i]);
  return a;
}

// The GEMM's activations, dequantized: BlockQ8A for Q8_0 and Q6_K (a scale per 32 elements),
// BlockQ8K256 for Q4_K (one per 256): d = max |x| / 127, q = x * (1 / d) rounded to nearest even.
std::vector<double> gemm_activations(GgmlType type, const float* x, int64_t n) {
  const int64_t bs = type == Q4K ? 256 : 32;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / bs; ++b) {
    float amax = 0.0f;
    for (int64_t i = 0; i < bs; ++i) amax = std::max(amax, std::fabs(x[b * bs + i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < bs; ++i) {
      const float q = x[b * bs + i] * id;
      v[static_cast<size_t>(b * bs + i)] = static_cast<double>(d) * std::nearbyint(q);
    }
  }
  return v;
}

TEST(CpuGemm, RowsMatchTheirCodesInFloat64AndMatvecAtEveryLevel) {
  ThreadPool pool(1);
  for (const Case& c : kCases) {
    const std::vector<uint8_t> W =
        random_matrix(c.type, c.n_in, c.n_out, static_cast<uint32_t>(c.n_out));
    std::vector<float> wd(static_cast<size_t>(c.n_in * c.n_out));
    const size_t rs = row_size(c.type, c.n_in);
    for (int64_t r = 0; r < c.n_out; ++r)
      dequantize_row(c.type, W.data() + r * rs, wd.data() + r * c.n_in, c.n_in);
    std::mt19937 rng(static_cast<uint32_t>(c.n_in + c.n_tokens));
    const std::vector<float> X = gaussian(rng, c.n_tokens * c.n_in);
    const PackedMatrix P = pack_matrix(c.type, W.data(), c.n_in, c.n_out, pool);
    EXPECT_EQ(P.n_groups, (c.n_out + 15) / 16);
    std::vector<float> first;
    for (SimdLevel level : test::supported_simd_levels()) {
      test::SimdLevelScope scope(level);
      SCOPED_TRACE(type_name(static_cast<uint32_t>(c.type)) + " " +
                   std::string(simd_level_name(level)) + " n_in=" + std::to_string(c.n_in) +
                   " n_out=" + std::to_string(c.n_out) + " n_tokens=" + std::to_string(c.n_tokens));
      std::vector<float> Y(static_cast<size_t>(c.n_tokens * c.n_out), NAN);
      gemm(P, X.data(), c.n_tokens, Y.data(), pool);
      std::vector<float> y(static_cast<size_t>(c.n_out));
      double num = 0, den = 0;
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        const float* xt = X.data() + t * c.n_in;
        const std::vector<double> xq = gemm_activations(c.type, xt, c.n_in);
        matvec(c.type, W.data(), c.n_in, c.n_out, xt, y.data(), pool);
        for (int64_t r = 0; r < c.n_out; ++r) {
          const double got = Y[static_cast<size_t>(t * c.n_out + r)];
          ASSERT_TRUE(std::isfinite(got)) << "token " << t << " row " << r;
          double want = 0;
          for (int64_t i = 0; i < c.n_in; ++i)
            want += wd[r * c.n_in + i] * xq[static_cast<size_t>(i)];
          const double abs = abs_dot(wd, xt, c.n_in, r);
          // The same codes and scales in float64, other float summation order (gemm.h):
          // <= 1e-6 of sum |w x|.
          ASSERT_LE(std::fabs(got - want) / abs, 1e-6) << "token " << t << " row " << r;
          const double mv = y[static_cast<size_t>(r)];
          if (c.type == Q8 || b32_type(c.type)) {  // matvec takes the same BlockQ8A codes
            ASSERT_LE(std::fabs(got - mv) / abs, 1e-6)
                << "token " << t << " row " << r << ": gemm " << got << " matvec " << mv;
          }
          num += (got - mv) * (got - mv);
          den += mv * mv;
        }
      }
      // Q4_K's matvec rounds the activations with a scale per 32 elements (BlockQ8K), its GEMM
      // with one per 256: the two differ by that rounding, measured NMSE <= 1.2e-4. Q5_K's and
      // Q6_K's GEMM take a scale per 32 consecutive elements (BlockQ8A), their matvec per 32
      // strided ones (kernels.h): measured 1.6e-5 to 6.8e-5. Q8_0's and the 32-element block
      // types' by float rounding only.
      EXPECT_LE(num / den, c.type == Q8 || b32_type(c.type) ? 1e-11
                           : c.type == Q4K                  ? 4e-4
                                                            : 1.5e-4);
      // Every level runs the same float steps: bit-identical to the first level's result.
      if (first.empty()) {
        first = Y;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), Y.data(), Y.size() * sizeof(float)));
      }
    }
  }
}

// Every level packs the same bytes (the AVX-512 packers of Q6_K, Q3_K and Q2_K against the
// portable ones), and writes every byte of the record: the destination filled with two different
// patterns beforehand gives the same result.
TEST(CpuGemm, EveryLevelPacksTheSameBytes) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(type_name(static_cast<uint32_t>(c.type)) + " n_in=" + std::to_string(c.n_in) +
                 " n_out=" + std::to_string(c.n_out));
    const std::vector<uint8_t> W =
        random_matrix(c.type, c.n_in, c.n_out, static_cast<uint32_t>(c.n_in * 7 + c.n_out));
    const size_t n = packed_size(c.type, c.n_in, c.n_out);
    std::vector<uint8_t> first;
    for (SimdLevel level : test::supported_simd_levels()) {
      test::SimdLevelScope scope(level);
      SCOPED_TRACE(std::string(simd_level_name(level)));
      for (const uint8_t fill : {uint8_t{0xAA}, uint8_t{0x55}}) {
        void* mem = nullptr;
        ASSERT_EQ(0, posix_memalign(&mem, 64, n));
        std::unique_ptr<void, decltype(&std::free)> owner(mem, &std::free);
        std::memset(mem, fill, n);
        const PackedMatrix P =
            pack_matrix_into(static_cast<uint8_t*>(mem), c.type, W.data(), c.n_in, c.n_out, pool);
        ASSERT_EQ(P.bytes.get(), mem);
        ASSERT_LE(P.size_bytes(), n);
        const std::vector<uint8_t> got(static_cast<const uint8_t*>(mem),
                                       static_cast<const uint8_t*>(mem) + P.size_bytes());
        if (first.empty()) {
          first = got;
        } else {
          const auto at = std::mismatch(first.begin(), first.end(), got.begin()).first;
          ASSERT_TRUE(at == first.end()) << "first difference at byte " << (at - first.begin())
                                         << " of " << first.size() << " (fill " << int{fill} << ")";
        }
      }
    }
  }
}

TEST(CpuGemm, MatchesFloat64) {
  ThreadPool pool(2);
  for (GgmlType type : {Q8, Q4K, Q5K, Q6K, Q40, Q41, Q50, Q51, IQ4NL, IQ4XS, Q3K, Q2K}) {
    SCOPED_TRACE(type_name(static_cast<uint32_t>(type)));
    const int64_t n_in = 1024, n_out = 77, n_tokens = 21;
    const std::vector<uint8_t> W = random_matrix(type, n_in, n_out, 3);
    const size_t rs = row_size(type, n_in);
    std::vector<float> wd(static_cast<size_t>(n_in * n_out));
    for (int64_t r = 0; r < n_out; ++r)
      dequantize_row(type, W.data() + r * rs, wd.data() + r * n_in, n_in);
    std::mt19937 rng(5);
    const std::vector<float> X = gaussian(rng, n_tokens * n_in);
    const PackedMatrix P = pack_matrix(type, W.data(), n_in, n_out, pool);
    std::vector<float> Y(static_cast<size_t>(n_tokens * n_out));
    gemm(P, X.data(), n_tokens, Y.data(), pool);
    double num = 0, den = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < n_out; ++r) {
        double ref = 0;
        for (int64_t i = 0; i < n_in; ++i)
          ref += static_cast<double>(wd[r * n_in + i]) * X[t * n_in + i];
        const double e = Y[t * n_out + r] - ref;
        num += e * e;
        den += ref * ref;
      }
    }
    // The activation rounding of Q8A / Q8K (quant_dot's tolerances, test_cpu_kernels.cpp).
    EXPECT_LE(num / den, type == Q4K ? 4e-4 : 2e-4);
    EXPECT_GT(den, 0.0);
  }
}

// pack_matrix hands its source back slice by slice (about 4 MiB each), in order, covering every
// byte once, and packs the same bytes as without the callback.
TEST(CpuGemm, PackingReleasesTheSourceSliceBySlice) {
  ThreadPool pool(2);
  const int64_t n_in = 1024, n_out = 4001;  // 4.35 MB of Q8_0 rows: two slices and a bit
  const std::vector<uint8_t> W = random_matrix(Q8, n_in, n_out, 12);
  std::vector<std::pair<const uint8_t*, size_t>> slices;
  const PackedMatrix a =
      pack_matrix(Q8, W.data(), n_in, n_out, pool, [&](const uint8_t* p, size_t n) {
        slices.push_back({p, n});
      });
  const PackedMatrix b = pack_matrix(Q8, W.data(), n_in, n_out, pool);
  ASSERT_EQ(a.size_bytes(), b.size_bytes());
  EXPECT_EQ(0, std::memcmp(a.bytes.get(), b.bytes.get(), a.size_bytes()));
  ASSERT_GE(slices.size(), 2u);
  const uint8_t* at = W.data();
  for (const auto& [p, n] : slices) {
    EXPECT_EQ(p, at);
    EXPECT_GT(n, 0u);
    EXPECT_LE(n, size_t{4} << 20);
    at = p + n;
  }
  EXPECT_EQ(at, W.data() + W.size());
}

TEST(CpuGemm, TokenAndThreadCountsDoNotChangeResults) {
  ThreadPool p1(1), p3(3);
  const int64_t n_in = 768, n_out = 301, n_tokens = 75;
  std::mt19937 rng(6);
  const std::vector<float> X = gaussian(rng, n_tokens * n_in);
  for (GgmlType type : {Q8, Q4K, Q5K, Q6K, Q40, Q41, Q50, Q51, IQ4NL, IQ4XS, Q3K, Q2K}) {
    const std::vector<uint8_t> W = random_matrix(type, n_in, n_out, 9);
    for (SimdLevel level : test::supported_simd_levels()) {
      test::SimdLevelScope scope(level);
      SCOPED_TRACE(type_name(static_cast<uint32_t>(type)) + " " +
                   std::string(simd_level_name(level)));
      const PackedMatrix P = pack_matrix(type, W.data(), n_in, n_out, p3);
      std::vector<float> a(static_cast<size_t>(n_tokens * n_out)), b(a.size()), one(a.size());
      gemm(P, X.data(), n_tokens, a.data(), p1);
      gemm(P, X.data(), n_tokens, b.data(), p3);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
      // Decode (one token per call) equals prefill bit for bit.
      for (int64_t t = 0; t < n_tokens; ++t)
        gemm(P, X.data() + t * n_in, 1, one.data() + t * n_out, p3);
      EXPECT_EQ(0, std::memcmp(a.data(), one.data(), a.size() * sizeof(float)));
    }
  }
}

// GemmInput::SameAsLast: a second product of the same input uses the first one's quantized
// activations (shown by changing the input behind gemm's back: the result is still that of the
// old input), gemm_forget_input() and any change of pointer, token count, row length or format
// make it quantize again, and the reused activations give exactly the fresh results.
TEST(CpuGemm, SameAsLastReusesTheQuantizedInputOnlyWhereItFits) {
  ThreadPool pool(2);
  const int64_t n_in = 512, n_tokens = 37;
  std::mt19937 rng(11);
  const std::vector<float> X1 = gaussian(rng, n_tokens * n_in), X2 = gaussian(rng, n_tokens * n_in);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    SCOPED_TRACE(std::string(simd_level_name(level)));
    const std::vector<uint8_t> Wa = random_matrix(Q8, n_in, 40, 1),
                               Wb = random_matrix(Q8, n_in, 24, 2),
                               Wk = random_matrix(Q4K, n_in, 24, 3),
                               W6 = random_matrix(Q6K, n_in, 20, 4);
    const PackedMatrix A = pack_matrix(Q8, Wa.data(), n_in, 40, pool),
                       B = pack_matrix(Q8, Wb.data(), n_in, 24, pool),
                       K = pack_matrix(Q4K, Wk.data(), n_in, 24, pool),
                       K6 = pack_matrix(Q6K, W6.data(), n_in, 20, pool);
    const auto fresh = [&](const PackedMatrix& P, const std::vector<float>& X, int64_t n) {
      std::vector<float> Y(static_cast<size_t>(n * P.n_out));
      gemm(P, X.data(), n, Y.data(), pool);
      return Y;
    };
    const std::vector<float> b1 = fresh(B, X1, n_tokens), b2 = fresh(B, X2, n_tokens),
                             k2 = fresh(K, X2, n_tokens), b2_short = fresh(B, X2, 20),
                             q6_2 = fresh(K6, X2, n_tokens);
    std::vector<float> buf = X1, ya(static_cast<size_t>(n_tokens * 40)), yb(b1.size());
    gemm(A, buf.data(), n_tokens, ya.data(), pool);
    gemm(B, buf.data(), n_tokens, yb.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(yb.data(), b1.data(), b1.size() * sizeof(float)));
    // The input changes without telling gemm: the kept activations are X1's (the reuse happened).
    buf = X2;
    gemm(B, buf.data(), n_tokens, yb.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(yb.data(), b1.data(), b1.size() * sizeof(float)));
    // Told, it quantizes X2.
    gemm_forget_input();
    gemm(B, buf.data(), n_tokens, yb.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(yb.data(), b2.data(), b2.size() * sizeof(float)));
    // Another format (Q4_K's 256-element activations) or token count: quantized anew.
    std::vector<float> yk(k2.size());
    gemm(K, buf.data(), n_tokens, yk.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(yk.data(), k2.data(), k2.size() * sizeof(float)));
    std::vector<float> ys(b2_short.size());
    gemm(B, buf.data(), 20, ys.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(ys.data(), b2_short.data(), ys.size() * sizeof(float)));
    // Q6_K reads the activations Q8_0 reads (BlockQ8A and the same packed tiles): after B's
    // product of X2 it takes them, although the input changed behind its back.
    gemm(B, buf.data(), n_tokens, yb.data(), pool);
    buf = X1;
    std::vector<float> y6(q6_2.size());
    gemm(K6, buf.data(), n_tokens, y6.data(), pool, GemmInput::SameAsLast);
    EXPECT_EQ(0, std::memcmp(y6.data(), q6_2.data(), y6.size() * sizeof(float)));
  }
}

TEST(CpuGemm, PackedWeightsAreSharedMadeOnceAndOnlyForPackableTypes) {
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q8_0;
  spec.embd_type = GgmlType::F32;
  const auto m = write_and_load(spec, "gemm-packed-q8_0.gguf");
  ASSERT_NE(m, nullptr);
  const Model& model = *m;
  const auto a = PackedWeights::of(model), b = PackedWeights::of(model);
  EXPECT_EQ(a.get(), b.get());
  ThreadPool pool(2);
  const GgufTensorInfo& q = *model.layers[0].attn_q;
  const PackedMatrix* p = a->get(q, pool);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, b->get(q, pool));  // made once
  EXPECT_EQ(p->n_in, q.ne[0]);
  EXPECT_EQ(p->n_out, q.ne[1]);
  // Q5_K, Q6_K and the 32-element block types are packed where the SIMD level has their tiles
  // (avx512) only.
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (GgmlType t : {Q2K, Q3K, Q5K, Q6K, Q40, Q41, Q50, Q51, IQ4NL, IQ4XS}) {
      EXPECT_EQ(gemm_packable(t), level == SimdLevel::Avx512)
          << simd_level_name(level) << " " << type_name(static_cast<uint32_t>(t));
    }
    EXPECT_TRUE(gemm_packable(GgmlType::Q8_0) && gemm_packable(GgmlType::Q4_K));
    EXPECT_FALSE(gemm_packable(GgmlType::F16) || gemm_packable(GgmlType::BF16) ||
                 gemm_packable(GgmlType::F32));
  }
  // Not one of the matrices (the F32 embeddings, a norm vector): no packed form.
  EXPECT_EQ(a->get(*model.token_embd, pool), nullptr);
  EXPECT_EQ(a->get(*model.layers[0].attn_norm, pool), nullptr);
  // The packed product equals the product on the file's bytes within the rounding above,
  // although the mapped pages were dropped (they read back from the file).
  std::mt19937 rng(2);
  const std::vector<float> x = gaussian(rng, q.ne[0]);
  std::vector<float> y1(static_cast<size_t>(q.ne[1])), y2(y1.size());
  gemm(*p, x.data(), 1, y1.data(), pool);
  matvec(q.type, q.data, q.ne[0], q.ne[1], x.data(), y2.data(), pool);
  for (size_t r = 0; r < y1.size(); ++r) EXPECT_NEAR(y1[r], y2[r], 1e-4 * (1 + std::fabs(y2[r])));
}

// The packed matrices lie in one mapping, one after the other in the model's order (layers, then
// output; each 64-byte aligned, packed_size() apart), whatever order they are first used in, and
// hold what pack_matrix makes of the file's bytes.
TEST(CpuGemm, PackedWeightsLieInOneMappingInModelOrder) {
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q8_0;
  spec.embd_type = GgmlType::F32;
  const auto m = write_and_load(spec, "gemm-arena-q8_0.gguf");
  ASSERT_NE(m, nullptr);
  const Model& model = *m;
  std::vector<const GgufTensorInfo*> order;
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : w.matrices()) {
      if (t != nullptr && t != w.ffn_gate_inp) order.push_back(t);
    }
  }
  ASSERT_NE(model.output, nullptr);
  order.push_back(model.output);
  ASSERT_GE(order.size(), 8u);
  PackedWeights pw(model);
  ThreadPool pool(2);
  std::vector<const PackedMatrix*> packed(order.size());
  for (size_t i = order.size(); i-- > 0;) {  // last first: the offsets do not follow the use
    packed[i] = pw.get(*order[i], pool);
    ASSERT_NE(packed[i], nullptr);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const GgufTensorInfo& t = *order[i];
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(packed[i]->bytes.get()) % 64, 0u);
    if (i > 0) {
      EXPECT_EQ(packed[i]->bytes.get(),
                packed[i - 1]->bytes.get() +
                    packed_size(order[i - 1]->type, order[i - 1]->ne[0], order[i - 1]->ne[1]));
    }
    const PackedMatrix want = pack_matrix(t.type, t.data, t.ne[0], t.ne[1], pool);
    ASSERT_EQ(want.size_bytes(), packed[i]->size_bytes());
    EXPECT_EQ(0, std::memcmp(want.bytes.get(), packed[i]->bytes.get(), want.size_bytes()));
  }
}

// Each expert of a stack has its own packed form, equal to the plain product on its slice;
// phi3's fused attn_qkv is packed as a whole matrix.
TEST(CpuGemm, ExpertsAndFusedMatricesArePacked) {
  TestModelSpec spec;
  spec.arch = "qwen3moe";
  spec.n_expert = 4;
  spec.n_expert_used = 2;
  spec.n_ff_exp = 64;
  spec.weight_type = GgmlType::Q8_0;
  spec.embd_type = GgmlType::F32;
  const auto m = write_and_load(spec, "gemm-packed-moe.gguf");
  ASSERT_NE(m, nullptr);
  const Model& model = *m;
  const auto packed = PackedWeights::of(model);
  ThreadPool pool(2);
  const GgufTensorInfo& up = *model.layers[1].ffn_up_exps;
  EXPECT_EQ(packed->get(up, pool), nullptr);  // a stack is packed per expert only
  EXPECT_EQ(packed->get_expert(up, 4, pool), nullptr);
  EXPECT_EQ(packed->get_expert(up, -1, pool), nullptr);
  std::mt19937 rng(3);
  const std::vector<float> x = gaussian(rng, up.ne[0] * 3);
  for (int64_t e = 0; e < 4; ++e) {
    const PackedMatrix* p = packed->get_expert(up, e, pool);
    ASSERT_NE(p, nullptr) << e;
    EXPECT_EQ(p, packed->get_expert(up, e, pool));
    EXPECT_EQ(p->n_in, up.ne[0]);
    EXPECT_EQ(p->n_out, up.ne[1]);
    const MatrixView v = expert_of(up, e);
    std::vector<float> y1(static_cast<size_t>(3 * v.n_out)), y2(y1.size());
    gemm(*p, x.data(), 3, y1.data(), pool);
    matmul(v.type, v.data, v.n_in, v.n_out, x.data(), 3, y2.data(), pool);
    for (size_t r = 0; r < y1.size(); ++r)
      EXPECT_NEAR(y1[r], y2[r], 1e-4 * (1 + std::fabs(y2[r]))) << "expert " << e << " " << r;
  }
  TestModelSpec phi;
  phi.arch = "phi3";
  phi.weight_type = GgmlType::Q8_0;
  phi.embd_type = GgmlType::F32;
  const auto pm = write_and_load(phi, "gemm-packed-phi3.gguf");
  ASSERT_NE(pm, nullptr);
  const GgufTensorInfo& qkv = *pm->layers[0].attn_qkv;
  const PackedMatrix* pq = PackedWeights::of(*pm)->get(qkv, pool);
  ASSERT_NE(pq, nullptr);
  EXPECT_EQ(pq->n_out, qkv.ne[1]);
}

}  // namespace
}  // namespace spw::cpu
