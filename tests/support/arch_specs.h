// Test-model specs that exercise each architecture's own parts (test_model.h): the names the
// parameterised tests use, one spec each.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "tests/support/test_model.h"

namespace spw {

/// The architectures the engine reads, as test names: llama, qwen2, qwen3, qwen2moe, qwen3moe,
/// mixtral (arch llama with experts), phi3, gemma3.
const std::vector<std::string>& test_arch_names();
/// Only the ones this change added (qwen2moe, qwen3moe, mixtral, phi3, gemma3).
const std::vector<std::string>& new_test_arch_names();

/// A small spec of architecture `name` with weights of `type` whose features all act on a
/// prompt of a dozen tokens or more: gemma3 has 6 layers (5 sliding, window 8) and linear RoPE
/// scaling on its global layer; phi3 a partial rotary (half the head) and a sliding window of 8
/// on every layer; the MoE archs 4 (mixtral) or 8 (qwen) experts, 2 used.
/// K-quant types get n_embd 256, n_ff 512, head_dim 64 (their block size).
TestModelSpec arch_test_spec(const std::string& name, GgmlType type = GgmlType::F32);

/// The test name of an (architecture, weight type) parameter: "gemma3_Q4_K".
std::string arch_type_test_name(
    const ::testing::TestParamInfo<std::tuple<std::string, GgmlType>>& info);

}  // namespace spw
