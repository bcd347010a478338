#include "engine/cpu/simd.h"

#include <atomic>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "engine/cpu/kernels.h"

namespace spw::cpu {
namespace {

#if defined(__aarch64__)
// AArch64 Linux hardware capability bits (<asm/hwcap.h>): Advanced SIMD, and the SDOT/UDOT
// dot-product instructions of ARMv8.2-A (optional there, standard from ARMv8.4-A).
constexpr unsigned long kHwcapAsimd = 1UL << 1;
constexpr unsigned long kHwcapAsimdDp = 1UL << 20;

unsigned long aarch64_hwcap() {
#if defined(__linux__)
  return getauxval(AT_HWCAP);
#else
  return kHwcapAsimd;  // Advanced SIMD is part of every ARMv8-A; dot products are not
#endif
}
#endif

bool cpu_has(SimdLevel level) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XGETBV). The
  // table getters come last: they run code compiled for their level.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (level) {
    case SimdLevel::Scalar:
      return true;
    case SimdLevel::Avx2:
      return avx2 && quant_kernels_avx2() != nullptr && op_kernels_avx2() != nullptr;
    case SimdLevel::Avx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             quant_kernels_avx512() != nullptr && op_kernels_avx512() != nullptr;
    case SimdLevel::Neon:
    case SimdLevel::NeonDotprod:
      return false;
  }
  return false;
#elif defined(__aarch64__)
  // The table getters come last, as on x86: the dot-product table runs SDOT code.
  const unsigned long hwcap = aarch64_hwcap();
  switch (level) {
    case SimdLevel::Scalar:
      return true;
    case SimdLevel::Neon:
      return (hwcap & kHwcapAsimd) != 0 && quant_kernels_neon() != nullptr;
    case SimdLevel::NeonDotprod:
      return (hwcap & kHwcapAsimd) != 0 && (hwcap & kHwcapAsimdDp) != 0 &&
             quant_kernels_neon_dotprod() != nullptr;
    case SimdLevel::Avx2:
    case SimdLevel::Avx512:
      return false;
  }
  return false;
#else
  return level == SimdLevel::Scalar;
#endif
}

SimdLevel detect() {
  for (SimdLevel l :
       {SimdLevel::Avx512, SimdLevel::Avx2, SimdLevel::NeonDotprod, SimdLevel::Neon}) {
    if (cpu_has(l)) return l;
  }
  return SimdLevel::Scalar;
}

struct Tables {
  const QuantKernels* quant;
  const OpKernels* ops;
};

// Each processor builds only its own levels' units (engine/CMakeLists.txt), so only those
// getters are referred to.
Tables tables_for(SimdLevel level) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::Avx512:
      return {quant_kernels_avx512(), op_kernels_avx512()};
    case SimdLevel::Avx2:
      return {quant_kernels_avx2(), op_kernels_avx2()};
#elif defined(__aarch64__)
    case SimdLevel::NeonDotprod:  // the element-wise ops and attention run scalar on Arm
      return {quant_kernels_neon_dotprod(), op_kernels_scalar()};
    case SimdLevel::Neon:
      return {quant_kernels_neon(), op_kernels_scalar()};
#endif
    default:
      break;
  }
  return {quant_kernels_scalar(), op_kernels_scalar()};
}

// Both tables are published together through one pointer to a static per level, so a
// reader never sees a quant table of one level with the ops of another. Each static is built
// on first use of its level only: the getters of a level run code compiled for it.
const Tables* tables_static(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: {
      static const Tables t = tables_for(SimdLevel::Avx512);
      return &t;
    }
    case SimdLevel::Avx2: {
      static const Tables t = tables_for(SimdLevel::Avx2);
      return &t;
    }
    case SimdLevel::NeonDotprod: {
      static const Tables t = tables_for(SimdLevel::NeonDotprod);
      return &t;
    }
    case SimdLevel::Neon: {
      static const Tables t = tables_for(SimdLevel::Neon);
      return &t;
    }
    case SimdLevel::Scalar:
      break;
  }
  static const Tables t = tables_for(SimdLevel::Scalar);
  return &t;
}

std::atomic<int> g_level{-1};  // -1: not chosen yet

SimdLevel current() {
  int l = g_level.load(std::memory_order_acquire);
  if (l < 0) {
    int expected = -1;
    g_level.compare_exchange_strong(expected, static_cast<int>(detected_simd_level()),
                                    std::memory_order_acq_rel);
    l = g_level.load(std::memory_order_acquire);
  }
  return static_cast<SimdLevel>(l);
}

}  // namespace

SimdLevel detected_simd_level() {
  static const SimdLevel level = detect();
  return level;
}

bool simd_level_supported(SimdLevel level) { return cpu_has(level); }

bool set_simd_level(SimdLevel level) {
  if (!cpu_has(level)) return false;
  g_level.store(static_cast<int>(level), std::memory_order_release);
  return true;
}

SimdLevel simd_level() { return current(); }

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar:
      return "scalar";
    case SimdLevel::Avx2:
      return "avx2";
    case SimdLevel::Avx512:
      return "avx512";
    case SimdLevel::Neon:
      return "neon";
    case SimdLevel::NeonDotprod:
      return "neon-dotprod";
  }
  return "unknown";
}

const QuantKernels& active_quant_kernels() { return *tables_static(current())->quant; }
const OpKernels& active_op_kernels() { return *tables_static(current())->ops; }

}  // namespace spw::cpu
