// The KV snapshot fuzzer's seeds (tests/fuzz/corpus/kv_snapshot, written by the engine's own
// writer, tests/fuzz/make_kv_snapshot_seeds.cpp) read as the fuzzer reads them: the whole
// snapshot restores its 150 tokens into the fuzzer's cache, each cut or garbled variant is refused
// with the reader's message naming the file, and a byte changed in the frame is caught by the
// file's checksum alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

// The seed `name` through the fuzzer's input handling (its first byte replaced by `harness`
// when that is 0 or 1), loaded into `cache`.
Expected<std::vector<int32_t>> load_seed(const std::string& name, KvCache& cache,
                                         std::string* path_out, int harness = -1) {
  std::ifstream in(kSeeds / name, std::ios::binary);
  std::vector<uint8_t> input{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_GT(input.size(), 1u) << name;
  if (harness >= 0 && !input.empty()) input[0] = static_cast<uint8_t>(harness);
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

TEST(KvSnapshotFuzzSeeds, TheSnapshotRestoresAndItsVariantsAreRefused) {
  ASSERT_TRUE(fs::exists(kSeeds / "snapshot-150.kv")) << kSeeds;
  auto cache = fuzz::make_cache();
  std::string path;
  for (const char* whole : {"snapshot-150.kv", "snapshot-150-rehash.kv"}) {
    const auto tokens = load_seed(whole, *cache, &path);
    ASSERT_TRUE(tokens.ok()) << whole << ": " << tokens.error().message;
    EXPECT_EQ(tokens->size(), 150u) << whole;
    EXPECT_EQ(cache->n_tokens(), 150) << whole;
  }
  const std::vector<std::vector<uint8_t>> clean = all_blocks(*cache);
  const std::pair<const char*, const char*> refused[] = {
      {"cut-40.kv", " is truncated"},
      {"cut-300.kv", " is truncated (its header says 150 tokens)"},
      {"cut-17855.kv", " is truncated"},
      {"garbled-count.kv", " is truncated"},
  };
  for (const auto& [name, want] : refused) {
    const auto r = load_seed(name, *cache, &path);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().message.rfind("snapshot " + path + want, 0), 0u)
        << name << ": " << r.error().message;
  }
  // A byte changed inside the zstd frame: the file's checksum refuses it; with the checksum made
  // good (as the fuzzer makes it) the frame has none of its own, and other bytes are restored.
  const auto raw = load_seed("garbled-frame.kv", *cache, &path, 0);
  ASSERT_FALSE(raw.ok());
  EXPECT_EQ(raw.error().message, "snapshot " + path + " is corrupted (checksum mismatch)");
  const auto rehashed = load_seed("garbled-frame.kv", *cache, &path);
  ASSERT_TRUE(rehashed.ok()) << rehashed.error().message;
  EXPECT_EQ(rehashed->size(), 150u);
  EXPECT_NE(all_blocks(*cache), clean);
}

}  // namespace
}  // namespace spw::kv
