// Internal to engine/cpu: the activation block formats and the table of kernels each
// SIMD level provides. The public entry points (quant_dot.h, ops.h, attention.h) pick the
// table of the active level and call through it.
//
// This header is included by the translation units compiled with -mavx2 / -mavx512* (and
// -march=armv8.2-a+dotprod on AArch64), so it holds only plain structs and declarations: no
// inline functions and no default member initializers. An inline function (or implicit constructor)
// emitted by an AVX2 unit is a weak symbol the linker may pick for every unit, and would then run
// on CPUs without AVX2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spw::cpu {

/// Activation block for the 32-element integer formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL)
/// and for IQ4_XS (one block per 32-element sub-block of its 256-element super-blocks):
/// ggml's Q8_1 with float instead of binary16 fields. x[i] ~= d * qs[i], |qs| <= 127, s = d *
/// sum(qs) (the sum lets Q4_1/Q5_1 apply their offset m, and Q4_0/Q5_0 their -8/-16, once per
/// block).
struct BlockQ8A {
  float d;
  float s;
  int8_t qs[32];
};  // 40 B

/// Activation block for the 256-element K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): ggml's Q8_K
/// with a scale per 32 elements instead of one per 256. The 32 elements of a scale are strided:
/// group g (0..7) holds the elements e with (e % 32) / 4 == g, 4 of every 32. x[e] ~= d[g(e)] *
/// qs[e], |qs| <= 127, d[g] = max |x| over the group / 127. bsums[j] is the dequantized sum of
/// elements 16 j .. 16 j + 15, which hold 4 elements of each of groups a .. a + 3 (a = 4 (j % 2)):
/// with I_k the integer sum of the 4 codes of group a + k, bsums[j] = (d[a] I_0 + d[a+1] I_1) +
/// (d[a+2] I_2 + d[a+3] I_3), each product and sum rounded to float (the K-quant mins and the
/// -32 / -4 offsets of Q6_K / Q3_K are applied through these sums).
///
/// Why strided groups: the SIMD dot products add 4 adjacent byte products into each 32-bit lane
/// of a vector of 32 consecutive elements (VPMADDUBSW + VPMADDWD, VPDPBUSD, SDOT), so lane g of
/// a (row, token)'s integer accumulator only ever holds group g, and the 8 scales are applied
/// once per super-block as one vector multiply. Contiguous groups of 32 would need a horizontal
/// reduction per group, or a float multiply-add per sub-block (an earlier version: prefill 18-41 %
/// slower). One scale per 256 (ggml's Q8_K) rounds the activations of a super-block with a step
/// set by its largest element: on the test models (CpuVsReference, logits of a prompt and 8
/// decode steps against the float64 reference) Q2_K, Q3_K, Q5_K and Q6_K had NMSE 5.6-6.4e-4 on
/// average over the architectures and up to 8.0e-4; with these groups 3.2-3.5e-4, up to 5.5e-4.
struct BlockQ8K {
  float d[8];
  int8_t qs[256];
  float bsums[16];
};  // 352 B

/// Activation block of the int8 GEMM's Q4_K tiles (gemm.h): ggml's Q8_K, one scale per 256
/// elements. x[i] ~= d * qs[i], |qs| <= 127; bsums[j] = sum of qs[16 j .. 16 j + 15]. (A scale
/// per 32 elements there costs a float multiply-add per sub-block, row and token on top of the
/// integer products: measured 9-13 % slower tiles at avx512 for NMSE 7.5e-4 -> 4e-4 on the test
/// models, so the GEMM keeps this format.)
struct BlockQ8K256 {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};  // 292 B

static_assert(sizeof(BlockQ8A) == 40 && sizeof(BlockQ8K) == 352 && sizeof(BlockQ8K256) == 292);

/// Element format of KV rows seen by the attention kernels. Q8_0 rows are ggml BlockQ8_0
/// blocks (binary16 d, then 32 int8 qs: 34 B, x = d * qs); an element index idx of such a row
/// lies in block idx / 32, so rows and strides must be multiples of 32 elements.
enum class KvFormat : int { F32 = 0, F16 = 1, Q8_0 = 2 };

inline constexpr int kQ8_0BlockBytes = 34;

inline constexpr int kMaxTileRows = 4;
inline constexpr int kMaxTileTokens = 4;
inline constexpr int kNumTypeSlots = 31;  // GgmlType numbers 0 (F32) .. 30 (BF16)

/// Dot products of nr weight rows with nt activation rows, nr and nt fixed per function:
///   y[t * y_stride + r] = dot(w + r * w_stride, x + t * x_stride) over n elements,
/// for r < nr, t < nt. Activation rows are f32 for F32/F16/BF16 weights, BlockQ8A or BlockQ8K
/// rows otherwise. Each (r, t) is accumulated in the same order whatever the tile shape, so a
/// result never depends on how a matrix was tiled or split across threads.
using TileFn = void (*)(const uint8_t* w, size_t w_stride, const uint8_t* x, size_t x_stride,
                        int64_t n, float* y, size_t y_stride);

