// KV snapshots: `--save-kv FILE` / `--load-kv FILE`. A snapshot holds every block of a KvCache
// (all tiers) and the tokens they encode, so a document's prefill is computed once.
//
// File format (little-endian), version 1:
//   magic "SPWKV\0\0\1" (8 bytes), u32 format version,
//   u64 model fingerprint (model_fingerprint()), u32 type_k, u32 type_v (ggml type numbers),
//   u32 block_size, u64 n_layer, n_kv_heads, head_dim, head_dim_v, u64 n_tokens,
//   u64 token-prefix hash (XXH3-64 of the n_tokens int32 ids), n_tokens int32 token ids,
//   u64 payload bytes, payload = zstd frame of the blocks (read_block layout, in block order),
//   u64 XXH3-64 of everything before it.
// Version 2, for a model with sliding-window layers (a KvCacheSet, kv_cache_set.h): the same,
// with n_layer counting every group's layers, a group table after the token-prefix hash (u32
// n_groups, then per group u64 span (0: global) and u64 n_layer), and a payload of each group's
// held blocks [WindowRule::first_live(n_tokens), n_blocks) in group order, each in its group's
// read_block layout. A global-only session writes version 1, unchanged.
// Loading checks all of it before touching the cache; errors name the file and what differs:
// "snapshot FILE was made with another model", "... KV types f16/f16, this session uses q8_0/f16",
// "... is truncated", "... is corrupted (checksum mismatch)".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"

namespace spw::kv {

class KvCacheSet;  // kv_cache_set.h

/// Identity of a model's weights and hyperparameters: XXH3-64 over the GGUF tensor index (names,
/// types, shapes, data offsets), the first 4 KiB of each tensor's data (so two models of one
/// shape, such as a base model and its fine-tune, differ; reading a sample keeps it cheap for a
/// multi-GB file) and the ModelConfig fields that change the forward pass.
uint64_t model_fingerprint(const Model& model);

/// Writes cache (after flush()) and tokens (tokens.size() == cache.n_tokens()) to path
/// atomically (temporary file + rename). Errors: I/O (disk full) with the path; the old file, if
/// any, is untouched.
Status save_snapshot(const std::string& path, const Model& model, KvCache& cache,
                     std::span<const int32_t> tokens);
/// The same for a session's layer groups (version 2 when a group slides).
Status save_snapshot(const std::string& path, const Model& model, KvCacheSet& caches,
                     std::span<const int32_t> tokens);

/// Reads path, checks it against model and cache's config, then cache.restore(). Returns the
/// tokens it holds. On any error the cache is left as it was (checked before restore) or, if
/// restore itself fails, empty.
Expected<std::vector<int32_t>> load_snapshot(const std::string& path, const Model& model,
                                             KvCache& cache);
/// The same for a session's layer groups: the file's group table must match caches'.
Expected<std::vector<int32_t>> load_snapshot(const std::string& path, const Model& model,
                                             KvCacheSet& caches);

/// The pid in the name of save_snapshot's temporary file, "<path>.tmp-<pid>-<6 characters>"
/// (a snapshot path ends in ".kv"); -1 for any other name.
int64_t snapshot_temp_pid(const std::string& file_name);

/// Removes from `dir` the temporary files of save_snapshot whose process no longer runs (one
/// killed while writing a snapshot leaves its file). A live process's file, this process's, and
/// one of a process of another user (kill() says EPERM) are kept. Returns how many were removed.
int remove_stale_snapshot_temps(const std::string& dir);

}  // namespace spw::kv
