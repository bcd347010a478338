// Helpers shared by the tests of block decoding (CPU math and CUDA kernels): float bit casts and
// where a block type keeps its binary16 scale fields, so random block bytes can be given finite
// scales.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace spw::test {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Byte offsets of a block's binary16 scale fields (formats/ggml_format.h's structs); empty
/// for the float types.
inline std::vector<int> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K:
      return {208};
    case GgmlType::Q2_K:
      return {80, 82};
    case GgmlType::Q3_K:
      return {108};
    default:
      return {};
  }
}

}  // namespace spw::test
