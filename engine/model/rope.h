// Rotary position embedding (Su et al. 2021, "RoFormer") and its context-extension forms, as a
// GGUF file states them and llama.cpp applies them (ggml's rope_ext, src/llama-context.cpp):
//   none / linear  theta_i(pos) = pos * freq_scale * base^(-2i / n_rot) / f_i
//                  (freq_scale = 1 / rope.scaling.factor; linear position interpolation,
//                  Chen et al. 2023);
//   yarn           theta_i = (1 - mix_i) * interp_i + mix_i * extrap_i with extrap_i = pos *
//                  base^(-2i / n_rot) / f_i, interp_i = freq_scale * extrap_i and mix_i =
//                  ext_factor * (1 - clamp((i - low) / max(0.001, high - low), 0, 1)), the
//                  correction range [low, high] from beta_fast / beta_slow and the original
//                  context (Peng et al. 2023, "YaRN"); cos and sin are multiplied by mscale;
//   llama3 / LongRoPE  per-pair divisors f_i from a tensor: `rope_freqs.weight` (Llama 3.1), or
//                  `rope_factors_long.weight` / `rope_factors_short.weight` (Phi-3, chosen by
//                  the session's context against the original context), with LongRoPE's
//                  attention factor in mscale (rope.scaling.attn_factor).
// Angles are formed in double (pos * inv_freq reaches 10^5 radians at long context).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace spw {

/// The scaling a file names in <arch>.rope.scaling.type.
enum class RopeScaling { None, Linear, Yarn, LongRope };

/// "none" | "linear" | "yarn" | "longrope".
const char* rope_scaling_name(RopeScaling s);

/// One RoPE: the frequencies of a group of layers (all of them, or gemma3's sliding-window
/// layers, which keep base 10000 and no scaling).
struct RopeParams {
  RopeScaling scaling = RopeScaling::None;
  double freq_base = 10000.0;  // <arch>.rope.freq_base
  double freq_scale = 1.0;     // 1 / <arch>.rope.scaling.factor (or .rope.scale_linear)
  // YaRN. ext_factor: <arch>.rope.scaling.yarn_ext_factor, else 1 for yarn and 0 otherwise (0
  // turns the ramp off); beta_fast / beta_slow: .rope.scaling.yarn_beta_fast / _slow (32, 1);
  // n_ctx_orig: .rope.scaling.original_context_length (default the trained context).
  double ext_factor = 0.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t n_ctx_orig = 0;
  // Magnitude factors: attn_factor is .rope.scaling.attn_factor (LongRoPE's, default 1);
  // yarn_attn_factor is .rope.scaling.yarn_attn_factor (default 1), used when ext_factor == 0.
  double attn_factor = 1.0;
  double yarn_attn_factor = 1.0;
};

/// YaRN's correction range [low, high] in pairs, as ggml_rope_yarn_corr_dims computes it:
/// low = max(0, floor(d(beta_fast))), high = min(n_rot - 1, ceil(d(beta_slow))), with
/// d(beta) = n_rot * ln(n_ctx_orig / (2 pi beta)) / (2 ln base).
std::array<double, 2> rope_yarn_corr_dims(int64_t n_rot, const RopeParams& p);

/// The factor cos and sin are multiplied by (so q.k by its square), as llama.cpp's context sets
/// it: with ext_factor != 0, (1 + 0.1 ln(1 / freq_scale)) for freq_scale < 1 (else 1) times
/// attn_factor; otherwise yarn_attn_factor * attn_factor.
double rope_mscale(const RopeParams& p);

/// Per-pair angle per position, i < n_rot / 2: theta_i(pos) = pos * inv_freq[i] (the forms
/// above, factors f_i from `factors`, nullptr for none).
std::vector<double> rope_inv_freq(int64_t n_rot, const RopeParams& p, const float* factors);

}  // namespace spw
