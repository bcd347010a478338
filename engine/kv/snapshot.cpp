// KV snapshots (format in snapshot.h).
//
// Save streams: each block is read from its tier (read_block) and fed to one zstd frame that
// goes straight into a temporary file beside the target, so memory stays at one block plus
// zstd's buffers however long the context. The payload's size precedes it in the file and the
// checksum covers it, so once the frame is written its size is patched in and the file is read
// back once to compute the checksum (from the page cache). fsync, rename, fsync of the folder:
// a crash leaves the old snapshot or the new one, never a mixture.
//
// Load checks everything the header says against the file and the session before restore():
// magic, version, fingerprint, KV types, shape, block size, capacity, exact file size, token
// hash, the whole-file checksum and the frame's declared content size. Only then does restore()
// empty the cache and pull the blocks out of the frame, one block_bytes() at a time; the
// decompressor never writes past the block it was given and the frame must end exactly with the
// last block.
#include "engine/kv/snapshot.h"
#include "engine/common/output_path.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <string_view>

#include "engine/common/size.h"
#include "engine/kv/kv_cache_set.h"
#include "engine/kv/planner.h"
#include "engine/kv/snapshot_file.h"

namespace spw::kv {

namespace {

static_assert(std::endian::native == std::endian::little,
              "snapshots are little-endian; a big-endian build needs byte swapping here");

constexpr char kMagic[8] = {'S', 'P', 'W', 'K', 'V', '\0', '\0', '\1'};
// Version 1: one cache of global layers. Version 2 (a model with sliding-window layers,
// kv_cache_set.h): a group table follows the fixed header, and the payload holds each group's
// held blocks in group order.
constexpr uint32_t kVersionGlobal = 1;
constexpr uint32_t kVersionGroups = 2;
// magic, version, fingerprint, type_k, type_v, block_size, 4 shape fields, n_tokens, token hash.
constexpr uint64_t kHeaderBytes = 8 + 4 + 8 + 4 + 4 + 4 + 4 * 8 + 8 + 8;
static_assert(kHeaderBytes == 80);
// Bytes around the tokens and the payload: the payload size and the checksum.
constexpr uint64_t kTrailerBytes = 8 + 8;
constexpr size_t kIoChunk = size_t{4} << 20;  // read/write granularity
// zstd level 1: KV rows are mostly noise in their low mantissa bits and compress little at any
// level, so the fastest level costs almost nothing in size.
constexpr int kZstdLevel = 1;
// ZSTD_FRAMEHEADERSIZE_MAX, which zstd.h exposes only under ZSTD_STATIC_LINKING_ONLY.
constexpr size_t kZstdFrameHeaderMax = 18;

std::string errno_text(int err) { return std::strerror(err); }

// Little-endian field packing into a byte vector.
struct Packer {
  std::vector<uint8_t> bytes;
  template <typename T>
  void put(T v) {
    put_bytes(&v, sizeof v);
  }
  void put_bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = bytes.size();
    bytes.resize(at + n);
    std::memcpy(bytes.data() + at, p, n);
  }
};

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string kv_type_text(uint32_t t) { return kv_type_label(static_cast<GgmlType>(t)); }

uint64_t token_hash(std::span<const int32_t> tokens) {
  return XXH3_64bits(tokens.data(), tokens.size_bytes());
}

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};
struct XxhFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// "53 50 57 4b": bytes for a message.
std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return out;
}

// Reads exactly n bytes at off; a short read means the file is shorter than its header says.
Status read_at(int fd, uint64_t off, uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot read snapshot {}: {}", path, errno_text(errno));
    }
    if (r == 0) return make_error("snapshot {} is truncated", path);
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// XXH3-64 of bytes [0, n) of the file.
Expected<uint64_t> hash_file_prefix(int fd, uint64_t n, const std::string& path) {
  std::unique_ptr<XXH3_state_t, XxhFree> st(XXH3_createState());
  if (!st || XXH3_64bits_reset(st.get()) != XXH_OK) return Error{"xxhash: out of memory"};
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(n, kIoChunk)));
  for (uint64_t off = 0; off < n;) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(n - off, buf.size()));
    if (auto s = read_at(fd, off, buf.data(), len, path); !s) return s.error();
    XXH3_64bits_update(st.get(), buf.data(), len);
    off += len;
  }
  return static_cast<uint64_t>(XXH3_64bits_digest(st.get()));
}

