// Tests of the fast CPU kernels (engine/cpu) against the reference: every quantized
// product against dequantize_row + a float64 dot, by NMSE per type, at every SIMD level the
// CPU has; the scalar level against the SIMD levels; thread-count and tiling independence;
// the element-wise ops against float64; attention partials and their log-sum-exp merge.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf/ggml_types.h"
#include "tests/support/simd_levels.h"

namespace spw::cpu {
namespace {

constexpr GgmlType kTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

int block_size(GgmlType t) { return type_traits(static_cast<uint32_t>(t))->block_size; }
std::string tname(GgmlType t) { return type_name(static_cast<uint32_t>(t)); }

// NMSE tolerances of a product against float64 on dequantized weights and unquantized
// activations. The float formats see float32 rounding only (measured <= 3e-13); the integer
// formats add the activation rounding: measured <= 4.3e-5 with Q8A activations (32-element
// blocks, IQ4_XS's 4.0e-5 among them) and <= 3.3e-5 with Q8K (a scale per 32 strided elements;
// 6.6e-5 when it had one scale per 256) over every case below; the bounds leave a 5-6x margin.
double nmse_tolerance(GgmlType t) {
  switch (vec_dot_type(t)) {
    case VecDotType::F32:
      return 1e-11;
    case VecDotType::Q8A:
    case VecDotType::Q8K:
      return 2e-4;
  }
  return 0.0;
}

struct Matrix {
  GgmlType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;  // n_out rows of row_size(type, n_in), preceded by `offset` bytes
  size_t offset = 0;           // misalignment of the first row, to catch aligned loads
  std::vector<float> deq;      // [n_out][n_in] dequantized

