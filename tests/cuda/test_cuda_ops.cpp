// The non-matmul CUDA kernels (kernels/*.cu) against the CPU backend's ops or float64 loops,
// on awkward sizes: RMSNorm, RoPE, SwiGLU, adds, KV stores, attention (decode and prefill,
// GQA, f32 and f16 caches), argmax and top-k, and the argument checks of every launcher.
//
// Tolerances, |got - want| <= atol + rtol * |want| unless stated:
// - exact: add, add_bias, kv_store (f16 bits as fp32_to_fp16), argmax, top-k;
// - rmsnorm rtol 5e-6 (the GPU sums squares in f32, the CPU in double; the output is a
//   product, so the error is relative per element);
// - rope and swiglu: a few ulps (FMA contraction, expf within 2 ulp of exp);
// - attention: max |got - want| <= 2e-5 * max|v| against a float64 softmax over the same
//   (f16-rounded) K/V: the output is a convex combination of V rows, so its error scales with
//   the values, not with the (possibly cancelling) result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu/ops.h"
#include "engine/common/fp16.h"
#include "engine/gguf/ggml_types.h"
#include "kernels/launch.h"
#include "tests/cuda/cuda_test.h"

namespace spw::kernels {
namespace {

using test::DeviceBuffer;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// Every element within atol + rtol * |want|; on failure names the worst element (NaN counts
// as worst).
template <typename Ref>
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<Ref>& want,
                                     double atol, double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << ", want " << want.size();
  }
  size_t worst = 0, n_bad = 0;
  double worst_excess = -INFINITY;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = static_cast<double>(want[i]);
    const double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    const bool exact_special =
        (std::isinf(w) || std::isnan(w)) && (g == w || (std::isnan(g) && std::isnan(w)));
    const double excess = exact_special ? -tol : (std::isnan(err) ? INFINITY : err - tol);
    if (excess > 0) ++n_bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << n_bad << " of " << got.size() << " outside tolerance; worst [" << worst << "]: got "
         << got[worst] << ", want " << static_cast<double>(want[worst]) << " (|diff| "
         << std::fabs(got[worst] - static_cast<double>(want[worst])) << ", atol " << atol
         << ", rtol " << rtol << ")";
}

template <typename T>
std::vector<T> download_or_fail(const DeviceBuffer<T>& b) {
  std::vector<T> h = b.download();
  EXPECT_EQ(h.size(), b.size()) << "download failed: " << cudaGetErrorString(cudaGetLastError());
  return h;
}

// ---- element-wise ops -----------------------------------------------------------------------

TEST(CudaOps, RmsNorm) {
  SPW_SKIP_WITHOUT_CUDA();
  constexpr int64_t kRows = 3;
  constexpr float kEps = 1e-6f;
  for (int64_t n : {1, 7, 4097}) {
    for (bool weighted : {false, true}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE("n " + std::to_string(n) + (weighted ? " weighted" : "") +
                     (in_place ? " in place" : ""));
        const auto x = uniform(static_cast<size_t>(n * kRows), -2.0f, 2.0f, 1);
        const auto w = uniform(static_cast<size_t>(n), 0.5f, 1.5f, 2);
        std::vector<float> want(x.size());
        for (int64_t r = 0; r < kRows; ++r) {
          cpu::rms_norm(&x[r * n], weighted ? w.data() : nullptr, kEps, n, &want[r * n]);
        }
        DeviceBuffer<float> dx, dw, dy(x.size());
        ASSERT_TRUE(dx.upload(x) && dw.upload(w) && dy.poison());
        float* y = in_place ? dx.get() : dy.get();
        SPW_ASSERT_CUDA(
            launch_rmsnorm(dx.get(), weighted ? dw.get() : nullptr, y, n, kRows, kEps, nullptr));
        EXPECT_TRUE(all_close(download_or_fail(in_place ? dx : dy), want, 0.0, 5e-6));
      }
    }
  }
}

