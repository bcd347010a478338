// Element decoding of the GGUF weight types, shared by the CUDA kernels (matvec.cu,
// dequant.cu, get_rows.cu, convert.cu) and the CPU test that checks it bit for bit against
// the reference dequantize_row() (tests/unit/test_kernel_quant_math.cpp). Plain C++ as well
// as device code: no CUDA header is needed.
//
// Block formats: ggml's block_q4_0 ... block_q6_K, block_q2_K, block_q3_K, block_iq4_nl and
// block_iq4_xs (ggml-common.h), mirrored by the packed structs of formats/ggml_format.h; the
// decoding rules are those of ggml's dequantize_row_* as the engine's reference
// (engine/gguf/ggml_types.cpp, ggml_low_bit.cpp) writes them.
//
// Exactness. Every decoded float equals dequantize_row()'s bit for bit:
// - the integer codes become floats exactly (small integers; see small_uint_to_float),
// - the scale arithmetic is the reference's, operation for operation and in its order
//   (q * d, q * d + m, d1 * q - m1, (d * sc) * q, d * kValuesIQ4NL[q]),
// - on the device every product and sum is an explicitly rounded __fmul_rn / __fadd_rn, so
//   nvcc never contracts `q * d + m` into one FMA. (For these formats the product before an
//   add is exact anyway: an 11-bit half times a code of at most 6 + 5 bits fits a float's 24,
//   so a fused form would round identically; the explicit rounding keeps that from being a
//   silent assumption.) The host side relies on the reference not being contracted either
//   (the project compiles ISO C++, where GCC's default is -ffp-contract=off).
//
// Groups. Block types are decoded 8 elements at a time: group g of a block is two runs of 4
// consecutive elements, out[0..4) = elements [run_start(g, 0), +4) and out[4..8) = elements
// [run_start(g, 1), +4). The runs are chosen so that a group reads 4 contiguous bytes of
// quants (the low and the high nibbles of the same bytes), which is how the formats pack
// them; 4-element runs let a kernel load the matching activations as float4.
//
// Pointers: `blk` is the first byte of a block. It must be 2-byte aligned (every field the
// formats have sits at an even offset of an even-sized block); no stronger alignment is
// assumed. Multi-byte fields are little-endian, as in the file.
#pragma once

#include <cstdint>
#include <cstring>  // std::memcpy, host side only

#include "formats/ggml_format.h"
#include "kernels/common.h"

namespace spw::kernels {

// ---- bit casts and explicitly rounded arithmetic -----------------------------------------

SPW_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

SPW_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

/// a * b rounded once (never fused with a following add).
SPW_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b rounded once (never fused with a preceding multiply).
SPW_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a - b rounded once.
SPW_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// ---- half and bfloat16 --------------------------------------------------------------------

/// IEEE binary16 bits -> float, exact for every pattern: subnormals, +-0, +-inf, and NaN
/// with its sign and payload (the same bits as spw::fp16_to_fp32). Integer arithmetic only,
/// plus one exact subtraction for subnormals whose operands are normal floats, so the result
/// does not depend on flush-to-zero settings.
SPW_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;  // exponent and mantissa
  const uint32_t shifted = em << 13;
  float f;
  if (em >= 0x7C00u) {  // inf / NaN: exponent 31 -> 255, payload kept
    f = bits_to_float(shifted + (224u << 23));
  } else if (em >= 0x0400u) {  // normal: rebias 15 -> 127
    f = bits_to_float(shifted + (112u << 23));
  } else {  // subnormal or zero: 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24, exact
    f = bits_to_float(shifted + (113u << 23)) - 6.103515625e-05f;
  }
  return bits_to_float(float_to_bits(f) | sign);
}

/// bfloat16 bits -> float (exact: the top half of the float's bits).
SPW_HD float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

