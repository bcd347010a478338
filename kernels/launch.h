// Host-side launchers of the CUDA kernels in kernels/*.cu (one file per op, each defining its
// launch_<op>()). The engine's CUDA backend (engine/backend/cuda) is their only caller.
//
// Conventions for every launcher:
// - Every pointer is a device pointer unless the comment says "host". Sizes are element counts.
// - The launch is asynchronous on `stream`. The return value is cudaErrorInvalidValue for
//   arguments the kernel cannot take (checked on the host before launching, nothing launched),
//   otherwise cudaGetLastError() right after the launch; callers wrap each call in CUDA_CHECK.
// - Weights are GGUF tensors uploaded byte for byte: a weight mapping n_in -> n_out is n_out
//   rows, row r starting at byte r * row_bytes (row_bytes = row_size(type, n_in)), each row in
//   `type`'s blocks as ggml lays them out (formats/ggml_format.h). n_in must be a multiple
//   of the type's block size (the model loader checks it).
// - Zero-sized work (n_out, n_tok, n_rows or n == 0) returns cudaSuccess and launches
//   nothing; negative sizes are invalid. Weight pointers must be at least 2-byte aligned (4 for
//   F32 weights); row_bytes may exceed row_size (padded rows) but not fall below it.
// - Matrices are row-major: X [n][k] means n rows of k contiguous floats.
// - f16 values are IEEE binary16 bit patterns in uint16_t (the same bits as __half).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/ggml_format.h"
#include "kernels/paged_math.h"

namespace spw::kernels {

// ---- matvec.cu --------------------------------------------------------------------------
/// Y[t][r] = sum_i W[r][i] * X[t][i] for t < n_tok, r < n_out, with W in any supported weight
/// type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
/// IQ4_XS (others: cudaErrorInvalidValue). Decode (n_tok == 1) is the case it is built for; it
/// stays correct for any n_tok >= 1 (the backend uses cuBLAS above a handful of tokens). X
/// [n_tok][n_in] f32, Y [n_tok][n_out] f32. Accumulates in f32; the blocks are decoded by the
/// SPW_HD functions of kernels/quant_math.h.
cudaError_t launch_matvec(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                          int64_t n_out, const float* x, int64_t n_tok, float* y,
                          cudaStream_t stream);

// ---- dequant.cu -------------------------------------------------------------------------
/// Rows [row0, row0 + n_rows) of W, decoded to f16: dst [n_rows][n_in] (binary16 bits). The
/// prefill path decodes a weight tile and hands it to cuBLAS. Same types as launch_matvec.
cudaError_t launch_dequant_f16(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                               int64_t row0, int64_t n_rows, uint16_t* dst, cudaStream_t stream);

// ---- get_rows.cu ------------------------------------------------------------------------
/// Embedding lookup: dst[t][0..n_in) = row ids[t] of W decoded to f32, t < n. ids must be in
/// [0, n_rows of W) (the session checks token ids before uploading them).
cudaError_t launch_get_rows(GgmlType type, const void* w, int64_t row_bytes, int64_t n_in,
                            const int32_t* ids, int64_t n, float* dst, cudaStream_t stream);

// ---- convert.cu -------------------------------------------------------------------------
/// y[i] = binary16(x[i]), round to nearest even (bit-identical to fp32_to_fp16 in
/// engine/common/fp16.h for every non-NaN value), i < n.
cudaError_t launch_f32_to_f16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);

// ---- rmsnorm.cu -------------------------------------------------------------------------
/// For each of n_rows (<= INT32_MAX) rows of n floats: y = x / sqrt(mean(x^2) + eps) * w (w ==
/// nullptr: no weight, as the reference path). y may alias x. Rows of a head (Qwen3's QK-norm) are
/// rows with n = head_dim. RMSNorm: Zhang & Sennrich 2019.
cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t n, int64_t n_rows,
                           float eps, cudaStream_t stream);