TEST(CudaOps, Rope) {
  SPW_SKIP_WITHOUT_CUDA();
  // Positions up to 100000: the table carries them, angles formed in double on the host.
  const std::vector<int64_t> positions = {0, 1, 17, 4095, 32768, 100000};
  const auto n_tok = static_cast<int64_t>(positions.size());
  constexpr int64_t kHeads = 3;
  struct Dims {
    int64_t head_dim, n_rot;
  };
  for (Dims dm : {Dims{64, 32}, Dims{128, 128}, Dims{40, 24}, Dims{8, 2}}) {
    for (bool neox : {false, true}) {
      SCOPED_TRACE("head_dim " + std::to_string(dm.head_dim) + " n_rot " +
                   std::to_string(dm.n_rot) + (neox ? " neox" : " normal"));
      const auto inv_freq = cpu::rope_inv_freq(dm.n_rot, 1e6, 1.0, nullptr);
      std::vector<float> cs(static_cast<size_t>(n_tok * dm.n_rot));
      for (int64_t t = 0; t < n_tok; ++t) {
        cpu::rope_cos_sin(inv_freq.data(), dm.n_rot, positions[t], 1.0f, &cs[t * dm.n_rot]);
      }
      const auto x = uniform(static_cast<size_t>(n_tok * kHeads * dm.head_dim), -1.0f, 1.0f, 3);
      std::vector<float> want = x;
      for (int64_t t = 0; t < n_tok; ++t) {
        cpu::rope(&want[t * kHeads * dm.head_dim], kHeads, dm.head_dim, dm.n_rot, &cs[t * dm.n_rot],
                  neox ? RopeType::NeoX : RopeType::Normal);
      }
      DeviceBuffer<float> dx, dcs;
      ASSERT_TRUE(dx.upload(x) && dcs.upload(cs));
      SPW_ASSERT_CUDA(
          launch_rope(dx.get(), dcs.get(), n_tok, kHeads, dm.head_dim, dm.n_rot, neox, nullptr));
      const auto got = download_or_fail(dx);
      // |x0 c - x1 s| with |x| <= 1, |c|, |s| <= 1: a few ulps of 1 (FMA or not).
      EXPECT_TRUE(all_close(got, want, 1e-6, 1e-6));
      for (int64_t r = 0; r < n_tok * kHeads; ++r) {  // dims past n_rot untouched
        for (int64_t d = dm.n_rot; d < dm.head_dim; ++d) {
          ASSERT_EQ(got[r * dm.head_dim + d], x[r * dm.head_dim + d])
              << "row " << r << " dim " << d;
        }
      }
    }
  }
}

TEST(CudaOps, SwiGlu) {
  SPW_SKIP_WITHOUT_CUDA();
  for (int64_t n : {1, 1000, 3 * 4097 + 1}) {
    for (int alias : {0, 1, 2}) {  // y separate, y == g, y == u
      SCOPED_TRACE("n " + std::to_string(n) + " alias " + std::to_string(alias));
      auto g = uniform(static_cast<size_t>(n), -20.0f, 20.0f, 4);
      const auto u = uniform(static_cast<size_t>(n), -3.0f, 3.0f, 5);
      if (n > 4) {  // exp(-g) overflowing f32 (g / inf = -0) and saturating
        g[0] = -100.0f;
        g[1] = 100.0f;
        g[2] = -1e30f;
        g[3] = 0.0f;
      }
      std::vector<double> want(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      }
      DeviceBuffer<float> dg, du, dy(g.size());
      ASSERT_TRUE(dg.upload(g) && du.upload(u) && dy.poison());
      float* y = alias == 1 ? dg.get() : alias == 2 ? du.get() : dy.get();
      SPW_ASSERT_CUDA(launch_swiglu(dg.get(), du.get(), y, n, nullptr));
      const auto got = download_or_fail(alias == 1 ? dg : alias == 2 ? du : dy);
      // expf within 2 ulp, then a division and a product; atol covers the underflow of
      // g * exp(g) below f32's range (exact 0 on the GPU, ~1e-42 in double).
      EXPECT_TRUE(all_close(got, want, 1e-30, 1e-6));
    }
  }
}

