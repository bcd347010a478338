// The KV snapshot file (format in snapshot.h) written and read for a model fingerprint rather
// than a Model: what save_snapshot / load_snapshot run once they have model_fingerprint(model).
// For code that has a cache but no model, such as the snapshot fuzzer (tests/fuzz), which links
// the reader without the model loader.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/common/expected.h"

namespace spw::kv {

class KvCache;
class KvCacheSet;

/// save_snapshot with `fingerprint` in place of model_fingerprint(model).
Status save_snapshot_file(const std::string& path, uint64_t fingerprint, KvCache& cache,
                          std::span<const int32_t> tokens);
Status save_snapshot_file(const std::string& path, uint64_t fingerprint, KvCacheSet& caches,
                          std::span<const int32_t> tokens);
/// load_snapshot with `fingerprint` in place of model_fingerprint(model): every check of the
/// file (and its errors) as there, the fingerprint compared with this one.
Expected<std::vector<int32_t>> load_snapshot_file(const std::string& path, uint64_t fingerprint,
                                                  KvCache& cache);
Expected<std::vector<int32_t>> load_snapshot_file(const std::string& path, uint64_t fingerprint,
                                                  KvCacheSet& caches);

}  // namespace spw::kv