  const uint8_t* data() const { return bytes.data() + offset; }
};

std::vector<float> gaussian(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

void finish_matrix(Matrix& m) {
  const size_t rs = row_size(m.type, m.n_in);
  m.deq.resize(static_cast<size_t>(m.n_in * m.n_out));
  for (int64_t r = 0; r < m.n_out; ++r) {
    dequantize_row(m.type, m.data() + r * rs, m.deq.data() + r * m.n_in, m.n_in);
  }
}

// Weights quantized from gaussian rows (each row with its own spread) by quantize_row.
Matrix make_matrix(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed, size_t offset = 0) {
  std::mt19937 rng(seed);
  Matrix m{type, n_in, n_out, {}, offset, {}};
  const size_t rs = row_size(type, n_in);
  m.bytes.assign(offset + rs * static_cast<size_t>(n_out), 0);
  std::uniform_real_distribution<float> spread(0.2f, 2.0f);
  for (int64_t r = 0; r < n_out; ++r) {
    const std::vector<float> row = gaussian(rng, n_in, spread(rng));
    quantize_row(type, row.data(), m.bytes.data() + offset + r * rs, n_in);
  }
  finish_matrix(m);
  return m;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Weights of random bytes (every code, scale and high-bit pattern a file may hold, including
// Q8_0's -128 and negative Q6_K scales), with the binary16 scale fields set to sane values.
Matrix make_random_block_matrix(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::mt19937 rng(seed);
  Matrix m{type, n_in, n_out, {}, 0, {}};
  const auto tr = *type_traits(static_cast<uint32_t>(type));
  const size_t rs = row_size(type, n_in);
  m.bytes.resize(rs * static_cast<size_t>(n_out));
  for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> d(0.001f, 0.02f), mn(-0.1f, 0.1f);
  for (size_t off = 0; off < m.bytes.size(); off += static_cast<size_t>(tr.type_size)) {
    uint8_t* blk = m.bytes.data() + off;
    switch (type) {
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        put_f16(blk, d(rng));
        put_f16(blk + 2, mn(rng));
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put_f16(blk, d(rng));
        put_f16(blk + 2, d(rng));
        break;
      case GgmlType::Q6_K:
        put_f16(blk + 208, d(rng) * 0.1f);
        break;
      case GgmlType::Q2_K:
        put_f16(blk + 80, d(rng));
        put_f16(blk + 82, d(rng));
        break;
      case GgmlType::Q3_K:
        put_f16(blk + 108, d(rng) * 0.1f);
        break;
      case GgmlType::IQ4_XS:
        put_f16(blk, d(rng) * 0.01f);
        break;
      default:
        put_f16(blk, d(rng));
        break;
    }
  }
  finish_matrix(m);
  return m;
}

// Y[t][r] = sum_i deq[r][i] * X[t][i] in float64; also sum |deq x| per element (the scale
// float rounding is measured against).
void reference(const Matrix& m, const std::vector<float>& X, int64_t n_tokens,
               std::vector<double>& y, std::vector<double>& abs_sum) {
  y.assign(static_cast<size_t>(n_tokens * m.n_out), 0.0);
  abs_sum.assign(y.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < m.n_out; ++r) {
      double acc = 0.0, a = 0.0;
      for (int64_t i = 0; i < m.n_in; ++i) {
        const double p = static_cast<double>(m.deq[r * m.n_in + i]) * X[t * m.n_in + i];
        acc += p;
        a += std::fabs(p);
      }
      y[t * m.n_out + r] = acc;
      abs_sum[t * m.n_out + r] = a;
    }
  }
}

double nmse(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0.0 ? num / den : num;
}

std::vector<int64_t> n_in_sizes(GgmlType t) {
  switch (block_size(t)) {
    case 1:
      return {227, 32 * 7, 256 * 3};
    case 32:
      return {32 * 7, 256 * 3};
    default:
      return {256 * 3};
  }
}

// ---- quantized products against the reference ----

TEST(CpuQuant, MatmulAndMatvecMatchReferenceAtEveryLevel) {
  ThreadPool pool(1);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (GgmlType type : kTypes) {
      for (int64_t n_in : n_in_sizes(type)) {
        for (int64_t n_out : {1, 7, 33}) {
          SCOPED_TRACE(tname(type) + " " + std::string(simd_level_name(level)) +
                       " n_in=" + std::to_string(n_in) + " n_out=" + std::to_string(n_out));
          const Matrix m = make_matrix(type, n_in, n_out, static_cast<uint32_t>(n_in + n_out), 1);
          std::mt19937 rng(7);
          const int64_t n_tokens = 6;
          const std::vector<float> X = gaussian(rng, n_tokens * n_in);
          std::vector<double> ref, abs_sum;
          reference(m, X, n_tokens, ref, abs_sum);
          std::vector<float> Y(static_cast<size_t>(n_tokens * n_out));
          matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, Y.data(), pool);
          const double e = nmse(Y, ref);
          EXPECT_LE(e, nmse_tolerance(type));
          // Each token row of matmul is bit-identical to matvec of that token (the tile
          // shape never changes a result).
          std::vector<float> y(static_cast<size_t>(n_out));
          for (int64_t t = 0; t < n_tokens; ++t) {
            matvec(type, m.data(), n_in, n_out, X.data() + t * n_in, y.data(), pool);
            ASSERT_EQ(0, std::memcmp(y.data(), Y.data() + t * n_out, y.size() * sizeof(float)))
                << "token " << t;
          }
        }
      }
    }
  }
}

TEST(CpuQuant, RandomBlockBytesMatchReference) {
  ThreadPool pool(1);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (GgmlType type : kTypes) {
      if (block_size(type) == 1) continue;  // random bits would be NaN / inf floats
      SCOPED_TRACE(tname(type) + " " + std::string(simd_level_name(level)));
      const Matrix m = make_random_block_matrix(type, 768, 33, 11);
      std::mt19937 rng(3);
      const std::vector<float> X = gaussian(rng, 5 * 768);
      std::vector<double> ref, abs_sum;
      reference(m, X, 5, ref, abs_sum);
      std::vector<float> Y(5 * 33);
      matmul(type, m.data(), 768, 33, X.data(), 5, Y.data(), pool);
      EXPECT_LE(nmse(Y, ref), nmse_tolerance(type));
    }
  }
}

TEST(CpuQuant, ScalarLevelEqualsSimdLevelsWithinFloatRounding) {
  ThreadPool pool(1);
  for (SimdLevel level : test::supported_simd_levels()) {
    if (level == SimdLevel::Scalar) continue;
    for (GgmlType type : kTypes) {
      for (int64_t n_in : n_in_sizes(type)) {
        SCOPED_TRACE(tname(type) + " " + std::string(simd_level_name(level)) +
                     " n_in=" + std::to_string(n_in));
        const int64_t n_out = 33, n_tokens = 5;
        const Matrix m = make_matrix(type, n_in, n_out, 5);
        std::mt19937 rng(9);
        const std::vector<float> X = gaussian(rng, n_tokens * n_in);
        std::vector<double> ref, abs_sum;
        reference(m, X, n_tokens, ref, abs_sum);

        // The activation codes are identical at every level.
        const size_t xs = activation_row_size(type, n_in);
        std::vector<uint8_t> q_scalar(xs), q_simd(xs);
        std::vector<float> y_scalar(static_cast<size_t>(n_tokens * n_out)), y_simd(y_scalar.size());
        {
          test::SimdLevelScope s(SimdLevel::Scalar);
          quantize_activation_row(type, X.data(), q_scalar.data(), n_in);
          matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, y_scalar.data(), pool);
        }
        {
          test::SimdLevelScope s(level);
          quantize_activation_row(type, X.data(), q_simd.data(), n_in);
          matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, y_simd.data(), pool);
        }
        EXPECT_EQ(0, std::memcmp(q_scalar.data(), q_simd.data(), xs));
        double worst = 0.0;
        size_t worst_i = 0;
        for (size_t i = 0; i < y_simd.size(); ++i) {
          const double rel = std::fabs(y_simd[i] - y_scalar[i]) / abs_sum[i];
          if (rel > worst) worst = rel, worst_i = i;
        }
        // Same integer sums, different float summation order: measured <= 1.4e-7 of
        // sum |w x|.
        EXPECT_LE(worst, 1e-6) << "worst element " << worst_i << ": simd " << y_simd[worst_i]
                               << " scalar " << y_scalar[worst_i];
      }
    }
  }
}

