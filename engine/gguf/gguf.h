// GGUF reader: memory-maps a .gguf file and validates its header, metadata and tensor index
// before any tensor byte is touched.
//
// Format: GGUF v2/v3 (ggml/docs/gguf.md). Little-endian. Layout:
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type, value)
//   | n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml_type, u64 offset)
//   | padding to general.alignment (default 32) | tensor data (offsets relative to its start).
// Strings are u64 length + bytes (no NUL). Arrays are u32 element type + u64 count + elements
// (arrays of arrays allowed). Dimensions are ggml order: ne[0] is the contiguous (row) length.
//
// Errors (Expected::error().message) name the file and, where relevant, the key or tensor:
//   bad magic, unsupported version (v1 and > 3), truncated header, counts or string lengths
//   larger than the file, bad alignment (0 or not a power of two), unknown ggml type number
//   (names the number and the tensor), misaligned tensor offset, tensor data past the end of
//   the file ("tensor 'blk.3.ffn_down.weight' ends at byte N but the file has M bytes"),
//   duplicate keys or tensor names, rows not a multiple of the type's block size.
// Supported-but-refused types (Q2_K, IQ*) and unknown architectures pass here; the model loader
// refuses them, so vocabulary-only use (tokenize) works on any file that is structurally sound.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"

namespace spw {

/// GGUF metadata value types, as numbered by the format.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

/// "UINT32", "ARRAY", ... for messages.
std::string_view gguf_type_name(GgufType t);

struct GgufValue;

/// An array value. Elements all have `elem_type`; for nested arrays each element is itself an
/// ARRAY value.
struct GgufArray {
  GgufType elem_type = GgufType::UINT8;
  std::vector<GgufValue> items;
};

/// One metadata value. Integers are widened to int64/uint64 (by signedness), floats to double;
/// `type` keeps the type as stored. Strings view the mapped file (valid while the GgufFile lives).
struct GgufValue {
  GgufType type = GgufType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string_view, GgufArray> v;

  bool is_integer() const;
  bool is_float() const;
  /// Integer value (any integer type); precondition is_integer(). UINT64 above INT64_MAX
  /// is reported by the typed getters, not here.
  int64_t as_int() const;
  double as_double() const;  ///< precondition is_integer() || is_float()
  std::string_view as_string() const { return std::get<std::string_view>(v); }
  const GgufArray& as_array() const { return std::get<GgufArray>(v); }
};

struct GgufKV {
  std::string_view key;
  GgufValue value;
};

/// One entry of the tensor index, validated: bounds, alignment, block multiple.
struct GgufTensorInfo {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;                            // 1..4
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ggml order; ne[0] is the row length
  uint64_t offset = 0;                       // relative to the start of the data section
  uint64_t n_bytes = 0;                      // exact size of the tensor's data
  const uint8_t* data = nullptr;             // into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return row_size(type, ne[0]); }
  /// "[64, 512]" for messages.
  std::string shape_string() const;
};

/// An open, validated, memory-mapped GGUF file. Immutable; safe to read from many threads.
class GgufFile {
 public:
  /// Maps and validates `path`. Never crashes on hostile input; every failure is an Error whose
  /// message starts with the path.
  static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  ///< absolute start of tensor data

  const std::vector<GgufKV>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  /// nullptr when absent.
  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed getters. Missing key: the default if given, else an error naming the key.
  // Present with the wrong type: always an error naming key, stored type and wanted type.
  Expected<int64_t> get_int(std::string_view key, std::optional<int64_t> def = std::nullopt) const;
  Expected<double> get_float(std::string_view key,
                             std::optional<double> def = std::nullopt) const;  ///< ints accepted
  Expected<bool> get_bool(std::string_view key, std::optional<bool> def = std::nullopt) const;
  Expected<std::string> get_string(std::string_view key,
                                   std::optional<std::string> def = std::nullopt) const;
  /// Array with elements of `elem` type (nullptr if absent; error if present with another type).
  Expected<const GgufArray*> get_array(std::string_view key, GgufType elem) const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  void* map_ = nullptr;
  std::vector<GgufKV> kv_;
  std::vector<GgufTensorInfo> tensors_;
  friend class GgufParser;
};

}  // namespace spw
