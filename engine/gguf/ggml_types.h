// What the engine knows about the GGUF tensor types: their names and sizes, which of them it
// computes with, and reference (scalar) dequantize / quantize of whole rows. The type numbers
// (GgmlType) and the block layouts (BlockQ4_0 ... BlockQ6_K, BlockQ2_K, BlockQ3_K, BlockIQ4_NL,
// BlockIQ4_XS) are in formats/ggml_format.h, which kernels/ includes too.
//
// Source: the GGUF specification (ggml/docs/gguf.md) and ggml's block definitions
// (ggml-common.h). A row of n elements of a block type occupies n / block_size blocks
// of type_size bytes each; n must be a multiple of block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "formats/ggml_format.h"

namespace spw {

/// What the loader knows about a type number.
struct TypeTraits {
  std::string_view name;  // "Q4_K" — as GGUF tools print it
  int block_size;         // elements per block (1 for F32/F16/BF16)
  int type_size;          // bytes per block
  bool supported;         // false: known but refused (IQ1_*, IQ2_*, IQ3_*, TQ*, ...)
};

/// Traits of a type number; std::nullopt when the number is not a ggml type at all.
std::optional<TypeTraits> type_traits(uint32_t type);

/// Name for messages: "Q4_K", or "unknown type 77" for an unknown number.
std::string type_name(uint32_t type);

/// Bytes of a row of n elements. Precondition: n % block_size == 0 and the type is known.
size_t row_size(GgmlType type, int64_t n);

/// True for the fifteen types the engine computes with: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
bool is_supported_type(GgmlType type);

/// Those fifteen names for messages, from the type table in type-number order:
/// "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16".
std::string supported_type_names();

/// Dequantizes one row of n elements from `src` (row_size(type, n) bytes) into `dst` (n floats).
/// Precondition: supported type, n % block_size == 0. Reference code: scalar and exact to the
/// format's definition (ggml's dequantize_row_*).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

/// Quantizes one row of n floats into `dst` (row_size(type, n) bytes). Used to write test
/// models and quantized KV; round-to-nearest within each block, scales chosen so that
/// dequantize(quantize(x)) stays within the bound documented per type in quant_error_bound().
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

/// Upper bound on max|x - dequantize(quantize(x))| / max|x| over one row, for tests.
double quant_error_bound(GgmlType type);

}  // namespace spw