TEST(CpuQuant, VecDotAgreesWithMatvec) {
  ThreadPool pool(1);
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(tname(type));
    const int64_t n = 768;
    const Matrix m = make_matrix(type, n, 3, 21);
    std::mt19937 rng(4);
    const std::vector<float> x = gaussian(rng, n);
    std::vector<uint8_t> xq(activation_row_size(type, n));
    quantize_activation_row(type, x.data(), xq.data(), n);
    std::vector<float> y(3);
    matvec(type, m.data(), n, 3, x.data(), y.data(), pool);
    // matvec tiles rows (several per call); vec_dot is one row: equal bit for bit.
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(vec_dot(type, m.data() + r * row_size(type, n), xq.data(), n), y[r]);
    }
  }
}

TEST(CpuQuant, ThreadCountDoesNotChangeResults) {
  ThreadPool p1(1), p2(2), p3(3);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (GgmlType type : kTypes) {
      SCOPED_TRACE(tname(type) + " " + std::string(simd_level_name(level)));
      const int64_t n_in = 768, n_out = 301, n_tokens = 13;
      const Matrix m = make_matrix(type, n_in, n_out, 17);
      std::mt19937 rng(5);
      const std::vector<float> X = gaussian(rng, n_tokens * n_in);
      std::vector<float> a(static_cast<size_t>(n_tokens * n_out)), b(a.size()), c(a.size());
      matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, a.data(), p1);
      matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, b.data(), p2);
      matmul(type, m.data(), n_in, n_out, X.data(), n_tokens, c.data(), p3);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
      std::vector<float> y1(static_cast<size_t>(n_out)), y2(y1.size());
      matvec(type, m.data(), n_in, n_out, X.data(), y1.data(), p1);
      matvec(type, m.data(), n_in, n_out, X.data(), y2.data(), p2);
      EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
    }
  }
}