TEST(CudaOps, AddAndAddBias) {
  SPW_SKIP_WITHOUT_CUDA();
  for (int64_t n : {1, 4097, (1 << 20) + 3}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto a = uniform(static_cast<size_t>(n), -5.0f, 5.0f, 6);
    const auto b = uniform(static_cast<size_t>(n), -5.0f, 5.0f, 7);
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
    DeviceBuffer<float> da, db, dy(a.size());
    ASSERT_TRUE(da.upload(a) && db.upload(b) && dy.poison());
    SPW_ASSERT_CUDA(launch_add(da.get(), db.get(), dy.get(), n, nullptr));
    EXPECT_EQ(download_or_fail(dy), want);
    SPW_ASSERT_CUDA(launch_add(da.get(), db.get(), da.get(), n, nullptr));  // y == a
    EXPECT_EQ(download_or_fail(da), want);
  }
  struct Shape {
    int64_t n, rows;
  };
  for (Shape s : {Shape{7, 3}, Shape{4096, 5}, Shape{1, 1}, Shape{3000, 129}}) {
    SCOPED_TRACE("bias n " + std::to_string(s.n) + " rows " + std::to_string(s.rows));
    const auto x = uniform(static_cast<size_t>(s.n * s.rows), -5.0f, 5.0f, 8);
    const auto bias = uniform(static_cast<size_t>(s.n), -1.0f, 1.0f, 9);
    std::vector<float> want = x;
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t i = 0; i < s.n; ++i) want[r * s.n + i] += bias[i];
    }
    DeviceBuffer<float> dx, db;
    ASSERT_TRUE(dx.upload(x) && db.upload(bias));
    SPW_ASSERT_CUDA(launch_add_bias(dx.get(), db.get(), s.n, s.rows, nullptr));
    EXPECT_EQ(download_or_fail(dx), want);
  }
}

// Non-NaN values over the whole binary16 range and past it: normals, subnormals, ties,
// overflow to inf, signed zeros, infinities.
std::vector<float> f16_edge_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f), ex(-30.0f, 17.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = (rng() % 2 ? -1.0f : 1.0f) * mant(rng) * std::exp2(std::floor(ex(rng)));
  const float special[] = {0.0f,
                           -0.0f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           1e-8f,
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -26),
                           std::ldexp(1.0f, -14),
                           1.0f + std::ldexp(1.0f, -11),
                           INFINITY,
                           -INFINITY};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) v[i] = special[i];
  return v;
}

TEST(CudaOps, KvStoreF32AndF16Exact) {
  SPW_SKIP_WITHOUT_CUDA();
  constexpr int64_t kCtx = 16, kRow = 40, kPos0 = 5, kTok = 3;
  const auto src = f16_edge_values(static_cast<size_t>(kTok * kRow), 10);
  DeviceBuffer<float> dsrc;
  ASSERT_TRUE(dsrc.upload(src));

  DeviceBuffer<uint32_t> c32(kCtx * kRow);  // f32 cache, read back as bits
  ASSERT_TRUE(c32.poison());
  SPW_ASSERT_CUDA(
      launch_kv_store(dsrc.get(), c32.get(), GgmlType::F32, kRow, kPos0, kTok, nullptr));
  const auto got32 = download_or_fail(c32);
  ASSERT_EQ(got32.size(), static_cast<size_t>(kCtx * kRow));
  for (int64_t i = 0; i < kCtx * kRow; ++i) {
    const int64_t pos = i / kRow;
    uint32_t want = 0xFFFFFFFFu;  // poison: rows outside [pos0, pos0 + n_tok) untouched
    if (pos >= kPos0 && pos < kPos0 + kTok) std::memcpy(&want, &src[i - kPos0 * kRow], 4);
    ASSERT_EQ(got32[i], want) << "element " << i;
  }

  DeviceBuffer<uint16_t> c16(kCtx * kRow);
  ASSERT_TRUE(c16.poison());
  SPW_ASSERT_CUDA(
      launch_kv_store(dsrc.get(), c16.get(), GgmlType::F16, kRow, kPos0, kTok, nullptr));
  const auto got16 = download_or_fail(c16);
  ASSERT_EQ(got16.size(), static_cast<size_t>(kCtx * kRow));
  for (int64_t i = 0; i < kCtx * kRow; ++i) {
    const int64_t pos = i / kRow;
    uint16_t want = 0xFFFFu;
    if (pos >= kPos0 && pos < kPos0 + kTok) want = fp32_to_fp16(src[i - kPos0 * kRow]);
    ASSERT_EQ(got16[i], want) << "element " << i << " value "
                              << (pos >= kPos0 && pos < kPos0 + kTok ? src[i - kPos0 * kRow] : 0);
  }
}