/// float -> binary16 bits, round to nearest even; overflow gives +-inf, NaN gives the quiet
/// NaN sign | 0x7E00. Bit-identical to spw::fp32_to_fp16 for every input (NaN included).
/// Device: one cvt.rn.f16.f32 (IEEE round-to-nearest-even, exact for subnormal halves) plus
/// the NaN pattern; host: integer rounding plus one exact float add for the subnormal range.
SPW_HD uint16_t float_to_half_rne(float f) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  if (f != f) h = static_cast<unsigned short>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7E00u);
  return h;
#else
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (a < 0x38800000u) {
    // |f| < 2^-14: the half is a multiple of 2^-24. Adding 0.5 (ulp 2^-24) rounds |f| to
    // that grid, ties to even, in one IEEE add; the low bits are then the half's mantissa
    // (0x400 when it rounds up to the smallest normal, which is the right pattern too).
    const float r = bits_to_float(a) + 0.5f;
    return static_cast<uint16_t>(sign | (float_to_bits(r) - 0x3F000000u));
  }
  // Normal: rebias 127 -> 15 and drop 13 mantissa bits, ties to even; a carry out of the
  // mantissa moves into the exponent, as it should.
  const uint32_t rebiased = a - (112u << 23);
  const uint32_t rounded = rebiased + 0x0FFFu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
#endif
}

// ---- loads ---------------------------------------------------------------------------------

/// Little-endian 16-bit field at p (p 2-byte aligned).
SPW_HD uint32_t load_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

/// Little-endian 32-bit field at p, p 2-byte aligned. kMaybe4: the caller's blocks keep
/// 4-byte fields 4-byte aligned when the data is (block size % 4 == 0), so a single load is
/// tried when the address allows; otherwise two 16-bit loads.
template <bool kMaybe4>
SPW_HD uint32_t load_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if (kMaybe4 && (reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    return *reinterpret_cast<const uint32_t*>(p);
  }
  const auto* q = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

/// v - bias as a float, exactly, for 0 <= v < 2^23 and small integer bias: 2^23 + v has v in
/// its mantissa bits, and (2^23 + v) - (2^23 + bias) is exact. Replaces an int -> float
/// conversion, which runs at a quarter or less of the FP32 rate on current GPUs.
template <int kBias>
SPW_HD float small_uint_to_float(uint32_t v) {
  return bits_to_float(0x4B000000u | v) - (8388608.0f + static_cast<float>(kBias));
}

/// Byte k (0..3) of a little-endian word.
SPW_HD uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xFFu; }

// ---- block traits ----------------------------------------------------------------------
//
// BlockTraits<T> for the fifteen supported types:
//   kType                    — T.
//   kBlockElems, kBlockBytes — as ggml (1 element for F32/F16/BF16).
//   kFloat                   — true for F32/F16/BF16: decode(p) reads one element at p.
// Block types also have:
//   kGroups                  — 8-element groups per block (kBlockElems / 8).
//   run_start(g, run)        — element index in the block of out[4*run .. 4*run+4).
//   decode_group(blk, g, out) — the 8 decoded floats of group g.

template <GgmlType T>
struct BlockTraits;

template <>
struct BlockTraits<GgmlType::F32> {
  static constexpr GgmlType kType = GgmlType::F32;
  static constexpr int kBlockElems = 1;
  static constexpr int kBlockBytes = 4;
  static constexpr bool kFloat = true;
  SPW_HD static float decode(const uint8_t* p) { return bits_to_float(load_u32<true>(p)); }
};

template <>
struct BlockTraits<GgmlType::F16> {
  static constexpr GgmlType kType = GgmlType::F16;
  static constexpr int kBlockElems = 1;
  static constexpr int kBlockBytes = 2;
  static constexpr bool kFloat = true;
  SPW_HD static float decode(const uint8_t* p) {
    return half_to_float(static_cast<uint16_t>(load_u16(p)));
  }
};

template <>
struct BlockTraits<GgmlType::BF16> {
  static constexpr GgmlType kType = GgmlType::BF16;
  static constexpr int kBlockElems = 1;
  static constexpr int kBlockBytes = 2;
  static constexpr bool kFloat = true;
  SPW_HD static float decode(const uint8_t* p) {
    return bf16_to_float(static_cast<uint16_t>(load_u16(p)));
  }
};

