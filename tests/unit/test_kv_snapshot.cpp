// KV snapshots (engine/kv/snapshot.h): a round trip through KvCache with blocks in every tier
// restores identical blocks and tokens; another model, other KV types or block size, a file cut
// short at any of several lengths, or one changed byte anywhere are refused with a message
// naming the file, and the cache is left exactly as it was; a failed save leaves the old file.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_set.h"
#include "engine/kv/snapshot.h"
#include "engine/model/model.h"
#include "tests/support/test_model.h"

namespace spw::kv {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Model> load_model(const TempDir& dir, const std::string& name,
                                  const TestModelSpec& spec) {
  const std::string path = dir.file(name);
  EXPECT_TRUE(write_test_model(spec, path).ok());
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

// Blocks of 16 tokens, a window of one recent block plus the sink block, two host blocks and
// the rest on disk: a snapshot of 150 tokens has blocks in every tier.
KvCacheConfig config_for(const Model& m, const std::string& spill_dir,
                         GgmlType type_k = GgmlType::F16, GgmlType type_v = GgmlType::F16) {
  const ModelConfig& mc = m.config();
  KvCacheConfig c;
  c.n_layer = mc.n_layer;
  c.n_kv_heads = mc.n_head_kv;
  c.head_dim = mc.head_dim;
  c.head_dim_v = mc.head_dim_v;
  c.n_ctx = mc.n_ctx_train;
  c.type_k = type_k;
  c.type_v = type_v;
  c.block_size = 16;
  c.n_sinks = 4;
  c.window_tokens = 16;
  c.spill_dir = spill_dir;
  const int64_t bb =
      c.n_layer * c.n_kv_heads * c.block_size *
      static_cast<int64_t>(row_size(type_k, c.head_dim) + row_size(type_v, c.head_dim_v));
  c.host_budget = 2 * bb;
  c.disk_budget = 64 * bb;
  return c;
}

std::unique_ptr<KvCache> make_cache(const KvCacheConfig& c) {
  auto made = KvCache::create(c);
  EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
  return made.ok() ? std::move(*made) : nullptr;
}

// Appends n positions of seeded random rows in ubatches of up to 40, and their token ids.
void fill(KvCache& cache, std::vector<int32_t>& tokens, int64_t n, uint32_t seed) {
  const KvCacheConfig& c = cache.config();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(c.n_kv_heads * c.head_dim));
  std::vector<float> v(static_cast<size_t>(c.n_kv_heads * c.head_dim_v));
  while (n > 0) {
    const int64_t ub = std::min<int64_t>(n, 40);
    const int64_t p0 = cache.n_tokens();
    ASSERT_TRUE(cache.reserve(ub).ok());
    for (int64_t pos = p0; pos < p0 + ub; ++pos) {
      for (int64_t l = 0; l < c.n_layer; ++l) {
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        cache.store(l, pos, k.data(), v.data());
      }
      tokens.push_back(static_cast<int32_t>(rng() % 320));
    }
    cache.commit(ub);
    n -= ub;
  }
  ASSERT_TRUE(cache.flush().ok());
}

// Every block's bytes, in the read_block layout.
std::vector<std::vector<uint8_t>> all_blocks(const KvCache& cache) {
  const int64_t bs = cache.config().block_size;
  const int64_t n_blocks = (cache.n_tokens() + bs - 1) / bs;
  std::vector<std::vector<uint8_t>> out;
  for (int64_t b = 0; b < n_blocks; ++b) {
    std::vector<uint8_t> block(static_cast<size_t>(cache.block_bytes()));
    EXPECT_TRUE(cache.read_block(b, block).ok()) << "block " << b;
    out.push_back(std::move(block));
  }
  return out;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A model, a cache of 150 tokens in every tier and its snapshot on disk.
class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_model(dir_, "a.gguf", TestModelSpec{});
    ASSERT_NE(model_, nullptr);
    cache_ = make_cache(config_for(*model_, dir_.path()));
    ASSERT_NE(cache_, nullptr);
    fill(*cache_, tokens_, 150, 1);
    blocks_ = all_blocks(*cache_);
    path_ = dir_.file("a.kvsnap");
    const Status st = save_snapshot(path_, *model_, *cache_, tokens_);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }

