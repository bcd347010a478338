#include "tests/support/hostile_gguf.h"

#include <cassert>
#include <cstdio>
#include <cstring>

namespace spw {

namespace {

// Reads fields of a trusted GGUF during scan_gguf_layout.
struct Cursor {
  const std::vector<uint8_t>& b;
  uint64_t pos = 0;

  template <typename T>
  T get() {
    assert(pos + sizeof(T) <= b.size());
    T x;
    std::memcpy(&x, b.data() + pos, sizeof(T));
    pos += sizeof(T);
    return x;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    assert(pos + n <= b.size());
    std::string s(reinterpret_cast<const char*>(b.data() + pos), n);
    pos += n;
    return s;
  }
  void skip_value(GgufType t) {
    switch (t) {
      case GgufType::UINT8:
      case GgufType::INT8:
      case GgufType::BOOL:
        pos += 1;
        break;
      case GgufType::UINT16:
      case GgufType::INT16:
        pos += 2;
        break;
      case GgufType::UINT32:
      case GgufType::INT32:
      case GgufType::FLOAT32:
        pos += 4;
        break;
      case GgufType::UINT64:
      case GgufType::INT64:
      case GgufType::FLOAT64:
        pos += 8;
        break;
      case GgufType::STRING:
        (void)get_string();
        break;
      case GgufType::ARRAY: {
        const auto elem = static_cast<GgufType>(get<uint32_t>());
        const auto n = get<uint64_t>();
        for (uint64_t i = 0; i < n; ++i) skip_value(elem);
        break;
      }
    }
  }
};

std::vector<uint8_t> base_bytes() { return hostile_base_model(); }

}  // namespace

ByteBuilder& ByteBuilder::str(std::string_view s) {
  u64(s.size());
  bytes.insert(bytes.end(), s.begin(), s.end());
  return *this;
}

ByteBuilder& ByteBuilder::header(uint64_t n_tensors, uint64_t n_kv, uint32_t version) {
  bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
  return u32(version).u64(n_tensors).u64(n_kv);
}

ByteBuilder& ByteBuilder::pad_to(uint64_t alignment) {
  while (bytes.size() % alignment != 0) bytes.push_back(0);
  return *this;
}

const GgufLayout::Key& GgufLayout::key(std::string_view name) const {
  for (const auto& k : keys) {
    if (k.key == name) return k;
  }
  assert(false && "GgufLayout::key: no such key");
  return keys.front();
}

const GgufLayout::Tensor& GgufLayout::tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return t;
  }
  assert(false && "GgufLayout::tensor: no such tensor");
  return tensors.front();
}

GgufLayout scan_gguf_layout(const std::vector<uint8_t>& bytes) {
  GgufLayout l;
  Cursor c{bytes};
  [[maybe_unused]] const auto magic = c.get<uint32_t>();
  assert(magic == 0x46554747);
  (void)c.get<uint32_t>();  // version
  const auto n_tensors = c.get<uint64_t>();
  const auto n_kv = c.get<uint64_t>();
  uint64_t alignment = 32;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufLayout::Key k;
    k.begin = c.pos;
    k.key = c.get_string();
    k.type_pos = c.pos;
    const auto type = static_cast<GgufType>(c.get<uint32_t>());
    k.value_pos = c.pos;
    if (k.key == "general.alignment" && type == GgufType::UINT32) {
      alignment = c.get<uint32_t>();
      c.pos = k.value_pos;
    }
    c.skip_value(type);
    k.end = c.pos;
    l.keys.push_back(std::move(k));
  }
  l.tensor_index_begin = c.pos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufLayout::Tensor t;
    t.begin = c.pos;
    t.name = c.get_string();
    t.n_dims_pos = c.pos;
    const auto n_dims = c.get<uint32_t>();
    t.ne_pos = c.pos;
    int64_t ne[4] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; ++d) ne[d] = static_cast<int64_t>(c.get<uint64_t>());
    t.type_pos = c.pos;
    const auto type = c.get<uint32_t>();
    t.offset_pos = c.pos;
    t.data_begin = c.get<uint64_t>();  // relative for now
    t.end = c.pos;
    t.data_end = t.data_begin + row_size(static_cast<GgmlType>(type), ne[0]) *
                                    static_cast<uint64_t>(ne[1] * ne[2] * ne[3]);
    l.tensors.push_back(std::move(t));
  }
  l.tensor_index_end = c.pos;
  assert(alignment > 0);
  l.data_begin = (c.pos + alignment - 1) / alignment * alignment;
  for (auto& t : l.tensors) {
    t.data_begin += l.data_begin;
    t.data_end += l.data_begin;
  }
  return l;
}

void patch_u32(std::vector<uint8_t>& bytes, uint64_t pos, uint32_t value) {
  assert(pos + 4 <= bytes.size());
  std::memcpy(bytes.data() + pos, &value, 4);
}

void patch_u64(std::vector<uint8_t>& bytes, uint64_t pos, uint64_t value) {
  assert(pos + 8 <= bytes.size());
  std::memcpy(bytes.data() + pos, &value, 8);
}

TestModelSpec hostile_base_spec() {
  TestModelSpec s;
  s.n_vocab = 260;
  s.n_embd = 32;
  s.n_layer = 1;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 16;
  s.n_ff = 32;
  s.tied_embeddings = true;
  s.weight_type = GgmlType::Q8_0;  // a third of F32's data: fewer truncation points to walk
  s.seed = 7;
  return s;
}

std::vector<uint8_t> hostile_base_model() {
  auto m = build_test_model(hostile_base_spec());
  assert(m.ok());
  return m->serialize();
}