/// Q8_0: d (f16), qs[32] int8; y = qs[j] * d. Group g: elements [8g, 8g+8).
template <>
struct BlockTraits<GgmlType::Q8_0> {
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static constexpr int kBlockElems = kQK8_0;
  static constexpr int kBlockBytes = sizeof(BlockQ8_0);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 8 * g + 4 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const uint32_t q0 = load_u32<false>(blk + 2 + 8 * g);
    const uint32_t q1 = load_u32<false>(blk + 2 + 8 * g + 4);
    // Flipping the sign bit maps int8 v to v + 128 in [0, 255].
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(small_uint_to_float<128>(byte_of(q0 ^ 0x80808080u, k)), d);
      out[4 + k] = mul_rn(small_uint_to_float<128>(byte_of(q1 ^ 0x80808080u, k)), d);
    }
  }
};

/// Q4_0: d (f16), qs[16]; byte j holds element j (low nibble) and j + 16 (high);
/// y = (nibble - 8) * d. Group g: bytes [4g, 4g+4): elements 4g.. and 16 + 4g...
template <>
struct BlockTraits<GgmlType::Q4_0> {
  static constexpr GgmlType kType = GgmlType::Q4_0;
  static constexpr int kBlockElems = kQK4_0;
  static constexpr int kBlockBytes = sizeof(BlockQ4_0);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 4 * g + 16 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const uint32_t qs = load_u32<false>(blk + 2 + 4 * g);
    const uint32_t lo = qs & 0x0F0F0F0Fu, hi = (qs >> 4) & 0x0F0F0F0Fu;
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(small_uint_to_float<8>(byte_of(lo, k)), d);
      out[4 + k] = mul_rn(small_uint_to_float<8>(byte_of(hi, k)), d);
    }
  }
};

/// Q4_1: d, m (f16), qs[16] as Q4_0; y = nibble * d + m.
template <>
struct BlockTraits<GgmlType::Q4_1> {
  static constexpr GgmlType kType = GgmlType::Q4_1;
  static constexpr int kBlockElems = kQK4_1;
  static constexpr int kBlockBytes = sizeof(BlockQ4_1);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 4 * g + 16 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const float m = half_to_float(static_cast<uint16_t>(load_u16(blk + 2)));
    const uint32_t qs = load_u32<true>(blk + 4 + 4 * g);
    const uint32_t lo = qs & 0x0F0F0F0Fu, hi = (qs >> 4) & 0x0F0F0F0Fu;
    for (int k = 0; k < 4; ++k) {
      out[k] = add_rn(mul_rn(small_uint_to_float<0>(byte_of(lo, k)), d), m);
      out[4 + k] = add_rn(mul_rn(small_uint_to_float<0>(byte_of(hi, k)), d), m);
    }
  }
};

/// The 5th bits of a Q5_0/Q5_1 group: bit j of the little-endian qh word belongs to element
/// j. Returns 0x10 in byte k for element 4g + k (lo) or 16 + 4g + k (hi).
SPW_HD uint32_t q5_high_bits(uint32_t qh, int g, int run) {
  const uint32_t bits = (qh >> (4 * g + 16 * run)) & 0xFu;  // 4 bits, one per element
  // Spread bit k to bit 4 of byte k.
  return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

/// Q5_0: d (f16), qh (32 bits), qs[16]; y = ((nibble | bit << 4) - 16) * d.
template <>
struct BlockTraits<GgmlType::Q5_0> {
  static constexpr GgmlType kType = GgmlType::Q5_0;
  static constexpr int kBlockElems = kQK5_0;
  static constexpr int kBlockBytes = sizeof(BlockQ5_0);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 4 * g + 16 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const uint32_t qh = load_u32<false>(blk + 2);
    const uint32_t qs = load_u32<false>(blk + 6 + 4 * g);
    const uint32_t lo = (qs & 0x0F0F0F0Fu) | q5_high_bits(qh, g, 0);
    const uint32_t hi = ((qs >> 4) & 0x0F0F0F0Fu) | q5_high_bits(qh, g, 1);
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(small_uint_to_float<16>(byte_of(lo, k)), d);
      out[4 + k] = mul_rn(small_uint_to_float<16>(byte_of(hi, k)), d);
    }
  }
};