  // Loading `path` into a cache that holds 40 other tokens fails with a message containing
  // `what` and the path, and leaves that cache exactly as it was.
  void expect_refused(const std::string& path, const std::string& what,
                      const Model* model = nullptr) {
    const Model& m = model != nullptr ? *model : *model_;
    auto other = make_cache(config_for(m, dir_.path()));
    ASSERT_NE(other, nullptr);
    std::vector<int32_t> other_tokens;
    fill(*other, other_tokens, 40, 99);
    const auto before = all_blocks(*other);
    auto r = load_snapshot(path, m, *other);
    ASSERT_FALSE(r.ok()) << path << " was accepted";
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(path), std::string::npos)
        << "names the file: " << r.error().message;
    EXPECT_EQ(other->n_tokens(), 40) << r.error().message;
    EXPECT_TRUE(all_blocks(*other) == before) << "the cache changed: " << r.error().message;
  }

  TempDir dir_{"spillway-snapshot"};
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> tokens_;
  std::vector<std::vector<uint8_t>> blocks_;
  std::string path_;
};

TEST_F(SnapshotTest, SourceReachesEveryTier) {
  const KvStats s = cache_->stats();
  EXPECT_GT(s.window_blocks, 0);
  EXPECT_EQ(s.host_blocks, 2);
  EXPECT_GT(s.disk_blocks, 0) << "the test must read blocks back from the disk tier";
}

TEST_F(SnapshotTest, RoundTripRestoresIdenticalBlocks) {
  auto fresh = make_cache(config_for(*model_, dir_.path()));
  ASSERT_NE(fresh, nullptr);
  auto r = load_snapshot(path_, *model_, *fresh);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, tokens_);
  EXPECT_EQ(fresh->n_tokens(), 150);
  ASSERT_TRUE(fresh->flush().ok());
  EXPECT_TRUE(all_blocks(*fresh) == blocks_);
  // Placed as a normal run places them.
  const KvStats a = cache_->stats(), b = fresh->stats();
  EXPECT_EQ(b.window_blocks, a.window_blocks);
  EXPECT_EQ(b.host_blocks, a.host_blocks);
  EXPECT_EQ(b.disk_blocks, a.disk_blocks);
  EXPECT_EQ(b.cold_to_window_bytes, 0);
}

TEST_F(SnapshotTest, LoadReplacesWhatTheCacheHeld) {
  auto busy = make_cache(config_for(*model_, dir_.path()));
  ASSERT_NE(busy, nullptr);
  std::vector<int32_t> other;
  fill(*busy, other, 70, 5);
  auto r = load_snapshot(path_, *model_, *busy);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, tokens_);
  EXPECT_EQ(busy->n_tokens(), 150);
  EXPECT_TRUE(all_blocks(*busy) == blocks_);
  // And it goes on: a further position is stored after the restored ones.
  fill(*busy, other, 3, 6);
  EXPECT_EQ(busy->n_tokens(), 153);
}

TEST_F(SnapshotTest, SavingTwiceGivesTheSameFile) {
  const std::string again = dir_.file("again.kvsnap");
  ASSERT_TRUE(save_snapshot(again, *model_, *cache_, tokens_).ok());
  EXPECT_TRUE(read_bytes(again) == read_bytes(path_));
}

