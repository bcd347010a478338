// The online-softmax rules of the CUDA attention (kernels/softmax_math.h), compiled as plain
// C++: streamed and block updates over random splits, merged in random orders, against a
// float64 softmax-weighted sum; empty partials and masked scores never giving NaN; agreement
// with the CPU backend's attn_merge.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/attention.h"
#include "kernels/softmax_math.h"

namespace spw::kernels {
namespace {

constexpr int kDim = 7;  // values per position (an odd head_dim_v)

// A partial as the kernels keep it: the state and the unnormalised o.
struct Partial {
  SoftmaxState st;
  std::vector<float> o = std::vector<float>(kDim, 0.0f);
};

// o += factor-scaled merge of b into a, as the kernels apply softmax_merge.
void merge_into(Partial& a, const Partial& b) {
  const SoftmaxMerge f = softmax_merge(a.st, b.st);
  for (int d = 0; d < kDim; ++d) a.o[d] = a.o[d] * f.alpha + b.o[d] * f.beta;
}

// Scores [j0, j1) one at a time (softmax_push) or as one block (softmax_push_block).
Partial attend(const std::vector<float>& x, const std::vector<float>& v, size_t j0, size_t j1,
               bool block) {
  Partial p;
  if (block) {
    std::vector<float> w(j1 - j0);
    const float alpha =
        softmax_push_block(p.st, x.data() + j0, static_cast<int64_t>(j1 - j0), w.data());
    for (int d = 0; d < kDim; ++d) p.o[d] *= alpha;
    for (size_t j = j0; j < j1; ++j) {
      for (int d = 0; d < kDim; ++d) p.o[d] += w[j - j0] * v[j * kDim + d];
    }
  } else {
    for (size_t j = j0; j < j1; ++j) {
      const SoftmaxStep s = softmax_push(p.st, x[j]);
      for (int d = 0; d < kDim; ++d) p.o[d] = p.o[d] * s.alpha + s.p * v[j * kDim + d];
    }
  }
  return p;
}

TEST(KernelSoftmaxMath, SplitAndMergedInAnyOrderMatchesFloat64) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    const size_t n = std::uniform_int_distribution<size_t>(1, 200)(rng);
    // Scores spread over +-40 in some trials (exp(x - m) spans far beyond f32 without the max
    // subtraction), with about 1 in 8 masked (-inf); at least one score stays finite.
    const float spread = trial % 3 == 0 ? 40.0f : 3.0f;
    std::uniform_real_distribution<float> score(-spread, spread), val(-1.0f, 1.0f);
    std::vector<float> x(n), v(n * kDim);
    for (auto& s : x) s = rng() % 8 == 0 ? -INFINITY : score(rng);
    x[rng() % n] = score(rng);
    for (auto& e : v) e = val(rng);

    // float64 reference and its scale sum_j w_j |v_j| / sum_j w_j, per dim.
    double m = -INFINITY;
    for (float s : x) m = std::max(m, static_cast<double>(s));
    double sum = 0.0;
    std::vector<double> want(kDim, 0.0), mag(kDim, 0.0);
    for (size_t j = 0; j < n; ++j) {
      const double w = std::exp(static_cast<double>(x[j]) - m);
      sum += w;
      for (int d = 0; d < kDim; ++d) {
        want[d] += w * v[j * kDim + d];
        mag[d] += w * std::fabs(v[j * kDim + d]);
      }
    }

    // Random cut points (empty pieces allowed), each piece streamed or as a block.
    const int n_cuts = std::uniform_int_distribution<int>(0, 6)(rng);
    std::vector<size_t> cuts = {0, n};
    for (int c = 0; c < n_cuts; ++c) cuts.push_back(rng() % (n + 1));
    std::sort(cuts.begin(), cuts.end());
    std::vector<Partial> parts;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      parts.push_back(attend(x, v, cuts[c], cuts[c + 1], rng() % 2 == 0));
    }
    // Merge random pairs until one is left: every order and tree shape is reachable.
    while (parts.size() > 1) {
      const size_t a = rng() % parts.size();
      size_t b = rng() % (parts.size() - 1);
      if (b >= a) ++b;
      merge_into(parts[a], parts[b]);
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(b));
    }
    const Partial& got = parts[0];
    ASSERT_GT(got.st.s, 0.0f);
    EXPECT_EQ(got.st.m, static_cast<float>(m));
    const float inv = softmax_inv_sum(got.st);
    for (int d = 0; d < kDim; ++d) {
      const double ref = want[d] / sum, tol = 1e-5 * (mag[d] / sum);
      EXPECT_NEAR(got.o[d] * inv, ref, tol) << "dim " << d << " n " << n;
    }
  }
}

