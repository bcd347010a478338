// GGUF writer: builds a GGUF v3 (or v2) file and writes it atomically (temporary file +
// rename). Used to write test models and, later, KV snapshots. Tensors either hold their bytes
// or are generated row by row while the file is written (add_tensor_generated), so a file of
// many gigabytes is written without holding it in memory.
#pragma once

#include <cstdint>
#include <functional>
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

  /// Fills rows [row0, row0 + n_rows) of a generated tensor into `dst`
  /// (row_size(type, ne[0]) bytes per row, rows back to back). Must depend on nothing but
  /// (row0, n_rows) and what it captured: write() and serialize() may split the rows into
  /// chunks differently and call it from one thread at a time.
  using RowFill = std::function<void(int64_t row0, int64_t n_rows, uint8_t* dst)>;

  /// Adds a tensor whose bytes `fill` produces while the file is written. write() streams them
  /// in chunks of a few MiB; serialize() materializes them like any other tensor.
  void add_tensor_generated(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            RowFill fill);

  /// Convenience: quantizes f32 rows (ne[0] per row) to `type` and adds them.
  void add_tensor_f32(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                      const std::vector<float>& values);

  /// The whole file as bytes.
  std::vector<uint8_t> serialize() const;

  /// Writes to `path` (temp file + rename), streaming tensor data: memory stays a few MiB
  /// beyond the stored tensors. Errors name the path and the system error.
  Status write(const std::string& path) const;
  /// The temporary file write(path) fills before renaming it onto path ("PATH.tmp.PID"), so a
  /// tool can remove it when interrupted.
  static std::string temp_path_for(const std::string& path);

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;  // empty for a generated tensor
    RowFill fill;               // set for a generated tensor
    uint64_t n_bytes = 0;       // row_size(type, ne[0]) * rows
  };
  // Magic, version, counts, metadata and the tensor index, padded to the alignment: every
  // byte before the first tensor's data.
  std::vector<uint8_t> header() const;
  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufWriteValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace spw
