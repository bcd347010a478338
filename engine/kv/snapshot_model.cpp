// KV snapshots of a model: its fingerprint, and save/load by it (snapshot_file.h holds the
// file's reader and writer, which need no model).
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/kv/snapshot.h"
#include "engine/kv/snapshot_file.h"

namespace spw::kv {

uint64_t model_fingerprint(const Model& model) {
  constexpr uint64_t kSampleBytes = 4096;
  // Little-endian fields, packed.
  std::vector<uint8_t> bytes;
  const auto put_bytes = [&](const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = bytes.size();
    bytes.resize(at + n);
    std::memcpy(bytes.data() + at, p, n);
  };
  const auto put = [&](auto v) { put_bytes(&v, sizeof v); };
  bytes.reserve(256 + model.file().tensors().size() * (kSampleBytes + 128));
  const ModelConfig& c = model.config();
  put(static_cast<uint32_t>(c.arch));
  for (const int64_t v : {c.n_vocab, c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_head_kv, c.head_dim,
                          c.head_dim_v, c.n_rot}) {
    put(v);
  }
  for (const double v : {c.rms_eps, c.rope.freq_base, c.rope.freq_scale}) put(v);
  put(static_cast<uint32_t>(c.rope_type));
  for (const bool b : {c.has_qkv_bias, c.has_qk_norm, c.tied_embeddings, c.has_rope_freqs}) {
    put(static_cast<uint8_t>(b));
  }
  // The tensor index, and the first bytes of each tensor's data: two files of one shape (a base
  // model and its fine-tune, two seeds of a test model) differ there, and reading 4 KiB per
  // tensor keeps the fingerprint cheap for a multi-GB file.
  for (const GgufTensorInfo& t : model.file().tensors()) {
    put(static_cast<uint64_t>(t.name.size()));
    put_bytes(t.name.data(), t.name.size());
    put(static_cast<uint32_t>(t.type));
    for (const int64_t ne : t.ne) put(ne);
    put(t.offset);
    put(t.n_bytes);
    put_bytes(t.data, static_cast<size_t>(std::min(t.n_bytes, kSampleBytes)));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

Status save_snapshot(const std::string& path, const Model& model, KvCache& cache,
                     std::span<const int32_t> tokens) {
  return save_snapshot_file(path, model_fingerprint(model), cache, tokens);
}
Status save_snapshot(const std::string& path, const Model& model, KvCacheSet& caches,
                     std::span<const int32_t> tokens) {
  return save_snapshot_file(path, model_fingerprint(model), caches, tokens);
}
Expected<std::vector<int32_t>> load_snapshot(const std::string& path, const Model& model,
                                             KvCache& cache) {
  return load_snapshot_file(path, model_fingerprint(model), cache);
}
Expected<std::vector<int32_t>> load_snapshot(const std::string& path, const Model& model,
                                             KvCacheSet& caches) {
  return load_snapshot_file(path, model_fingerprint(model), caches);
}

}  // namespace spw::kv