TEST(Snapshot, EveryKvTypeRoundTrips) {
  TempDir dir("spillway-snapshot");
  TestModelSpec spec;
  spec.n_embd = 128;
  spec.head_dim = 32;  // q8_0 needs a multiple of 32
  auto model = load_model(dir, "m.gguf", spec);
  ASSERT_NE(model, nullptr);
  for (const auto& [tk, tv] : {std::pair{GgmlType::F32, GgmlType::F32},
                               {GgmlType::Q8_0, GgmlType::Q8_0},
                               {GgmlType::Q8_0, GgmlType::F16}}) {
    SCOPED_TRACE(type_name(static_cast<uint32_t>(tk)) + "/" + type_name(static_cast<uint32_t>(tv)));
    auto cache = make_cache(config_for(*model, dir.path(), tk, tv));
    ASSERT_NE(cache, nullptr);
    std::vector<int32_t> tokens;
    fill(*cache, tokens, 77, 3);
    const auto blocks = all_blocks(*cache);
    const std::string path = dir.file("t.kvsnap");
    ASSERT_TRUE(save_snapshot(path, *model, *cache, tokens).ok());
    auto fresh = make_cache(config_for(*model, dir.path(), tk, tv));
    auto r = load_snapshot(path, *model, *fresh);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, tokens);
    EXPECT_TRUE(all_blocks(*fresh) == blocks);
  }
}

TEST(Snapshot, EmptyCacheRoundTrips) {
  TempDir dir("spillway-snapshot");
  auto model = load_model(dir, "m.gguf", TestModelSpec{});
  ASSERT_NE(model, nullptr);
  auto empty = make_cache(config_for(*model, dir.path()));
  ASSERT_TRUE(save_snapshot(dir.file("e.kvsnap"), *model, *empty, {}).ok());
  auto busy = make_cache(config_for(*model, dir.path()));
  std::vector<int32_t> tokens;
  fill(*busy, tokens, 20, 2);
  auto r = load_snapshot(dir.file("e.kvsnap"), *model, *busy);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->empty());
  EXPECT_EQ(busy->n_tokens(), 0);
}

TEST_F(SnapshotTest, AnotherModelIsRefused) {
  // Same shape, other weights (another seed): only the weights tell them apart.
  TestModelSpec same_shape;
  same_shape.seed = 2;
  auto b = load_model(dir_, "b.gguf", same_shape);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(model_fingerprint(*b), model_fingerprint(*model_));
  expect_refused(path_, "was made with another model", b.get());
  // Another shape altogether.
  TestModelSpec deeper;
  deeper.n_layer = 3;
  auto c = load_model(dir_, "c.gguf", deeper);
  ASSERT_NE(c, nullptr);
  expect_refused(path_, "was made with another model", c.get());
}