// Everything of the header a session must agree with; one per file or cache.
struct SnapshotShape {
  uint64_t fingerprint = 0;
  uint32_t type_k = 0, type_v = 0, block_size = 0;
  uint64_t n_layer = 0, n_kv_heads = 0, head_dim = 0, head_dim_v = 0;
};

// The caches of a session in group order (a KvCacheSet's groups, or one KvCache).
using Groups = std::vector<KvCache*>;

bool needs_groups(const Groups& g) { return g.size() > 1 || g.front()->layout().drops(); }

// Layers over all groups.
int64_t total_layers(const Groups& g) {
  int64_t n = 0;
  for (const KvCache* c : g) n += c->config().n_layer;
  return n;
}

// The group table of version 2: per group its span (0: global) and layer count.
std::vector<std::pair<uint64_t, uint64_t>> group_table(const Groups& g) {
  std::vector<std::pair<uint64_t, uint64_t>> t;
  for (const KvCache* c : g) {
    t.emplace_back(static_cast<uint64_t>(c->layout().span_tokens),
                   static_cast<uint64_t>(c->config().n_layer));
  }
  return t;
}

// Blocks group c holds for n_tokens positions: [first, n_blocks).
std::pair<int64_t, int64_t> held_blocks(const KvCache& c, int64_t n_tokens) {
  const int64_t bs = c.config().block_size;
  return {c.layout().window.first_live(n_tokens), ceil_div(n_tokens, bs)};
}

SnapshotShape shape_of(uint64_t fingerprint, const Groups& groups) {
  const KvCacheConfig& c = groups.front()->config();
  SnapshotShape s;
  s.fingerprint = fingerprint;
  s.type_k = static_cast<uint32_t>(c.type_k);
  s.type_v = static_cast<uint32_t>(c.type_v);
  s.block_size = static_cast<uint32_t>(c.block_size);
  s.n_layer = static_cast<uint64_t>(total_layers(groups));
  s.n_kv_heads = static_cast<uint64_t>(c.n_kv_heads);
  s.head_dim = static_cast<uint64_t>(c.head_dim);
  s.head_dim_v = static_cast<uint64_t>(c.head_dim_v);
  return s;
}

