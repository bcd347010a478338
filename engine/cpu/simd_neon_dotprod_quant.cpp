// AArch64 NEON quantized dot products with ARMv8.2-A's SDOT (`vdotq_s32`: Cortex-A55/A76 and
// later, Neoverse N1/V1 (Graviton 2/3), Jetson Orin's Cortex-A78AE). Compiled with
// -march=armv8.2-a+dotprod (engine/CMakeLists.txt); runs only after simd.cpp has found
// HWCAP_ASIMDDP in the kernel's hardware capabilities.
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define SPW_QUANT_TABLE_FN quant_kernels_neon_dotprod
#include "engine/cpu/quant_neon.inc"
#else
#include "engine/cpu/kernels.h"
namespace spw::cpu {
const QuantKernels* quant_kernels_neon_dotprod() { return nullptr; }
}  // namespace spw::cpu
#endif