// ---- rope.cu ----------------------------------------------------------------------------
/// Rotary position embedding (Su et al. 2021, RoFormer) in place on x [n_tok][n_heads][head_dim]:
/// the first n_rot dims of every head rotated with token t's cos/sin table cs[t][0..n_rot),
/// laid out as engine/cpu/ops.h rope_cos_sin() writes it (cos at i, sin at n_rot/2 + i,
/// angles formed in double on the host, `rope_freqs` and linear scaling already applied).
/// neox == false pairs (2i, 2i+1) (llama); true pairs (i, i + n_rot/2) (qwen2, qwen3).
cudaError_t launch_rope(float* x, const float* cs, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                        int64_t n_rot, bool neox, cudaStream_t stream);

// ---- swiglu.cu --------------------------------------------------------------------------
/// y[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u for i < n (Shazeer 2020, GLU variants).
/// y may alias g or u.
cudaError_t launch_swiglu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream);

// ---- geglu.cu --------------------------------------------------------------------------
/// y[i] = gelu_tanh(g[i]) * u[i] for i < n (GeGLU, Gemma's FFN), gelu_tanh(x) = 0.5 x (1 +
/// tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as the CPU does: x / (1 + exp(-2 sqrt(2/pi)
/// (x + 0.044715 x^3))). y may alias g or u.
cudaError_t launch_geglu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream);

// ---- add.cu -----------------------------------------------------------------------------
/// Residual add: y[i] = a[i] + b[i], i < n; y may alias a or b.
cudaError_t launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
/// Scale in place: x[i] *= a, i < n (gemma3's embedding scale sqrt(n_embd)).
cudaError_t launch_scale(float* x, float a, int64_t n, cudaStream_t stream);
/// Bias: x[r][i] += bias[i] for r < n_rows, i < n (qwen2's Q/K/V biases).
cudaError_t launch_add_bias(float* x, const float* bias, int64_t n, int64_t n_rows,
                            cudaStream_t stream);

// ---- moe.cu -----------------------------------------------------------------------------
/// Gather: dst[i][0..dim) = src[rows[i]][0..dim) for i < n_rows (one expert's tokens into a
/// contiguous block). rows: device int32 indices into src's rows.
cudaError_t launch_gather_rows(const float* src, const int32_t* rows, int64_t n_rows, int64_t dim,
                               float* dst, cudaStream_t stream);
/// Scatter: dst[rows[i]][0..dim) = src[i][0..dim) for i < n_rows; rows distinct.
cudaError_t launch_scatter_rows(const float* src, const int32_t* rows, int64_t n_rows, int64_t dim,
                                float* dst, cudaStream_t stream);
/// out[t][c] = sum_{j < k} weights[t][j] * slot[t][j][c], j in order, for t < n_tok, c < dim:
/// the router-weighted sum of a token's k expert outputs. slot [n_tok][k][dim], weights
/// [n_tok][k], out [n_tok][dim] (not aliasing slot).
cudaError_t launch_moe_combine(const float* slot, const float* weights, int64_t n_tok, int64_t k,
                               int64_t dim, float* out, cudaStream_t stream);
/// qwen2moe's shared expert: out[t] += sigmoid(h[t] . gate_w) * y[t], t < n_tok; h, y, out
/// [n_tok][dim], gate_w [dim].
cudaError_t launch_shared_gate_add(const float* h, const float* gate_w, const float* y,
                                   int64_t n_tok, int64_t dim, float* out, cudaStream_t stream);