// ---- attention --------------------------------------------------------------------------

struct AttnCase {
  int64_t n_tok, pos0, n_head, n_kv_heads, hd, hdv;
  GgmlType kv_type;
  std::string name() const {
    return "n_tok " + std::to_string(n_tok) + " pos0 " + std::to_string(pos0) + " heads " +
           std::to_string(n_head) + ":" + std::to_string(n_kv_heads) + " hd " + std::to_string(hd) +
           "/" + std::to_string(hdv) + (kv_type == GgmlType::F16 ? " f16" : " f32");
  }
};

// Runs one case against a float64 softmax over the same cache values (f16-rounded for an F16
// cache). The cache has 3 rows past pos0 + n_tok holding NaN: the kernel must not read them.
void check_attention(const AttnCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  const int64_t n_ctx = c.pos0 + c.n_tok + 3, n_used = c.pos0 + c.n_tok;
  const int64_t k_row = c.n_kv_heads * c.hd, v_row = c.n_kv_heads * c.hdv;
  const bool f16 = c.kv_type == GgmlType::F16;
  auto k = uniform(static_cast<size_t>(n_ctx * k_row), -1.0f, 1.0f, seed);
  auto v = uniform(static_cast<size_t>(n_ctx * v_row), -1.0f, 1.0f, seed + 1);
  // q in [-4, 4]: scores of spread ~1.3 after the 1/sqrt(hd) scale, a peaked softmax.
  const auto q = uniform(static_cast<size_t>(c.n_tok * c.n_head * c.hd), -4.0f, 4.0f, seed + 2);
  if (f16) {  // the reference sees the rounded values the cache holds
    for (auto& e : k) e = fp16_to_fp32(fp32_to_fp16(e));
    for (auto& e : v) e = fp16_to_fp32(fp32_to_fp16(e));
  }
  std::fill(k.begin() + n_used * k_row, k.end(), kNaN);
  std::fill(v.begin() + n_used * v_row, v.end(), kNaN);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));

  const int64_t n_rep = c.n_head / c.n_kv_heads;
  std::vector<double> want(static_cast<size_t>(c.n_tok * c.n_head * c.hdv), 0.0);
  double vmax = 0.0;
  for (int64_t i = 0; i < n_used * v_row; ++i) vmax = std::max(vmax, std::fabs(double{v[i]}));
  std::vector<double> s;
  for (int64_t t = 0; t < c.n_tok; ++t) {
    const int64_t n_kv = c.pos0 + t + 1;
    s.resize(static_cast<size_t>(n_kv));
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t kvh = h / n_rep;
      const float* qh = &q[(t * c.n_head + h) * c.hd];
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < n_kv; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < c.hd; ++d) dot += double{qh[d]} * k[j * k_row + kvh * c.hd + d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (auto& e : s) sum += e = std::exp(e - m);
      double* out = &want[(t * c.n_head + h) * c.hdv];
      for (int64_t j = 0; j < n_kv; ++j) {
        for (int64_t d = 0; d < c.hdv; ++d) out[d] += s[j] / sum * v[j * v_row + kvh * c.hdv + d];
      }
    }
  }

  DeviceBuffer<float> dq, dout(want.size());
  ASSERT_TRUE(dq.upload(q) && dout.poison());
  DeviceBuffer<float> dk32, dv32;
  DeviceBuffer<uint16_t> dk16, dv16;
  const void *dk = nullptr, *dv = nullptr;
  if (f16) {
    std::vector<uint16_t> kb(k.size()), vb(v.size());
    for (size_t i = 0; i < k.size(); ++i) kb[i] = fp32_to_fp16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) vb[i] = fp32_to_fp16(v[i]);
    ASSERT_TRUE(dk16.upload(kb) && dv16.upload(vb));
    dk = dk16.get();
    dv = dv16.get();
  } else {
    ASSERT_TRUE(dk32.upload(k) && dv32.upload(v));
    dk = dk32.get();
    dv = dv32.get();
  }
  SPW_ASSERT_CUDA(launch_attention(dq.get(), dk, dv, c.kv_type, dout.get(), c.n_tok, c.pos0,
                                   c.n_head, c.n_kv_heads, c.hd, c.hdv, scale, nullptr));
  EXPECT_TRUE(all_close(download_or_fail(dout), want, 2e-5 * vmax, 0.0));
}

