#include "tests/support/arch_specs.h"

#include "engine/gguf/ggml_types.h"

namespace spw {

const std::vector<std::string>& test_arch_names() {
  static const std::vector<std::string> v = {"llama",    "qwen2",   "qwen3", "qwen2moe",
                                             "qwen3moe", "mixtral", "phi3",  "gemma3"};
  return v;
}

const std::vector<std::string>& new_test_arch_names() {
  static const std::vector<std::string> v = {"qwen2moe", "qwen3moe", "mixtral", "phi3", "gemma3"};
  return v;
}

TestModelSpec arch_test_spec(const std::string& name, GgmlType type) {
  TestModelSpec s;
  s.arch = name == "mixtral" ? "llama" : name;
  s.weight_type = type;
  // Types of 256-element blocks (the K-quants, IQ4_XS): rows of multiples of 256.
  const bool k_quant = type_traits(static_cast<uint32_t>(type))->block_size == 256;
  if (k_quant) {
    s.n_embd = 256;
    s.n_ff = 512;
    s.head_dim = 64;
  }
  if (name == "llama") s.rope_freqs = true;
  if (name == "mixtral") {
    s.n_expert = 4;
    s.n_expert_used = 2;
  }
  if (name == "qwen2moe" || name == "qwen3moe") {
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = k_quant ? 256 : 32;
    if (name == "qwen2moe") s.n_ff_shexp = k_quant ? 512 : 64;
  }
  if (name == "phi3") {
    s.n_rot = s.head_dim / 2;  // Phi-4-mini's partial rotary
    s.sliding_window = 8;      // on every layer
  }
  if (name == "gemma3") {
    s.n_layer = 6;  // layers 0-4 slide, layer 5 is global
    s.sliding_window = 8;
    s.rope_scaling = "linear";  // the global layer's; the sliding ones keep base 10000
    s.rope_factor = 4.0f;
  }
  return s;
}

std::string arch_type_test_name(
    const ::testing::TestParamInfo<std::tuple<std::string, GgmlType>>& info) {
  return std::get<0>(info.param) + "_" + type_name(static_cast<uint32_t>(std::get<1>(info.param)));
}

}  // namespace spw