// Removes the temporary file unless released (after a successful rename).
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status save_groups(const std::string& path_in, uint64_t fingerprint, const Groups& groups,
                   std::span<const int32_t> tokens) {
  KvCache& cache = *groups.front();
  // Renaming onto /dev/null, a FIFO or a link would replace it: write to a regular file only.
  auto resolved = resolve_output_path(path_in);
  if (!resolved) return make_error("saving snapshot: {}", resolved.error().message);
  const std::string& path = *resolved;
  const int64_t n_tokens = cache.n_tokens();
  if (static_cast<int64_t>(tokens.size()) != n_tokens) {
    return make_error("saving snapshot {}: {} token ids given for a cache of {} tokens", path,
                      tokens.size(), n_tokens);
  }
  int64_t raw_bytes = 0;
  for (KvCache* g : groups) {
    if (auto s = g->flush(); !s) return s;
    const auto [first, end] = held_blocks(*g, n_tokens);
    raw_bytes += (end - first) * g->block_bytes();
  }

  // Header (and the group table) and tokens.
  const SnapshotShape sh = shape_of(fingerprint, groups);
  const bool v2 = needs_groups(groups);
  Packer h;
  h.bytes.reserve(kHeaderBytes + 4 + 16 * groups.size() + tokens.size_bytes() + 8);
  h.put_bytes(kMagic, sizeof kMagic);
  h.put(v2 ? kVersionGroups : kVersionGlobal);
  h.put(sh.fingerprint);
  h.put(sh.type_k);
  h.put(sh.type_v);
  h.put(sh.block_size);
  for (const uint64_t v : {sh.n_layer, sh.n_kv_heads, sh.head_dim, sh.head_dim_v}) h.put(v);
  h.put(static_cast<uint64_t>(n_tokens));
  h.put(token_hash(tokens));
  if (v2) {
    h.put(static_cast<uint32_t>(groups.size()));
    for (const auto& [span, layers] : group_table(groups)) {
      h.put(span);
      h.put(layers);
    }
  }
  h.put_bytes(tokens.data(), tokens.size_bytes());
  const uint64_t size_offset = h.bytes.size();
  h.put(uint64_t{0});  // payload bytes, patched in once the frame is written

  TempFile tmp;
  tmp.path = path + ".tmp-" + std::to_string(::getpid()) + "-XXXXXX";
  FdCloser fd{::mkstemp(tmp.path.data())};
  if (fd.fd < 0) {
    const int err = errno;
    tmp.path.clear();
    return make_error("cannot write snapshot {}: cannot create a file in {}: {}", path,
                      parent_dir(path), errno_text(err));
  }
  ::fchmod(fd.fd, 0644);  // mkstemp makes 0600; a snapshot is an ordinary cache file
  if (auto s = write_all(fd.fd, h.bytes.data(), h.bytes.size(), path); !s) return s;

  // Payload: one zstd frame of the blocks in order, with its content size declared.
  std::unique_ptr<ZSTD_CCtx, CctxFree> cctx(ZSTD_createCCtx());
  if (!cctx) return Error{"zstd: out of memory"};
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, kZstdLevel);
  ZSTD_CCtx_setPledgedSrcSize(cctx.get(), static_cast<unsigned long long>(raw_bytes));
  std::vector<uint8_t> block;
  std::vector<uint8_t> out(ZSTD_CStreamOutSize());
  uint64_t payload_bytes = 0;
  const auto pump = [&](ZSTD_inBuffer& in, ZSTD_EndDirective mode) -> Status {
    for (;;) {
      ZSTD_outBuffer o{out.data(), out.size(), 0};
      const size_t left = ZSTD_compressStream2(cctx.get(), &o, &in, mode);
      if (ZSTD_isError(left)) {
        return make_error("cannot write snapshot {}: zstd: {}", path, ZSTD_getErrorName(left));
      }
      if (auto s = write_all(fd.fd, out.data(), o.pos, path); !s) return s;
      payload_bytes += o.pos;
      const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
      if (done) return Status::Ok();
    }
  };
  for (KvCache* g : groups) {
    block.resize(static_cast<size_t>(g->block_bytes()));
    const auto [first, end] = held_blocks(*g, n_tokens);
    for (int64_t b = first; b < end; ++b) {
      if (auto s = g->read_block(b, block); !s) return s;
      ZSTD_inBuffer in{block.data(), block.size(), 0};
      if (auto s = pump(in, ZSTD_e_continue); !s) return s;
    }
  }
  ZSTD_inBuffer none{nullptr, 0, 0};
  if (auto s = pump(none, ZSTD_e_end); !s) return s;

  // Patch in the payload size, then checksum everything so far (read back) and append it.
  const uint64_t checksum_offset = h.bytes.size() + payload_bytes;
  {
    const auto* p = reinterpret_cast<const uint8_t*>(&payload_bytes);
    size_t n = sizeof payload_bytes, done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd.fd, p + done, n - done, static_cast<off_t>(size_offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
      done += static_cast<size_t>(w);
    }
  }
  auto sum = hash_file_prefix(fd.fd, checksum_offset, path);
  if (!sum) return sum.error();
  const uint64_t checksum = *sum;
  if (::lseek(fd.fd, static_cast<off_t>(checksum_offset), SEEK_SET) < 0) {
    return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
  }
  if (auto s = write_all(fd.fd, reinterpret_cast<const uint8_t*>(&checksum), sizeof checksum, path);
      !s) {
    return s;
  }
  // Delayed allocation can report a full disk only here.
  if (::fsync(fd.fd) != 0) {
    return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
  }
  const int fd_raw = fd.fd;
  fd.fd = -1;
  if (::close(fd_raw) != 0) {
    return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
  }
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    return make_error("cannot write snapshot {}: {}", path, errno_text(errno));
  }
  tmp.keep = true;
  // The rename is durable once the folder is synced; failing that is not an error of the file.
  FdCloser dir{::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) ::fsync(dir.fd);
  return Status::Ok();
}

