// AVX2 + FMA + F16C quantized dot products (compiled with -mavx2 -mfma -mf16c; see
// engine/CMakeLists.txt). Runs only after simd.cpp has checked the CPU.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPW_QUANT_TABLE_FN quant_kernels_avx2
#include "engine/cpu/quant_x86.inc"
#else
#include "engine/cpu/kernels.h"
namespace spw::cpu {
const QuantKernels* quant_kernels_avx2() { return nullptr; }
}  // namespace spw::cpu
#endif