/// Q5_1: d, m (f16), qh (32 bits), qs[16]; y = (nibble | bit << 4) * d + m.
template <>
struct BlockTraits<GgmlType::Q5_1> {
  static constexpr GgmlType kType = GgmlType::Q5_1;
  static constexpr int kBlockElems = kQK5_1;
  static constexpr int kBlockBytes = sizeof(BlockQ5_1);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 4 * g + 16 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const float m = half_to_float(static_cast<uint16_t>(load_u16(blk + 2)));
    const uint32_t qh = load_u32<true>(blk + 4);
    const uint32_t qs = load_u32<true>(blk + 8 + 4 * g);
    const uint32_t lo = (qs & 0x0F0F0F0Fu) | q5_high_bits(qh, g, 0);
    const uint32_t hi = ((qs >> 4) & 0x0F0F0F0Fu) | q5_high_bits(qh, g, 1);
    for (int k = 0; k < 4; ++k) {
      out[k] = add_rn(mul_rn(small_uint_to_float<0>(byte_of(lo, k)), d), m);
      out[4 + k] = add_rn(mul_rn(small_uint_to_float<0>(byte_of(hi, k)), d), m);
    }
  }
};

/// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, from its 12 packed bytes
/// read as little-endian words w0 (bytes 0-3), w1 (4-7), w2 (8-11): sub-blocks 0-3 keep 6
/// bits in bytes j and j+4; sub-blocks 4-7 keep their low 4 bits in byte j+4 (low nibble:
/// scale, high: min) and their top 2 bits in the spare top bits of bytes j-4 and j (ggml's
/// get_scale_min_k4). Selects rather than a byte array, so device code stays in registers.
SPW_HD void k4_scale_min(uint32_t w0, uint32_t w1, uint32_t w2, int j, uint32_t& sc, uint32_t& m) {
  const int k = j & 3;
  const uint32_t b0 = byte_of(w0, k), b1 = byte_of(w1, k), b2 = byte_of(w2, k);
  if (j < 4) {
    sc = b0 & 63u;
    m = b1 & 63u;
  } else {
    sc = (b2 & 0xFu) | ((b0 >> 6) << 4);
    m = (b2 >> 4) | ((b1 >> 6) << 4);
  }
}

/// Shared by Q4_K and Q5_K: 64-element chunk c = g / 8 uses sub-blocks 2c (its first 32
/// elements, the low nibbles of 32 bytes) and 2c + 1 (the high nibbles); i = g % 8 picks
/// 4 of those bytes. Group g: elements 64c + 4i.. and 64c + 32 + 4i...
struct KQuantGroups {
  static constexpr int kBlockElems = kQK_K;
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 64 * (g >> 3) + 32 * run + 4 * (g & 7); }
  /// d1 = d * sc, m1 = dmin * m of sub-blocks 2c and 2c+1 (as ggml, in that order).
  SPW_HD static void scales(const uint8_t* blk, int c, float& d1, float& m1, float& d2, float& m2) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const float dmin = half_to_float(static_cast<uint16_t>(load_u16(blk + 2)));
    const uint32_t w0 = load_u32<true>(blk + 4), w1 = load_u32<true>(blk + 8),
                   w2 = load_u32<true>(blk + 12);
    uint32_t sc, m;
    k4_scale_min(w0, w1, w2, 2 * c, sc, m);
    d1 = mul_rn(d, small_uint_to_float<0>(sc));
    m1 = mul_rn(dmin, small_uint_to_float<0>(m));
    k4_scale_min(w0, w1, w2, 2 * c + 1, sc, m);
    d2 = mul_rn(d, small_uint_to_float<0>(sc));
    m2 = mul_rn(dmin, small_uint_to_float<0>(m));
  }
};