TEST(CpuQuant, ActivationQuantizationMatchesItsDefinition) {
  std::mt19937 rng(8);
  std::vector<float> x = gaussian(rng, 512);
  x[3] = 0.0f;
  std::fill(x.begin() + 256, x.begin() + 288, 0.0f);  // an all-zero Q8A block
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    std::vector<uint8_t> a(activation_row_size(GgmlType::Q8_0, 512));
    quantize_activation_row(GgmlType::Q8_0, x.data(), a.data(), 512);
    for (int b = 0; b < 16; ++b) {
      float d, s;
      int8_t qs[32];
      std::memcpy(&d, a.data() + 40 * b, 4);
      std::memcpy(&s, a.data() + 40 * b + 4, 4);
      std::memcpy(qs, a.data() + 40 * b + 8, 32);
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        EXPECT_LE(std::fabs(qs[j] * d - x[32 * b + j]), 0.5f * d * 1.0001f + 1e-30f);
        sum += qs[j];
      }
      EXPECT_EQ(s, d * static_cast<float>(sum));
    }
    // BlockQ8K (engine/cpu/kernels.h): float d[8], int8 qs[256], float bsums[16]; group g of a
    // super-block is the elements e with (e % 32) / 4 == g. Group 5 of the second super-block
    // is all zero.
    std::vector<float> xk = x;
    for (int e = 0; e < 256; ++e) {
      if ((e % 32) / 4 == 5) xk[256 + e] = 0.0f;
    }
    xk[256 + 7] = 40.0f;  // an outlier coarsens its own group only
    ASSERT_EQ(activation_row_size(GgmlType::Q4_K, 512), 2u * 352u);
    std::vector<uint8_t> k(activation_row_size(GgmlType::Q4_K, 512));
    quantize_activation_row(GgmlType::Q4_K, xk.data(), k.data(), 512);
    for (int b = 0; b < 2; ++b) {
      const uint8_t* blk = k.data() + 352 * b;
      const float* v = xk.data() + 256 * b;
      float d[8], bsums[16];
      int8_t qs[256];
      std::memcpy(d, blk, 32);
      std::memcpy(qs, blk + 32, 256);
      std::memcpy(bsums, blk + 288, 64);
      for (int g = 0; g < 8; ++g) {
        float amax = 0.0f;
        for (int e = 0; e < 256; ++e) {
          if ((e % 32) / 4 == g) amax = std::max(amax, std::fabs(v[e]));
        }
        EXPECT_EQ(d[g], amax / 127.0f) << "block " << b << " group " << g;
      }
      EXPECT_EQ(d[5], b == 1 ? 0.0f : d[5]);
      if (b == 1) {
        EXPECT_EQ(d[1], 40.0f / 127.0f);
        for (int g = 0; g < 8; ++g) {
          if (g != 1) EXPECT_LT(d[g], 6.0f / 127.0f) << "group " << g;
        }
      }
      for (int e = 0; e < 256; ++e) {
        const float dg = d[(e % 32) / 4];
        EXPECT_LE(std::fabs(qs[e] * dg - v[e]), 0.5f * dg * 1.0001f + 1e-30f) << e;
        if (dg == 0.0f) EXPECT_EQ(qs[e], 0);
      }
      for (int j = 0; j < 16; ++j) {
        // (d[a] I_0 + d[a+1] I_1) + (d[a+2] I_2 + d[a+3] I_3), each step rounded to float.
        float p[4];
        double exact = 0.0;
        for (int k = 0; k < 4; ++k) {
          int isum = 0;
          for (int l = 0; l < 4; ++l) isum += qs[16 * j + 4 * k + l];
          const float dk = d[4 * (j % 2) + k];
          p[k] = dk * static_cast<float>(isum);
          exact += static_cast<double>(dk) * isum;
        }
        const float want = (p[0] + p[1]) + (p[2] + p[3]);
        EXPECT_EQ(bsums[j], want) << "block " << b << " sum " << j;
        EXPECT_NEAR(bsums[j], exact, 1e-6 * (std::fabs(exact) + 1.0))
            << "block " << b << " sum " << j;
      }
    }
  }
}

