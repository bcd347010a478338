// Hostile GGUF files: byte vectors that are broken in one precise way each, for testing that
// the reader and the model loader fail with a clear message and never crash.
//
// Most cases start from a small valid model (hostile_base_model) and patch one field in place,
// located with scan_gguf_layout; the few the writer cannot express (duplicate keys, deep
// nesting) are built byte by byte with ByteBuilder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/test_model.h"

namespace spw {

/// Little-endian byte builder for hand-made GGUF files.
class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  ByteBuilder& u32(uint32_t x) { return put(x); }
  ByteBuilder& u64(uint64_t x) { return put(x); }
  /// GGUF string: u64 length + bytes.
  ByteBuilder& str(std::string_view s);
  /// GGUF header: magic, version, n_tensors, n_kv.
  ByteBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3);
  ByteBuilder& pad_to(uint64_t alignment);

  std::vector<uint8_t> bytes;
};

/// Absolute byte positions of the fields of a serialized GGUF, for patching.
struct GgufLayout {
  struct Key {
    std::string key;
    uint64_t begin = 0;      ///< the key's u64 length
    uint64_t type_pos = 0;   ///< u32 value type
    uint64_t value_pos = 0;  ///< first byte of the value (for arrays: u32 element type)
    uint64_t end = 0;
  };
  struct Tensor {
    std::string name;
    uint64_t begin = 0;       ///< the name's u64 length
    uint64_t n_dims_pos = 0;  ///< u32 n_dims
    uint64_t ne_pos = 0;      ///< n_dims x u64
    uint64_t type_pos = 0;    ///< u32 ggml type
    uint64_t offset_pos = 0;  ///< u64 offset
    uint64_t end = 0;
    uint64_t data_begin = 0;  ///< absolute [data_begin, data_end)
    uint64_t data_end = 0;
  };
  uint64_t n_kv_pos = 16;  ///< u64 n_kv in the header (n_tensors is at 8)
  uint64_t tensor_index_begin = 0;
  uint64_t tensor_index_end = 0;
  uint64_t data_begin = 0;  ///< aligned start of the data section
  std::vector<Key> keys;
  std::vector<Tensor> tensors;

  const Key& key(std::string_view name) const;        ///< asserts presence
  const Tensor& tensor(std::string_view name) const;  ///< asserts presence
};

/// Scans a well-formed GGUF (one GgufWriter wrote). Trusts its input: asserts on malformed bytes.
GgufLayout scan_gguf_layout(const std::vector<uint8_t>& bytes);

void patch_u32(std::vector<uint8_t>& bytes, uint64_t pos, uint32_t value);
void patch_u64(std::vector<uint8_t>& bytes, uint64_t pos, uint64_t value);

/// The spec of the base model: llama, Q8_0, 1 layer, n_vocab 260, n_embd 32, tied (about 22 KB),
/// small enough to truncate at every byte of its header and index.
TestModelSpec hostile_base_spec();
/// The base model's bytes (valid; Model::load accepts it).
std::vector<uint8_t> hostile_base_model();

/// The base model cut to its first k bytes (k <= size).
std::vector<uint8_t> hostile_truncated(size_t k);
/// "GGUF" replaced by "GGML".
std::vector<uint8_t> hostile_bad_magic();
/// The header's version field set to `version` (1 and 99 are the interesting ones).
std::vector<uint8_t> hostile_version(uint32_t version);
/// blk.0.attn_q.weight's type number set to `type` (77: not a ggml type at all).
std::vector<uint8_t> hostile_unknown_tensor_type(uint32_t type = 77);
/// A structurally valid model whose blk.0.attn_q.weight has `type`, a 256-block type the engine
/// knows but does not compute with (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
/// TQ2_0): the reader accepts it, Model::load refuses it by name. The other weights are Q8_0;
/// n_embd 256 so the row fits the type's 256-blocks; the bytes are a fixed pattern.
std::vector<uint8_t> hostile_refused_type(GgmlType type);
/// hostile_refused_type(GgmlType::IQ2_XXS) (type 16).
std::vector<uint8_t> hostile_refused_type_iq2_xxs();
/// general.architecture = "mamba9" with <mamba9.*> keys: readable, refused by Model::load.
std::vector<uint8_t> hostile_unknown_arch();
/// The offset of the base model's second tensor plus 1 (not a multiple of the alignment).
std::vector<uint8_t> hostile_misaligned_offset();
/// general.alignment set to `alignment` (0 and 48: neither is a power of two).
std::vector<uint8_t> hostile_alignment(uint32_t alignment);
/// The header's KV count set to `n_kv` (2^62).
std::vector<uint8_t> hostile_kv_count(uint64_t n_kv);
/// The element count of tokenizer.ggml.tokens set to `count` (2^60).
std::vector<uint8_t> hostile_array_count(uint64_t count);
/// The length of the first key (general.architecture) set to `len` (2^63).
std::vector<uint8_t> hostile_key_length(uint64_t len);
/// The length of general.architecture's string value set to `len` (2^63).
std::vector<uint8_t> hostile_value_length(uint64_t len);
/// token_embd.weight's n_dims set to `n_dims` (9).
std::vector<uint8_t> hostile_n_dims(uint32_t n_dims);
/// token_embd.weight's two dimensions set to 2^40 each (product 2^80 overflows int64).
std::vector<uint8_t> hostile_dim_overflow();
/// Two KVs with the key "general.architecture" (byte-built, no tensors).
std::vector<uint8_t> hostile_duplicate_key();
/// The base model with token_embd.weight added twice (the writer does not deduplicate tensors).
std::vector<uint8_t> hostile_duplicate_tensor();
/// One key holding arrays of arrays `depth` deep (100), byte-built.
std::vector<uint8_t> hostile_nested_arrays(int depth);
/// 0 bytes.
std::vector<uint8_t> hostile_empty();
/// 3 bytes: "GGU".
std::vector<uint8_t> hostile_three_bytes();

/// Writes `bytes` to `path`; false on any I/O error.
bool write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace spw
