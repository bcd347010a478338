// Internal to engine/gguf: the helpers the reference (de)quantizers share, and the entry points
// of the block types whose codecs live in ggml_low_bit.cpp (Q2_K, Q3_K, IQ4_NL, IQ4_XS). The
// public API is ggml_types.h; nothing outside engine/gguf includes this header.
//
// Every function takes nb, a number of whole blocks; x / y are nb * block_size floats; src /
// dst are nb * type_size bytes at any byte offset.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/common/fp16.h"
#include "formats/ggml_format.h"

namespace spw::gguf_detail {

// Blocks may sit at any byte offset inside an mmapped file, so every block is copied into a
// local struct with memcpy before its fields are read (and built locally, then copied out,
// when quantizing).
template <typename Block>
inline Block load_block(const void* src, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const unsigned char*>(src) + i * sizeof(Block), sizeof(Block));
  return b;
}

template <typename Block>
inline void store_block(void* dst, int64_t i, const Block& b) {
  std::memcpy(static_cast<unsigned char*>(dst) + i * sizeof(Block), &b, sizeof(Block));
}

// Round to nearest, ties to even, as ggml's nearest_int() does (it adds 1.5 * 2^23 and
// reads the low bits, which rounds in the default FPU mode).
inline int nearest_int(float v) { return static_cast<int>(std::lrintf(v)); }

// Smallest binary16 value >= v (v >= 0, finite, < 65504): a super-block scale rounded up,
// so that 63 (or 127, 15, 31) times it still covers the largest sub-block scale and nothing
// clips.
inline uint16_t fp16_round_up(float v) {
  uint16_t h = fp32_to_fp16(v);
  if (fp16_to_fp32(h) < v) ++h;  // positive halves are ordered like their bit patterns
  return h;
}

// The value of largest magnitude, with its sign (ggml's amax/max pair); the first of equal
// magnitudes.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// ggml_low_bit.cpp: dequantize_row / quantize_row of one type over nb blocks.
void dequant_q2_K(const void* src, float* y, int64_t nb);
void dequant_q3_K(const void* src, float* y, int64_t nb);
void dequant_iq4_nl(const void* src, float* y, int64_t nb);
void dequant_iq4_xs(const void* src, float* y, int64_t nb);
void quant_q2_K(const float* x, void* dst, int64_t nb);
void quant_q3_K(const float* x, void* dst, int64_t nb);
void quant_iq4_nl(const float* x, void* dst, int64_t nb);
void quant_iq4_xs(const float* x, void* dst, int64_t nb);

}  // namespace spw::gguf_detail