// ---- element-wise ops ----

TEST(CpuOps, RmsNorm) {
  std::mt19937 rng(1);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (int64_t n : {1, 7, 1000, 4096}) {
      const auto x = gaussian(rng, n, 3.0f), w = gaussian(rng, n);
      std::vector<float> out(static_cast<size_t>(n)), out_nw(out.size());
      rms_norm(x.data(), w.data(), 1e-5f, n, out.data());
      rms_norm(x.data(), nullptr, 1e-5f, n, out_nw.data());
      double ss = 0.0;
      for (float v : x) ss += static_cast<double>(v) * v;
      const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[i] * scale * w[i];
        EXPECT_NEAR(out[i], want, 2e-6 * std::fabs(want) + 1e-30) << i;
        EXPECT_NEAR(out_nw[i], x[i] * scale, 2e-6 * std::fabs(x[i] * scale) + 1e-30) << i;
      }
    }
  }
}

TEST(CpuOps, RopeNormalAndNeoxMatchFloat64) {
  std::mt19937 rng(2);
  struct Case {
    int64_t head_dim, n_rot;
  };
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (const RopeType type : {RopeType::Normal, RopeType::NeoX}) {
      for (const Case c : {Case{128, 128}, Case{64, 32}, Case{20, 12}}) {
        const int64_t n_heads = 3, pos = 100003;
        RopeParams rp;
        rp.freq_base = 500000.0;
        const auto inv = rope_inv_freq(c.n_rot, rp, nullptr);
        std::vector<float> cs(static_cast<size_t>(c.n_rot));
        rope_cos_sin(inv.data(), c.n_rot, pos, 1.0f, cs.data());
        auto x = gaussian(rng, n_heads * c.head_dim);
        const auto x0 = x;
        rope(x.data(), n_heads, c.head_dim, c.n_rot, cs.data(), type);
        const int64_t half = c.n_rot / 2;
        for (int64_t h = 0; h < n_heads; ++h) {
          const float* in = x0.data() + h * c.head_dim;
          const float* out = x.data() + h * c.head_dim;
          std::vector<double> want(in, in + c.head_dim);
          for (int64_t i = 0; i < half; ++i) {
            const double th = static_cast<double>(pos) * inv[static_cast<size_t>(i)];
            const int64_t a = type == RopeType::Normal ? 2 * i : i;
            const int64_t b = type == RopeType::Normal ? 2 * i + 1 : i + half;
            want[a] = in[a] * std::cos(th) - in[b] * std::sin(th);
            want[b] = in[a] * std::sin(th) + in[b] * std::cos(th);
          }
          for (int64_t i = 0; i < c.head_dim; ++i)
            EXPECT_NEAR(out[i], want[i], 1e-6) << h << " " << i;
        }
      }
    }
  }
}

TEST(CpuOps, SwigluAndSoftmax) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (int64_t n : {1, 13, 1024}) {
      std::vector<float> g(static_cast<size_t>(n)), u = gaussian(rng, n), out(g.size());
      for (auto& v : g) v = wide(rng);
      if (n > 4) g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f;
      swiglu(g.data(), u.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
        EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << g[i];
      }
      std::vector<float> s(static_cast<size_t>(n));
      for (auto& v : s) v = wide(rng);
      const auto s0 = s;
      softmax(s.data(), n);
      const double m = *std::max_element(s0.begin(), s0.end());
      double sum = 0.0;
      for (float v : s0) sum += std::exp(v - m);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(s0[i] - m) / sum;
        // x - max is rounded to float before the exp: up to half an ulp of |x - max|, i.e. a
        // relative error of 6e-8 |x - max| in the result, on top of exp's own 2e-6.
        EXPECT_NEAR(s[i], want, (2e-6 + 6e-8 * std::fabs(s0[i] - m)) * want + 1e-30);
      }
    }
  }
}