TEST(CudaOps, AttentionDecodeAndPrefill) {
  SPW_SKIP_WITHOUT_CUDA();
  uint32_t seed = 100;
  struct Heads {
    int64_t n_head, n_kv;
  };
  for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t hd : {40, 64, 128}) {
      for (Heads hs : {Heads{8, 2}, Heads{4, 4}}) {
        for (int64_t pos0 : {0, 100}) {
          for (int64_t n_tok : {1, 5, 70}) {
            check_attention({n_tok, pos0, hs.n_head, hs.n_kv, hd, hd, type}, seed += 3);
          }
        }
      }
    }
  }
}

TEST(CudaOps, AttentionOtherShapes) {
  SPW_SKIP_WITHOUT_CUDA();
  uint32_t seed = 500;
  const AttnCase cases[] = {
      {1, 0, 2, 1, 256, 256, GgmlType::F16},   // widest head, first token
      {9, 37, 4, 2, 256, 256, GgmlType::F16},  // widest head, prefill kernel
      {3, 20, 4, 1, 256, 256, GgmlType::F32},
      {8, 0, 6, 3, 64, 40, GgmlType::F32},   // head_dim_v != head_dim; first tiled n_tok
      {7, 11, 6, 3, 40, 64, GgmlType::F16},  // last n_tok of the per-query kernel
      {33, 5, 2, 2, 16, 16, GgmlType::F32},  // small odd-sized dims
      {17, 3, 3, 1, 8, 8, GgmlType::F16},
      {1, 3000, 8, 2, 128, 128, GgmlType::F16},  // long context decode: all warps busy
      {2, 2999, 8, 2, 64, 64, GgmlType::F32},
      {40, 2000, 4, 2, 128, 128, GgmlType::F16},  // long context prefill
      {1, 0, 1, 1, 1, 1, GgmlType::F32},          // one dim, one key
  };
  for (const AttnCase& c : cases) check_attention(c, seed += 3);
}

// ---- sampling -----------------------------------------------------------------------------

int32_t argmax_on_device(const std::vector<float>& x) {
  DeviceBuffer<float> dx;
  DeviceBuffer<int32_t> out(1);
  EXPECT_TRUE(dx.upload(x) && out.poison());
  EXPECT_EQ(launch_argmax(dx.get(), static_cast<int64_t>(x.size()), out.get(), nullptr),
            cudaSuccess);
  const auto h = out.download();
  return h.empty() ? -2 : h[0];
}

TEST(CudaOps, Argmax) {
  SPW_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(argmax_on_device({3.0f}), 0);
  EXPECT_EQ(argmax_on_device({-INFINITY}), 0);
  for (size_t n : {32000u, 151936u}) {
    SCOPED_TRACE(n);
    auto x = uniform(n, -10.0f, 10.0f, 11);
    x[n - 1] = 20.0f;
    EXPECT_EQ(argmax_on_device(x), static_cast<int32_t>(n - 1));
    // Ties: the lowest index among equal maxima, wherever the threads meet them.
    x[n - 1] = 30.0f;
    x[20000] = 30.0f;
    x[1025] = 30.0f;
    EXPECT_EQ(argmax_on_device(x), 1025);
    // NaN never wins, wherever it is.
    x[0] = kNaN;
    x[1] = kNaN;
    x[1024] = kNaN;
    x[n / 2] = kNaN;
    EXPECT_EQ(argmax_on_device(x), 1025);
    // All -inf but a NaN: the first -inf.
    std::fill(x.begin(), x.end(), -INFINITY);
    x[0] = kNaN;
    EXPECT_EQ(argmax_on_device(x), 1);
  }
}