/// Q4_K: d, dmin (f16), 12 bytes of 6-bit scales/mins, qs[128]; y = d1 * nibble - m1.
template <>
struct BlockTraits<GgmlType::Q4_K> : KQuantGroups {
  static constexpr GgmlType kType = GgmlType::Q4_K;
  static constexpr int kBlockBytes = sizeof(BlockQ4_K);
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int c = g >> 3, i = g & 7;
    float d1, m1, d2, m2;
    scales(blk, c, d1, m1, d2, m2);
    const uint32_t qs = load_u32<true>(blk + 16 + 32 * c + 4 * i);
    const uint32_t lo = qs & 0x0F0F0F0Fu, hi = (qs >> 4) & 0x0F0F0F0Fu;
    for (int k = 0; k < 4; ++k) {
      out[k] = sub_rn(mul_rn(d1, small_uint_to_float<0>(byte_of(lo, k))), m1);
      out[4 + k] = sub_rn(mul_rn(d2, small_uint_to_float<0>(byte_of(hi, k))), m2);
    }
  }
};

/// Q5_K: as Q4_K plus qh[32]: bit 2c (2c + 1) of qh[l] is the 5th bit of element l
/// (l + 32) of chunk c; y = d1 * (nibble + 16 * bit) - m1.
template <>
struct BlockTraits<GgmlType::Q5_K> : KQuantGroups {
  static constexpr GgmlType kType = GgmlType::Q5_K;
  static constexpr int kBlockBytes = sizeof(BlockQ5_K);
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int c = g >> 3, i = g & 7;
    float d1, m1, d2, m2;
    scales(blk, c, d1, m1, d2, m2);
    const uint32_t qh = load_u32<true>(blk + 16 + 4 * i);
    const uint32_t qs = load_u32<true>(blk + 48 + 32 * c + 4 * i);
    const uint32_t lo = (qs & 0x0F0F0F0Fu) | (((qh >> (2 * c)) & 0x01010101u) << 4);
    const uint32_t hi = ((qs >> 4) & 0x0F0F0F0Fu) | (((qh >> (2 * c + 1)) & 0x01010101u) << 4);
    for (int k = 0; k < 4; ++k) {
      out[k] = sub_rn(mul_rn(d1, small_uint_to_float<0>(byte_of(lo, k))), m1);
      out[4 + k] = sub_rn(mul_rn(d2, small_uint_to_float<0>(byte_of(hi, k))), m2);
    }
  }
};

/// Q6_K: ql[128], qh[64], int8 scales[16], d (f16); y = (d * scale) * (q - 32), q 6 bits.
/// Per 128-element half n: ql[64n + l] holds elements l (low nibble) and l + 64 (high),
/// ql[64n + 32 + l] holds l + 32 and l + 96, qh[32n + l] bits 0-1, 2-3, 4-5, 6-7 the top bits
/// of l, l + 32, l + 64, l + 96; element e of the half has scale 16-element sub-block e / 16.
/// Group g = 16n + 8p + i: bytes ql[64n + 32p + 4i ..+4), qh[32n + 4i ..+4): elements
/// 32p + 4i.. (low nibbles, qh bits 2p) and 64 + 32p + 4i.. (high, qh bits 4 + 2p) of half n.
template <>
struct BlockTraits<GgmlType::Q6_K> {
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ6_K);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) {
    return 128 * (g >> 4) + 32 * ((g >> 3) & 1) + 4 * (g & 7) + 64 * run;
  }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int n = g >> 4, p = (g >> 3) & 1, i = g & 7;
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk + 208)));
    // Sub-block of the runs: (64 * run + 32p + 4i) / 16 within the half.
    const int s_lo = 8 * n + 2 * p + (i >> 2);
    const uint32_t sc_pair_lo = load_u16(blk + 192 + (s_lo & ~1));  // 2-aligned pair
    const uint32_t sc_pair_hi = load_u16(blk + 192 + ((s_lo + 4) & ~1));
    const uint32_t sc_lo = (sc_pair_lo >> (8 * (s_lo & 1))) & 0xFFu;
    const uint32_t sc_hi = (sc_pair_hi >> (8 * (s_lo & 1))) & 0xFFu;
    const float d_lo = mul_rn(d, small_uint_to_float<128>(sc_lo ^ 0x80u));
    const float d_hi = mul_rn(d, small_uint_to_float<128>(sc_hi ^ 0x80u));
    const uint32_t ql = load_u32<false>(blk + 64 * n + 32 * p + 4 * i);
    const uint32_t qh = load_u32<false>(blk + 128 + 32 * n + 4 * i);
    const uint32_t lo = (ql & 0x0F0F0F0Fu) | (((qh >> (2 * p)) & 0x03030303u) << 4);
    const uint32_t hi = ((ql >> 4) & 0x0F0F0F0Fu) | (((qh >> (4 + 2 * p)) & 0x03030303u) << 4);
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(d_lo, small_uint_to_float<32>(byte_of(lo, k)));
      out[4 + k] = mul_rn(d_hi, small_uint_to_float<32>(byte_of(hi, k)));
    }
  }
};