// GeGLU (gemma3's FFN) at every SIMD level against gelu_tanh in double, written as 0.5 x (1 +
// tanh z) = x / (1 + exp(-2z)) (the tanh form cancels to 0 in the negative tail, where the
// float path keeps the tiny value).
TEST(CpuOps, GegluMatchesTheTanhGeluInFloat64) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (int64_t n : {1, 13, 1024}) {
      std::vector<float> g(static_cast<size_t>(n)), u = gaussian(rng, n), out(g.size());
      for (auto& v : g) v = wide(rng);
      if (n > 4) g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f, g[3] = -1e20f;
      geglu(g.data(), u.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double x = g[i];
        const double z = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
        const double want = x / (1.0 + std::exp(-2.0 * z)) * u[i];
        EXPECT_NEAR(want, 0.5 * x * (1.0 + std::tanh(z)) * u[i], 1e-15 * (1 + std::fabs(x * u[i])));
        // The exponent 2z is formed in float: its rounding (~2e-7 |2z|) moves the tail's value
        // relatively by as much, on top of exp's 2e-6.
        EXPECT_NEAR(out[i], want, (2e-6 + 2e-7 * std::fabs(2 * z)) * std::fabs(want) + 1e-30)
            << g[i];
      }
    }
  }
}

TEST(CpuOps, F16RowConversionIsBitExact) {
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0) continue;  // NaN payloads may differ
    all.push_back(static_cast<uint16_t>(h));
  }
  std::mt19937 rng(4);
  std::vector<float> f;
  for (int i = 0; i < 20000; ++i) {
    uint32_t bits = rng();
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // skip NaN / inf bit patterns here
    float v;
    std::memcpy(&v, &bits, 4);
    f.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 6.1e-5f, INFINITY,
                  -INFINITY, 1.0f / 3.0f}) {
    f.push_back(v);
  }
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    std::vector<float> out(all.size());
    f16_to_f32_row(all.data(), out.data(), static_cast<int64_t>(all.size()));
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = fp16_to_fp32(all[i]);
      ASSERT_EQ(0, std::memcmp(&out[i], &want, 4)) << std::hex << all[i];
    }
    std::vector<uint16_t> h(f.size());
    f32_to_f16_row(f.data(), h.data(), static_cast<int64_t>(f.size()));
    for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], fp32_to_fp16(f[i])) << f[i];
  }
}

// ---- attention ----

struct AttnData {
  int64_t n_kv, n_heads_kv = 2, head = 1, hd, hdv;
  std::vector<float> k32, v32;     // [n_kv][n_heads_kv * hd]: the reference session's layout
  std::vector<uint16_t> k16, v16;  // the same values rounded to f16
};

AttnData make_kv(int64_t n_kv, int64_t hd, int64_t hdv, uint32_t seed) {
  std::mt19937 rng(seed);
  AttnData a{n_kv, 2, 1, hd, hdv, {}, {}, {}, {}};
  a.k32 = gaussian(rng, n_kv * 2 * hd);
  a.v32 = gaussian(rng, n_kv * 2 * hdv);
  for (float& v : a.k32) v = fp16_to_fp32(fp32_to_fp16(v));  // f16-representable: one truth
  for (float& v : a.v32) v = fp16_to_fp32(fp32_to_fp16(v));
  for (float v : a.k32) a.k16.push_back(fp32_to_fp16(v));
  for (float v : a.v32) a.v16.push_back(fp32_to_fp16(v));
  return a;
}

KvSpan span(const AttnData& a, bool k, bool f16, int64_t j0) {
  const int64_t d = k ? a.hd : a.hdv, stride = a.n_heads_kv * d, off = j0 * stride + a.head * d;
  if (f16) return {(k ? a.k16.data() : a.v16.data()) + off, GgmlType::F16, stride};
  return {(k ? a.k32.data() : a.v32.data()) + off, GgmlType::F32, stride};
}

