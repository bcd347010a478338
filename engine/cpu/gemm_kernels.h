// Internal to engine/cpu: the int8 GEMM micro-kernels each SIMD level provides (gemm.h has
// the layout and the arithmetic they share). Plain declarations only, as kernels.h (which says
// why: this header is included by units compiled with -mavx2 / -mavx512*), but for the helpers
// of internal linkage below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernels.h"
#include "engine/gguf/ggml_types.h"

namespace spw::cpu {

inline constexpr int kGemmMaxTokens = 8;

/// One tile: `nt` tokens x the 16 rows of one group, over nb blocks. w: the group's first
/// block record; x: token t's block b at x[t * x_stride + b] (BlockQ8A); comp[t * x_stride +
/// b] = -128 * sum of that block's codes (read only by kernels with uses_comp); y[t *
/// y_stride + r] is written for r < nr (1..16), t < nt (1..max_tokens).
using GemmTileFn = void (*)(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t x_stride,
                            const int32_t* comp, float* y, int64_t y_stride, int nr, int nt);

/// Q4_K: as GemmTileFn over nb super-blocks, x: BlockQ8K256; bs[(t * x_stride + b) * 8 + j] =
/// the sum of token t's codes in 32-element sub-block j of super-block b (bsums[2j] +
/// bsums[2j + 1]).
using GemmTileKFn = void (*)(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t x_stride,
                             const int16_t* bs, float* y, int64_t y_stride, int nr, int nt);

/// BlockQ8A activations (Q8_0's, Q5_K's and Q6_K's) of 8 tokens packed for the 8-token tiles
/// (kQ8ATileBlockBytes per 32-element block b, 64-byte aligned): qs[8][8][4] (k, token t: token
/// t's codes 4k .. 4k + 3 of block b), then comp[8] (int32: -128 x the sum of token t's codes in
/// block b), then d[8] (float: token t's scale), then halves[8][2] (int16: minus the sums of
/// token t's codes 0..15 and 16..31 of block b), then s[8] (float: BlockQ8A's s, d x the sum).
inline constexpr int kQ8ATileBlockBytes = 256 + 32 + 32 + 32 + 32;  // 384

/// Q4_K activations (BlockQ8K256) of 8 tokens packed for q4_k_tile8 (kQ8KTileBlockBytes per
/// super-block b): qs[8][8][8][4] (sub-block j, group g, token t: token t's codes 32j + 4g ..
/// 32j + 4g + 3), then bs[4][8][2] (pair p, token t: int16 sums of sub-blocks 2p and 2p + 1),
/// then d[8] (float: token t's scale).
inline constexpr int kQ8KTileBlockBytes = 2048 + 128 + 32;  // 2208

/// 8 tokens x the 16 rows of one group over nb blocks (Q8_0) or super-blocks (Q4_K, Q6_K),
/// activations packed as above; the same sums and roundings as GemmTileFn / GemmTileKFn.
/// y[t * y_stride + r] for r < nr, t < 8.
using GemmTile8Fn = void (*)(const uint8_t* w, int64_t nb, const uint8_t* xp, float* y,
                             int64_t y_stride, int nr);

/// The 32-element block types with a repacked layout (gemm.h's "32-element blocks"): their slot
/// in GemmKernels::b32 / b32_tile8, or -1.
inline constexpr int kB32Types = 5;
constexpr int b32_slot(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return 0;
    case GgmlType::Q4_1:
      return 1;
    case GgmlType::Q5_0:
      return 2;
    case GgmlType::Q5_1:
      return 3;
    case GgmlType::IQ4_NL:
      return 4;
    default:
      return -1;
  }
}
/// A slot's record bytes per 32-element block of 16 rows: the file's block size x 16.
inline constexpr int kB32GroupBlockBytes[kB32Types] = {288, 320, 352, 384, 288};

/// Repacks row group g of a matrix (pack_low_bit_group's arguments) into gd: a level's own
/// packer of a type, writing the same bytes as the portable one.
using GemmPackFn = void (*)(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                            uint8_t* gd);

