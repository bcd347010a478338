// Int8 GEMM on repacked weights, for prefill and decode of quantized matrices (issue 18).
//
// A weight matrix (ggml layout: n_out rows of n_in elements, W maps n_in -> n_out) is repacked
// once into groups of kGemmGroupRows = 16 consecutive rows. A group holds, per 32-element
// block b of the row length, one record of kQ8_0GroupBlockBytes = 544 bytes:
//   qs[8][16][4]: for k = 0..7 and row r = 0..15, elements 4k .. 4k + 3 of row r's block b,
//                 stored as u8 = w + 128 (the Q8_0 code with its sign bit flipped);
//   d[16]:        row r's binary16 block scale, as in the file.
// So one 64-byte line holds 4 elements of 16 rows: one VPDPBUSD (u8 weights x s8 activation,
// 4 products summed per 32-bit lane) advances 16 rows by 4 elements, the activation's 4
// bytes broadcast. Rows past n_out in the last group are zero (d = 0, w = 0). The packed
// matrix has the file's size (34 bytes per 32 elements) plus the padding of the last group.
//
// Activations are quantized once per call with the matvec's own quantizer (BlockQ8A:
// engine/cpu/kernels.h, codes identical at every SIMD level), so the per-block scales are those
// of quant_dot.h. Each output is
//   y[t][r] = sum over blocks b, in order, of fma(d_w[r][b] * d_x[t][b], float(S), acc)
// with S = sum_i w[r][32b + i] * q_x[t][32b + i] the exact integer block sum (VPDPBUSD's
// u8 bias is taken back in integers: S = sum (w + 128) q_x - 128 sum q_x). The same sequence of
// float roundings at every SIMD level (scalar, avx2, avx512) and for every tile shape, token
// count and thread count: results are bit-identical across all of them, and a token's row does
// not depend on the other tokens of the call (decode equals prefill bit for bit).
//
// Against quant_dot.h's matvec/matmul of the same Q8_0 matrix (which sums 8 lanes of partial
// block sums before one horizontal add) the results differ by float rounding only: measured
// <= 2e-7, bounded in the tests by 1e-6, of sum_i |w_i x_i| per element.
//
// Q4_K: per 256-element super-block b, one record of kQ4_KGroupBlockBytes = 2368 bytes:
//   qs[32][16][4]: byte (k, r, j) holds row r's 4-bit codes of elements 4k + j (low nibble)
//                  and 128 + 4k + j (high nibble), so a nibble mask gives the VPDPBUSD operand
//                  of sub-block k / 8 and a shift that of sub-block 4 + k / 8;
//   sc[8][16]:     the 6-bit sub-block scales (u8), sub-block major;
//   m[4][16][2]:   the 6-bit mins (u8), byte (p, r, h) = row r's min of sub-block 2p + h, the
//                  pairs VPDPWSSD / VPMADDWD take against the token's sub-block sums;
//   d[16], dmin[16]: binary16, as in the file.
// 148 bytes per row and super-block (the file's 144 + 4). Activations are BlockQ8K256 blocks
// (engine/cpu/kernels.h: ggml's Q8_K, one scale per 256 elements, codes identical at every SIMD
// level). Per super-block: I = sum_j sc_j S_j and M = sum_j m_j bsum_j in exact integers, then
// acc = fma(d_w d_x, float(I), acc), acc = fma(-(dmin_w d_x), float(M), acc), at every level.
// Against float64 on the same codes and scales: float rounding only (bounded in the tests by
// 1e-6 of sum |w x|). quant_dot.h's Q4_K matvec rounds the activations with a scale per 32
// elements (BlockQ8K): the two differ by that rounding.
//
// Q5_K (where the SIMD level has its tiles: avx512): Q4_K's record with the codes' low 4 bits,
// scales, mins, d and dmin, followed by qh[8][16][4] (512 bytes): byte (g, r, j) holds the 5th
// bits of row r's elements 32i + 4g + j at bit i (i = 0..7), which a shift and a mask put over the
// nibble of sub-block i. kQ5_KGroupBlockBytes = 2880, 180 bytes per row and super-block (the
// file's 176 + 4). Activations are Q8_0's BlockQ8A blocks, one per 32-element sub-block j (a
// scale per 32 as the matvec's; one per 256, as Q4_K's GEMM, measured NMSE 1.3e-3 on a quantized
// MoE test model, over the bound of 1e-3). Per sub-block: S_j = sum of q x (exact integer), then
// acc = fma(d_x[j], float(S_j) * (d_w sc_j), acc), acc = fma(-(dmin_w m_j), s_x[j], acc) with
// s_x the block's d x sum of codes, at every level.
//
// Q6_K (where the SIMD level has its tiles: avx512): per 256-element super-block b, one record of
// kQ6_KGroupBlockBytes = 3360 bytes, the file's 210 per row:
//   ql[32][16][4]: byte (k, r, j) holds the low 4 bits of row r's codes of elements 4k + j (low
//                  nibble) and 128 + 4k + j (high nibble), as Q4_K's qs;
//   qh[16][16][4]: byte (k, r, j) holds the top 2 bits of elements 64i + 4k + j at bits 2i..2i+1
//                  (i = 0..3), so a shift and a mask put them over a nibble: the codes q (0..63)
//                  of elements 4k' .. 4k' + 3 of 16 rows are one u8 VPDPBUSD operand;
//   sc[8][16][2]:  the int8 scales of the 16-element sub-blocks, byte (j, r, h) = row r's scale of
//                  sub-block 2j + h (VPMADDWD / VPDPWSSD take the pair sign-extended to int16);
//   d[16]:         binary16, as in the file.
// Activations are Q8_0's BlockQ8A blocks (a scale per 32 consecutive elements, so Q6_K keeps the
// accuracy of its matvec, whose BlockQ8K has a scale per 32 strided elements; one scale per 256
// measured NMSE 1.2e-3 against float64 on a quantized MoE test model, over the bound of 1e-3).
// Per super-block and activation block j: I_j = sum over s = 2j, 2j + 1 of sc_s (S_s - 32 h_s),
// S_s = sum of q x over the 16 elements of sub-block s and h_s the sum of their activation
// codes, exact integers (|I_j| < 2^24), then acc = fma(d_w d_x[j], float(I_j), acc), at every
// level.
//
// The 32-element blocks (where the SIMD level has their tiles: avx512): Q4_0, Q4_1, Q5_0, Q5_1
// and IQ4_NL, per 32-element block b one record of the file's size (16 x 18, 20, 22, 24, 18
// bytes: kB32GroupBlockBytes in gemm_kernels.h):
//   qs[4][16][4]: byte (k, r, j) = the file's qs[4k + j] of row r: the 4-bit codes of elements
//                 4k + j (low nibble) and 16 + 4k + j (high nibble);
//   qh[16][4]:    (Q5_0, Q5_1) byte (r, j) holds the 5th bits of row r's elements 4k + j at bit
//                 k (k = 0..7), which a shift and a mask put over the nibble;
//   d[16], then m[16] (Q4_1, Q5_1): binary16, as in the file.
// The u8 VPDPBUSD operand is the code (Q4_0: w = code - 8, Q5_0: code - 16, Q4_1 / Q5_1: d code
// + m) or, for IQ4_NL, kValuesIQ4NL[code] + 128 (a VPSHUFB). Activations are Q8_0's BlockQ8A
// blocks (the matvec's). Per block: S = sum of u8 x q_x - offset x sum q_x (offset 8, 16, 128,
// or 0 for Q4_1 / Q5_1), an exact integer, then acc = fma(d_w d_x, float(S), acc) and, for Q4_1
// and Q5_1, acc = fma(m_w, s_x, acc) with s_x the block's d x sum of codes, at every level.
// Against quant_dot.h's matvec of the same matrix: float rounding only (<= 1e-6 of sum |w x|).
//
// IQ4_XS (where the SIMD level has its tiles: avx512): per 256-element super-block b, one record
// of kIQ4_XSGroupBlockBytes = 2208 bytes (the file's 136 per row + 2):
//   qs[8][4][16][4]: sub-block j's planes as IQ4_NL's block record (byte (j, k, r, i) = the
//                    file's qs[16j + 4k + i] of row r);
//   sc[8][16]:       the 6-bit sub-block scales minus 32 (int8), sub-block major;
//   d[16]:           binary16, as in the file.
// Activations are BlockQ8A, one per sub-block j. Per sub-block: S_j as IQ4_NL's, I_j = sc_j S_j
// exact (|I_j| < 2^24), then acc = fma(d_w d_x[j], float(I_j), acc), at every level. quant_dot.h's
// matvec takes the same BlockQ8A codes: the two differ by float rounding only.
//
// Q3_K (where the SIMD level has its tiles: avx512): per 256-element super-block b, one record of
// kQ3_KGroupBlockBytes = 1824 bytes (the file's 110 per row + 4), the codes q = w + 4 (0..7):
//   q2[16][16][4]: byte (k, r, j) holds the low 2 bits of row r's codes of elements 64i + 4k + j
//                  at bits 2i .. 2i + 1 (i = 0..3), as Q6_K's qh;
//   q1[8][16][4]:  byte (g, r, j) holds the 3rd bits of elements 32i + 4g + j at bit i (i =
//                  0..7), as Q5_K's qh;
//   sc[8][16][2]:  the 6-bit sub-block scales minus 32 (int8), as Q6_K's;
//   d[16]:         binary16, as in the file.
// The tiles are Q6_K's with these operands and an offset of 4 instead of 32: per activation block
// j, I_j = sum over s = 2j, 2j + 1 of sc_s (S_s - 4 h_s), exact, acc = fma(d_w d_x[j], I_j, acc).
// quant_dot.h's matvec takes BlockQ8K (a scale per 32 strided elements): the two differ by that.
//
// Q2_K (where the SIMD level has its tiles: avx512): per 256-element super-block b, one record of
// kQ2_KGroupBlockBytes = 1344 bytes, the file's 84 per row: the codes' 2-bit planes as Q3_K's
// q2, then sm[8][16][2] (byte (j, r, h) = the file's scales byte of sub-block 2j + h: the 4-bit
// scale in the low nibble, the 4-bit min in the high one), d[16], dmin[16]. Per activation block
// j: I_j = sum over s = 2j, 2j + 1 of sc_s S_s and M_j = -sum m_s h_s (exact integers), then acc =
// fma(d_w d_x[j], float(I_j), acc), acc = fma(dmin_w d_x[j], float(M_j), acc).
//
// Types: Q8_0, Q4_K, and Q2_K, Q3_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS at
// avx512 (every quantized type the engine computes). At avx2 and below the avx512-only ones are
// not packable (gemm_packable() false): quant_dot.h computes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/gguf/ggml_types.h"