TEST_F(SnapshotTest, FingerprintIsStable) {
  auto again = Model::load(dir_.file("a.gguf"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(model_fingerprint(**again), model_fingerprint(*model_));
}

TEST_F(SnapshotTest, OtherKvTypesAreRefused) {
  auto f32 = make_cache(config_for(*model_, dir_.path(), GgmlType::F32, GgmlType::F16));
  ASSERT_NE(f32, nullptr);
  std::vector<int32_t> t;
  fill(*f32, t, 20, 4);
  auto r = load_snapshot(path_, *model_, *f32);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("was made with KV types f16/f16, this session uses f32/f16"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(f32->n_tokens(), 20);
}

TEST_F(SnapshotTest, OtherBlockSizeIsRefused) {
  KvCacheConfig c = config_for(*model_, dir_.path());
  c.block_size = 32;
  auto other = make_cache(c);
  ASSERT_NE(other, nullptr);
  auto r = load_snapshot(path_, *model_, *other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--kv-block 16, this session uses 32"), std::string::npos)
      << r.error().message;
}

TEST_F(SnapshotTest, MoreTokensThanTheSessionHoldsIsRefused) {
  KvCacheConfig c = config_for(*model_, dir_.path());
  c.disk_budget = 0;  // window + 2 host blocks: 64 tokens
  auto small = make_cache(c);
  ASSERT_NE(small, nullptr);
  ASSERT_LT(small->max_tokens(), 150);
  std::vector<int32_t> t;
  fill(*small, t, 10, 4);
  const auto before = all_blocks(*small);
  auto r = load_snapshot(path_, *model_, *small);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("holds 150 tokens"), std::string::npos) << r.error().message;
  EXPECT_EQ(small->n_tokens(), 10);
  EXPECT_TRUE(all_blocks(*small) == before);
}

TEST_F(SnapshotTest, TruncatedFilesAreRefused) {
  const auto bytes = read_bytes(path_);
  const size_t n = bytes.size();
  ASSERT_GT(n, 80 + 4 * 150 + 16 + 100u);
  const std::string cut = dir_.file("cut.kvsnap");
  for (const size_t len :
       {size_t{4}, size_t{8}, size_t{12}, size_t{40}, size_t{79}, size_t{80}, size_t{81},
        size_t{80 + 4 * 75}, size_t{80 + 4 * 150}, size_t{80 + 4 * 150 + 8},
        size_t{80 + 4 * 150 + 9}, n / 2, n - 9, n - 8, n - 1}) {
    SCOPED_TRACE(len);
    write_bytes(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + len));
    expect_refused(cut, "truncated");
  }
  write_bytes(cut, {});
  expect_refused(cut, " is empty, not a Spillway KV snapshot");
  // And bytes after the checksum.
  auto longer = bytes;
  longer.push_back(0);
  write_bytes(cut, longer);
  expect_refused(cut, "corrupted");
}

// A file that is not a snapshot at all (text, a short file) is named as such with the bytes it
// starts with, not as a truncated snapshot.
TEST_F(SnapshotTest, AFileThatIsNotASnapshotSaysSoWithItsFirstBytes) {
  const std::string other = dir_.file("notes.txt");
  const std::string text = "hello world\n";
  write_bytes(other, std::vector<uint8_t>(text.begin(), text.end()));
  expect_refused(other,
                 other +
                     " is not a Spillway KV snapshot (magic: a snapshot starts with bytes 53 50 "
                     "57 4b 56 00 00 01, this file with 68 65 6c 6c 6f 20 77 6f)");
  write_bytes(other, {'a', 'b', 'c'});
  expect_refused(other,
                 " is not a Spillway KV snapshot (magic: a snapshot starts with bytes 53 "
                 "50 57 4b 56 00 00 01, this file with 61 62 63)");
  // The first bytes of a snapshot and nothing else: a truncated snapshot.
  write_bytes(other, {'S', 'P', 'W'});
  expect_refused(other, "snapshot " + other + " is truncated");
}

TEST_F(SnapshotTest, OneChangedByteAnywhereIsRefused) {
  const auto bytes = read_bytes(path_);
  const size_t n = bytes.size();
  const size_t tokens_end = 80 + 4 * 150, payload = tokens_end + 8;
  // Every byte of the header, the payload size, the zstd frame header and the checksum; every
  // third token byte and every 97th payload byte. Header bytes get a low and a high bit.
  std::vector<std::pair<size_t, uint8_t>> flips;
  for (size_t i = 0; i < 80; ++i) flips.insert(flips.end(), {{i, 0x01}, {i, 0x80}});
  for (size_t i = 80; i < tokens_end; i += 3) flips.push_back({i, 0x01});
  for (size_t i = tokens_end; i < payload; ++i) flips.insert(flips.end(), {{i, 0x01}, {i, 0x80}});
  for (size_t i = payload; i < payload + 32; ++i) flips.push_back({i, 0x01});
  for (size_t i = payload + 32; i < n - 8; i += 97) flips.push_back({i, 0x01});
  for (size_t i = n - 8; i < n; ++i) flips.push_back({i, 0x01});
  const std::string bad = dir_.file("bad.kvsnap");
  auto other = make_cache(config_for(*model_, dir_.path()));
  ASSERT_NE(other, nullptr);
  std::vector<int32_t> other_tokens;
  fill(*other, other_tokens, 40, 99);
  const auto before = all_blocks(*other);
  for (const auto& [off, flip] : flips) {
    auto changed = bytes;
    changed[off] ^= flip;
    write_bytes(bad, changed);
    auto r = load_snapshot(bad, *model_, *other);
    ASSERT_FALSE(r.ok()) << "byte " << off << " ^ " << int(flip) << " of " << n << " was accepted";
    ASSERT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
    ASSERT_EQ(other->n_tokens(), 40) << "byte " << off << ": " << r.error().message;
  }
  EXPECT_TRUE(all_blocks(*other) == before);
  // The messages say what is wrong where they can.
  auto changed = bytes;
  changed[n - 100] ^= 1;
  write_bytes(bad, changed);
  expect_refused(bad, "corrupted (checksum mismatch)");
  changed = bytes;
  changed[80 + 4 * 10] ^= 1;
  write_bytes(bad, changed);
  expect_refused(bad, "corrupted (token hash mismatch)");
  changed = bytes;
  changed[0] ^= 1;
  write_bytes(bad, changed);
  expect_refused(bad, "not a Spillway KV snapshot");
}

TEST_F(SnapshotTest, MissingFileIsAnError) {
  expect_refused(dir_.file("none.kvsnap"), "cannot open snapshot");
}

TEST_F(SnapshotTest, TokensMustMatchTheCache) {
  std::vector<int32_t> fewer(tokens_.begin(), tokens_.end() - 1);
  const Status st = save_snapshot(dir_.file("x.kvsnap"), *model_, *cache_, fewer);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("149 token ids given for a cache of 150 tokens"),
            std::string::npos)
      << st.error().message;
  EXPECT_FALSE(fs::exists(dir_.file("x.kvsnap")));
}

TEST_F(SnapshotTest, SaveIntoAMissingFolderFails) {
  const std::string path = dir_.file("no/such/folder/a.kvsnap");
  const Status st = save_snapshot(path, *model_, *cache_, tokens_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find(path), std::string::npos) << st.error().message;
}

// Files in the folder other than the model, the snapshot and the spill files: a failed save
// must not leave its temporary file behind.
std::vector<std::string> strays(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) out.push_back(name);
  }
  return out;
}

