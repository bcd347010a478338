// GGUF reader. Every read goes through a bounds-checked cursor over the mapping, so a hostile
// file can produce an error but never a read past the end (no SIGBUS) or an allocation sized by
// an unchecked count.
#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace spw {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;            // arrays of arrays nest at most this deep
constexpr int kMaxDims = 4;                  // GGML_MAX_DIMS

// Smallest encoded size of one value of a type: used to reject counts that cannot fit in
// the bytes that remain before anything is allocated.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
      return 8;
    case GgufType::STRING:
      return 8;
    case GgufType::ARRAY:
      return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= 12; }

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                                "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                                "UINT64", "INT64",   "FLOAT64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : std::string_view("INVALID");
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }

int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*u);
  return std::get<int64_t>(v);
}

double GgufValue::as_double() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return static_cast<double>(std::get<int64_t>(v));
}

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

// Parses the mapped bytes into a GgufFile. All offsets are absolute positions in the file.
class GgufParser {
 public:
  GgufParser(GgufFile& f, const uint8_t* base, uint64_t size) : f_(f), base_(base), size_(size) {}

  Status parse() {
    uint32_t magic = 0;
    if (size_ < 4 || !read(magic))
      return fail("file is too small to be a GGUF file ({} bytes)", size_);
    if (magic != kGgufMagic) {
      return fail("not a GGUF file (bad magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", magic,
                  kGgufMagic);
    }
    uint32_t version = 0;
    if (!read(version)) return truncated("the version");
    if (version == 1)
      return fail(
          "GGUF version 1 is not supported (only versions 2 and 3); convert the model again with a "
          "current llama.cpp");
    if (version < 2 || version > 3)
      return fail("unsupported GGUF version {} (supported: 2 and 3)", version);
    f_.version_ = version;

    uint64_t n_tensors = 0, n_kv = 0;
    if (!read(n_tensors) || !read(n_kv)) return truncated("the header counts");
    // Each KV needs at least 8 (key length) + 4 (type) + 1 bytes; each tensor entry at least
    // 8 + 4 + 8 + 4 + 8.
    if (n_kv > remaining() / 13)
      return fail("metadata count {} is larger than the file allows", n_kv);
    if (n_tensors > remaining() / 32)
      return fail("tensor count {} is larger than the file allows", n_tensors);

    f_.kv_.reserve(n_kv);
    std::unordered_set<std::string_view> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string_view key;
      if (auto st =
              read_string(key, [&] { return fmt::format("the key of metadata entry {}", i); });
          !st)
        return st;
      uint32_t type = 0;
      if (!read(type)) return truncated(fmt::format("the type of key '{}'", key));
      if (!valid_value_type(type)) return fail("key '{}' has invalid value type {}", key, type);
      GgufValue value;
      if (auto st = read_value(static_cast<GgufType>(type), value, key, 0); !st) return st;
      if (!keys.insert(key).second) return fail("duplicate metadata key '{}'", key);
      f_.kv_.push_back({key, std::move(value)});
    }

    if (const GgufValue* a = f_.find("general.alignment")) {
      if (!a->is_integer())
        return fail("general.alignment has type {}, expected an integer", gguf_type_name(a->type));
      const int64_t al = a->as_int();
      if (al <= 0 || al > (1 << 30) || (al & (al - 1)) != 0) {
        return fail("general.alignment = {} is not a power of two", al);
      }
      f_.alignment_ = static_cast<uint32_t>(al);
    }

