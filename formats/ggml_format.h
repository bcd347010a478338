// The GGUF tensor formats: the ggml_type numbers and the block layouts exactly as a GGUF file
// stores them. Sources: the GGUF specification (ggml/docs/gguf.md) for the type numbers, ggml's
// block_q4_0 ... block_q6_K, block_q2_K, block_q3_K, block_iq4_nl, block_iq4_xs and
// kvalues_iq4nl (ggml-common.h) for the layouts.
//
// The one header both engine/ (the loader, the CPU paths) and kernels/ (the CUDA kernels that
// decode the same bytes) include, so the kernels need nothing of the engine: a leaf, depending
// on the standard library only. What the engine knows about a type beyond its layout (names,
// which types it computes with, row sizes, reference (de)quantization) is in
// engine/gguf/ggml_types.h.
#pragma once

#include <cstdint>

namespace spw {

/// ggml_type numbers, exactly as stored in a GGUF tensor index. Only the supported types
/// and the ones we refuse by name are listed; any other number is "unknown".
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

inline constexpr int kQK4_0 = 32;  // elements per Q4_0 block
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;       // elements per K-quant super-block
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales/mins of Q4_K and Q5_K

inline constexpr int kQK4_NL = 32;        // elements per IQ4_NL block
inline constexpr int kQ3KScaleSize = 12;  // packed 6-bit scales of Q3_K

/// The 16 values an IQ4_NL / IQ4_XS 4-bit code stands for (ggml-common.h's kvalues_iq4nl): a
/// non-linear grid, denser near zero, times the block scale.
inline constexpr int8_t kValuesIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Block layouts (packed, little-endian, exactly as in the file). `d`, `m`, `dmin` are
// binary16 bit patterns.
#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};  // 18 B
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};  // 20 B
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};  // 22 B
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};  // 24 B
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};                             // 34 B
struct BlockQ2_K {             // 84 B
  uint8_t scales[kQK_K / 16];  // per 16-element sub-block: 4-bit scale (low), 4-bit min (high)
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d;                  // super-block scale for the scales
  uint16_t dmin;               // super-block scale for the mins
};
struct BlockQ3_K {                // 110 B
  uint8_t hmask[kQK_K / 8];       // high (3rd) bit of each quant
  uint8_t qs[kQK_K / 4];          // low 2 bits
  uint8_t scales[kQ3KScaleSize];  // 16 signed 6-bit sub-block scales, stored + 32
  uint16_t d;                     // super-block scale
};
struct BlockQ4_K {              // 144 B
  uint16_t d;                   // super-block scale for the 6-bit scales
  uint16_t dmin;                // super-block scale for the 6-bit mins
  uint8_t scales[kKScaleSize];  // 8 scales + 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];        // 4-bit quants
};
struct BlockQ5_K {  // 176 B
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];  // 5th bit of each quant
  uint8_t qs[kQK_K / 2];  // low 4 bits
};
struct BlockQ6_K {            // 210 B
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 8-bit sub-block scales
  uint16_t d;                 // super-block scale
};
struct BlockIQ4_NL {  // 18 B
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];  // 4-bit indices into kValuesIQ4NL, laid out as Q4_0's
};
struct BlockIQ4_XS {             // 136 B
  uint16_t d;                    // super-block scale
  uint16_t scales_h;             // top 2 bits of the eight 6-bit sub-block scales
  uint8_t scales_l[kQK_K / 64];  // low 4 bits of the scales, two per byte
  uint8_t qs[kQK_K / 2];         // 4-bit indices into kValuesIQ4NL
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_NL) == 18 &&
              sizeof(BlockIQ4_XS) == 136);

}  // namespace spw