TEST_F(SnapshotTest, FailedSaveLeavesTheOldFileIntact) {
  const auto old_bytes = read_bytes(path_);
  // Another, longer state whose save runs out of room half way, as on a full disk: the file
  // size limit makes write() fail with EFBIG (SIGXFSZ ignored) past half the old file's size.
  std::vector<int32_t> more = tokens_;
  fill(*cache_, more, 60, 8);
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = old_bytes.size() / 2;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status st = save_snapshot(path_, *model_, *cache_, more);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  ASSERT_FALSE(st.ok()) << "the save should have hit the size limit";
  EXPECT_NE(st.error().message.find(path_), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("File too large"), std::string::npos) << st.error().message;
  EXPECT_TRUE(read_bytes(path_) == old_bytes) << "the old snapshot changed";
  EXPECT_TRUE(strays(dir_.path()).empty()) << strays(dir_.path()).front();
  // It still loads.
  auto fresh = make_cache(config_for(*model_, dir_.path()));
  auto r = load_snapshot(path_, *model_, *fresh);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, tokens_);
  // And the bigger state saves once there is room.
  ASSERT_TRUE(save_snapshot(path_, *model_, *cache_, more).ok());
  auto again = make_cache(config_for(*model_, dir_.path()));
  auto r2 = load_snapshot(path_, *model_, *again);
  ASSERT_TRUE(r2.ok()) << r2.error().message;
  EXPECT_EQ(*r2, more);
}

}  // namespace
}  // namespace spw::kv