std::vector<double> attn_reference(const AttnData& a, const float* q, int64_t n_q, float scale) {
  std::vector<double> out(static_cast<size_t>(n_q * a.hdv), 0.0);
  for (int64_t h = 0; h < n_q; ++h) {
    std::vector<double> s(static_cast<size_t>(a.n_kv));
    double m = -INFINITY;
    for (int64_t j = 0; j < a.n_kv; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < a.hd; ++i)
        acc += static_cast<double>(q[h * a.hd + i]) * a.k32[(j * 2 + a.head) * a.hd + i];
      s[j] = acc * scale;
      m = std::max(m, s[j]);
    }
    double sum = 0.0;
    for (auto& v : s) sum += (v = std::exp(v - m));
    for (int64_t j = 0; j < a.n_kv; ++j) {
      for (int64_t i = 0; i < a.hdv; ++i)
        out[h * a.hdv + i] += s[j] / sum * a.v32[(j * 2 + a.head) * a.hdv + i];
    }
  }
  return out;
}

TEST(CpuAttention, PartialMatchesFloat64) {
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (int64_t hd : {64, 20}) {
      for (int64_t n_kv : {1, 7, 200}) {
        for (int64_t n_q : {1, 3, 4, 6}) {
          for (bool f16 : {false, true}) {
            SCOPED_TRACE(std::string(simd_level_name(level)) + " hd=" + std::to_string(hd) +
                         " n_kv=" + std::to_string(n_kv) + " n_q=" + std::to_string(n_q) +
                         (f16 ? " f16" : " f32"));
            const AttnData a = make_kv(n_kv, hd, hd, static_cast<uint32_t>(n_kv + hd));
            std::mt19937 rng(6);
            const auto q = gaussian(rng, n_q * hd, 2.0f);
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            const AttnShape shape{n_q, hd, hd, scale};
            std::vector<AttnPartial> p(static_cast<size_t>(n_q));
            attn_partial(shape, q.data(), span(a, true, f16, 0), span(a, false, f16, 0), n_kv,
                         p.data());
            const auto want = attn_reference(a, q.data(), n_q, scale);
            double worst = 0.0, ref_max = 0.0;
            std::vector<float> o(static_cast<size_t>(hd));
            for (int64_t h = 0; h < n_q; ++h) {
              attn_finalize(p[h], o.data());
              for (int64_t i = 0; i < hd; ++i) {
                worst = std::max(worst, std::fabs(o[i] - want[h * hd + i]));
                ref_max = std::max(ref_max, std::fabs(want[h * hd + i]));
              }
            }
            EXPECT_LE(worst, 2e-6 * ref_max);
          }
        }
      }
    }
  }
}

TEST(CpuAttention, SplitRangesMergeToTheUnsplitResult) {
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    const int64_t n_kv = 200, hd = 64, hdv = 48, n_q = 4;
    const AttnData a = make_kv(n_kv, hd, hdv, 12);
    std::mt19937 rng(7);
    const auto q = gaussian(rng, n_q * hd, 3.0f);
    const AttnShape shape{n_q, hd, hdv, 0.125f};
    for (bool f16 : {false, true}) {
      std::vector<AttnPartial> whole(static_cast<size_t>(n_q));
      attn_partial(shape, q.data(), span(a, true, f16, 0), span(a, false, f16, 0), n_kv,
                   whole.data());
      // Two-way splits (empty parts included), and a three-way split merged in both orders.
      const std::vector<std::vector<int64_t>> splits = {
          {0, 200}, {1, 200}, {64, 200}, {77, 200}, {199, 200}, {200, 200}, {50, 130, 200}};
      for (const auto& cuts : splits) {
        std::vector<std::vector<AttnPartial>> parts;
        int64_t j0 = 0;
        for (int64_t j1 : cuts) {
          parts.emplace_back(static_cast<size_t>(n_q));
          attn_partial(shape, q.data(), span(a, true, f16, j0), span(a, false, f16, j0), j1 - j0,
                       parts.back().data());
          j0 = j1;
        }
        for (bool reverse : {false, true}) {
          if (reverse) std::reverse(parts.begin(), parts.end());
          for (int64_t h = 0; h < n_q; ++h) {
            AttnPartial acc;
            for (const auto& p : parts) attn_merge(acc, p[h]);
            std::vector<float> got(static_cast<size_t>(hdv)), want(got.size());
            attn_finalize(acc, got.data());
            attn_finalize(whole[h], want.data());
            float ref_max = 0.0f;
            for (float v : want) ref_max = std::max(ref_max, std::fabs(v));
            for (int64_t i = 0; i < hdv; ++i) {
              EXPECT_NEAR(got[i], want[i], 1e-6f * ref_max)
                  << "cut " << cuts[0] << " head " << h << " dim " << i;
            }
          }
        }
      }
    }
  }
}