namespace spw::cpu {

class ThreadPool;

inline constexpr int kGemmGroupRows = 16;
inline constexpr int kQ8_0GroupBlockBytes = kGemmGroupRows * 32 + kGemmGroupRows * 2;    // 544
inline constexpr int kQ4_KGroupBlockBytes = kGemmGroupRows * (128 + 8 + 8 + 4);          // 2368
inline constexpr int kQ5_KGroupBlockBytes = kQ4_KGroupBlockBytes + kGemmGroupRows * 32;  // 2880
inline constexpr int kQ6_KGroupBlockBytes = kGemmGroupRows * (128 + 64 + 16 + 2);        // 3360
inline constexpr int kIQ4_XSGroupBlockBytes = kGemmGroupRows * (128 + 8 + 2);            // 2208
inline constexpr int kQ3_KGroupBlockBytes = kGemmGroupRows * (64 + 32 + 16 + 2);         // 1824
inline constexpr int kQ2_KGroupBlockBytes = kGemmGroupRows * (64 + 16 + 2 + 2);          // 1344

/// True when `type` has a repacked layout and a GEMM at the SIMD level in use: Q8_0 and Q4_K at
/// every level, the other quantized types (Q2_K, Q3_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1,
/// IQ4_NL, IQ4_XS) where the level has their tiles (avx512; elsewhere quant_dot.h's kernels run:
/// they are faster than a portable tile, and AVX2 tiles measured no gain for Q5_K and Q6_K and are
/// not written for the others). A matrix packed at one level still computes after set_simd_level()
/// changes it (the portable tile, the same results).
bool gemm_packable(GgmlType type);

/// One repacked weight matrix (the layout above), 64-byte aligned, immutable once made.
struct PackedMatrix {
  GgmlType type = GgmlType::Q8_0;
  int64_t n_in = 0;      // row length in elements, a multiple of the type's block
  int64_t n_out = 0;     // rows
  int64_t n_groups = 0;  // ceil(n_out / 16)
  size_t group_bytes = 0;
  struct Free {
    // true: the memory is the caller's (pack_matrix_into); value-initialized (false) otherwise
    bool borrowed;
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> bytes;  // n_groups * group_bytes