// A model with sliding-window layers: the snapshot (version 2) holds each group's held blocks
// and restores them byte for byte into a fresh set; a global-only session and a set of other
// groups refuse it and stay as they were.
namespace spw::kv {
namespace {
std::vector<std::vector<uint8_t>> held(const KvCache& cache) {
  std::vector<std::vector<uint8_t>> out;
  const int64_t bs = cache.config().block_size;
  for (int64_t b = cache.first_held_block(); b * bs < cache.n_tokens(); ++b) {
    std::vector<uint8_t> block(static_cast<size_t>(cache.block_bytes()));
    EXPECT_TRUE(cache.read_block(b, block).ok()) << "block " << b;
    out.push_back(std::move(block));
  }
  return out;
}

TEST(SnapshotGroups, SlidingAndGlobalGroupsRoundTrip) {
  TempDir dir("spw-snap-groups");
  auto model = load_model(dir, "m.gguf", TestModelSpec{});
  ASSERT_TRUE(model);
  const KvCacheConfig base = config_for(*model, dir.path());
  ASSERT_GE(base.n_layer, 2);
  std::vector<int64_t> span(static_cast<size_t>(base.n_layer), 24);
  span.back() = 0;  // the last layer global, the others sliding
  auto a = KvCacheSet::create(base, span);
  auto b = KvCacheSet::create(base, span);
  ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? "" : a.error().message);
  ASSERT_EQ((*a)->n_groups(), 2);
  // 150 positions through the set, in ubatches of 40.
  std::vector<int32_t> tokens;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(base.n_kv_heads * base.head_dim));
  std::vector<float> v(static_cast<size_t>(base.n_kv_heads * base.head_dim_v));
  for (int64_t p0 = 0; p0 < 150; p0 += 40) {
    const int64_t ub = std::min<int64_t>(40, 150 - p0);
    ASSERT_TRUE((*a)->reserve(ub).ok());
    for (int64_t pos = p0; pos < p0 + ub; ++pos) {
      for (int64_t l = 0; l < base.n_layer; ++l) {
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        (*a)->store(l, pos, k.data(), v.data());
      }
      tokens.push_back(static_cast<int32_t>(rng() % 320));
    }
    (*a)->commit(ub);
  }
  ASSERT_TRUE((*a)->flush().ok());
  EXPECT_GT((*a)->stats().dropped_blocks, 0);
  const std::string path = dir.file("groups.kv");
  ASSERT_TRUE(save_snapshot(path, *model, **a, tokens).ok());
  const std::vector<uint8_t> bytes = read_bytes(path);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 2u);

  auto loaded = load_snapshot(path, *model, **b);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(*loaded, tokens);
  for (int64_t g = 0; g < 2; ++g) {
    EXPECT_EQ((*b)->group(g).n_tokens(), 150);
    EXPECT_EQ((*b)->group(g).first_held_block(), (*a)->group(g).first_held_block());
    EXPECT_EQ(held((*b)->group(g)), held((*a)->group(g))) << "group " << g;
  }

  // A global-only session of the same model refuses it and keeps what it holds.
  auto plain = make_cache(base);
  ASSERT_TRUE(plain);
  std::vector<int32_t> plain_tokens;
  fill(*plain, plain_tokens, 20, 3);
  auto refused = load_snapshot(path, *model, *plain);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("sliding-window layer groups"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(plain->n_tokens(), 20);
  // Other groups (another span) refuse it too.
  std::fill(span.begin(), span.end() - 1, 40);
  auto other = KvCacheSet::create(base, span);
  ASSERT_TRUE(other.ok());
  auto refused2 = load_snapshot(path, *model, **other);
  ASSERT_FALSE(refused2.ok());
  EXPECT_NE(refused2.error().message.find("other sliding-window layer groups"), std::string::npos)
      << refused2.error().message;
  // Cut short anywhere: refused, the set left as it was.
  for (const size_t keep : {size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string cut = dir.file("cut.kv");
    std::ofstream(cut, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(keep));
    EXPECT_FALSE(load_snapshot(cut, *model, **b).ok()) << "kept " << keep;
    EXPECT_EQ((*b)->n_tokens(), 150);
  }
}
}  // namespace
}  // namespace spw::kv