/// Q2_K: scales[16] (4-bit scale low, 4-bit min high per 16-element sub-block), qs[64], d,
/// dmin (f16); y = (d * sc) * q - dmin * m, q 2 bits. Per 128-element half n, byte 32n + l
/// holds element 32j + l of the half at bits 2j (j < 4); element e of the block belongs to
/// sub-block e / 16. Group g = 16n + 8p + i: bytes qs[32n + 4i ..+4) at bits 2(2p) and
/// 2(2p + 1): elements 128n + 64p + 4i.. and 128n + 64p + 32 + 4i...
template <>
struct BlockTraits<GgmlType::Q2_K> {
  static constexpr GgmlType kType = GgmlType::Q2_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ2_K);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) {
    return 128 * (g >> 4) + 64 * ((g >> 3) & 1) + 32 * run + 4 * (g & 7);
  }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int n = g >> 4, p = (g >> 3) & 1, i = g & 7;
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk + 80)));
    const float dmin = half_to_float(static_cast<uint16_t>(load_u16(blk + 82)));
    const uint32_t qs = load_u32<true>(blk + 16 + 32 * n + 4 * i);
    for (int run = 0; run < 2; ++run) {
      const int j = 2 * p + run;                          // shift 2j
      const uint32_t sc = blk[8 * n + 2 * j + (i >> 2)];  // scale and min byte
      const float dl = mul_rn(d, small_uint_to_float<0>(sc & 0xFu));
      const float ml = mul_rn(dmin, small_uint_to_float<0>(sc >> 4));
      const uint32_t q = (qs >> (2 * j)) & 0x03030303u;
      for (int k = 0; k < 4; ++k) {
        out[4 * run + k] = sub_rn(mul_rn(dl, small_uint_to_float<0>(byte_of(q, k))), ml);
      }
    }
  }
};

/// Q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, d (f16); y = (d * (sc - 32)) * (q - 4),
/// q = low 2 bits (laid out as Q2_K's) | bit 4n + j of hmask[l] << 2 for element 32j + l of
/// half n. Scale of sub-block s: low 4 bits in byte s (s < 8, low nibble) or s - 8 (high
/// nibble), top 2 bits at bit 2(s / 4) of byte 8 + s % 4. Groups as Q2_K's.
template <>
struct BlockTraits<GgmlType::Q3_K> {
  static constexpr GgmlType kType = GgmlType::Q3_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ3_K);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) {
    return BlockTraits<GgmlType::Q2_K>::run_start(g, run);
  }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int n = g >> 4, p = (g >> 3) & 1, i = g & 7;
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk + 108)));
    // 110-byte blocks: every other block starts 2 bytes past a 4-byte boundary.
    const uint32_t hm = load_u32<false>(blk + 4 * i);
    const uint32_t qs = load_u32<false>(blk + 32 + 32 * n + 4 * i);
    for (int run = 0; run < 2; ++run) {
      const int j = 2 * p + run;
      const int s = 8 * n + 2 * j + (i >> 2);
      const uint32_t low4 = s < 8 ? (blk[96 + s] & 0xFu) : (blk[96 + s - 8] >> 4);
      const uint32_t top2 = (blk[96 + 8 + (s & 3)] >> (2 * (s >> 2))) & 3u;
      const float dl = mul_rn(d, small_uint_to_float<32>(low4 | (top2 << 4)));
      const uint32_t q =
          ((qs >> (2 * j)) & 0x03030303u) | (((hm >> (4 * n + j)) & 0x01010101u) << 2);
      for (int k = 0; k < 4; ++k) {
        out[4 * run + k] = mul_rn(dl, small_uint_to_float<4>(byte_of(q, k)));
      }
    }
  }
};

