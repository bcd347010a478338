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

/// Reads path, checks it against model and cache's config, then cache.restore(). Returns the
/// tokens it holds. On any error the cache is left as it was (checked before restore) or, if
/// restore itself fails, empty.
Expected<std::vector<int32_t>> load_snapshot(const std::string& path, const Model& model,
                                             KvCache& cache);

}  // namespace spw::kv