// The k largest, value descending, ties by lower index; NaN ranks below everything and -0 ties
// with +0 (equal values).
std::vector<int32_t> topk_reference(const std::vector<float>& x, int k) {
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
    if (na != nb) return nb;
    if (!na && x[a] != x[b]) return x[a] > x[b];
    return a < b;
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

TEST(CudaOps, TopK) {
  SPW_SKIP_WITHOUT_CUDA();
  for (size_t n : {32000u, 151936u, 256u}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(n);
    // Values on a 1/8 grid: many exact ties, including around the k-th value.
    for (auto& e : x) e = std::round(nd(rng) * 8.0f) / 8.0f;
    x[7] = kNaN;
    x[n - 2] = kNaN;
    x[3] = -0.0f;
    x[4] = 0.0f;
    x[5] = INFINITY;
    x[n - 1] = -INFINITY;
    for (int k : {1, 40, 256}) {
      if (static_cast<size_t>(k) > n) continue;
      SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
      const auto want = topk_reference(x, k);
      DeviceBuffer<float> dx, dval(static_cast<size_t>(k));
      DeviceBuffer<int32_t> didx(static_cast<size_t>(k));
      ASSERT_TRUE(dx.upload(x) && dval.poison() && didx.poison());
      SPW_ASSERT_CUDA(
          launch_topk(dx.get(), static_cast<int64_t>(n), k, didx.get(), dval.get(), nullptr));
      const auto got_idx = download_or_fail(didx);
      const auto got_val = download_or_fail(dval);
      ASSERT_EQ(got_idx.size(), want.size());
      for (int i = 0; i < k; ++i) {
        ASSERT_EQ(got_idx[i], want[i]) << "rank " << i << " value " << x[want[i]];
        const float w = x[want[i]];
        ASSERT_EQ(std::memcmp(&got_val[i], &w, 4), 0) << "rank " << i;
      }
    }
  }
}

// ---- arguments ----------------------------------------------------------------------------

TEST(CudaOps, BadArgumentsLaunchNothing) {
  SPW_SKIP_WITHOUT_CUDA();
  constexpr cudaError_t kBad = cudaErrorInvalidValue;
  DeviceBuffer<float> f(4096);
  DeviceBuffer<int32_t> i32(256);
  float* p = f.get();
  ASSERT_NE(p, nullptr);

  EXPECT_EQ(launch_rmsnorm(p, nullptr, p, -1, 1, 1e-6f, nullptr), kBad);
  EXPECT_EQ(launch_rmsnorm(p, nullptr, p, 8, -1, 1e-6f, nullptr), kBad);
  EXPECT_EQ(launch_rmsnorm(nullptr, nullptr, p, 8, 1, 1e-6f, nullptr), kBad);

  EXPECT_EQ(launch_rope(p, p, 1, 1, 8, 3, false, nullptr), kBad);  // odd n_rot
  EXPECT_EQ(launch_rope(p, p, 1, 1, 8, 10, true, nullptr), kBad);  // n_rot > head_dim
  EXPECT_EQ(launch_rope(p, p, -1, 1, 8, 8, false, nullptr), kBad);
  EXPECT_EQ(launch_rope(p, nullptr, 1, 1, 8, 8, false, nullptr), kBad);

  EXPECT_EQ(launch_swiglu(p, p, p, -1, nullptr), kBad);
  EXPECT_EQ(launch_swiglu(p, nullptr, p, 4, nullptr), kBad);
  EXPECT_EQ(launch_add(p, p, p, -1, nullptr), kBad);
  EXPECT_EQ(launch_add(p, p, nullptr, 4, nullptr), kBad);
  EXPECT_EQ(launch_add_bias(p, p, -1, 2, nullptr), kBad);
  EXPECT_EQ(launch_add_bias(p, nullptr, 4, 2, nullptr), kBad);

  EXPECT_EQ(launch_kv_store(p, p, GgmlType::Q8_0, 32, 0, 1, nullptr), kBad);
  EXPECT_EQ(launch_kv_store(p, p, GgmlType::BF16, 32, 0, 1, nullptr), kBad);
  EXPECT_EQ(launch_kv_store(p, p, GgmlType::F16, 32, -1, 1, nullptr), kBad);
  EXPECT_EQ(launch_kv_store(p, nullptr, GgmlType::F32, 32, 0, 1, nullptr), kBad);

  const auto attn = [&](GgmlType t, int64_t n_tok, int64_t pos0, int64_t nh, int64_t nkv,
                        int64_t hd, int64_t hdv, const float* q) {
    return launch_attention(q, p, p, t, p, n_tok, pos0, nh, nkv, hd, hdv, 0.125f, nullptr);
  };
  EXPECT_EQ(attn(GgmlType::Q8_0, 1, 0, 4, 2, 32, 32, p), kBad);
  EXPECT_EQ(attn(GgmlType::F16, 1, 0, 6, 4, 32, 32, p), kBad);  // n_head % n_kv_heads
  EXPECT_EQ(attn(GgmlType::F16, 1, 0, 4, 0, 32, 32, p), kBad);
  EXPECT_EQ(attn(GgmlType::F16, 1, 0, 4, 2, 257, 32, p), kBad);  // head_dim > 256
  EXPECT_EQ(attn(GgmlType::F16, 1, 0, 4, 2, 32, 257, p), kBad);
  EXPECT_EQ(attn(GgmlType::F16, 1, 0, 4, 2, 0, 32, p), kBad);
  EXPECT_EQ(attn(GgmlType::F32, 1, -1, 4, 2, 32, 32, p), kBad);
  EXPECT_EQ(attn(GgmlType::F32, -1, 0, 4, 2, 32, 32, p), kBad);
  EXPECT_EQ(attn(GgmlType::F32, 1, 0, 4, 2, 32, 32, nullptr), kBad);

  EXPECT_EQ(launch_argmax(p, 0, i32.get(), nullptr), kBad);
  EXPECT_EQ(launch_argmax(p, 16, nullptr, nullptr), kBad);
  EXPECT_EQ(launch_topk(p, 100, 0, i32.get(), p, nullptr), kBad);
  EXPECT_EQ(launch_topk(p, 1000, 257, i32.get(), p, nullptr), kBad);
  EXPECT_EQ(launch_topk(p, 10, 11, i32.get(), p, nullptr), kBad);  // k > n
  EXPECT_EQ(launch_topk(p, 100, 4, nullptr, p, nullptr), kBad);

  // Zero sizes: success, nothing launched, null pointers allowed.
  EXPECT_EQ(launch_rmsnorm(nullptr, nullptr, nullptr, 0, 3, 1e-6f, nullptr), cudaSuccess);
  EXPECT_EQ(launch_rope(nullptr, nullptr, 0, 4, 64, 64, true, nullptr), cudaSuccess);
  EXPECT_EQ(launch_swiglu(nullptr, nullptr, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_add(nullptr, nullptr, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_add_bias(nullptr, nullptr, 8, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_kv_store(nullptr, nullptr, GgmlType::F16, 64, 3, 0, nullptr), cudaSuccess);
  EXPECT_EQ(attn(GgmlType::F16, 0, 10, 4, 2, 64, 64, nullptr), cudaSuccess);

  // Nothing was launched, so nothing failed on the device either.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaOps, KernelsLoadable) {
  SPW_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(kernels_loadable(), cudaSuccess) << cudaGetErrorString(kernels_loadable());
}

}  // namespace
}  // namespace spw::kernels