Expected<std::vector<int32_t>> load_groups(const std::string& path, uint64_t fingerprint,
                                           const Groups& groups) {
  KvCache& cache = *groups.front();
  FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return make_error("cannot open snapshot {}: {}", path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    return make_error("cannot read snapshot {}: {}", path, errno_text(errno));
  }
  if (!S_ISREG(st.st_mode)) return make_error("snapshot {} is not a regular file", path);
  ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const auto file_size = static_cast<uint64_t>(st.st_size);

  // Fixed header.
  uint8_t head[kHeaderBytes];
  if (file_size == 0) return make_error("{} is empty, not a Spillway KV snapshot", path);
  // A file that does not start as a snapshot does is another file, whatever its length.
  const size_t n_magic = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof kMagic));
  if (auto s = read_at(fd.fd, 0, head, n_magic, path); !s) return s.error();
  if (std::memcmp(head, kMagic, n_magic) != 0) {
    return make_error(
        "{} is not a Spillway KV snapshot (magic: a snapshot starts with bytes {}, this file with "
        "{})",
        path, hex_bytes(reinterpret_cast<const uint8_t*>(kMagic), sizeof kMagic),
        hex_bytes(head, n_magic));
  }
  if (file_size < sizeof kMagic) return make_error("snapshot {} is truncated", path);
  if (file_size < kHeaderBytes + kTrailerBytes) {
    return make_error("snapshot {} is truncated", path);
  }
  if (auto s = read_at(fd.fd, 0, head, kHeaderBytes, path); !s) return s.error();
  const uint8_t* p = head + sizeof kMagic;
  const auto version = get<uint32_t>(p);
  p += 4;
  if (version != kVersionGlobal && version != kVersionGroups) {
    return make_error("snapshot {} has format version {}; this build reads versions {} and {}",
                      path, version, kVersionGlobal, kVersionGroups);
  }
  SnapshotShape file;
  file.fingerprint = get<uint64_t>(p), p += 8;
  file.type_k = get<uint32_t>(p), p += 4;
  file.type_v = get<uint32_t>(p), p += 4;
  file.block_size = get<uint32_t>(p), p += 4;
  file.n_layer = get<uint64_t>(p), p += 8;
  file.n_kv_heads = get<uint64_t>(p), p += 8;
  file.head_dim = get<uint64_t>(p), p += 8;
  file.head_dim_v = get<uint64_t>(p), p += 8;
  const auto n_tokens = get<uint64_t>(p);
  p += 8;
  const auto want_token_hash = get<uint64_t>(p);

  // Against this model and session.
  const SnapshotShape mine = shape_of(fingerprint, groups);
  if (file.fingerprint != mine.fingerprint) {
    return make_error(
        "snapshot {} was made with another model (fingerprint {:016x}, this model "
        "has {:016x})",
        path, file.fingerprint, mine.fingerprint);
  }
  if (file.type_k != mine.type_k || file.type_v != mine.type_v) {
    return make_error("snapshot {} was made with KV types {}/{}, this session uses {}/{}", path,
                      kv_type_text(file.type_k), kv_type_text(file.type_v),
                      kv_type_text(mine.type_k), kv_type_text(mine.type_v));
  }
  if (file.n_layer != mine.n_layer || file.n_kv_heads != mine.n_kv_heads ||
      file.head_dim != mine.head_dim || file.head_dim_v != mine.head_dim_v) {
    return make_error(
        "snapshot {} holds KV of shape {} layers x {} KV heads x head_dim {}/{}, this session's "
        "is {} x {} x {}/{}",
        path, file.n_layer, file.n_kv_heads, file.head_dim, file.head_dim_v, mine.n_layer,
        mine.n_kv_heads, mine.head_dim, mine.head_dim_v);
  }
  if (file.block_size != mine.block_size) {
    return make_error("snapshot {} was made with --kv-block {}, this session uses {}", path,
                      file.block_size, mine.block_size);
  }
  // Version 2's group table: the same layer groups as this session's.
  uint64_t tokens_offset = kHeaderBytes;
  const bool v2 = needs_groups(groups);
  if ((version == kVersionGroups) != v2) {
    return make_error("snapshot {} was made {} sliding-window layer groups, this session {} them",
                      path, version == kVersionGroups ? "with" : "without", v2 ? "has" : "has no");
  }
  if (v2) {
    const auto mine_groups = group_table(groups);
    const uint64_t table_bytes = 4 + 16 * mine_groups.size();
    if (file_size < kHeaderBytes + table_bytes + kTrailerBytes) {
      return make_error("snapshot {} is truncated", path);
    }
    std::vector<uint8_t> table(static_cast<size_t>(table_bytes));
    if (auto s = read_at(fd.fd, kHeaderBytes, table.data(), table.size(), path); !s) {
      return s.error();
    }
    const uint8_t* q = table.data();
    bool same = get<uint32_t>(q) == mine_groups.size();
    q += 4;
    for (const auto& [span, layers] : mine_groups) {
      same = same && get<uint64_t>(q) == span && get<uint64_t>(q + 8) == layers;
      q += 16;
    }
    if (!same) {
      return make_error("snapshot {} was made with other sliding-window layer groups", path);
    }
    tokens_offset += table_bytes;
  }
  // Sizes: tokens and payload must account for the file exactly.
  if (n_tokens > (file_size - tokens_offset - kTrailerBytes) / 4) {
    return make_error("snapshot {} is truncated (its header says {} tokens)", path, n_tokens);
  }
  const int64_t max_tokens = cache.max_tokens();
  if (n_tokens > static_cast<uint64_t>(max_tokens)) {
    return make_error("snapshot {} holds {} tokens; this session fits {} {}", path, n_tokens,
                      max_tokens, cache.capacity_detail());
  }
  const uint64_t size_offset = tokens_offset + 4 * n_tokens;
  uint64_t payload_bytes = 0;
  if (auto s = read_at(fd.fd, size_offset, reinterpret_cast<uint8_t*>(&payload_bytes), 8, path);
      !s) {
    return s.error();
  }
  const uint64_t payload_offset = size_offset + 8;
  if (payload_bytes > file_size - payload_offset - 8) {
    return make_error("snapshot {} is truncated", path);
  }
  const uint64_t checksum_offset = payload_offset + payload_bytes;
  if (checksum_offset + 8 != file_size) {
    return make_error("snapshot {} is corrupted ({} bytes after its checksum)", path,
                      file_size - checksum_offset - 8);
  }

  // Tokens, their hash, then the checksum of the whole file.
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  if (auto s = read_at(fd.fd, tokens_offset, reinterpret_cast<uint8_t*>(tokens.data()),
                       4 * tokens.size(), path);
      !s) {
    return s.error();
  }
  if (token_hash(tokens) != want_token_hash) {
    return make_error("snapshot {} is corrupted (token hash mismatch)", path);
  }
  uint64_t want_checksum = 0;
  if (auto s = read_at(fd.fd, checksum_offset, reinterpret_cast<uint8_t*>(&want_checksum), 8, path);
      !s) {
    return s.error();
  }
  auto sum = hash_file_prefix(fd.fd, checksum_offset, path);
  if (!sum) return sum.error();
  if (*sum != want_checksum) {
    return make_error("snapshot {} is corrupted (checksum mismatch)", path);
  }

  // The frame must declare exactly the bytes the blocks need: each group's held blocks.
  int64_t n_blocks = 0;  // over all groups
  unsigned long long raw_bytes = 0;
  for (const KvCache* g : groups) {
    const auto [first, end] = held_blocks(*g, static_cast<int64_t>(n_tokens));
    n_blocks += end - first;
    raw_bytes += static_cast<unsigned long long>((end - first) * g->block_bytes());
  }
  const int64_t block_bytes = cache.block_bytes();
  {
    uint8_t frame_head[kZstdFrameHeaderMax] = {};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(payload_bytes, sizeof frame_head));
    if (auto s = read_at(fd.fd, payload_offset, frame_head, n, path); !s) return s.error();
    const unsigned long long declared = ZSTD_getFrameContentSize(frame_head, n);
    if (declared != raw_bytes) {
      return make_error(
          "snapshot {} is corrupted (its payload holds {} bytes, {} blocks of {} "
          "need {})",
          path,
          declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR
              ? std::string("an unknown number of")
              : std::to_string(declared),
          n_blocks, block_bytes, raw_bytes);
    }
  }

  // Everything checked: restore, decompressing block by block in order.
  std::unique_ptr<ZSTD_DCtx, DctxFree> dctx(ZSTD_createDCtx());
  if (!dctx) return Error{"zstd: out of memory"};
  std::vector<uint8_t> in_buf(ZSTD_DStreamInSize());
  ZSTD_inBuffer in{in_buf.data(), 0, 0};
  uint64_t read_off = payload_offset;
  const uint64_t payload_end = checksum_offset;
  int64_t next_block = 0;   // the block of the current group expected next
  int64_t blocks_done = 0;  // over all groups
  int64_t group_bytes = block_bytes;
  size_t last_ret = 1;  // ZSTD_decompressStream's last result: 0 once the frame is complete
  const auto refill = [&]() -> Status {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(payload_end - read_off, in_buf.size()));
    if (auto s = read_at(fd.fd, read_off, in_buf.data(), n, path); !s) return s;
    read_off += n;
    in = ZSTD_inBuffer{in_buf.data(), n, 0};
    return Status::Ok();
  };
  const auto fill = [&](int64_t b, std::span<uint8_t> dst) -> Status {
    if (b != next_block || static_cast<int64_t>(dst.size()) != group_bytes) {
      return make_error(
          "restoring snapshot {}: block {} ({} bytes) asked for, expected block {} "
          "({} bytes)",
          path, b, dst.size(), next_block, group_bytes);
    }
    ZSTD_outBuffer out{dst.data(), dst.size(), 0};
    while (out.pos < out.size) {
      if (in.pos == in.size) {
        if (read_off == payload_end) {
          return make_error("snapshot {} is corrupted (payload ends inside block {})", path, b);
        }
        if (auto s = refill(); !s) return s;
      }
      last_ret = ZSTD_decompressStream(dctx.get(), &out, &in);
      if (ZSTD_isError(last_ret)) {
        return make_error("snapshot {} is corrupted (zstd: {})", path, ZSTD_getErrorName(last_ret));
      }
      if (last_ret == 0 && out.pos < out.size) {
        return make_error("snapshot {} is corrupted (payload ends inside block {})", path, b);
      }
    }
    ++next_block;
    if (++blocks_done == n_blocks) {
      // The frame must end here: nothing more to decompress, no bytes left over.
      uint8_t extra = 0;
      while (last_ret != 0) {
        if (in.pos == in.size) {
          if (read_off == payload_end) break;
          if (auto s = refill(); !s) return s;
        }
        ZSTD_outBuffer one{&extra, 1, 0};
        last_ret = ZSTD_decompressStream(dctx.get(), &one, &in);
        if (ZSTD_isError(last_ret) || one.pos != 0) {
          return make_error("snapshot {} is corrupted (payload longer than its blocks)", path);
        }
      }
      if (last_ret != 0 || in.pos != in.size || read_off != payload_end) {
        return make_error("snapshot {} is corrupted (payload does not end with its last block)",
                          path);
      }
    }
    return Status::Ok();
  };
  const auto clear_all = [&] {
    for (KvCache* g : groups) g->clear();
  };
  if (n_blocks == 0) {
    clear_all();
    return tokens;
  }
  for (KvCache* g : groups) {
    next_block = held_blocks(*g, static_cast<int64_t>(n_tokens)).first;
    group_bytes = g->block_bytes();
    if (auto s = g->restore(static_cast<int64_t>(n_tokens), fill); !s) {
      clear_all();
      return s.error();
    }
  }
  if (blocks_done != n_blocks) {
    clear_all();
    return make_error("restoring snapshot {}: {} of {} blocks were restored", path, blocks_done,
                      n_blocks);
  }
  return tokens;
}

