// The activation kernels (kernels/rmsnorm.cu, rope.cu, swiglu.cu, add.cu) against the CPU
// backend's ops or float64 loops, on awkward sizes, the argument checks of their launchers, and
// kernels_loadable(). The weight kernels are tested in test_cuda_quant.cpp, the KV write and
// attention of the GPU window in test_cuda_paged.cpp.
//
// Tolerances, |got - want| <= atol + rtol * |want| unless stated:
// - exact: add, add_bias;
// - rmsnorm rtol 5e-6 (the GPU sums squares in f32, the CPU in double; the output is a
//   product, so the error is relative per element);
// - rope and swiglu: a few ulps (FMA contraction, expf within 2 ulp of exp).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/ops.h"
#include "kernels/launch.h"
#include "tests/cuda/cuda_test.h"

namespace spw::kernels {
namespace {

using test::DeviceBuffer;

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
      RopeParams rp;
      rp.freq_base = 1e6;
      const auto inv_freq = rope_inv_freq(dm.n_rot, rp, nullptr);
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

// GeGLU (gemma3): against gelu_tanh in double, as x / (1 + exp(-2z)) = 0.5 x (1 + tanh z).
TEST(CudaOps, GeGlu) {
  SPW_SKIP_WITHOUT_CUDA();
  for (int64_t n : {1, 1000, 3 * 4097 + 1}) {
    auto g = uniform(static_cast<size_t>(n), -12.0f, 12.0f, 6);
    const auto u = uniform(static_cast<size_t>(n), -3.0f, 3.0f, 7);
    if (n > 4) {
      g[0] = -100.0f;
      g[1] = 100.0f;
      g[2] = -1e20f;
      g[3] = 0.0f;
    }
    std::vector<double> want(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double x = g[i];
      const double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
      want[i] = x / (1.0 + std::exp(-2.0 * z)) * u[i];
    }
    DeviceBuffer<float> dg, du, dy(g.size());
    ASSERT_TRUE(dg.upload(g) && du.upload(u) && dy.poison());
    SPW_ASSERT_CUDA(launch_geglu(dg.get(), du.get(), dy.get(), n, nullptr));
    const auto got = download_or_fail(dy);
    // The exponent formed in float (|2z| up to ~100 here): 2e-5 relative in the tails.
    EXPECT_TRUE(all_close(got, want, 1e-30, 2e-5)) << "n " << n;
  }
}

// The MoE data movement: gather, scatter, the weighted sum in choice order, the shared expert's
// sigmoid gate.
TEST(CudaOps, MoeGatherScatterCombineSharedGate) {
  SPW_SKIP_WITHOUT_CUDA();
  const int64_t n = 5, k = 2, dim = 300;
  const auto h = uniform(static_cast<size_t>(n * dim), -1.0f, 1.0f, 8);
  const std::vector<int32_t> rows = {4, 0, 2};
  DeviceBuffer<float> dh, dx(static_cast<size_t>(3 * dim));
  DeviceBuffer<int32_t> dr;
  ASSERT_TRUE(dh.upload(h) && dr.upload(rows) && dx.poison());
  SPW_ASSERT_CUDA(launch_gather_rows(dh.get(), dr.get(), 3, dim, dx.get(), nullptr));
  const auto gx = download_or_fail(dx);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < dim; ++c)
      ASSERT_EQ(gx[i * dim + static_cast<size_t>(c)], h[static_cast<size_t>(rows[i] * dim + c)]);
  // Scatter the gathered rows to slots 9, 1, 6 of [n * k][dim].
  const std::vector<int32_t> slots = {9, 1, 6};
  DeviceBuffer<int32_t> ds;
  DeviceBuffer<float> slot(static_cast<size_t>(n * k * dim));
  ASSERT_TRUE(ds.upload(slots) && slot.upload(std::vector<float>(slot.size(), 0.0f)));
  SPW_ASSERT_CUDA(launch_scatter_rows(dx.get(), ds.get(), 3, dim, slot.get(), nullptr));
  const auto sl = download_or_fail(slot);
  for (size_t i = 0; i < slots.size(); ++i)
    for (int64_t c = 0; c < dim; ++c)
      ASSERT_EQ(sl[static_cast<size_t>(slots[i] * dim + c)], gx[i * dim + static_cast<size_t>(c)]);
  const auto w = uniform(static_cast<size_t>(n * k), 0.0f, 1.0f, 9);
  DeviceBuffer<float> dw, out(static_cast<size_t>(n * dim));
  ASSERT_TRUE(dw.upload(w) && out.poison());
  SPW_ASSERT_CUDA(launch_moe_combine(slot.get(), dw.get(), n, k, dim, out.get(), nullptr));
  const auto o = download_or_fail(out);
  std::vector<double> want(static_cast<size_t>(n * dim));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) {
      float acc = 0.0f;  // the kernel's order: choice 0, then 1
      for (int64_t j = 0; j < k; ++j)
        acc += w[static_cast<size_t>(t * k + j)] * sl[static_cast<size_t>((t * k + j) * dim + c)];
      want[static_cast<size_t>(t * dim + c)] = acc;
    }
  EXPECT_TRUE(all_close(o, want, 1e-7, 1e-6));
  // out += sigmoid(h . g) * y.
  const auto g = uniform(static_cast<size_t>(dim), -0.2f, 0.2f, 10);
  const auto y = uniform(static_cast<size_t>(n * dim), -1.0f, 1.0f, 11);
  DeviceBuffer<float> dgw, dy;
  ASSERT_TRUE(dgw.upload(g) && dy.upload(y));
  SPW_ASSERT_CUDA(
      launch_shared_gate_add(dh.get(), dgw.get(), dy.get(), n, dim, out.get(), nullptr));
  const auto o2 = download_or_fail(out);
  for (int64_t t = 0; t < n; ++t) {
    double d = 0;
    for (int64_t c = 0; c < dim; ++c)
      d += static_cast<double>(h[static_cast<size_t>(t * dim + c)]) * g[static_cast<size_t>(c)];
    const double gate = 1.0 / (1.0 + std::exp(-d));
    for (int64_t c = 0; c < dim; ++c)
      want[static_cast<size_t>(t * dim + c)] =
          o[static_cast<size_t>(t * dim + c)] + gate * y[static_cast<size_t>(t * dim + c)];
  }
  EXPECT_TRUE(all_close(o2, want, 1e-6, 1e-5));
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

// ---- arguments ----------------------------------------------------------------------------

TEST(CudaOps, BadArgumentsLaunchNothing) {
  SPW_SKIP_WITHOUT_CUDA();
  constexpr cudaError_t kBad = cudaErrorInvalidValue;
  DeviceBuffer<float> f(4096);
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

  // Zero sizes: success, nothing launched, null pointers allowed.
  EXPECT_EQ(launch_rmsnorm(nullptr, nullptr, nullptr, 0, 3, 1e-6f, nullptr), cudaSuccess);
  EXPECT_EQ(launch_rope(nullptr, nullptr, 0, 4, 64, 64, true, nullptr), cudaSuccess);
  EXPECT_EQ(launch_swiglu(nullptr, nullptr, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_add(nullptr, nullptr, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_add_bias(nullptr, nullptr, 8, 0, nullptr), cudaSuccess);

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
