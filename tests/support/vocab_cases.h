// The shared tokenizer test data (../shared/models/ggml-vocab-*.gguf.inp/.out), read exactly as
// llama.cpp's tests/test-tokenizer-0.cpp reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spw {

/// The whole file as bytes ("" when it cannot be read).
std::string read_file_bytes(const std::string& path);

/// Test inputs: pieces separated by "\n__ggml_vocab_test__\n"; a separator that ends the file
/// closes the last piece and does not start an empty one.
std::vector<std::string> split_vocab_inputs(const std::string& raw);

/// Reference ids: one line per input, ids separated by spaces (the leading space is skipped).
std::vector<std::vector<int32_t>> read_vocab_outputs(const std::string& path);

/// "1 2 3" for messages and CLI output comparisons.
std::string ids_str(const std::vector<int32_t>& ids);

}  // namespace spw
