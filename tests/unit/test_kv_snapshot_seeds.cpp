// The KV snapshot fuzzer's seeds (tests/fuzz/corpus/kv_snapshot, written by the engine's own
// writer, tests/fuzz/make_kv_snapshot_seeds.cpp) read as the fuzzer reads them: the whole
// snapshot restores its 150 tokens into the fuzzer's cache, each cut or garbled variant is refused
// with the reader's message naming the file, and a byte changed in the frame is caught by the
// file's checksum alone; the same for format version 2 (sliding-window layer groups, groups-*).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kv/kv_cache_set.h"
#include "engine/kv/snapshot_file.h"
#include "tests/fuzz/kv_snapshot_cache.h"

namespace spw::kv {
namespace {

namespace fs = std::filesystem;

const fs::path kSeeds = fs::path(SPILLWAY_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "kv_snapshot";

// Every block of `cache`, in the read_block layout.
std::vector<std::vector<uint8_t>> all_blocks(const KvCache& cache) {
  const int64_t bs = cache.config().block_size;
  std::vector<std::vector<uint8_t>> out;
  for (int64_t b = 0; b < (cache.n_tokens() + bs - 1) / bs; ++b) {
    out.emplace_back(static_cast<size_t>(cache.block_bytes()));
    EXPECT_TRUE(cache.read_block(b, out.back()).ok()) << "block " << b;
  }
  return out;
}

// The blocks a sliding-window set holds (every group's; a sliding group's dropped blocks, which
// read_block refuses, left out).
std::vector<std::vector<uint8_t>> all_blocks(const KvCacheSet& set) {
  std::vector<std::vector<uint8_t>> out;
  for (int64_t g = 0; g < set.n_groups(); ++g) {
    const KvCache& cache = set.group(g);
    const int64_t bs = cache.config().block_size;
    for (int64_t b = 0; b < (cache.n_tokens() + bs - 1) / bs; ++b) {
      std::vector<uint8_t> bytes(static_cast<size_t>(cache.block_bytes()));
      if (cache.read_block(b, bytes).ok()) out.push_back(std::move(bytes));
    }
  }
  return out;
}

// The seed `name` through the fuzzer's input handling (its first byte replaced by `harness`
// when that is >= 0), loaded into `cache` (a KvCache or a KvCacheSet).
template <class Cache>
Expected<std::vector<int32_t>> load_seed(const std::string& name, Cache& cache,
                                         std::string* path_out, int harness = -1) {
  std::ifstream in(kSeeds / name, std::ios::binary);
  std::vector<uint8_t> input{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_GT(input.size(), 1u) << name;
  if (harness >= 0 && !input.empty()) input[0] = static_cast<uint8_t>(harness);
  EXPECT_EQ(fuzz::input_is_for_set(input.data(), input.size()), (std::is_same_v<Cache, KvCacheSet>))
      << name << ": the harness byte picks the other cache";
  const std::vector<uint8_t> file = fuzz::snapshot_of_input(input.data(), input.size());
  const fs::path path = fs::temp_directory_path() / ("spillway-seed-" + name);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  }
  *path_out = path.string();
  auto r = load_snapshot_file(path.string(), fuzz::kFingerprint, cache);
  fs::remove(path);
  return r;
}

// The seeds named `prefix`* restored into `cache`: `version` is their format version, `bit` the
// harness byte's bit 1 they carry.
template <class Cache>
void check_seeds(const std::string& prefix, Cache& cache, uint32_t version, int bit) {
  std::string path;
  for (const std::string whole : {prefix + "snapshot-150.kv", prefix + "snapshot-150-rehash.kv"}) {
    ASSERT_TRUE(fs::exists(kSeeds / whole)) << kSeeds / whole;
    std::ifstream in(kSeeds / whole, std::ios::binary);
    std::vector<char> head(13);
    in.read(head.data(), 13);
    uint32_t v = 0;
    std::memcpy(&v, head.data() + 1 + 8, 4);
    EXPECT_EQ(v, version) << whole;
    const auto tokens = load_seed(whole, cache, &path);
    ASSERT_TRUE(tokens.ok()) << whole << ": " << tokens.error().message;
    EXPECT_EQ(tokens->size(), 150u) << whole;
    EXPECT_EQ(cache.n_tokens(), 150) << whole;
  }
  const std::vector<std::vector<uint8_t>> clean = all_blocks(cache);
  ASSERT_FALSE(clean.empty());
  const std::pair<std::string, const char*> refused[] = {
      {"cut-40.kv", " is truncated"},
      {"cut-300.kv", " is truncated (its header says 150 tokens)"},
      {"garbled-count.kv", " is truncated"},
  };
  for (const auto& [name, want] : refused) {
    const auto r = load_seed(prefix + name, cache, &path);
    ASSERT_FALSE(r.ok()) << prefix + name;
    EXPECT_EQ(r.error().message.rfind("snapshot " + path + want, 0), 0u)
        << prefix + name << ": " << r.error().message;
  }
  int cut_in_payload = 0;  // cut-<size - 100>.kv
  for (const auto& e : fs::directory_iterator(kSeeds)) {
    const std::string n = e.path().filename().string();
    if (!n.starts_with(prefix + "cut-") || n == prefix + "cut-40.kv" || n == prefix + "cut-300.kv")
      continue;
    if (prefix.empty() && n.starts_with("groups-")) continue;
    ++cut_in_payload;
    const auto r = load_seed(n, cache, &path);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.error().message.rfind("snapshot " + path + " is truncated", 0), 0u)
        << n << ": " << r.error().message;
  }
  EXPECT_EQ(cut_in_payload, 1);
  // A byte changed inside the zstd frame: the file's checksum refuses it; with the checksum made
  // good (as the fuzzer makes it) the frame has none of its own, and other bytes are restored.
  const auto raw = load_seed(prefix + "garbled-frame.kv", cache, &path, bit);
  ASSERT_FALSE(raw.ok());
  EXPECT_EQ(raw.error().message, "snapshot " + path + " is corrupted (checksum mismatch)");
  const auto rehashed = load_seed(prefix + "garbled-frame.kv", cache, &path);
  ASSERT_TRUE(rehashed.ok()) << rehashed.error().message;
  EXPECT_EQ(rehashed->size(), 150u);
  EXPECT_NE(all_blocks(cache), clean);
}

TEST(KvSnapshotFuzzSeeds, TheSnapshotRestoresAndItsVariantsAreRefused) {
  auto cache = fuzz::make_cache();
  check_seeds("", *cache, 1, 0);
}

// Format version 2 (sliding-window layer groups): the same seeds written from the fuzzer's set.
TEST(KvSnapshotFuzzSeeds, TheLayerGroupSnapshotRestoresAndItsVariantsAreRefused) {
  auto set = fuzz::make_cache_set();
  ASSERT_EQ(set->n_groups(), 2);
  check_seeds("groups-", *set, 2, 2);
  // A version-2 file into the single cache, and a version-1 file into the set: refused, named.
  auto cache = fuzz::make_cache();
  std::string path;
  const auto v2_in_v1 = load_seed("groups-snapshot-150.kv", *cache, &path, 0);
  ASSERT_FALSE(v2_in_v1.ok());
  EXPECT_EQ(v2_in_v1.error().message.rfind("snapshot " + path, 0), 0u) << v2_in_v1.error().message;
  const auto v1_in_v2 = load_seed("snapshot-150.kv", *set, &path, 2);
  ASSERT_FALSE(v1_in_v2.ok());
  EXPECT_EQ(v1_in_v2.error().message.rfind("snapshot " + path, 0), 0u) << v1_in_v2.error().message;
}

}  // namespace
}  // namespace spw::kv
