// libFuzzer target: the KV snapshot reader (engine/kv/snapshot_file.h) on arbitrary files,
// restoring into a small cache (kv_snapshot_cache.h). The first input byte is the harness's
// (snapshot_of_input: odd makes the token hash and checksum good, so that mutations reach the
// sizes, the zstd frame and the restore; bit 1 restores into the sliding-window layer groups,
// format version 2, instead of the single cache of version 1).
// A load must succeed with as many tokens as the cache then holds, or fail with a message naming
// the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/kv/snapshot_file.h"
#include "tests/fuzz/kv_snapshot_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<spw::kv::KvCache> cache = spw::kv::fuzz::make_cache();
  static const std::unique_ptr<spw::kv::KvCacheSet> set = spw::kv::fuzz::make_cache_set();
  static const int fd = memfd_create("fuzz.kv", 0);
  if (fd < 0) std::abort();
  if (size == 0) return 0;
  const std::vector<uint8_t> file = spw::kv::fuzz::snapshot_of_input(data, size);
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size())) {
    std::abort();
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const bool for_set = spw::kv::fuzz::input_is_for_set(data, size);
  auto tokens = for_set ? spw::kv::load_snapshot_file(path, spw::kv::fuzz::kFingerprint, *set)
                        : spw::kv::load_snapshot_file(path, spw::kv::fuzz::kFingerprint, *cache);
  if (!tokens) {
    if (tokens.error().message.find(path) == std::string::npos) std::abort();
    return 0;
  }
  const int64_t held = for_set ? set->n_tokens() : cache->n_tokens();
  if (static_cast<int64_t>(tokens->size()) != held) std::abort();
  return 0;
}
