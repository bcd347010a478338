#include "tests/support/quant_mix.h"

namespace spw {
namespace {

// llama.cpp's use_more_bits(): the first and last eighth of the layers and every third between.
bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

GgmlType layer_type(std::string_view mix, std::string_view role, const MixContext& c) {
  const int64_t l = c.layer, n = c.n_layer;
  if (mix == "q4_k_m") {
    if (role == "attn_v") return GgmlType::Q6_K;
    if (role == "ffn_down" && use_more_bits(l, n)) return GgmlType::Q6_K;
    return GgmlType::Q4_K;
  }
  if (mix == "q2_k") {
    if (role == "attn_v") return c.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    if (role == "ffn_down" || role == "attn_output") return GgmlType::Q3_K;
    return GgmlType::Q2_K;
  }
  if (mix == "q3_k_s") return GgmlType::Q3_K;
  if (mix == "q3_k_m") {
    // llama.cpp counts attn_v tensors in layer order: the first two are Q5_K.
    if (role == "attn_v") return l < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    if (role == "ffn_down") return l < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    if (role == "attn_output") return GgmlType::Q4_K;
    return GgmlType::Q3_K;
  }
  if (mix == "q3_k_l") {
    if (role == "attn_v" || role == "ffn_down" || role == "attn_output") return GgmlType::Q5_K;
    return GgmlType::Q3_K;
  }
  // iq4_nl, iq4_xs
  const GgmlType base = mix == "iq4_nl" ? GgmlType::IQ4_NL : GgmlType::IQ4_XS;
  if (role == "attn_v" && c.n_gqa >= 4) return GgmlType::Q5_K;
  if (role == "ffn_down" && l < n / 8) return GgmlType::Q5_K;
  return base;
}

}  // namespace

const std::vector<std::string>& quant_mix_names() {
  static const std::vector<std::string> kNames = {"q2_k",   "q3_k_s", "q3_k_m", "q3_k_l",
                                                  "q4_k_m", "iq4_nl", "iq4_xs"};
  return kNames;
}

std::string quant_mix_list() {
  std::string s;
  for (const std::string& n : quant_mix_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool is_quant_mix(std::string_view mix) {
  for (const std::string& n : quant_mix_names()) {
    if (n == mix) return true;
  }
  return false;
}

std::optional<GgmlType> quant_mix_type(std::string_view mix, std::string_view role,
                                       const MixContext& ctx) {
  if (!is_quant_mix(mix)) return std::nullopt;
  if (role == "output" || (role == "token_embd" && ctx.tied)) return GgmlType::Q6_K;
  if (role == "token_embd") {  // the mix's base type: no rule for token_embd in these mixes
    if (mix == "q4_k_m") return GgmlType::Q4_K;
    if (mix == "q2_k") return GgmlType::Q2_K;
    if (mix == "iq4_nl") return GgmlType::IQ4_NL;
    if (mix == "iq4_xs") return GgmlType::IQ4_XS;
    return GgmlType::Q3_K;
  }
  return layer_type(mix, role, ctx);
}

uint32_t quant_mix_file_type(std::string_view mix) {
  if (mix == "q2_k") return 10;
  if (mix == "q3_k_s") return 11;
  if (mix == "q3_k_m") return 12;
  if (mix == "q3_k_l") return 13;
  if (mix == "q4_k_m") return 15;
  if (mix == "iq4_nl") return 25;
  if (mix == "iq4_xs") return 30;
  return 0;
}

}  // namespace spw
