// AVX-512 (F, BW, VL, VNNI) quantized dot products: the AVX2 kernels with their u8 x s8
// products done by 256-bit VPDPBUSD (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni on top of the AVX2 flags; see engine/CMakeLists.txt). 256-bit vectors keep
// the clock up on CPUs that slow down for 512-bit ones; decode is bound by memory anyway. The
// float formats (F32, F16, BF16) are the exception: their prefill is bound by FMA throughput,
// so they run 512-bit tiles (quant_x86.inc, Flt16).
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define SPW_QUANT_TABLE_FN quant_kernels_avx512
#include "engine/cpu/quant_x86.inc"
#else
#include "engine/cpu/kernels.h"
namespace spw::cpu {
const QuantKernels* quant_kernels_avx512() { return nullptr; }
}  // namespace spw::cpu
#endif