TEST(CpuAttention, EmptyRangeIsNeutral) {
  AttnPartial empty;
  AttnPartial p;
  p.o = {1.0f, 2.0f};
  p.m = 0.5f;
  p.s = 2.0f;
  AttnPartial acc = p;
  attn_merge(acc, empty);
  EXPECT_EQ(acc.o, p.o);
  EXPECT_EQ(acc.s, p.s);
  AttnPartial acc2;
  attn_merge(acc2, p);
  EXPECT_EQ(acc2.o, p.o);
  EXPECT_EQ(acc2.m, p.m);
}

// ---- thread pool ----

TEST(CpuThreadPool, CoversEveryIndexOnceWithFixedChunks) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 5, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::set<std::pair<int64_t, int64_t>> chunks;
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        std::lock_guard lk(mu);
        chunks.insert({b, e});
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
      if (n > 1 && threads > 1) {
        const int64_t c = ThreadPool::chunk_count(n, threads);
        std::set<std::pair<int64_t, int64_t>> want;
        for (int64_t k = 0; k < c; ++k) want.insert({k * n / c, (k + 1) * n / c});
        EXPECT_EQ(chunks, want) << "threads " << threads << " n " << n;
      }
    }
  }
}

// An exception in a chunk, on a worker or on the calling thread, comes out of parallel_for on
// the caller after every started chunk has finished; the pool then runs the next job whole.
TEST(CpuThreadPool, AnExceptionInAChunkIsRethrownOnTheCallerAndThePoolGoesOn) {
  ThreadPool pool(3);
  ASSERT_EQ(pool.size(), 3);
  const auto caller = std::this_thread::get_id();
  for (const bool on_worker : {true, false}) {
    int thrown = 0;
    for (int round = 0; round < 50; ++round) {
      try {
        pool.parallel_for(1200, [&](int64_t b, int64_t) {
          if ((std::this_thread::get_id() != caller) == on_worker && b >= 100) {
            throw std::bad_alloc();
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));  // let the others claim
        });
      } catch (const std::bad_alloc&) {
        ++thrown;
      }
      std::vector<int> seen(1000, 0);
      pool.parallel_for(1000, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
      });
      ASSERT_EQ(std::count(seen.begin(), seen.end(), 1), 1000) << "round " << round;
    }
    // Which thread claims which chunk is the scheduler's: most rounds give each kind a chunk.
    EXPECT_GT(thrown, 10) << (on_worker ? "worker" : "caller");
  }
}

TEST(CpuThreadPool, ManySmallJobsAndWakeUpAfterSleep) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int it = 0; it < 20000; ++it) {
    pool.parallel_for(7, [&](int64_t b, int64_t e) { total += e - b; });
  }
  EXPECT_EQ(total.load(), 7 * 20000);
  // Workers go to sleep after a short spin; the next job must still wake them.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.parallel_for(12, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard lk(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

}  // namespace
}  // namespace spw::cpu

namespace spw::cpu {
namespace {

// Regression: jobs of different sizes back to back. A worker still leaving an old, small job
// once read a new, larger job's fields, claimed an old chunk index against it, ran a chunk twice
// and pushed the done count past the chunk count, so the caller spun forever (seen in CI as an
// int overflow of the wait counter under UBSan after 88 s).
TEST(CpuThreadPool, AlternatingJobSizesRunEachIndexExactlyOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64);
  for (int it = 0; it < 20000; ++it) {
    const int64_t n = it % 2 == 0 ? 2 : 64;
    for (int64_t i = 0; i < n; ++i)
      hits[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "job " << it << " index " << i;
    }
  }
}

}  // namespace
}  // namespace spw::cpu