    f_.tensors_.reserve(n_tensors);
    std::unordered_set<std::string_view> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo t;
      if (auto st = read_tensor_info(i, t); !st) return st;
      if (!names.insert(t.name).second) return fail("duplicate tensor name '{}'", t.name);
      f_.tensors_.push_back(t);
    }

    const uint64_t al = f_.alignment_;
    const uint64_t data_offset = (pos_ + al - 1) / al * al;
    f_.data_offset_ = data_offset;
    for (auto& t : f_.tensors_) {
      if (t.offset % al != 0) {
        return fail("tensor '{}' has offset {} which is not a multiple of the alignment {}", t.name,
                    t.offset, al);
      }
      const uint64_t begin = data_offset + t.offset;  // cannot overflow: offset checked below
      if (t.offset > size_ || begin > size_ || t.n_bytes > size_ - begin) {
        const unsigned __int128 end =
            static_cast<unsigned __int128>(data_offset) + t.offset + t.n_bytes;
        const uint64_t end64 = end > std::numeric_limits<uint64_t>::max()
                                   ? std::numeric_limits<uint64_t>::max()
                                   : static_cast<uint64_t>(end);
        return fail(
            "tensor '{}' ends at byte {} but the file has {} bytes (the file is truncated or "
            "corrupted)",
            t.name, end64, size_);
      }
      t.data = base_ + begin;
    }
    // Tensor data regions must not overlap (a hostile index could alias one tensor's bytes as
    // another's).
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(f_.tensors_.size());
    for (const auto& t : f_.tensors_) by_offset.push_back(&t);
    std::sort(
        by_offset.begin(), by_offset.end(),
        [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo* prev = by_offset[i - 1];
      if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
        return fail("tensor '{}' overlaps tensor '{}' in the data section", by_offset[i]->name,
                    prev->name);
      }
    }
    return Status::Ok();
  }

 private:
  template <typename... Args>
  Error fail(fmt::format_string<Args...> f, Args&&... args) {
    return Error{f_.path_ + ": " + fmt::format(f, std::forward<Args>(args)...)};
  }
  Error truncated(const std::string& what) {
    return Error{fmt::format("{}: file is truncated: it ends at byte {} while reading {}", f_.path_,
                             size_, what)};
  }

  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T& out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // `what` is a callable returning the description for messages, so nothing is formatted on the
  // success path (a vocabulary has one string per token).
  template <typename What>
  Status read_string(std::string_view& out, What&& what) {
    uint64_t len = 0;
    if (!read(len)) return truncated(what());
    if (len > remaining()) {
      return fail("string length {} of {} runs past the end of the file ({} bytes)", len, what(),
                  size_);
    }
    out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  Status read_value(GgufType type, GgufValue& out, std::string_view key, int depth) {
    out.type = type;
    switch (type) {
      case GgufType::UINT8:
        return read_scalar<uint8_t, uint64_t>(out, key);
      case GgufType::INT8:
        return read_scalar<int8_t, int64_t>(out, key);
      case GgufType::UINT16:
        return read_scalar<uint16_t, uint64_t>(out, key);
      case GgufType::INT16:
        return read_scalar<int16_t, int64_t>(out, key);
      case GgufType::UINT32:
        return read_scalar<uint32_t, uint64_t>(out, key);
      case GgufType::INT32:
        return read_scalar<int32_t, int64_t>(out, key);
      case GgufType::UINT64:
        return read_scalar<uint64_t, uint64_t>(out, key);
      case GgufType::INT64:
        return read_scalar<int64_t, int64_t>(out, key);
      case GgufType::FLOAT32:
        return read_scalar<float, double>(out, key);
      case GgufType::FLOAT64:
        return read_scalar<double, double>(out, key);
      case GgufType::BOOL: {
        uint8_t b = 0;
        if (!read(b)) return truncated(fmt::format("the value of key '{}'", key));
        if (b > 1) return fail("key '{}' has boolean value {} (must be 0 or 1)", key, b);
        out.v = b != 0;
        return Status::Ok();
      }
      case GgufType::STRING: {
        std::string_view s;
        if (auto st = read_string(s, [&] { return fmt::format("the value of key '{}'", key); });
            !st)
          return st;
        out.v = s;
        return Status::Ok();
      }
      case GgufType::ARRAY: {
        if (depth >= kMaxArrayDepth)
          return fail("key '{}' nests arrays deeper than {}", key, kMaxArrayDepth);
        uint32_t elem = 0;
        uint64_t count = 0;
        if (!read(elem) || !read(count))
          return truncated(fmt::format("the array header of key '{}'", key));
        if (!valid_value_type(elem))
          return fail("key '{}' is an array of invalid type {}", key, elem);
        const auto et = static_cast<GgufType>(elem);
        if (count > remaining() / min_encoded_size(et)) {
          return fail("array count {} of key '{}' is larger than the file allows", count, key);
        }
        GgufArray arr;
        arr.elem_type = et;
        arr.items.resize(count);
        for (uint64_t i = 0; i < count; ++i) {
          if (auto st = read_value(et, arr.items[i], key, depth + 1); !st) return st;
        }
        out.v = std::move(arr);
        return Status::Ok();
      }
    }
    return fail("key '{}' has invalid value type", key);
  }

  template <typename Raw, typename Wide>
  Status read_scalar(GgufValue& out, std::string_view key) {
    Raw r{};
    if (!read(r)) return truncated(fmt::format("the value of key '{}'", key));
    out.v = static_cast<Wide>(r);
    return Status::Ok();
  }

  Status read_tensor_info(uint64_t index, GgufTensorInfo& t) {
    if (auto st = read_string(t.name, [&] { return fmt::format("the name of tensor {}", index); });
        !st)
      return st;
    if (t.name.empty()) return fail("tensor {} has an empty name", index);
    uint32_t n_dims = 0;
    if (!read(n_dims)) return truncated(fmt::format("tensor '{}'", t.name));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return fail("tensor '{}' has {} dimensions (1 to {} allowed)", t.name, n_dims, kMaxDims);
    }
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!read(ne)) return truncated(fmt::format("the shape of tensor '{}'", t.name));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail("tensor '{}' has invalid dimension {} = {}", t.name, d, ne);
      }
      t.ne[d] = static_cast<int64_t>(ne);
    }
    // Element count must fit in int64 (and therefore bytes in the file are checked later).
    unsigned __int128 n = 1;
    for (int d = 0; d < kMaxDims; ++d) {
      n *= static_cast<uint64_t>(t.ne[d]);
      if (n > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
        return fail("tensor '{}' has too many elements (shape {})", t.name, t.shape_string());
      }
    }
    uint32_t type = 0;
    if (!read(type) || !read(t.offset)) return truncated(fmt::format("tensor '{}'", t.name));
    const auto traits = type_traits(type);
    if (!traits) {
      return fail("tensor '{}' has unknown tensor type {} (not a ggml tensor type)", t.name, type);
    }
    t.type = static_cast<GgmlType>(type);
    if (t.ne[0] % traits->block_size != 0) {
      return fail("tensor '{}' of type {} has row length {}, not a multiple of its block size {}",
                  t.name, traits->name, t.ne[0], traits->block_size);
    }
    const unsigned __int128 bytes = static_cast<unsigned __int128>(t.ne[0] / traits->block_size) *
                                    static_cast<uint64_t>(traits->type_size) *
                                    static_cast<uint64_t>(t.n_rows());
    if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
      return fail("tensor '{}' is impossibly large (shape {})", t.name, t.shape_string());
    }
    t.n_bytes = static_cast<uint64_t>(bytes);
    return Status::Ok();
  }

  GgufFile& f_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  if (path.empty()) return make_error("no model file given (the path is empty)");
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  // O_NONBLOCK: opening a FIFO must not block; anything but a regular file is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("{}: not a regular file", path);
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return make_error("{}: file is empty (0 bytes), not a GGUF file", path);
  }
  void* map = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    // ENOMEM from mmap of a file: no room in the address space (ulimit -v), not RAM.
    return make_error("{}: cannot map its {:.1f} MiB into the address space: {}{}", path,
                      static_cast<double>(f->size_) / (1024.0 * 1024.0), std::strerror(map_errno),
                      map_errno == ENOMEM ? " (check `ulimit -v`)" : "");
  }
  f->map_ = map;
  GgufParser parser(*f, static_cast<const uint8_t*>(map), f->size_);
  if (auto status = parser.parse(); !status) return status.error();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(map_, size_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : kv_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Expected<int64_t> GgufFile::get_int(std::string_view key, std::optional<int64_t> def) const {
  const GgufValue* v = find(key);
  if (!v) {
    if (def) return *def;
    return make_error("{}: required key '{}' is missing", path_, key);
  }
  if (!v->is_integer()) {
    return make_error("{}: key '{}' has type {}, expected an integer", path_, key,
                      gguf_type_name(v->type));
  }
  if (v->type == GgufType::UINT64 && std::get<uint64_t>(v->v) > static_cast<uint64_t>(INT64_MAX)) {
    return make_error("{}: key '{}' = {} is out of range", path_, key, std::get<uint64_t>(v->v));
  }
  return v->as_int();
}

Expected<double> GgufFile::get_float(std::string_view key, std::optional<double> def) const {
  const GgufValue* v = find(key);
  if (!v) {
    if (def) return *def;
    return make_error("{}: required key '{}' is missing", path_, key);
  }
  if (!v->is_float() && !v->is_integer()) {
    return make_error("{}: key '{}' has type {}, expected a number", path_, key,
                      gguf_type_name(v->type));
  }
  return v->as_double();
}

Expected<bool> GgufFile::get_bool(std::string_view key, std::optional<bool> def) const {
  const GgufValue* v = find(key);
  if (!v) {
    if (def) return *def;
    return make_error("{}: required key '{}' is missing", path_, key);
  }
  if (v->type != GgufType::BOOL) {
    return make_error("{}: key '{}' has type {}, expected BOOL", path_, key,
                      gguf_type_name(v->type));
  }
  return std::get<bool>(v->v);
}

Expected<std::string> GgufFile::get_string(std::string_view key,
                                           std::optional<std::string> def) const {
  const GgufValue* v = find(key);
  if (!v) {
    if (def) return *def;
    return make_error("{}: required key '{}' is missing", path_, key);
  }
  if (v->type != GgufType::STRING) {
    return make_error("{}: key '{}' has type {}, expected STRING", path_, key,
                      gguf_type_name(v->type));
  }
  return std::string(v->as_string());
}

Expected<const GgufArray*> GgufFile::get_array(std::string_view key, GgufType elem) const {
  const GgufValue* v = find(key);
  if (!v) return static_cast<const GgufArray*>(nullptr);
  if (v->type != GgufType::ARRAY) {
    return make_error("{}: key '{}' has type {}, expected ARRAY of {}", path_, key,
                      gguf_type_name(v->type), gguf_type_name(elem));
  }
  const GgufArray& a = v->as_array();
  if (a.elem_type != elem) {
    return make_error("{}: key '{}' is an ARRAY of {}, expected ARRAY of {}", path_, key,
                      gguf_type_name(a.elem_type), gguf_type_name(elem));
  }
  return &a;
}

}  // namespace spw
