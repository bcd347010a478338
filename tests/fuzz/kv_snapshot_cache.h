// The KV cache the snapshot fuzzer restores into and its seed snapshots were written from: one
// small shape, so that a seed passes every check against the session and mutations reach the
// sizes, the frame and the block restore.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_set.h"

namespace spw::kv::fuzz {

/// The model fingerprint the seeds carry (any fixed value: the reader only compares it).
inline constexpr uint64_t kFingerprint = 0x5350574b5646555aull;

/// 2 layers, 2 KV heads, head_dim 8, f16 K and V, blocks of 16, a window of the sink block and
/// two recent ones, the rest in RAM (no disk tier); 256 tokens at most.
inline std::unique_ptr<KvCache> make_cache() {
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.head_dim_v = 8;
  c.n_ctx = 256;
  c.type_k = GgmlType::F16;
  c.type_v = GgmlType::F16;
  c.block_size = 16;
  c.n_sinks = 4;
  c.window_tokens = 32;
  c.host_budget = -1;
  c.disk_budget = 0;
  auto made = KvCache::create(c);
  if (!made) std::abort();
  return std::move(*made);
}

/// The sliding-window layout (snapshot format version 2): 4 layers of make_cache()'s shape and
/// paging, layers 1 and 2 attending the last 32 positions (a group of their own that drops the
/// blocks behind its span), layers 0 and 3 global.
inline std::unique_ptr<KvCacheSet> make_cache_set() {
  KvCacheConfig c = make_cache()->config();
  c.n_layer = 4;
  const int64_t spans[4] = {0, 32, 32, 0};
  auto made = KvCacheSet::create(c, spans);
  if (!made) std::abort();
  return std::move(*made);
}

/// Bit 1 of the harness's byte: restore into make_cache_set() (version 2) instead of
/// make_cache() (version 1).
inline bool input_is_for_set(const uint8_t* data, size_t size) {
  return size > 0 && (data[0] & 2) != 0;
}

/// The snapshot file a fuzz input stands for: the input after its first byte, which is the
/// harness's: when it is odd, the token hash and the whole-file checksum are recomputed as a writer
/// would, so that mutations get past those checks to the sizes, the zstd frame and the restore.
inline std::vector<uint8_t> snapshot_of_input(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  std::vector<uint8_t> f(data + 1, data + size);
  // The fixed header (snapshot.h): the token count at byte 64, its hash at 72, the ids from 80.
  constexpr size_t kHeaderBytes = 80;
  if ((data[0] & 1) == 0 || f.size() < kHeaderBytes + 16) return f;
  uint64_t n_tokens = 0;
  std::memcpy(&n_tokens, f.data() + 64, 8);
  // Version 2: the group table (u32 n_groups, 16 bytes per group) comes before the ids.
  uint32_t version = 0;
  std::memcpy(&version, f.data() + 8, 4);
  size_t ids_at = kHeaderBytes;
  if (version == 2) {
    uint32_t n_groups = 0;
    std::memcpy(&n_groups, f.data() + kHeaderBytes, 4);
    if (n_groups > (f.size() - kHeaderBytes - 16) / 16) return f;
    ids_at += 4 + 16 * size_t{n_groups};
  }
  if (ids_at + 16 <= f.size() && n_tokens <= (f.size() - ids_at - 16) / 4) {
    const uint64_t h = XXH3_64bits(f.data() + ids_at, 4 * n_tokens);
    std::memcpy(f.data() + 72, &h, 8);
  }
  const uint64_t sum = XXH3_64bits(f.data(), f.size() - 8);
  std::memcpy(f.data() + f.size() - 8, &sum, 8);
  return f;
}

}  // namespace spw::kv::fuzz
