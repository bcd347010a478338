// llama.cpp's quantization mixes for test models: which tensor type each weight of a dense
// Llama-family model gets in a Q4_K_M, Q3_K_M, IQ4_XS, ... file, so a generated model has the
// same mix of types (and so the same mix of kernels) as the files users download.
//
// Source: llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) for a model that is not
// Falcon, has no experts, is not 70B-sized and is quantized without an importance matrix; the
// mix's default type (its ftype's base type: Q3_K for Q3_K_S/M/L) everywhere the rules say
// nothing. q4_k_m keeps the test models' historical rule (Q6_K for every attn_v; llama.cpp uses
// use_more_bits() for attn_v too), which the benchmark figures of tests/bench/RESULTS.md were
// measured with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace spw {

/// The mixes known: "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_m", "iq4_nl", "iq4_xs".
const std::vector<std::string>& quant_mix_names();

/// Those names joined with ", ", for messages.
std::string quant_mix_list();

/// True for a name of quant_mix_names().
bool is_quant_mix(std::string_view mix);

/// What a tensor's type depends on besides its role.
struct MixContext {
  int64_t layer = 0;    ///< block index (ignored for token_embd and output)
  int64_t n_layer = 1;  ///< block_count
  int64_t n_gqa = 1;    ///< n_head / n_head_kv
  bool tied = false;    ///< token_embd is also the output matrix
};

/// Type of a weight in `mix`. role: "token_embd", "output", or a layer weight "attn_q",
/// "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down". std::nullopt when mix is
/// not a known mix. Tied embeddings get the output's type, as llama.cpp quantizes them.
std::optional<GgmlType> quant_mix_type(std::string_view mix, std::string_view role,
                                       const MixContext& ctx);

/// general.file_type (llama_ftype) of a file in `mix`: 10 (Q2_K), 11-13 (Q3_K_S/M/L), 15
/// (Q4_K_M), 25 (IQ4_NL), 30 (IQ4_XS); 0 for an unknown mix.
uint32_t quant_mix_file_type(std::string_view mix);

}  // namespace spw
