// Vectorised element-wise kernels of the CPU forward pass: RMSNorm, RoPE, SwiGLU, softmax and
// the KV row conversions (f32 <-> f16, f32 -> q8_0). Each runs at the active SIMD level (simd.h);
// the scalar level is the portable fallback. Preconditions are asserted in debug builds only
// (kernels trust their inputs; shapes are checked once, at model load).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace spw::cpu {

/// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] over n elements; w == nullptr means no
/// weight. out may alias x.
void rms_norm(const float* x, const float* w, float eps, int64_t n, float* out);

/// Inverse frequencies of RoPE, as the reference path computes them:
/// inv_freq[i] = freq_scale * base^(-2i / n_rot) / factors[i] for i < n_rot / 2
/// (factors: `rope_freqs.weight`, Llama 3.1 scaling; nullptr for none).
std::vector<double> rope_inv_freq(int64_t n_rot, double base, double freq_scale,
                                  const float* factors);

/// cos/sin table of one position: cs[i] = cos(pos * inv_freq[i]) * mscale, cs[n_rot/2 + i] =
/// sin(...) * mscale for i < n_rot / 2. The angle is formed in double (pos * inv_freq reaches
/// 10^5 radians at long context, where float would lose ~0.01 rad). mscale is YaRN's
/// attention factor (1 otherwise). One table serves every head and layer of a token.
void rope_cos_sin(const double* inv_freq, int64_t n_rot, int64_t pos, float mscale, float* cs);

/// Rotates the first n_rot dims of each of n_heads vectors of head_dim floats, in place:
/// x: [n_heads][head_dim]. Normal pairs (2i, 2i+1); NeoX pairs (i, i + n_rot/2).
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cs,
          RopeType type);

/// out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u. out may alias g or u.
void swiglu(const float* g, const float* u, float* out, int64_t n);

/// x = exp(x - max x) / sum, in place.
void softmax(float* x, int64_t n);

/// Row conversions, round to nearest even (bit-identical to fp32_to_fp16 / fp16_to_fp32 in
/// engine/common/fp16.h for every non-NaN value).
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
void f16_to_f32_row(const uint16_t* x, float* y, int64_t n);

/// f32 -> Q8_0 blocks (n % 32 == 0; y receives n / 32 BlockQ8_0, 34 B each): the KV cache's
/// q8_0 rows. Bit-identical to quantize_row(GgmlType::Q8_0, ...) (ggml's
/// quantize_row_q8_0_ref: d = max|x| / 127, q = round half away from zero of x / d).
void f32_to_q8_0_row(const float* x, void* y, int64_t n);

}  // namespace spw::cpu
