// Vectorised element-wise kernels of the CPU forward pass: RMSNorm, RoPE, SwiGLU, GeGLU, softmax
// and the KV row conversions (f32 <-> f16, f32 -> q8_0). Each runs at the active SIMD level
// (simd.h); the scalar level is the portable fallback. Preconditions are asserted in debug builds
// only (kernels trust their inputs; shapes are checked once, at model load).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace spw::cpu {

/// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] over n elements; w == nullptr means no
/// weight. out may alias x.
void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out);

/// cos/sin table of one position: cs[i] = cos(pos * inv_freq[i]) * mscale, cs[n_rot/2 + i] =
/// sin(...) * mscale for i < n_rot / 2 (inv_freq and mscale: engine/model/rope.h
/// rope_inv_freq, rope_mscale). The angle is formed in double (pos * inv_freq reaches 10^5
/// radians at long context, where float would lose ~0.01 rad); the product with mscale too.
/// One table serves every head and every layer of that RoPE for a token.
void rope_cos_sin(const double* inv_freq, int64_t n_rot, int64_t pos, double mscale, float* cs);

/// Rotates the first n_rot dims of each of n_heads vectors of head_dim floats, in place:
/// x: [n_heads][head_dim]. Normal pairs (2i, 2i+1); NeoX pairs (i, i + n_rot/2).
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs,
          RopeType type);

/// out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u. out may alias g or u.
void swiglu(const float* g, const float* u, float* out, int64_t n);

/// out[i] = gelu_tanh(g[i]) * u[i] (GeGLU, Shazeer 2020; Gemma's FFN), gelu_tanh(x) = 0.5 x (1 +
/// tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715
/// x^3))). out may alias g or u.
void geglu(const float* g, const float* u, float* out, int64_t n);

/// x = exp(x - max x) / sum, in place.
void softmax(float* x, int64_t n);

/// The router of a mixture of experts (llama.cpp's build_moe_ffn, softmax gating), for each of
/// n tokens: logits [n][n_expert] become probabilities in place (softmax); chosen [n][k]
/// receives the k most probable experts (the lower expert first on ties) and weights [n][k]
/// their probabilities, divided by their sum when `norm`, times `scale` when it is not 0.
void route_experts(float* logits, int64_t n, int64_t n_expert, int64_t k, bool norm, float scale,
                   int32_t* chosen, float* weights);

/// Row conversions, round to nearest even (bit-identical to fp32_to_fp16 / fp16_to_fp32 in
/// engine/common/fp16.h for every non-NaN value).
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
void f16_to_f32_row(const uint16_t* x, float* y, int64_t n);

/// f32 -> Q8_0 blocks (n % 32 == 0; y receives n / 32 BlockQ8_0, 34 B each): the KV cache's
/// q8_0 rows. Bit-identical to quantize_row(GgmlType::Q8_0, ...) (ggml's
/// quantize_row_q8_0_ref: d = max|x| / 127, q = round half away from zero of x / d).
void f32_to_q8_0_row(const float* x, void* y, int64_t n);

}  // namespace spw::cpu
