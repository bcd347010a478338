// AArch64 Advanced SIMD (NEON) quantized dot products: ARMv8-A, no dot-product instructions
// (Cortex-A53/A72: Raspberry Pi 3 and 4). Compiled with the baseline flags plus
// -ffp-contract=off (engine/CMakeLists.txt); simd.cpp selects it from HWCAP_ASIMD.
#if defined(__aarch64__) && defined(__ARM_NEON)
#define SPW_QUANT_TABLE_FN quant_kernels_neon
#include "engine/cpu/quant_neon.inc"
#else
#include "engine/cpu/kernels.h"
namespace spw::cpu {
const QuantKernels* quant_kernels_neon() { return nullptr; }
}  // namespace spw::cpu
#endif