Groups groups_of(KvCacheSet& set) {
  Groups g;
  for (int64_t i = 0; i < set.n_groups(); ++i) g.push_back(&set.group(i));
  return g;
}

// The snapshot's buffers (its header with every token id, a block, zstd's windows) scale with
// the context and the block: running out of RAM for them is an error with the numbers.
Error out_of_memory(const std::string& path, const KvCache& cache, int64_t n_tokens) {
  return make_error(
      "cannot allocate RAM for snapshot {} ({} tokens, blocks of {}): out of memory; a shorter "
      "prompt or -c",
      path, n_tokens, format_size(cache.block_bytes()));
}

Status save_guarded(const std::string& path, uint64_t fingerprint, const Groups& groups,
                    std::span<const int32_t> tokens) {
  try {
    return save_groups(path, fingerprint, groups, tokens);
  } catch (const std::bad_alloc&) {
    return out_of_memory(path, *groups.front(), static_cast<int64_t>(tokens.size()));
  }
}

Expected<std::vector<int32_t>> load_guarded(const std::string& path, uint64_t fingerprint,
                                            const Groups& groups) {
  try {
    return load_groups(path, fingerprint, groups);
  } catch (const std::bad_alloc&) {
    return out_of_memory(path, *groups.front(), groups.front()->n_tokens());
  }
}

}  // namespace

