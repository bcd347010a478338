#include "engine/gguf/gguf_writer.h"
#include "engine/common/output_path.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace spw {

namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T x) {
    append(&x, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  // resize + memcpy rather than insert(range): GCC 12 warns (-Wstringop-overflow) on the
  // latter for small fixed-size sources.
  void append(const void* p, size_t n) {
    const size_t at = bytes.size();
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
  std::vector<uint8_t> bytes;
};

void put_value(ByteSink& out, const GgufWriteValue& v) {
  switch (v.type) {
    case GgufType::UINT8:
      out.put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.v)));
      break;
    case GgufType::INT8:
      out.put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.v)));
      break;
    case GgufType::UINT16:
      out.put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.v)));
      break;
    case GgufType::INT16:
      out.put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.v)));
      break;
    case GgufType::UINT32:
      out.put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v)));
      break;
    case GgufType::INT32:
      out.put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.v)));
      break;
    case GgufType::UINT64:
      out.put<uint64_t>(std::get<uint64_t>(v.v));
      break;
    case GgufType::INT64:
      out.put<int64_t>(std::get<int64_t>(v.v));
      break;
    case GgufType::FLOAT32:
      out.put<float>(static_cast<float>(std::get<double>(v.v)));
      break;
    case GgufType::FLOAT64:
      out.put<double>(std::get<double>(v.v));
      break;
    case GgufType::BOOL:
      out.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0);
      break;
    case GgufType::STRING:
      out.put_string(std::get<std::string>(v.v));
      break;
    case GgufType::ARRAY: {
      const auto& items = std::get<std::vector<GgufWriteValue>>(v.v);
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(items.size());
      for (const auto& item : items) put_value(out, item);
      break;
    }
  }
}

}  // namespace

GgufWriteValue GgufWriteValue::str_array(const std::vector<std::string>& items) {
  std::vector<GgufWriteValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(str(s));
  return array(GgufType::STRING, std::move(v));
}

GgufWriteValue GgufWriteValue::f32_array(const std::vector<float>& items) {
  std::vector<GgufWriteValue> v;
  v.reserve(items.size());
  for (float x : items) v.push_back(f32(x));
  return array(GgufType::FLOAT32, std::move(v));
}

GgufWriteValue GgufWriteValue::i32_array(const std::vector<int32_t>& items) {
  std::vector<GgufWriteValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(i32(x));
  return array(GgufType::INT32, std::move(v));
}

void GgufWriter::set(const std::string& key, GgufWriteValue value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

namespace {

uint64_t tensor_bytes(GgmlType type, const std::vector<int64_t>& ne) {
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  return row_size(type, ne.empty() ? 1 : ne[0]) * static_cast<uint64_t>(rows);
}

uint64_t padded(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  assert(data.size() == tensor_bytes(type, ne));
  // The stored size, as before generated tensors existed (the assert is off in Release builds).
  const uint64_t n_bytes = data.size();
  tensors_.push_back({name, type, std::move(ne), std::move(data), RowFill{}, n_bytes});
}

void GgufWriter::add_tensor_generated(const std::string& name, GgmlType type,
                                      std::vector<int64_t> ne, RowFill fill) {
  assert(fill);
  const uint64_t n_bytes = tensor_bytes(type, ne);
  tensors_.push_back({name, type, std::move(ne), {}, std::move(fill), n_bytes});
}

void GgufWriter::add_tensor_f32(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                const std::vector<float>& values) {
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  assert(static_cast<int64_t>(values.size()) == ne[0] * rows);
  const size_t rb = row_size(type, ne[0]);
  std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, values.data() + r * ne[0], data.data() + r * rb, ne[0]);
  }
  add_tensor(name, type, std::move(ne), std::move(data));
}