  size_t size_bytes() const { return static_cast<size_t>(n_groups) * group_bytes; }
};

/// Repacks W (n_out rows of row_size(type, n_in) bytes, as in the file) with the pool's threads,
/// a slice of rows (about 4 MiB of W) at a time; where `release` is given it is called with each
/// slice of W once that slice is packed (the model's cache drops those file pages, so the two
/// copies of a matrix are never resident whole). Preconditions: gemm_packable(type), n_in a
/// multiple of the type's block size, n_out >= 1.
PackedMatrix pack_matrix(GgmlType type, const void* W, int64_t n_in, int64_t n_out,
                         ThreadPool& pool,
                         const std::function<void(const uint8_t*, size_t)>& release = {});

/// The bytes pack_matrix writes for n_out rows of n_in elements of `type` (gemm_packable):
/// ceil(n_out / 16) groups of the type's record per block, rounded up to a multiple of 64.
size_t packed_size(GgmlType type, int64_t n_in, int64_t n_out);

/// As pack_matrix, into `dst`: 64-byte aligned, packed_size(type, n_in, n_out) bytes, which the
/// caller keeps for the result's life (the result does not free them). For a caller that lays
/// many matrices out in one mapping (PackedWeights: one run of huge pages for a model instead of
/// a small-page tail per matrix).
PackedMatrix pack_matrix_into(uint8_t* dst, GgmlType type, const void* W, int64_t n_in,
                              int64_t n_out, ThreadPool& pool,
                              const std::function<void(const uint8_t*, size_t)>& release = {});

/// Whether X holds what it held at the calling thread's previous gemm() call with the same X
/// pointer (the caller's promise: e.g. attn_k and attn_v after attn_q of the same normed input).
/// Then the activations quantized by that call are used again when they fit (same pointer,
/// token count, row length, activation format and SIMD level); otherwise gemm quantizes as for
/// New. Results are the same either way.
enum class GemmInput { New, SameAsLast };

/// Drops the calling thread's kept activations: its next SameAsLast call quantizes. For a caller
/// whose products of one input do not all run here (a matrix without a repacked layout computes
/// elsewhere, so gemm cannot see that the input changed before it).
void gemm_forget_input();

/// Y[t][r] = W[r] . X[t] for t < n_tokens, r < n_out. X: [n_tokens][n_in] floats, Y:
/// [n_tokens][n_out]. Activations are quantized once; each thread takes whole row groups and
/// walks them a block of tokens at a time, one kernel call per 16 rows x up to 8 tokens (at
/// avx512: whole 8-token tiles over activations packed per tile for Q8_0 and the K-quants, the
/// rest 8 (Q8_0) or 4 (the K-quants) at a time; 4 tokens otherwise), so a weight group is read
/// from memory once per 64 tokens. n_tokens = 1 is decode. Errors: none (preconditions as
/// pack_matrix; scratch grows with n_tokens x n_in, up to 2.9 bytes per element: 4.1 MB for
/// 512 x 2816).
void gemm(const PackedMatrix& W, const float* X, int64_t n_tokens, float* Y, ThreadPool& pool,
          GemmInput input = GemmInput::New);

}  // namespace spw::cpu
