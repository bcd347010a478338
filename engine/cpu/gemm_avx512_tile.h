// Internal to the AVX-512 GEMM units (gemm_avx512.cpp, gemm_avx512_low_bit.cpp; compiled with
// the AVX-512 flags, engine/CMakeLists.txt): the helpers their tiles share. Internal linkage
// (unnamed namespace), as gemm_kernels.h's tile_for: no other unit may include this header.
#pragma once

#if !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
      defined(__AVX512VNNI__))
#error "gemm_avx512_tile.h is for the units compiled with the AVX-512 VNNI flags"
#endif

#include <immintrin.h>

#include <cstdint>

namespace spw::cpu {
namespace {

// Rows r < nr (1..16) of T tokens' accumulators to y[t * ys + r].
template <int T>
inline void store_tile(const __m512 (&acc)[T], float* y, int64_t ys, int nr) {
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys, m, acc[t]);
}

// The 1-token tiles stream their weights: the record two super-blocks ahead into L1.
template <int kRecordBytes>
inline void prefetch_record_ahead(const uint8_t* wb) {
  for (int l = 0; l < kRecordBytes; l += 256)
    _mm_prefetch(reinterpret_cast<const char*>(wb + 2 * kRecordBytes + l), _MM_HINT_T0);
}

// acc += VPDPBUSD(w, the 4 bytes at p broadcast) / VPDPWSSD(w, the int16 pair at p broadcast),
// the broadcast embedded in the instruction ({1to16}: no separate broadcast, one address
// register for a whole packed tile).
__attribute__((always_inline)) inline void dpbusd_bcast(__m512i& acc, __m512i w, const int32_t* p) {
  __asm__("vpdpbusd %[x]%{1to16%}, %[w], %[s]" : [s] "+v"(acc) : [w] "v"(w), [x] "m"(*p));
}
__attribute__((always_inline)) inline void dpwssd_bcast(__m512i& acc, __m512i w, const int32_t* p) {
  __asm__("vpdpwssd %[x]%{1to16%}, %[w], %[s]" : [s] "+v"(acc) : [w] "v"(w), [x] "m"(*p));
}

// s[t] += VPDPBUSD(op, token t's 4 codes at q[t]) for the 8 tokens of a packed tile.
__attribute__((always_inline)) inline void dpbusd_tile8(__m512i (&s)[8], __m512i op,
                                                        const int32_t* q) {
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) dpbusd_bcast(s[t], op, q + t);
}

}  // namespace
}  // namespace spw::cpu