std::vector<uint8_t> hostile_truncated(size_t k) {
  auto b = base_bytes();
  assert(k <= b.size());
  b.resize(k);
  return b;
}

std::vector<uint8_t> hostile_bad_magic() {
  auto b = base_bytes();
  std::memcpy(b.data(), "GGML", 4);
  return b;
}

std::vector<uint8_t> hostile_version(uint32_t version) {
  auto b = base_bytes();
  patch_u32(b, 4, version);
  return b;
}

std::vector<uint8_t> hostile_unknown_tensor_type(uint32_t type) {
  auto b = base_bytes();
  patch_u32(b, scan_gguf_layout(b).tensor("blk.0.attn_q.weight").type_pos, type);
  return b;
}

std::vector<uint8_t> hostile_refused_type(GgmlType type) {
  TestModelSpec s = hostile_base_spec();
  s.n_embd = 256;
  s.n_head = 2;
  s.head_dim = 128;
  s.n_ff = 256;
  s.weight_type = GgmlType::Q8_0;  // keeps the file small; attn_q is the only refused tensor
  auto m = build_test_model(s);
  assert(m.ok());
  TestTensor* q = m->find_tensor("blk.0.attn_q.weight");
  assert(q && q->ne[0] == 256);
  q->type = type;
  q->data.assign(row_size(type, q->ne[0]) * static_cast<size_t>(q->ne[1]), 0);
  for (size_t i = 0; i < q->data.size(); ++i) q->data[i] = static_cast<uint8_t>(i * 37 + 11);
  return m->serialize();
}

std::vector<uint8_t> hostile_refused_type_iq2_xxs() {
  return hostile_refused_type(GgmlType::IQ2_XXS);
}

std::vector<uint8_t> hostile_unknown_arch() {
  TestModelSpec s = hostile_base_spec();
  s.arch = "mamba9";
  auto m = build_test_model(s);
  assert(m.ok());
  return m->serialize();
}

std::vector<uint8_t> hostile_misaligned_offset() {
  auto b = base_bytes();
  const GgufLayout l = scan_gguf_layout(b);
  assert(l.tensors.size() >= 2);
  const auto& t = l.tensors[1];
  patch_u64(b, t.offset_pos, t.data_begin - l.data_begin + 1);
  return b;
}

std::vector<uint8_t> hostile_alignment(uint32_t alignment) {
  // Written with alignment 64 so the key exists as a UINT32, then patched: the data section
  // stays where a 64-aligned reader would look, only the key's value is wrong.
  auto m = build_test_model(hostile_base_spec());
  assert(m.ok());
  m->alignment = 64;
  auto b = m->serialize();
  patch_u32(b, scan_gguf_layout(b).key("general.alignment").value_pos, alignment);
  return b;
}

std::vector<uint8_t> hostile_kv_count(uint64_t n_kv) {
  auto b = base_bytes();
  patch_u64(b, 16, n_kv);
  return b;
}

std::vector<uint8_t> hostile_array_count(uint64_t count) {
  auto b = base_bytes();
  patch_u64(b, scan_gguf_layout(b).key("tokenizer.ggml.tokens").value_pos + 4, count);
  return b;
}

std::vector<uint8_t> hostile_key_length(uint64_t len) {
  auto b = base_bytes();
  patch_u64(b, scan_gguf_layout(b).key("general.architecture").begin, len);
  return b;
}

std::vector<uint8_t> hostile_value_length(uint64_t len) {
  auto b = base_bytes();
  patch_u64(b, scan_gguf_layout(b).key("general.architecture").value_pos, len);
  return b;
}

std::vector<uint8_t> hostile_n_dims(uint32_t n_dims) {
  auto b = base_bytes();
  patch_u32(b, scan_gguf_layout(b).tensor("token_embd.weight").n_dims_pos, n_dims);
  return b;
}

std::vector<uint8_t> hostile_dim_overflow() {
  auto b = base_bytes();
  const GgufLayout l = scan_gguf_layout(b);
  const auto& t = l.tensor("token_embd.weight");
  patch_u64(b, t.ne_pos, uint64_t{1} << 40);
  patch_u64(b, t.ne_pos + 8, uint64_t{1} << 40);
  return b;
}

std::vector<uint8_t> hostile_duplicate_key() {
  ByteBuilder w;
  w.header(0, 2);
  w.str("general.architecture").u32(static_cast<uint32_t>(GgufType::STRING)).str("llama");
  w.str("general.architecture").u32(static_cast<uint32_t>(GgufType::STRING)).str("qwen2");
  w.pad_to(32);
  return w.bytes;
}

std::vector<uint8_t> hostile_duplicate_tensor() {
  auto m = build_test_model(hostile_base_spec());
  assert(m.ok());
  m->tensors.push_back(*m->find_tensor("token_embd.weight"));
  return m->serialize();
}

std::vector<uint8_t> hostile_nested_arrays(int depth) {
  assert(depth >= 1);
  ByteBuilder w;
  w.header(0, 1);
  w.str("test.deep").u32(static_cast<uint32_t>(GgufType::ARRAY));
  // depth - 1 arrays each holding one array, then an array of one UINT8.
  for (int i = 0; i < depth - 1; ++i) w.u32(static_cast<uint32_t>(GgufType::ARRAY)).u64(1);
  w.u32(static_cast<uint32_t>(GgufType::UINT8)).u64(1).put<uint8_t>(42);
  w.pad_to(32);
  return w.bytes;
}

std::vector<uint8_t> hostile_empty() { return {}; }

std::vector<uint8_t> hostile_three_bytes() { return {'G', 'G', 'U'}; }

bool write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const size_t n = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fflush(f) == 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace spw