/// kValuesIQ4NL[code] + 128 (1..241), four per little-endian word, selected without a memory
/// table so device code needs no __constant__ array; the value is then exact as
/// small_uint_to_float<128>.
SPW_HD uint32_t iq4nl_biased(uint32_t code) {
  constexpr uint32_t kW0 = 0x3F2D1801u;  // -127, -104, -83, -65  (+128: 1, 24, 45, 63)
  constexpr uint32_t kW1 = 0x766A5D4Fu;  //  -49,  -35, -22, -10  (79, 93, 106, 118)
  constexpr uint32_t kW2 = 0xA6998D81u;  //    1,   13,  25,  38  (129, 141, 153, 166)
  constexpr uint32_t kW3 = 0xF1D9C5B5u;  //   53,   69,  89, 113  (181, 197, 217, 241)
  const uint32_t w = (code & 8u) ? ((code & 4u) ? kW3 : kW2) : ((code & 4u) ? kW1 : kW0);
  return byte_of(w, static_cast<int>(code & 3u));
}

/// IQ4_NL: d (f16), qs[16] laid out as Q4_0's; y = d * kValuesIQ4NL[nibble]. Groups as Q4_0's.
template <>
struct BlockTraits<GgmlType::IQ4_NL> {
  static constexpr GgmlType kType = GgmlType::IQ4_NL;
  static constexpr int kBlockElems = kQK4_NL;
  static constexpr int kBlockBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 4 * g + 16 * run; }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const uint32_t qs = load_u32<false>(blk + 2 + 4 * g);
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(d, small_uint_to_float<128>(iq4nl_biased((qs >> (8 * k)) & 0xFu)));
      out[4 + k] = mul_rn(d, small_uint_to_float<128>(iq4nl_biased((qs >> (8 * k + 4)) & 0xFu)));
    }
  }
};

/// IQ4_XS: d (f16), scales_h (16 bits), scales_l[4], qs[128]; eight 32-element sub-blocks laid
/// out as IQ4_NL blocks, sub-block b with the 6-bit scale ls = (nibble b % 2 of scales_l[b / 2])
/// | (bits 2b, 2b + 1 of scales_h) << 4: y = (d * (ls - 32)) * kValuesIQ4NL[nibble].
/// Group g = 4b + i: bytes qs[16b + 4i ..+4): elements 32b + 4i.. and 32b + 16 + 4i...
template <>
struct BlockTraits<GgmlType::IQ4_XS> {
  static constexpr GgmlType kType = GgmlType::IQ4_XS;
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockIQ4_XS);
  static constexpr bool kFloat = false;
  static constexpr int kGroups = kBlockElems / 8;
  SPW_HD static int run_start(int g, int run) { return 32 * (g >> 2) + 16 * run + 4 * (g & 3); }
  SPW_HD static void decode_group(const uint8_t* blk, int g, float out[8]) {
    const int b = g >> 2, i = g & 3;
    const float d = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const uint32_t scales_h = load_u16(blk + 2);
    const uint32_t ls =
        ((blk[4 + (b >> 1)] >> (4 * (b & 1))) & 0xFu) | (((scales_h >> (2 * b)) & 3u) << 4);
    const float dl = mul_rn(d, small_uint_to_float<32>(ls));
    const uint32_t qs = load_u32<true>(blk + 8 + 16 * b + 4 * i);
    for (int k = 0; k < 4; ++k) {
      out[k] = mul_rn(dl, small_uint_to_float<128>(iq4nl_biased((qs >> (8 * k)) & 0xFu)));
      out[4 + k] = mul_rn(dl, small_uint_to_float<128>(iq4nl_biased((qs >> (8 * k + 4)) & 0xFu)));
    }
  }
};