// ---- kv_store.cu ------------------------------------------------------------------------
/// The GPU window's KV write: n_tok rows src [n_tok][n_kv_heads][row_dim] (K or V of
/// positions [pos0, pos0 + n_tok)) into the slots of the blocks that hold them, in the layout of
/// kernels/paged_math.h: blocks[i] is logical block first_block + i (first_block = pos0 /
/// block_size), part_off the layer's K or V part in a slot (PagedLayer::k_off / v_off).
/// kv_type F32, F16 (round to nearest even) or Q8_0 (row_dim % 32 == 0; bit-identical to the
/// CPU cache's conversion: quantize_q8_0_block).
cudaError_t launch_kv_store_paged(const float* src, GgmlType kv_type, int64_t row_dim,
                                  int64_t n_kv_heads, const PagedBlock* blocks, int64_t first_block,
                                  int64_t block_size, int64_t part_off, int64_t pos0, int64_t n_tok,
                                  cudaStream_t stream);

// ---- paged_attention.cu ----------------------------------------------------------------
/// Most splits of a block table a decode launch uses (bounds the partials' workspace).
inline constexpr int64_t kMaxPagedSplits = 64;

/// Splits for a launch_paged_attention of n_tok queries over n_blocks blocks: 1 for prefill
/// (n_tok >= 8) or a single block; for decode enough to give n_sm SMs two CTAs each, at most
/// one per block and kMaxPagedSplits.
int64_t paged_attention_splits(int64_t n_tok, int64_t n_blocks, int64_t n_head, int n_sm);

/// Partial causal attention (flash-decoding, Dao et al. 2023; FlashAttention, Dao et al. 2022)
/// of n_tok queries at positions [pos0, pos0 + n_tok) over the valid rows of a block table:
/// query t attends a row at position p when p <= pos0 + t and, for a sliding-window layer
/// (span > 0), p > pos0 + t - span (the lower bound; span 0: global). GQA: head h reads KV head
/// h / (n_head / n_kv_heads). Rows are read in `layer`'s layout and types (K and V types equal:
/// F32, F16 or Q8_0; Q8_0 needs head dims % 32 == 0).
///   q        [n_tok][n_head][head_dim] f32
///   table    [n_blocks] PagedBlock (device memory), any order; n_blocks may be 0
///   part_o   [n_split][n_tok][n_head][head_dim_v] f32, unnormalised o of each split
///   part_ms  [n_split][n_tok][n_head][2] f32: running max m and sum s (m = -inf, s = 0: no key)
/// n_split from paged_attention_splits(); it must be 1 when n_tok >= 8. head dims <= 256,
/// n_head <= 65535, block_size <= 65536, n_blocks * block_size < 2^31.
cudaError_t launch_paged_attention(const float* q, const PagedBlock* table, int64_t n_blocks,
                                   const PagedLayer& layer, int64_t n_tok, int64_t pos0,
                                   int64_t n_head, int64_t n_kv_heads, int64_t head_dim,
                                   int64_t head_dim_v, float scale, int64_t span, int64_t n_split,
                                   float* part_o, float* part_ms, cudaStream_t stream);

/// Log-sum-exp merge (softmax_math.h softmax_merge) of n_parts partials in the layout above
/// (part p at part_o + p * n_tok * n_head * head_dim_v, part_ms + p * n_tok * n_head * 2),
/// merged in part order. out_ms == nullptr: out_o [n_tok][n_head][head_dim_v] receives the
/// normalised attention output o / s (zeros where no part saw a key); otherwise out_o/out_ms
/// receive the merged partial (they may be part 0 itself). n_tok <= 65535.
cudaError_t launch_attn_combine(const float* part_o, const float* part_ms, int64_t n_parts,
                                int64_t n_tok, int64_t n_head, int64_t head_dim_v, float* out_o,
                                float* out_ms, cudaStream_t stream);

// ---- probe.cu ---------------------------------------------------------------------------
/// cudaSuccess when this build's kernels have code the current device can run (asked with
/// cudaFuncGetAttributes on one of them, which launches nothing); otherwise the error, e.g.
/// cudaErrorNoKernelImageForDevice on a GPU older than the architectures built
/// (CMAKE_CUDA_ARCHITECTURES). The backend calls it before choosing CUDA.
cudaError_t kernels_loadable();

}  // namespace spw::kernels
