// Dot products, matrix-vector (decode) and matrix-matrix (prefill) products computed directly
// on the weight rows as stored in the GGUF file, for every supported type (F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). Weights are never
// dequantized to a copy.
//
// As in ggml, the activations are first converted once to the "vec_dot type" of the weight
// type, so that the inner loops are integer dot products:
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS -> Q8A: 32-element blocks of int8 with a
//                                  float scale and the block sum (ggml's Q8_1 with float
//                                  fields; for Q8_0 and IQ4_NL ggml uses Q8_0, the same codes
//                                  without the sum; for IQ4_XS ggml uses Q8_K, but a scale per
//                                  32-element sub-block, as the weights have, rounds the
//                                  activations of a sub-block finer than one per 256)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K  -> Q8K: 256-element blocks with a float scale per 32
//                                  elements (strided: 4 of every 32, kernels.h says why) and
//                                  float sums per 16 elements (ggml's Q8_K has one scale per
//                                  256, which doubled the test models' NMSE against float64)
//   F32, F16, BF16               -> F32: the activations themselves
// The activation rounding adds an error of its own (NMSE ~1e-5..1e-4 against float64 on
// random data); the float formats see only float32 accumulation error.
//
// Matrices use ggml's layout: W maps n_in -> n_out and holds n_out rows of n_in elements,
// each row row_size(type, n_in) bytes, rows contiguous. Each output element is computed by
// one kernel call whose result does not depend on the tiling, the thread count or the
// scheduling: matvec(x) and row t of matmul(X) with x = X[t] are bit-identical, and so are
// runs with 1 or N threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/gguf/ggml_types.h"

namespace spw::cpu {

class ThreadPool;

enum class VecDotType { F32, Q8A, Q8K };

/// The activation format `wtype` is dotted with. Precondition: is_supported_type(wtype).
VecDotType vec_dot_type(GgmlType wtype);

/// Bytes of one activation row of n elements in the vec_dot type of `wtype`.
/// Precondition: n is a multiple of the weight type's block size.
size_t activation_row_size(GgmlType wtype, int64_t n);

/// Converts one row of n floats to the vec_dot type of `wtype` (activation_row_size bytes at
/// xq; for the float formats a plain copy). Identical output at every SIMD level.
void quantize_activation_row(GgmlType wtype, const float* x, void* xq, int64_t n);

/// Converts n_tokens rows of n floats (X: [n_tokens][n]) to rows of activation_row_size(wtype,
/// n) bytes at Xq, tokens spread over the pool.
void quantize_activations(GgmlType wtype, const float* X, int64_t n_tokens, int64_t n, void* Xq,
                          ThreadPool& pool);

/// sum_i w[i] * x[i] over one weight row of n elements and one activation row in the
/// vec_dot type (as written by quantize_activation_row).
float vec_dot(GgmlType wtype, const void* w_row, const void* xq, int64_t n);

/// y[r] = W[r] . x for r < n_out. x: [n_in] floats, y: [n_out].
void matvec(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const float* x, float* y,
            ThreadPool& pool);

/// Y[t][r] = W[r] . X[t]. X: [n_tokens][n_in] floats, Y: [n_tokens][n_out]. The activations
/// are converted once; then each thread walks its rows in tiles, a block of tokens at a time,
/// so a weight row is read from memory once per token block and reused from cache within it.
void matmul(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const float* X,
            int64_t n_tokens, float* Y, ThreadPool& pool);

/// As matmul, with activations already converted: Xq holds n_tokens rows of
/// activation_row_size(wtype, n_in) bytes (lets Q, K and V, or gate and up, share one
/// conversion).
void matmul_q(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const void* Xq,
              int64_t n_tokens, float* Y, ThreadPool& pool);

}  // namespace spw::cpu