TEST(KernelSoftmaxMath, EmptyPartialIsTheIdentityAndNeverNaN) {
  const SoftmaxState empty;  // m = -inf, s = 0
  ASSERT_EQ(empty.m, -INFINITY);
  ASSERT_EQ(empty.s, 0.0f);
  EXPECT_EQ(softmax_inv_sum(empty), 0.0f);

  Partial a;
  a.st.m = 2.5f;
  a.st.s = 3.25f;
  for (int d = 0; d < kDim; ++d) a.o[d] = 0.5f * static_cast<float>(d) - 1.0f;
  const Partial a0 = a;

  // a + empty = a, with factors (1, 0).
  SoftmaxState s = a.st;
  SoftmaxMerge f = softmax_merge(s, empty);
  EXPECT_EQ(f.alpha, 1.0f);
  EXPECT_EQ(f.beta, 0.0f);
  EXPECT_EQ(s.m, a.st.m);
  EXPECT_EQ(s.s, a.st.s);

  // empty + a = a, with factors (0, 1).
  Partial e;
  merge_into(e, a);
  EXPECT_EQ(e.st.m, a0.st.m);
  EXPECT_EQ(e.st.s, a0.st.s);
  for (int d = 0; d < kDim; ++d) EXPECT_EQ(e.o[d], a0.o[d]);

  // empty + empty stays empty, finite factors.
  SoftmaxState z;
  f = softmax_merge(z, empty);
  EXPECT_FALSE(std::isnan(f.alpha) || std::isnan(f.beta));
  EXPECT_EQ(z.m, -INFINITY);
  EXPECT_EQ(z.s, 0.0f);

  // A masked score into an empty state: m stays -inf, no NaN anywhere.
  SoftmaxState t;
  const SoftmaxStep step = softmax_push(t, -INFINITY);
  EXPECT_EQ(step.alpha, 1.0f);
  EXPECT_EQ(step.p, 0.0f);
  EXPECT_EQ(t.m, -INFINITY);
  EXPECT_EQ(t.s, 0.0f);
  EXPECT_EQ(softmax_rescale(-INFINITY, -INFINITY), 1.0f);
  EXPECT_EQ(softmax_weight(-INFINITY, -INFINITY), 0.0f);
  EXPECT_EQ(softmax_rescale(-INFINITY, 3.0f), 0.0f);

  // An all-masked block into an empty state and into a live one.
  const float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  float w[3] = {1.0f, 1.0f, 1.0f};
  SoftmaxState u;
  float alpha = softmax_push_block(u, masked, 3, w);
  EXPECT_EQ(alpha, 1.0f);
  EXPECT_EQ(u.m, -INFINITY);
  EXPECT_EQ(u.s, 0.0f);
  for (float p : w) EXPECT_EQ(p, 0.0f);
  SoftmaxState live = a.st;
  alpha = softmax_push_block(live, masked, 3, w);
  EXPECT_EQ(alpha, 1.0f);
  EXPECT_EQ(live.m, a.st.m);
  EXPECT_EQ(live.s, a.st.s);

  // Merging an empty block partial into a live one, then a live one into it: no NaN.
  Partial b = a0;
  Partial eb;
  eb.st = u;
  merge_into(b, eb);
  merge_into(eb, a0);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(b.o[d], a0.o[d]);
    EXPECT_EQ(eb.o[d], a0.o[d]);
  }
}

TEST(KernelSoftmaxMath, MergeAgreesWithCpuAttnMerge) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mdist(-30.0f, 30.0f), sdist(0.5f, 50.0f),
      odist(-10.0f, 10.0f);
  // A random partial; one in five is empty, some share the other side's max exactly.
  const auto make = [&](float m_hint) {
    cpu::AttnPartial p;
    p.o.assign(kDim, 0.0f);
    const unsigned kind = rng() % 5;
    if (kind == 0) return p;
    p.m = kind == 1 ? m_hint : mdist(rng);
    p.s = sdist(rng);
    for (auto& e : p.o) e = odist(rng);
    return p;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    SCOPED_TRACE(trial);
    const cpu::AttnPartial a = make(1.5f), b = make(1.5f);

    cpu::AttnPartial want = a;
    cpu::attn_merge(want, b);

    Partial got;
    got.st.m = a.m;
    got.st.s = a.s;
    got.o = a.o;
    Partial other;
    other.st.m = b.m;
    other.st.s = b.s;
    other.o = b.o;
    merge_into(got, other);

    ASSERT_FALSE(std::isnan(got.st.m) || std::isnan(got.st.s));
    EXPECT_EQ(got.st.m, want.m);
    EXPECT_NEAR(got.st.s, want.s, 1e-6f * std::fabs(want.s));
    std::vector<float> out_want(kDim), out_got(kDim);
    cpu::attn_finalize(want, out_want.data());
    const float inv = softmax_inv_sum(got.st);
    for (int d = 0; d < kDim; ++d) {
      EXPECT_NEAR(got.o[d], want.o[d], 1e-6f * (std::fabs(a.o[d]) + std::fabs(b.o[d])));
      EXPECT_NEAR(got.o[d] * inv, out_want[d], 1e-5f * std::fabs(out_want[d]) + 1e-7f);
    }
  }
}

}  // namespace
}  // namespace spw::kernels