std::vector<uint8_t> GgufWriter::header() const {
  ByteSink out;
  out.put<uint32_t>(0x46554747);
  out.put<uint32_t>(version_);
  out.put<uint64_t>(tensors_.size());
  const bool write_alignment = alignment_ != 32;
  bool has_alignment_key = false;
  for (const auto& kv : kv_) has_alignment_key |= kv.first == "general.alignment";
  out.put<uint64_t>(kv_.size() + (write_alignment && !has_alignment_key ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(out, value);
  }
  if (write_alignment && !has_alignment_key) {
    out.put_string("general.alignment");
    out.put<uint32_t>(static_cast<uint32_t>(GgufType::UINT32));
    out.put<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offset += padded(t.n_bytes, alignment_);
  }
  out.pad_to(alignment_);
  return std::move(out.bytes);
}

namespace {

// Rows of a generated tensor per fill call when streaming: about 8 MiB of data.
int64_t rows_per_chunk(uint64_t row_bytes) {
  constexpr uint64_t kChunkBytes = uint64_t{8} << 20;
  return static_cast<int64_t>(
      std::max<uint64_t>(1, kChunkBytes / std::max<uint64_t>(1, row_bytes)));
}

}  // namespace

std::string GgufWriter::temp_path_for(const std::string& path) {
  return fmt::format("{}.tmp.{}", path, ::getpid());
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> bytes = header();
  for (const auto& t : tensors_) {
    const size_t at = bytes.size();
    bytes.resize(at + padded(t.n_bytes, alignment_), 0);
    if (t.fill) {
      const uint64_t rb = row_size(t.type, t.ne[0]);
      t.fill(0, static_cast<int64_t>(t.n_bytes / rb), bytes.data() + at);
    } else if (t.n_bytes > 0) {
      std::memcpy(bytes.data() + at, t.data.data(), t.n_bytes);
    }
  }
  return bytes;
}

Status GgufWriter::write(const std::string& path_in) const {
  // The output must be (or become) a regular file: see resolve_output_path.
  auto resolved = resolve_output_path(path_in);
  if (!resolved) return resolved.error();
  const std::string& path = *resolved;
  // A per-process temporary name: two writers of the same path never share it.
  const std::string tmp = temp_path_for(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return make_error("{}: cannot create: {}", path, std::strerror(errno));
  bool ok = true;
  auto put = [&](const void* p, size_t n) {
    if (ok && n > 0) ok = std::fwrite(p, 1, n, f) == n;
  };
  const std::vector<uint8_t> head = header();
  put(head.data(), head.size());
  static constexpr uint8_t kZeros[64] = {};  // alignment padding (alignment may exceed 64)
  auto pad = [&](uint64_t n) {
    for (uint64_t done = 0; done < n; done += sizeof kZeros)
      put(kZeros, static_cast<size_t>(std::min<uint64_t>(sizeof kZeros, n - done)));
  };
  std::vector<uint8_t> chunk;
  for (const auto& t : tensors_) {
    if (!ok) break;
    if (t.fill) {
      const uint64_t rb = row_size(t.type, t.ne[0]);
      const int64_t rows = static_cast<int64_t>(t.n_bytes / rb);
      const int64_t step = rows_per_chunk(rb);
      chunk.resize(static_cast<size_t>(std::min(step, rows) * rb));
      for (int64_t r = 0; r < rows && ok; r += step) {
        const int64_t n = std::min(step, rows - r);
        t.fill(r, n, chunk.data());
        put(chunk.data(), static_cast<size_t>(n * rb));
      }
    } else {
      put(t.data.data(), t.data.size());
    }
    pad(padded(t.n_bytes, alignment_) - t.n_bytes);
  }
  const bool flushed = std::fflush(f) == 0;
  int e = errno;
  const bool closed = std::fclose(f) == 0;
  if (ok && flushed && !closed) e = errno;
  if (!ok || !flushed || !closed) {
    std::remove(tmp.c_str());
    return make_error("{}: write failed: {}", path, std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int re = errno;
    std::remove(tmp.c_str());
    return make_error("{}: cannot rename into place: {}", path, std::strerror(re));
  }
  return Status::Ok();
}

}  // namespace spw