struct GemmKernels {
  GemmTileFn q8_0;
  GemmTileKFn q4_k;
  int max_tokens_k;                  // tokens per q4_k tile call
  int max_tokens;                    // tokens per tile call
  bool uses_comp;                    // needs comp (VNNI's u8 bias); otherwise comp may be null
  GemmTile8Fn q8_0_tile8 = nullptr;  // full 8-token Q8_0 tiles over packed activations, or null
  GemmTile8Fn q4_k_tile8 = nullptr;  // the same for Q4_K, or null
  // Q6_K over nb super-blocks of BlockQ8A activations (8 blocks each: x[t * x_stride + 8b + j]),
  // the comp argument holding each block's halves pair (kQ8ATileBlockBytes' halves); null where
  // the level has no Q6_K tiles (Q6_K matrices are then not repacked: gemm_packable).
  GemmTileFn q6_k = nullptr;
  GemmTile8Fn q6_k_tile8 = nullptr;  // full 8-token Q6_K tiles, or null
  int max_tokens_6 = 4;              // tokens per q6_k tile call
  // Q5_K over nb super-blocks of BlockQ8A activations as q6_k (comp unused), or null where the
  // level has no Q5_K tiles (Q5_K matrices are then not repacked: gemm_packable).
  GemmTileFn q5_k = nullptr;
  GemmTile8Fn q5_k_tile8 = nullptr;  // full 8-token Q5_K tiles, or null
  // The 32-element block types by b32_slot() over BlockQ8A activations (1..4 tokens a call, the
  // comp argument holding each block's halves pair), and their full 8-token tiles; null where
  // the level has none (those types are then not repacked: gemm_packable).
  GemmTileFn b32[kB32Types] = {};
  GemmTile8Fn b32_tile8[kB32Types] = {};
  // IQ4_XS over nb super-blocks of BlockQ8A activations as q6_k (comp: the halves pairs), and
  // its full 8-token tiles; null where the level has none.
  GemmTileFn iq4_xs = nullptr;
  GemmTile8Fn iq4_xs_tile8 = nullptr;
  // Q3_K as q6_k (Q6_K's tiles on Q3_K's record), or null.
  GemmTileFn q3_k = nullptr;
  GemmTile8Fn q3_k_tile8 = nullptr;
  // Q2_K as q6_k (Q6_K's tiles on Q2_K's record, with its mins), or null.
  GemmTileFn q2_k = nullptr;
  GemmTile8Fn q2_k_tile8 = nullptr;
  // Q6_K, Q3_K and Q2_K group packers of the level, or null (the portable ones run).
  GemmPackFn pack_q6_k = nullptr;
  GemmPackFn pack_q3_k = nullptr;
  GemmPackFn pack_q2_k = nullptr;
};

/// Fill k's b32, iq4_xs, q3_k and q2_k entries (and, portable, q6_k's): the portable tiles
/// (gemm_low_bit.cpp), the AVX-512 ones (gemm_avx512_low_bit.cpp, built where gemm_kernels_avx512()
/// is).
void add_low_bit_tiles_scalar(GemmKernels& k);
void add_low_bit_tiles_avx512(GemmKernels& k);
/// Fill k's pack_* entries with the AVX-512 packers (gemm_avx512_pack.cpp).
void add_packers_avx512(GemmKernels& k);

/// The 2-bit planes of Q6_K's qh and Q3_K's qs record (gemm.h): from one row's 64 bytes in ggml's
/// order (byte 32 (e / 128) + e % 32 holds element e's 2 bits at bits 2 ((e % 128) / 32)),
/// byte (k, r, j) of out (k = 0..15, out + 64 k + 4 r + j) = the 2 bits of elements 64 i + 4 k + j
/// at bits 2 i (i = 0..3). Word-wise: four 32-bit shifts and masks per plane.
void pack_2bit_planes(const uint8_t* q2, int r, uint8_t* out);

/// Repacks row group g (rows 16 g .. 16 g + 15, those past n_out as zeros) of a 32-element block
/// type, IQ4_XS, Q3_K or Q2_K matrix into gd (gemm.h's layouts): nb blocks (or super-blocks) of
/// rows of rs bytes at src.
void pack_low_bit_group(GgmlType type, const uint8_t* src, size_t rs, int64_t g, int64_t nb,
                        int64_t n_out, uint8_t* gd);

// Internal linkage (unnamed namespace): definitions that each including unit compiles with its
// own flags, never one unit's AVX-512 code picked by the linker for another (kernels.h).
namespace {
/// Q3_K's scale s (0..15) of a super-block minus 32, as the record stores it: the low 4 bits in
/// the nibbles of scales[0..7], the top 2 at bits 2 (s / 4) of scales[8 + s % 4].
inline int8_t q3_k_scale(const uint8_t* scales, int s) {
  const int lo = s < 8 ? scales[s] & 0x0F : scales[s - 8] >> 4;
  const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return static_cast<int8_t>((lo | (hi << 4)) - 32);
}

/// The entry of `tiles` for `nt` tokens: tiles[i] takes i + 1 tokens, and nt past the last
/// takes the last (a level's GemmTileFn / GemmTileKFn picks its T-token tile this way).
template <typename Fn, std::size_t N>
Fn tile_for(const Fn (&tiles)[N], int nt) {
  return tiles[(nt < static_cast<int>(N) ? nt : static_cast<int>(N)) - 1];
}
/// The walk of every repacking: fn(blk, r, out) for each block (super-block) b < nb and row
/// r < 16 of row group g, blk row 16 g + r's block b as in the file (rows of W: rs bytes each at
/// src; a row past n_out gives a zero block), out the group's record b (gd + b x record_bytes).
template <typename Block, typename Fn>
void for_each_group_block(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                          uint8_t* gd, size_t record_bytes, Fn&& fn) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + static_cast<size_t>(b) * record_bytes;
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const int64_t row = g * kGemmGroupRows + r;
      Block blk{};
      if (row < n_out) std::memcpy(&blk, src + row * rs + b * sizeof(Block), sizeof blk);
      fn(static_cast<const Block&>(blk), r, out);
    }
  }
}

/// The 4 activation codes at p as one int32 (the broadcast operand of a dot-product step).
inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

const GemmKernels* gemm_kernels_avx2();    // nullptr where not built
const GemmKernels* gemm_kernels_avx512();  // nullptr where not built

}  // namespace spw::cpu