struct TypeKernels {
  TileFn tile[kMaxTileRows][kMaxTileTokens];  // [nr - 1][nt - 1]; null where not built
  int decode_rows;                            // tile shape for matvec: decode_rows x 1
  int prefill_rows;                           // tile shape for matmul
  int prefill_tokens;
};

struct QuantKernels {
  TypeKernels type[kNumTypeSlots];                               // by GgmlType number; F32 = 0
  void (*quantize_q8a)(const float* x, BlockQ8A* y, int64_t n);  // n % 32 == 0
  void (*quantize_q8k)(const float* x, BlockQ8K* y, int64_t n);  // n % 256 == 0
  void (*quantize_q8k256)(const float* x, BlockQ8K256* y, int64_t n);  // n % 256 == 0
};

struct OpKernels {
  // out = x / sqrt(mean(x^2) + eps) * w (w may be null: no weight).
  void (*rms_norm)(const float* x, const float* w, float eps, int64_t n, float* out);
  // x: [n_heads][head_dim]; rotates the first n_rot dims of each head. cs: [cos 0..n_rot/2-1,
  // sin 0..n_rot/2-1]. Normal pairs (2i, 2i+1), NeoX pairs (i, i + n_rot/2).
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs,
               bool neox);
  void (*swiglu)(const float* g, const float* u, float* out, int64_t n);  // silu(g) * u
  // gelu_tanh(g) * u, gelu_tanh(x) = x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))).
  void (*geglu)(const float* g, const float* u, float* out, int64_t n);
  void (*softmax)(float* x, int64_t n);
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // n % 32 == 0; y: n / 32 BlockQ8_0. Bit-identical to quantize_row(GgmlType::Q8_0, ...).
  void (*f32_to_q8_0)(const float* x, void* y, int64_t n);
  // x[i] = exp(x[i] - m); returns the sum of the new x (float accumulation).
  float (*exp_sum)(float* x, int64_t n, float m);
  void (*scale)(float* x, float a, int64_t n);  // x *= a
  // s[q * s_stride + j] = scale * dot(q_vec[q], k row j) for q < n_q, j < n_kv; k rows are
  // in format k_fmt, k_stride elements apart; q: [n_q][hd] in f32.
  void (*attn_scores)(const float* q, int64_t n_q, int64_t hd, const void* k, KvFormat k_fmt,
                      int64_t k_stride, int64_t n_kv, float scale, float* s, int64_t s_stride);
  // o[q][:] += sum_j p[q * p_stride + j] * v row j, for q < n_q; o: [n_q][hd_v].
  void (*attn_accum)(const float* p, int64_t p_stride, int64_t n_q, const void* v, KvFormat v_fmt,
                     int64_t v_stride, int64_t n_kv, int64_t hd_v, float* o);
  // Query-tiled attention (attn_tile.inc has the layouts and the arithmetic; attention_tile.h
  // the contract). rows: a multiple of 16. tile_softmax with pos == nullptr: no mask (every
  // row attends every key of the chunk).
  void (*tile_scores)(const float* qt, int64_t rows, int64_t hd, const float* k, int64_t n_k,
                      float scale, float* st);
  void (*tile_softmax)(float* st, int64_t rows, int64_t n_k, int32_t kp0, const int32_t* pos,
                       const int32_t* lo, float* m, float* s, float* a);
  void (*tile_accum)(const float* pt, int64_t rows, int64_t n_k, int32_t kp0, const int32_t* pos,
                     const int32_t* lo, const float* v, int64_t hdv, const float* a, int64_t n_real,
                     float* o);
  // Small tiles: scores of rows [0, n_real) from the keys transposed (tile_transpose; nkp a
  // multiple of 16), the same bits as tile_scores.
  void (*tile_scores_t)(const float* qt, int64_t rows, int64_t n_real, int64_t hd, const float* kt,
                        int64_t nkp, int64_t n_k, float scale, float* st);
  void (*tile_transpose)(const float* k, int64_t hd, int64_t n_k, float* kt, int64_t nkp);
  void (*tile_transpose_f16)(const uint16_t* k, int64_t hd, int64_t n_k, float* kt, int64_t nkp);
};

/// Fills b->bsums from b->d and b->qs (BlockQ8K's definition), identically at every level.
void q8k_bsums(BlockQ8K* b);

// Tables per level. The SIMD ones return nullptr where the build could not compile them
// (not x86-64 / not AArch64, or the compiler lacks the target flags). The NEON tables have
// NEON tiles for some types and the scalar level's for the others (simd_neon_quant.cpp).
const QuantKernels* quant_kernels_scalar();
const QuantKernels* quant_kernels_avx2();
const QuantKernels* quant_kernels_avx512();
const QuantKernels* quant_kernels_neon();
const QuantKernels* quant_kernels_neon_dotprod();
const OpKernels* op_kernels_scalar();
const OpKernels* op_kernels_avx2();
const OpKernels* op_kernels_avx512();  // the AVX2 table with 512-bit query-tiled attention

// The tables of the active level (simd.cpp).
const QuantKernels& active_quant_kernels();
const OpKernels& active_op_kernels();

}  // namespace spw::cpu
