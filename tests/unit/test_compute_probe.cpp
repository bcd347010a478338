// Tests of the compute probes (engine/cpu/compute_probe.h) that `bench` reports as its roofline:
// at every SIMD level this CPU runs, a finite rate of the order a CPU core can reach. Bounded,
// not timed: a probe the optimizer folds away (the scalar int8 loop once reported ~1e18 GOP/s)
// fails the upper bound.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "engine/cpu/compute_probe.h"
#include "engine/cpu/simd.h"
#include "tests/support/simd_levels.h"

namespace spw::cpu {
namespace {

TEST(ComputeProbe, EveryLevelReportsARateACoreCanReach) {
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    SCOPED_TRACE(std::string(simd_level_name(level)));
    const double fp32 = probe_fp32_gflops_per_s(1, 0.01);
    const double int8 = probe_int8_gops_per_s(1, 0.01);
    // One thread: above 0.05 G/s, and below 1e4 G/s (a 512-bit VPDPBUSD core at 5 GHz with two
    // ports does ~1,300 int8 GOP/s; an FMA core ~320 GFLOP/s).
    EXPECT_TRUE(std::isfinite(fp32) && fp32 > 0.05 && fp32 < 1e4) << fp32;
    EXPECT_TRUE(std::isfinite(int8) && int8 > 0.05 && int8 < 1e4) << int8;
  }
}

}  // namespace
}  // namespace spw::cpu
