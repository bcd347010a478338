#include "engine/cpu/simd.h"

#include <atomic>

#include "engine/cpu/kernels.h"

namespace spw::cpu {
namespace {

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
             quant_kernels_avx512() != nullptr && op_kernels_avx2() != nullptr;
  }
  return false;
#else
  return level == SimdLevel::Scalar;
#endif
}

SimdLevel detect() {
  for (SimdLevel l : {SimdLevel::Avx512, SimdLevel::Avx2}) {
    if (cpu_has(l)) return l;
  }
  return SimdLevel::Scalar;
}

struct Tables {
  const QuantKernels* quant;
  const OpKernels* ops;
};

Tables tables_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512:
      return {quant_kernels_avx512(), op_kernels_avx2()};  // no ops gain from 512-bit here
    case SimdLevel::Avx2:
      return {quant_kernels_avx2(), op_kernels_avx2()};
    case SimdLevel::Scalar:
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
  }
  return "unknown";
}

const QuantKernels& active_quant_kernels() { return *tables_static(current())->quant; }
const OpKernels& active_op_kernels() { return *tables_static(current())->ops; }

}  // namespace spw::cpu
