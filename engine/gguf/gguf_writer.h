// GGUF writer: builds a GGUF v3 (or v2) file in memory and writes it atomically
// (temporary file + rename). Used to write test models and, later, KV snapshots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"

namespace spw {

/// An owned metadata value for writing (mirrors GgufValue, with owned strings).
struct GgufWriteValue {
  GgufType type = GgufType::UINT32;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufWriteValue>> v;
  GgufType elem_type = GgufType::UINT8;  // for ARRAY

  static GgufWriteValue u32(uint32_t x) { return {GgufType::UINT32, uint64_t{x}}; }
  static GgufWriteValue i32(int32_t x) { return {GgufType::INT32, int64_t{x}}; }
  static GgufWriteValue u64(uint64_t x) { return {GgufType::UINT64, x}; }
  static GgufWriteValue f32(float x) { return {GgufType::FLOAT32, double{x}}; }
  static GgufWriteValue boolean(bool x) { return {GgufType::BOOL, x}; }
  static GgufWriteValue str(std::string s) { return {GgufType::STRING, std::move(s)}; }
  static GgufWriteValue array(GgufType elem, std::vector<GgufWriteValue> items) {
    GgufWriteValue a{GgufType::ARRAY, std::move(items)};
    a.elem_type = elem;
    return a;
  }
  static GgufWriteValue str_array(const std::vector<std::string>& items);
  static GgufWriteValue f32_array(const std::vector<float>& items);
  static GgufWriteValue i32_array(const std::vector<int32_t>& items);
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  /// Adds or replaces a key. general.alignment is written automatically when alignment != 32.
  void set(const std::string& key, GgufWriteValue value);

  /// Adds a tensor. `ne` in ggml order (ne[0] = row length); `data` must hold exactly
  /// row_size(type, ne[0]) * rows bytes.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                  std::vector<uint8_t> data);

  /// Convenience: quantizes f32 rows (ne[0] per row) to `type` and adds them.
  void add_tensor_f32(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                      const std::vector<float>& values);

  /// The whole file as bytes.
  std::vector<uint8_t> serialize() const;

  /// Writes to `path` (temp file + rename). Errors name the path and the system error.
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufWriteValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace spw