/// Group g (0 <= g < n_in / 8) of a row of block type TR starting at `row`: its 8 decoded
/// floats and the row indices e0, e1 of out[0..4) and out[4..8).
template <typename TR>
SPW_HD void decode_row_group(const uint8_t* row, int64_t g, float out[8], int64_t& e0,
                             int64_t& e1) {
  const int64_t b = g / TR::kGroups;
  const int gi = static_cast<int>(g % TR::kGroups);
  TR::decode_group(row + b * TR::kBlockBytes, gi, out);
  e0 = b * TR::kBlockElems + TR::run_start(gi, 0);
  e1 = b * TR::kBlockElems + TR::run_start(gi, 1);
}

/// Calls f(BlockTraits<type>{}) for the fifteen supported types; returns false (f not called)
/// for any other type. Host only (the launchers and the tests pick the kernel with it).
template <typename F>
inline bool dispatch_type(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::F32:
      f(BlockTraits<GgmlType::F32>{});
      return true;
    case GgmlType::F16:
      f(BlockTraits<GgmlType::F16>{});
      return true;
    case GgmlType::BF16:
      f(BlockTraits<GgmlType::BF16>{});
      return true;
    case GgmlType::Q8_0:
      f(BlockTraits<GgmlType::Q8_0>{});
      return true;
    case GgmlType::Q4_0:
      f(BlockTraits<GgmlType::Q4_0>{});
      return true;
    case GgmlType::Q4_1:
      f(BlockTraits<GgmlType::Q4_1>{});
      return true;
    case GgmlType::Q5_0:
      f(BlockTraits<GgmlType::Q5_0>{});
      return true;
    case GgmlType::Q5_1:
      f(BlockTraits<GgmlType::Q5_1>{});
      return true;
    case GgmlType::Q4_K:
      f(BlockTraits<GgmlType::Q4_K>{});
      return true;
    case GgmlType::Q5_K:
      f(BlockTraits<GgmlType::Q5_K>{});
      return true;
    case GgmlType::Q6_K:
      f(BlockTraits<GgmlType::Q6_K>{});
      return true;
    case GgmlType::Q2_K:
      f(BlockTraits<GgmlType::Q2_K>{});
      return true;
    case GgmlType::Q3_K:
      f(BlockTraits<GgmlType::Q3_K>{});
      return true;
    case GgmlType::IQ4_NL:
      f(BlockTraits<GgmlType::IQ4_NL>{});
      return true;
    case GgmlType::IQ4_XS:
      f(BlockTraits<GgmlType::IQ4_XS>{});
      return true;
    default:
      return false;
  }
}

/// Elements and bytes of one block of a type the kernels decode (1 element for F32/F16/BF16).
struct BlockShape {
  int64_t elems = 0;  // 0: a type the kernels do not decode
  int64_t bytes = 0;
};

/// BlockTraits' kBlockElems and kBlockBytes of `type`; {0, 0} for any type dispatch_type()
/// refuses. Host only: the launchers check a weight's n_in and row_bytes with it, which keeps
/// the kernels free of the engine's type table (they agree with its type_traits(): checked by
/// tests/unit/test_kernel_quant_math.cpp).
inline BlockShape block_shape(GgmlType type) {
  BlockShape shape;
  dispatch_type(type, [&](auto tr) {
    using TR = decltype(tr);
    shape.elems = TR::kBlockElems;
    shape.bytes = TR::kBlockBytes;
  });
  return shape;
}

}  // namespace spw::kernels