Status save_snapshot_file(const std::string& path, uint64_t fingerprint, KvCache& cache,
                          std::span<const int32_t> tokens) {
  return save_guarded(path, fingerprint, Groups{&cache}, tokens);
}
Status save_snapshot_file(const std::string& path, uint64_t fingerprint, KvCacheSet& caches,
                          std::span<const int32_t> tokens) {
  return save_guarded(path, fingerprint, groups_of(caches), tokens);
}
Expected<std::vector<int32_t>> load_snapshot_file(const std::string& path, uint64_t fingerprint,
                                                  KvCache& cache) {
  return load_guarded(path, fingerprint, Groups{&cache});
}
Expected<std::vector<int32_t>> load_snapshot_file(const std::string& path, uint64_t fingerprint,
                                                  KvCacheSet& caches) {
  return load_guarded(path, fingerprint, groups_of(caches));
}

int64_t snapshot_temp_pid(const std::string& file_name) {
  const std::string_view s = file_name;
  const size_t at = s.rfind(".kv.tmp-");
  if (at == std::string_view::npos || at == 0) return -1;
  const std::string_view rest = s.substr(at + 8);  // "<pid>-XXXXXX"
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 9 || rest.size() != dash + 7) return -1;
  int64_t pid = 0;
  for (const char c : rest.substr(0, dash)) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

int remove_stale_snapshot_temps(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return 0;
  const int64_t self = ::getpid();
  int removed = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const int64_t pid = snapshot_temp_pid(it->path().filename().string());
    if (pid <= 0 || pid == self) continue;
    // ESRCH: no such process. EPERM: it runs under another user; its file is kept.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm_ec;
    if (fs::remove(it->path(), rm_ec)) ++removed;
  }
  return removed;
}

}  // namespace spw::kv
