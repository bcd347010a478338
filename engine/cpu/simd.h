// SIMD level of the fast CPU path: detected once from the CPU, overridable for tests.
//
// Every kernel exists at the Scalar level (portable C++, the same integer math as the SIMD
// code). On x86-64 the AVX2 level (AVX2 + FMA + F16C) and the AVX-512 level (AVX-512
// F/BW/VL + VNNI on top of AVX2) are compiled in their own translation units with their own
// target flags and chosen at run time, so one binary runs on any x86-64. On AArch64 the NEON
// level (Advanced SIMD, part of every ARMv8-A) and the NEON dot-product level (ARMv8.2-A's
// SDOT, `vdotq_s32`, HWCAP_ASIMDDP) are chosen the same way, so one binary runs on a Cortex-A53
// (Raspberry Pi 3) as on a Cortex-A76 (Pi 5), Graviton or Jetson Orin. Kernels a level has no
// code for run at the Scalar level.
#pragma once

#include <string_view>

namespace spw::cpu {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3, NeonDotprod = 4 };

/// Every level, in enum order (tests and benchmarks loop over those simd_level_supported()).
inline constexpr SimdLevel kAllSimdLevels[] = {
    SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Neon, SimdLevel::NeonDotprod};

/// The best level this CPU and this build support (computed once, thread-safe).
SimdLevel detected_simd_level();

/// True when `level` can run here (Scalar always can).
bool simd_level_supported(SimdLevel level);

/// Selects the level every kernel uses from now on. Returns false, and changes nothing, when
/// the CPU or the build lacks it. Meant for tests and benchmarks; not to be called while
/// kernels run on other threads (each kernel call reads the level once, so a change between
/// calls is safe).
bool set_simd_level(SimdLevel level);

/// The level in use (detected_simd_level() until set_simd_level() changes it).
SimdLevel simd_level();

/// "scalar", "avx2", "avx512", "neon", "neon-dotprod".
std::string_view simd_level_name(SimdLevel level);

}  // namespace spw::cpu
