// The SIMD levels a test runs its kernels at: those this processor has (engine/cpu/simd.h), and a
// scope that selects one for a test and restores the previous level after it.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/simd.h"

namespace spw::test {

/// Every level of cpu::kAllSimdLevels this processor supports, in that order (scalar first).
inline std::vector<cpu::SimdLevel> supported_simd_levels() {
  std::vector<cpu::SimdLevel> v;
  for (cpu::SimdLevel l : cpu::kAllSimdLevels) {
    if (cpu::simd_level_supported(l)) v.push_back(l);
  }
  return v;
}

/// Selects `l` for the scope (a failed selection is a test failure) and restores the level that
/// was selected before.
class SimdLevelScope {
 public:
  explicit SimdLevelScope(cpu::SimdLevel l) : prev_(cpu::simd_level()) {
    EXPECT_TRUE(cpu::set_simd_level(l));
  }
  ~SimdLevelScope() { cpu::set_simd_level(prev_); }
  SimdLevelScope(const SimdLevelScope&) = delete;
  SimdLevelScope& operator=(const SimdLevelScope&) = delete;

 private:
  cpu::SimdLevel prev_;
};

}  // namespace spw::test
