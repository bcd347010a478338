// The tiered, paged KV cache (engine/kv/kv_cache.h): every position written through
// reserve/store/commit reads back byte for byte from blocks(), in position order, from the tier
// the window rule puts it in (sinks and recent blocks in the window, older ones in Host, then
// Disk); byte accounting against the formula; the budgets' "context full"; spill-file life and
// faults (injected write failure, corrupted bytes read back from the file, stale files of dead
// processes); snapshots' read_block/restore; concurrent store() from two threads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/fp16.h"
#include "engine/common/size.h"
#include "engine/gguf/ggml_types.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/tier_policy.h"
#include "tests/support/test_model.h"

namespace spw::kv {
namespace {

constexpr int64_t kSpareSlots = 2;  // window slots beyond the window's blocks (kv_cache.cpp)

// Deterministic "random" values of K (which = 0) and V (which = 1) for (layer, pos, i), so a
// check regenerates what was stored instead of keeping it.
float value(uint32_t seed, int64_t layer, int64_t pos, int64_t i, int which) {
  uint64_t x = (static_cast<uint64_t>(seed) << 48) ^ (static_cast<uint64_t>(layer) << 40) ^
               (static_cast<uint64_t>(pos) << 12) ^ (static_cast<uint64_t>(i) << 1) ^
               static_cast<uint64_t>(which);
  x += 0x9E3779B97F4A7C15ull;  // splitmix64
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

std::vector<float> make_row(const KvCacheConfig& c, uint32_t seed, int64_t layer, int64_t pos,
                            int which) {
  const int64_t n = c.n_kv_heads * (which == 0 ? c.head_dim : c.head_dim_v);
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = value(seed, layer, pos, i, which);
  return row;
}

// One head's row in the cache type, computed independently of the cache's converters.
std::vector<uint8_t> encode(GgmlType type, const float* x, int64_t n) {
  std::vector<uint8_t> out(row_size(type, n));
  if (type == GgmlType::F32) {
    std::memcpy(out.data(), x, out.size());
  } else if (type == GgmlType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = fp32_to_fp16(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {
    quantize_row(type, x, out.data(), n);
  }
  return out;
}

// A DeviceWindow whose "device" is RAM kept apart from the cache: what the CUDA session's window
// does, minus the GPU. It counts its calls and checks that the cache never copies a slot that no
// block holds.
class FakeDeviceWindow final : public DeviceWindow {
 public:
  FakeDeviceWindow(int64_t n_slots, int64_t slot_bytes)
      : slot_bytes_(slot_bytes),
        mem_(static_cast<size_t>(n_slots * slot_bytes), 0xAB),
        n_slots_(n_slots) {}
  int64_t n_slots() const override { return n_slots_; }
  uint8_t* slot(int32_t i) const override {
    EXPECT_TRUE(i >= 0 && i < n_slots_) << i;
    return const_cast<uint8_t*>(mem_.data()) + i * slot_bytes_;
  }
  Status zero(int32_t i) override {
    ++zeroed;
    std::memset(slot(i), 0, static_cast<size_t>(slot_bytes_));
    return Status::Ok();
  }
  Status copy_out(int32_t i, uint8_t* dst) override {
    ++copied_out;
    std::memcpy(dst, slot(i), static_cast<size_t>(slot_bytes_));
    return Status::Ok();
  }
  Status copy_in(int32_t i, const uint8_t* src) override {
    ++copied_in;
    std::memcpy(slot(i), src, static_cast<size_t>(slot_bytes_));
    return Status::Ok();
  }
  std::atomic<int64_t> zeroed{0}, copied_out{0}, copied_in{0};

 private:
  int64_t slot_bytes_;
  std::vector<uint8_t> mem_;
  int64_t n_slots_;
};

// One row written where blocks() says it lives: what KvCache::store does for a RAM window and
// the CUDA session's KV-write kernel does for a device window.
void write_row_at(const KvCache& cache, int64_t layer, int64_t pos, const float* k,
                  const float* v) {
  const KvCacheConfig& c = cache.config();
  std::vector<BlockView> views;
  cache.blocks(layer, pos + 1, views);
  const BlockView& bv = views.back();
  EXPECT_EQ(bv.tier, Tier::Window);
  const int64_t r = pos - bv.pos0;
  const size_t row_k = row_size(c.type_k, c.head_dim), row_v = row_size(c.type_v, c.head_dim_v);
  for (int64_t h = 0; h < c.n_kv_heads; ++h) {
    const auto ek = encode(c.type_k, k + h * c.head_dim, c.head_dim);
    const auto ev = encode(c.type_v, v + h * c.head_dim_v, c.head_dim_v);
    const size_t row = static_cast<size_t>(h * c.block_size + r);
    std::memcpy(const_cast<uint8_t*>(bv.k) + row * row_k, ek.data(), row_k);
    std::memcpy(const_cast<uint8_t*>(bv.v) + row * row_v, ev.data(), row_v);
  }
}

void store_range(KvCache& cache, uint32_t seed, int64_t pos0, int64_t pos1) {
  const KvCacheConfig& c = cache.config();
  if (c.device_window != nullptr) {
    for (int64_t pos = pos0; pos < pos1; ++pos) {
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const auto k = make_row(c, seed, l, pos, 0);
        const auto v = make_row(c, seed, l, pos, 1);
        write_row_at(cache, l, pos, k.data(), v.data());
      }
    }
    return;
  }
  for (int64_t pos = pos0; pos < pos1; ++pos) {
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const auto k = make_row(c, seed, l, pos, 0);
      const auto v = make_row(c, seed, l, pos, 1);
      cache.store(l, pos, k.data(), v.data());
    }
  }
}

// Appends n positions in one ubatch.
Status append(KvCache& cache, uint32_t seed, int64_t n) {
  const int64_t p0 = cache.n_tokens();
  if (Status st = cache.reserve(n); !st) return st;
  store_range(cache, seed, p0, p0 + n);
  cache.commit(n);
  return Status::Ok();
}

// Rows [0, end) of every layer read back from blocks() equal what was stored, blocks come in
// position order, and no block is partial except the last.
::testing::AssertionResult rows_match(const KvCache& cache, uint32_t seed, int64_t end,
                                      int64_t skip_block = -1) {
  const KvCacheConfig& c = cache.config();
  const size_t row_k = row_size(c.type_k, c.head_dim), row_v = row_size(c.type_v, c.head_dim_v);
  std::vector<BlockView> views;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    cache.blocks(l, end, views);
    if (static_cast<int64_t>(views.size()) != ceil_div(end, c.block_size)) {
      return ::testing::AssertionFailure() << "layer " << l << ": " << views.size() << " blocks";
    }
    for (size_t i = 0; i < views.size(); ++i) {
      const BlockView& bv = views[i];
      const int64_t b = static_cast<int64_t>(i);
      if (bv.block != b || bv.pos0 != b * c.block_size ||
          bv.n_tokens != std::min(c.block_size, end - bv.pos0)) {
        return ::testing::AssertionFailure() << "block " << b << " has block " << bv.block
                                             << " pos0 " << bv.pos0 << " n " << bv.n_tokens;
      }
      if (b == skip_block) continue;
      for (int64_t r = 0; r < bv.n_tokens; ++r) {
        const int64_t pos = bv.pos0 + r;
        const auto k = make_row(c, seed, l, pos, 0);
        const auto v = make_row(c, seed, l, pos, 1);
        for (int64_t h = 0; h < c.n_kv_heads; ++h) {
          const auto ek = encode(c.type_k, k.data() + h * c.head_dim, c.head_dim);
          const auto ev = encode(c.type_v, v.data() + h * c.head_dim_v, c.head_dim_v);
          const size_t row = static_cast<size_t>(h * c.block_size + r);
          if (std::memcmp(bv.k + row * row_k, ek.data(), row_k) != 0 ||
              std::memcmp(bv.v + row * row_v, ev.data(), row_v) != 0) {
            return ::testing::AssertionFailure()
                   << "layer " << l << " pos " << pos << " head " << h << " (block " << b
                   << ", tier " << tier_name(bv.tier) << ") differs";
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct Geometry {
  int64_t sinks = 0, recent = 0, window = 0;  // blocks
};
Geometry geometry(const KvCacheConfig& c) {
  Geometry g;
  g.sinks = ceil_div(c.n_sinks, c.block_size);
  g.recent = ceil_div(c.window_tokens, c.block_size);
  g.window = g.sinks + g.recent;
  return g;
}

int64_t formula_block_bytes(const KvCacheConfig& c) {
  return c.n_layer * c.n_kv_heads * c.block_size *
         static_cast<int64_t>(row_size(c.type_k, c.head_dim) + row_size(c.type_v, c.head_dim_v));
}

// After flush(): the tier of every block follows the window rule, Host fills before Disk, and
// the telemetry counts agree with blocks() and the byte formula.
::testing::AssertionResult tiers_match(KvCache& cache, int64_t host_slots) {
  const KvCacheConfig& c = cache.config();
  const Geometry g = geometry(c);
  const int64_t n_blocks = ceil_div(cache.n_tokens(), c.block_size);
  std::vector<BlockView> views;
  cache.blocks(0, cache.n_tokens(), views);
  int64_t counts[3] = {0, 0, 0};
  for (const BlockView& bv : views) {
    Tier want = Tier::Window;
    if (bv.block >= g.sinks && bv.block < n_blocks - g.recent) {
      want = bv.block - g.sinks < host_slots ? Tier::Host : Tier::Disk;
    }
    if (bv.tier != want) {
      return ::testing::AssertionFailure() << "block " << bv.block << " of " << n_blocks << " in "
                                           << tier_name(bv.tier) << ", want " << tier_name(want);
    }
    ++counts[static_cast<int>(bv.tier)];
  }
  const KvStats s = cache.stats();
  const int64_t bb = formula_block_bytes(c);
  if (cache.block_bytes() != bb) return ::testing::AssertionFailure() << "block_bytes";
  if (s.window_blocks != counts[0] || s.host_blocks != counts[1] || s.disk_blocks != counts[2] ||
      s.window_bytes != counts[0] * bb || s.host_bytes != counts[1] * bb ||
      s.disk_bytes != counts[2] * bb) {
    return ::testing::AssertionFailure()
           << "stats window " << s.window_blocks << "/" << s.window_bytes << " host "
           << s.host_blocks << "/" << s.host_bytes << " disk " << s.disk_blocks << "/"
           << s.disk_bytes << "; blocks() says " << counts[0] << " " << counts[1] << " "
           << counts[2] << " of " << bb << " bytes";
  }
  if (s.cold_to_window_bytes != 0 || s.spills_pending != 0) {
    return ::testing::AssertionFailure()
           << "cold_to_window " << s.cold_to_window_bytes << " pending " << s.spills_pending;
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> spill_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("spillway-spill-", 0) == 0) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

KvCacheConfig small_config(const std::string& spill_dir) {
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.head_dim_v = 8;
  c.n_ctx = 1000;
  c.type_k = GgmlType::F32;
  c.type_v = GgmlType::F32;
  c.block_size = 16;
  c.n_sinks = 4;
  c.window_tokens = 24;  // not a multiple of the block size: 2 recent blocks
  c.spill_dir = spill_dir;
  return c;
}

// --- The main round trip, over block sizes, sinks and types ---

struct Scenario {
  int64_t block_size, n_sinks, window_tokens;
  GgmlType type_k, type_v;
  int64_t head_dim;
  int64_t n_tokens;
  int64_t prefill;      // first ubatch; then ubatches of 1 (decode) and a few odd sizes
  bool device = false;  // the window in a (fake) DeviceWindow
};

void run_scenario(const Scenario& sc) {
  TempDir dir("spillway-kv");
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_kv_heads = 2;
  c.head_dim = sc.head_dim;
  c.head_dim_v = sc.head_dim;
  c.n_ctx = sc.n_tokens;
  c.type_k = sc.type_k;
  c.type_v = sc.type_v;
  c.block_size = sc.block_size;
  c.n_sinks = sc.n_sinks;
  c.window_tokens = sc.window_tokens;
  const int64_t bb = formula_block_bytes(c);
  const Geometry g = geometry(c);
  const int64_t cold_blocks = ceil_div(sc.n_tokens, sc.block_size) - g.window;
  ASSERT_GT(cold_blocks, 3) << "the scenario must reach the disk";
  const int64_t host_slots = 2;  // a tiny host budget: most cold blocks go to disk
  c.host_budget = host_slots * bb + bb / 2;
  c.disk_budget = (cold_blocks - host_slots) * bb;
  c.spill_dir = dir.path();
  std::shared_ptr<FakeDeviceWindow> dev;
  if (sc.device) {
    // The largest ubatch of the scenario: the prefill or 17.
    const int64_t slots = plan_tiers(c)->pool_slots(std::max<int64_t>(sc.prefill, 17));
    dev = std::make_shared<FakeDeviceWindow>(slots, bb);
    c.device_window = dev;
  }
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  EXPECT_EQ(cache.max_tokens(), sc.n_tokens);
  EXPECT_EQ(cache.block_bytes(), bb);

  const uint32_t seed = 7;
  ASSERT_TRUE(append(cache, seed, sc.prefill).ok());
  const int64_t odd_sizes[] = {1, 1, 3, 1, 1, 17, 1, 1, 1, 2};
  int64_t step = 0;
  while (cache.n_tokens() < sc.n_tokens) {
    const int64_t n = std::min(odd_sizes[step++ % 10], sc.n_tokens - cache.n_tokens());
    const int64_t p0 = cache.n_tokens();
    ASSERT_TRUE(cache.reserve(n).ok()) << "at " << p0;
    store_range(cache, seed, p0, p0 + n);
    // The window never holds more than its blocks, plus the spares of copies in flight (an
    // ubatch of n tokens needs its own blocks in the window while it is written).
    const KvStats s = cache.stats();
    const int64_t ubatch_blocks = ceil_div(p0 + n, c.block_size) - p0 / c.block_size;
    ASSERT_LE(s.window_blocks, g.sinks + std::max(g.recent, ubatch_blocks) + kSpareSlots)
        << "at " << p0;
    ASSERT_EQ(s.window_blocks + s.host_blocks + s.disk_blocks, ceil_div(p0 + n, c.block_size));
    EXPECT_EQ(s.cold_to_window_bytes, 0);
    cache.commit(n);
    if (step % 97 == 0) {
      ASSERT_TRUE(rows_match(cache, seed, cache.n_tokens()));
    }
  }
  ASSERT_TRUE(cache.flush().ok());
  EXPECT_TRUE(rows_match(cache, seed, cache.n_tokens()));
  EXPECT_TRUE(tiers_match(cache, host_slots));
  const KvStats s = cache.stats();
  EXPECT_EQ(s.window_blocks, g.window);
  EXPECT_EQ(s.host_blocks, host_slots);
  EXPECT_EQ(s.disk_blocks, cold_blocks - host_slots);
  EXPECT_EQ(s.window_to_host_bytes, s.host_bytes);
  EXPECT_EQ(s.window_to_disk_bytes, s.disk_bytes);
  if (dev) {  // every cold block came off the device exactly once, by copy_out
    EXPECT_EQ(dev->copied_out.load(), cold_blocks);
    EXPECT_EQ(dev->copied_in.load(), 0);
    EXPECT_GE(dev->zeroed.load(), ceil_div(sc.n_tokens, sc.block_size));
  }
  // And the cache is full: the budgets hold exactly n_ctx.
  EXPECT_FALSE(cache.reserve(1).ok());
}

TEST(KvCache, RoundTripBlock16NoSinks) {
  run_scenario({16, 0, 40, GgmlType::F32, GgmlType::F32, 8, 3000, 100});
}
TEST(KvCache, RoundTripBlock16FourSinks) {
  run_scenario({16, 4, 40, GgmlType::F16, GgmlType::F32, 8, 2500, 1});
}
TEST(KvCache, RoundTripBlock16TwentySinksF16) {
  run_scenario({16, 20, 16, GgmlType::F16, GgmlType::F16, 8, 2000, 300});
}
TEST(KvCache, RoundTripBlock256) {
  run_scenario({256, 4, 300, GgmlType::F16, GgmlType::F16, 8, 3000, 512});
}
// The window in a DeviceWindow (the CUDA session's layout, RAM standing in for the GPU): the same
// tiers, bytes and accounting, every spill through copy_out.
TEST(KvCache, DeviceWindowRoundTripBlock16) {
  run_scenario({16, 4, 40, GgmlType::F16, GgmlType::F16, 8, 2500, 100, true});
}
TEST(KvCache, DeviceWindowRoundTripQ8_0OneBlockWindow) {
  run_scenario({16, 0, 1, GgmlType::Q8_0, GgmlType::Q8_0, 32, 1500, 300, true});
}
TEST(KvCache, DeviceWindowRoundTripBlock256) {
  run_scenario({256, 4, 300, GgmlType::F16, GgmlType::F32, 8, 3000, 512, true});
}

TEST(KvCache, DeviceWindowTooSmallIsRefused) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());  // 1 sink block + 2 recent blocks
  c.device_window = std::make_shared<FakeDeviceWindow>(4, formula_block_bytes(c));
  auto made = KvCache::create(c);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().message,
            "the device window has 4 block slots; the window needs at least 5");
}

TEST(KvCache, RoundTripBlock256TwentySinksF32) {
  run_scenario({256, 20, 1, GgmlType::F32, GgmlType::F32, 8, 2100, 700});
}
TEST(KvCache, RoundTripQ8_0) {
  run_scenario({16, 4, 40, GgmlType::Q8_0, GgmlType::Q8_0, 32, 800, 64});
}
TEST(KvCache, RoundTripQ8_0KeysF16Values) {
  run_scenario({16, 0, 20, GgmlType::Q8_0, GgmlType::F16, 32, 600, 5});
}

// A prefill ubatch much longer than the window: its blocks are written in the window, then those
// already out of the recent window spill at commit.
TEST(KvCache, UbatchLongerThanWindow) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.n_sinks = 0;
  c.window_tokens = 16;
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  EXPECT_EQ(cache.max_tokens(), c.n_ctx);  // unlimited host
  ASSERT_TRUE(append(cache, 3, 500).ok());
  ASSERT_TRUE(cache.flush().ok());
  EXPECT_EQ(cache.stats().window_blocks, 1);
  EXPECT_TRUE(rows_match(cache, 3, 500));
  EXPECT_TRUE(tiers_match(cache, 1000));
  ASSERT_TRUE(append(cache, 3, 1).ok());
  EXPECT_TRUE(rows_match(cache, 3, 501));
}

// blocks() covers the positions of the ubatch being stored (end up to n_tokens + reserved).
TEST(KvCache, BlocksIncludeReservedPositions) {
  TempDir dir("spillway-kv");
  auto made = KvCache::create(small_config(dir.path()));
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  ASSERT_TRUE(append(cache, 5, 40).ok());
  ASSERT_TRUE(cache.reserve(30).ok());
  store_range(cache, 5, 40, 70);
  EXPECT_TRUE(rows_match(cache, 5, 70));
  cache.commit(30);
  EXPECT_EQ(cache.n_tokens(), 70);
  EXPECT_TRUE(rows_match(cache, 5, 70));
}

// --- Budgets ---

TEST(KvCache, ContextFullLeavesTheCacheUnchanged) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());  // 1 sink block + 2 recent blocks
  c.n_ctx = 100000;
  const int64_t bb = formula_block_bytes(c);
  c.host_budget = 2 * bb;
  c.disk_budget = 3 * bb + 100;  // the disk budget is what runs out
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  EXPECT_EQ(cache.max_tokens(), (3 + 2 + 3) * 16);
  EXPECT_EQ(cache.capacity_detail(), fmt::format("(window 48 tokens, host {} = 2 blocks, disk {} = "
                                                 "3 blocks)",
                                                 format_size(2 * bb), format_size(3 * bb + 100)));
  ASSERT_TRUE(append(cache, 9, 100).ok());
  for (int i = 0; i < 28; ++i) ASSERT_TRUE(append(cache, 9, 1).ok());
  ASSERT_EQ(cache.n_tokens(), 128);
  ASSERT_TRUE(cache.flush().ok());
  const KvStats before = cache.stats();
  EXPECT_EQ(before.disk_blocks, 3);
  for (const int64_t n : {int64_t{1}, int64_t{40}}) {
    const Status st = cache.reserve(n);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().message,
              "context full: 128 tokens fit in the budgets you set " + cache.capacity_detail());
    EXPECT_EQ(cache.n_tokens(), 128);
    const KvStats after = cache.stats();
    EXPECT_EQ(after.window_blocks, before.window_blocks);
    EXPECT_EQ(after.host_blocks, before.host_blocks);
    EXPECT_EQ(after.disk_blocks, before.disk_blocks);
    EXPECT_TRUE(rows_match(cache, 9, 128));
    EXPECT_TRUE(tiers_match(cache, 2));
  }
}

TEST(KvCache, NoDiskBudgetMeansHostOnly) {
  KvCacheConfig c = small_config("");
  c.n_ctx = 100000;
  c.host_budget = 4 * formula_block_bytes(c);
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_EQ((*made)->max_tokens(), (3 + 4) * 16);
  EXPECT_NE((*made)->capacity_detail().find("no disk budget"), std::string::npos);
}

TEST(KvCache, UnlimitedHostHoldsTheContext) {
  KvCacheConfig c = small_config("");
  c.n_ctx = 4097;
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  EXPECT_EQ(cache.max_tokens(), 4097);
  ASSERT_TRUE(append(cache, 1, 4097).ok());
  ASSERT_TRUE(cache.flush().ok());
  EXPECT_TRUE(tiers_match(cache, 1 << 20));
  EXPECT_TRUE(rows_match(cache, 1, 4097));
}

// --- Configuration errors ---

TEST(KvCache, Q8_0NeedsHeadDimMultipleOf32) {
  KvCacheConfig c = small_config("");
  c.type_k = GgmlType::Q8_0;
  auto made = KvCache::create(c);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().message,
            "q8_0 KV cache needs head_dim % 32 == 0 (this model has head_dim 8)");
}

TEST(KvCache, BadConfigsAreRefused) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config("");
  c.disk_budget = 1 << 20;
  auto no_dir = KvCache::create(c);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.error().message.find("--spill-dir"), std::string::npos);

  c.spill_dir = dir.file("missing/folder");
  auto missing = KvCache::create(c);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message.rfind("cannot create the spill file in " + c.spill_dir, 0), 0u)
      << missing.error().message;

  KvCacheConfig bad = small_config("");
  bad.type_v = GgmlType::Q4_0;
  EXPECT_FALSE(KvCache::create(bad).ok());
  bad = small_config("");
  bad.block_size = 0;
  EXPECT_FALSE(KvCache::create(bad).ok());
  bad = small_config("");
  bad.head_dim = 0;
  EXPECT_FALSE(KvCache::create(bad).ok());
}

// --- The spill file ---

TEST(KvCache, SpillFileExistsWhileTheCacheLives) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.host_budget = 0;
  c.disk_budget = 1 << 20;
  std::string path;
  {
    auto made = KvCache::create(c);
    ASSERT_TRUE(made.ok()) << made.error().message;
    const auto files = spill_files(dir.path());
    ASSERT_EQ(files.size(), 1u);
    path = files[0];
    const std::string name = std::filesystem::path(path).filename().string();
    EXPECT_EQ(name.rfind(fmt::format("spillway-spill-{}-", getpid()), 0), 0u) << name;
    EXPECT_EQ(name.substr(name.size() - 3), ".kv");
    // Preallocated for the blocks n_ctx can spill (the budget would hold more).
    const int64_t cold = ceil_div(c.n_ctx, 16) - 3;
    EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)),
              cold * (*made)->block_bytes());
    ASSERT_TRUE(append(**made, 2, 300).ok());
    ASSERT_TRUE((*made)->flush().ok());
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_GT((*made)->stats().disk_blocks, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(spill_files(dir.path()).empty());
}

TEST(KvCache, RemoveStaleSpillFiles) {
  TempDir dir("spillway-kv");
  // A pid that surely ran and is gone: a child that exited and was reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string dead = dir.file(fmt::format("spillway-spill-{}-0.kv", child));
  const std::string ours = dir.file(fmt::format("spillway-spill-{}-999.kv", getpid()));
  const std::string other = dir.file("notes-123-4.kv");
  for (const auto& p : {dead, ours, other}) std::ofstream(p) << "x";
  EXPECT_EQ(remove_stale_spill_files(dir.path()), 1);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(ours));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_EQ(remove_stale_spill_files(dir.file("no-such-folder")), 0);
}

// The disk tier is really read from the file: bytes overwritten in it show in blocks().
TEST(KvCache, CorruptedSpillFileShowsInBlocks) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.host_budget = formula_block_bytes(c);  // one host block, the rest on disk
  c.disk_budget = 1 << 20;
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  ASSERT_TRUE(append(cache, 4, 200).ok());
  ASSERT_TRUE(cache.flush().ok());
  ASSERT_TRUE(tiers_match(cache, 1));
  const int64_t victim = 5;  // sinks: block 0; host: block 1; disk: blocks 2..
  std::vector<BlockView> views;
  cache.blocks(0, cache.n_tokens(), views);
  ASSERT_EQ(views[victim].tier, Tier::Disk);

  // Find the block in the file by its bytes.
  const int64_t bb = cache.block_bytes();
  std::vector<uint8_t> block(static_cast<size_t>(bb));
  ASSERT_TRUE(cache.read_block(victim, block).ok());
  const auto files = spill_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  std::vector<uint8_t> file;
  {
    std::ifstream in(files[0], std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  int64_t offset = -1;
  for (int64_t o = 0; o + bb <= static_cast<int64_t>(file.size()); o += bb) {
    if (std::memcmp(file.data() + o, block.data(), static_cast<size_t>(bb)) == 0) offset = o;
  }
  ASSERT_GE(offset, 0) << "block " << victim << " not found in " << files[0];
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    const std::string junk(64, '\x5a');  // the first rows of layer 0's K
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  EXPECT_FALSE(rows_match(cache, 4, cache.n_tokens()));
  EXPECT_TRUE(rows_match(cache, 4, cache.n_tokens(), victim));  // every other block intact
  cache.blocks(0, cache.n_tokens(), views);
  EXPECT_EQ(views[victim].k[0], 0x5a);
}

// A failed write to the spill file: flush() and the next reserve() report it naming the file;
// the cache still returns everything it holds (the block that failed from its window slot).
TEST(KvCache, FailedDiskWriteIsReportedAndTheCacheStillReads) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.host_budget = 0;
  c.disk_budget = 1 << 20;
  c.fail_disk_write = [](int64_t slot) { return slot != 3; };
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  const std::string file = spill_files(dir.path()).at(0);
  ASSERT_TRUE(append(cache, 6, 40).ok());
  Status st;
  while (cache.n_tokens() < 200 && st.ok()) st = append(cache, 6, 1);
  if (st.ok()) st = cache.flush();
  ASSERT_FALSE(st.ok());
  const std::string want = "writing the spill file " + file + " failed: Input/output error";
  EXPECT_EQ(st.error().message, want);
  const int64_t held = cache.n_tokens();
  const Status again = cache.reserve(1);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, want);
  EXPECT_FALSE(cache.flush().ok());
  EXPECT_EQ(cache.n_tokens(), held);
  EXPECT_TRUE(rows_match(cache, 6, held));
  std::vector<BlockView> views;
  cache.blocks(0, held, views);
  // Disk slots are taken in order: slot 3 was the 4th block past the sink block.
  EXPECT_EQ(views.at(4).tier, Tier::Window);
  EXPECT_EQ(views.at(3).tier, Tier::Disk);
  EXPECT_EQ(cache.stats().cold_to_window_bytes, 0);
  // clear() starts over.
  cache.clear();
  EXPECT_TRUE(cache.reserve(1).ok());
}

// --- Snapshots, clear ---

// Snapshot support: every block read out (read_block) and restored into another cache in the
// tiers a normal run uses. With a (fake) DeviceWindow the window's blocks come off the device
// through copy_out and every restored block goes onto it through copy_in.
void read_block_restore_round_trip(bool device) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.type_k = GgmlType::F16;
  c.host_budget = 3 * formula_block_bytes(c);
  c.disk_budget = 1 << 20;
  std::shared_ptr<FakeDeviceWindow> dev_a, dev_b;
  KvCacheConfig ca = c, cb = c;
  if (device) {
    const int64_t slots = plan_tiers(c)->pool_slots(77);
    dev_a = std::make_shared<FakeDeviceWindow>(slots, formula_block_bytes(c));
    dev_b = std::make_shared<FakeDeviceWindow>(slots, formula_block_bytes(c));
    ca.device_window = dev_a;
    cb.device_window = dev_b;
  }
  auto a_made = KvCache::create(ca);
  auto b_made = KvCache::create(cb);
  ASSERT_TRUE(a_made.ok() && b_made.ok());
  KvCache& a = **a_made;
  KvCache& b = **b_made;
  ASSERT_TRUE(append(a, 8, 77).ok());
  for (int i = 0; i < 250; ++i) ASSERT_TRUE(append(a, 8, 1).ok());
  ASSERT_TRUE(a.flush().ok());
  const int64_t bb = a.block_bytes();
  const int64_t n_blocks = ceil_div(a.n_tokens(), 16);
  std::vector<uint8_t> saved(static_cast<size_t>(n_blocks * bb));
  const int64_t out_before = device ? dev_a->copied_out.load() : 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    ASSERT_TRUE(a.read_block(i, std::span(saved).subspan(i * bb, bb)).ok());
  }
  // The window's blocks (1 sink + 2 recent) were read off the device.
  if (device) EXPECT_EQ(dev_a->copied_out.load() - out_before, 3);
  EXPECT_FALSE(a.read_block(n_blocks, std::span(saved).subspan(0, bb)).ok());

  ASSERT_TRUE(append(b, 99, 30).ok());  // restore replaces whatever b held
  ASSERT_TRUE(b.restore(a.n_tokens(), [&](int64_t i, std::span<uint8_t> dst) {
                 EXPECT_EQ(static_cast<int64_t>(dst.size()), bb);
                 std::memcpy(dst.data(), saved.data() + i * bb, dst.size());
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(b.n_tokens(), a.n_tokens());
  if (device) EXPECT_EQ(dev_b->copied_in.load(), n_blocks);  // every block onto the device first
  EXPECT_TRUE(rows_match(b, 8, b.n_tokens()));
  EXPECT_TRUE(tiers_match(b, 3));
  std::vector<BlockView> va, vb;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    a.blocks(l, a.n_tokens(), va);
    b.blocks(l, b.n_tokens(), vb);
    ASSERT_EQ(va.size(), vb.size());
    for (size_t i = 0; i < va.size(); ++i) EXPECT_EQ(va[i].tier, vb[i].tier) << i;
  }
  std::vector<uint8_t> block(static_cast<size_t>(bb));
  for (int64_t i = 0; i < n_blocks; ++i) {
    ASSERT_TRUE(b.read_block(i, block).ok());
    EXPECT_EQ(std::memcmp(block.data(), saved.data() + i * bb, static_cast<size_t>(bb)), 0) << i;
  }
  // Decoding goes on after a restore.
  ASSERT_TRUE(append(b, 8, 5).ok());
  EXPECT_TRUE(rows_match(b, 8, b.n_tokens()));

  // A failing fill leaves the cache empty.
  const Status st = b.restore(a.n_tokens(), [&](int64_t i, std::span<uint8_t> dst) {
    if (i == 7) return Status(Error{"payload truncated"});
    std::memcpy(dst.data(), saved.data() + i * bb, dst.size());
    return Status::Ok();
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "payload truncated");
  EXPECT_EQ(b.n_tokens(), 0);
  EXPECT_EQ(b.stats().window_blocks + b.stats().host_blocks + b.stats().disk_blocks, 0);
  // More than the budgets hold is refused up front.
  EXPECT_FALSE(
      b.restore(b.max_tokens() + 1, [](int64_t, std::span<uint8_t>) { return Status::Ok(); }).ok());
}

TEST(KvCache, ReadBlockRestoreRoundTrip) { read_block_restore_round_trip(false); }
TEST(KvCache, DeviceWindowSnapshotRoundTrip) { read_block_restore_round_trip(true); }

// A context of 2^31 tokens in blocks of one token and no host limit is allowed; the bookkeeping
// must grow with use, not be sized for it up front (that was 3 GB before the first token).
TEST(KvCache, HugeContextCostsNothingUntilUsed) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.n_ctx = int64_t{1} << 31;
  c.block_size = 1;
  c.n_sinks = 0;
  c.window_tokens = 4;
  const auto rss_kib = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
    return 0LL;
  };
  const long long before = rss_kib();
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  EXPECT_EQ(cache.max_tokens(), c.n_ctx);
  ASSERT_TRUE(append(cache, 3, 100).ok());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(append(cache, 3, 1).ok());
  ASSERT_TRUE(cache.flush().ok());
  EXPECT_TRUE(rows_match(cache, 3, cache.n_tokens()));
  EXPECT_EQ(cache.stats().host_blocks, 150 - 4);
  EXPECT_LT(rss_kib() - before, 64 * 1024) << "KiB of RSS for 150 tokens";
}

TEST(KvCache, ClearFreesEveryTier) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.n_ctx = 100000;
  c.host_budget = 2 * formula_block_bytes(c);
  c.disk_budget = 5 * formula_block_bytes(c);
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(append(cache, 10 + round, cache.max_tokens()).ok());
    ASSERT_TRUE(cache.flush().ok());
    EXPECT_TRUE(rows_match(cache, 10 + round, cache.n_tokens()));
    EXPECT_TRUE(tiers_match(cache, 2));
    EXPECT_EQ(cache.stats().disk_blocks, 5);
    cache.clear();
    EXPECT_EQ(cache.n_tokens(), 0);
    const KvStats s = cache.stats();
    EXPECT_EQ(s.window_blocks + s.host_blocks + s.disk_blocks, 0);
    EXPECT_EQ(s.window_bytes + s.host_bytes + s.disk_bytes, 0);
  }
}

// store() from two threads, one layer each, as the session's workers do.
TEST(KvCache, ConcurrentStoreForDifferentLayers) {
  TempDir dir("spillway-kv");
  KvCacheConfig c = small_config(dir.path());
  c.host_budget = 4 * formula_block_bytes(c);
  c.disk_budget = 1 << 20;
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  const uint32_t seed = 12;
  const int64_t sizes[] = {64, 1, 1, 5, 1, 33, 1};
  for (int step = 0; cache.n_tokens() + 64 < c.n_ctx; ++step) {
    const int64_t n = sizes[step % 7];
    const int64_t p0 = cache.n_tokens();
    ASSERT_TRUE(cache.reserve(n).ok());
    std::vector<std::thread> workers;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      workers.emplace_back([&cache, &c, l, p0, n] {
        for (int64_t pos = p0; pos < p0 + n; ++pos) {
          const auto k = make_row(c, seed, l, pos, 0);
          const auto v = make_row(c, seed, l, pos, 1);
          cache.store(l, pos, k.data(), v.data());
        }
        std::vector<BlockView> views;  // readers between store calls of other layers
        cache.blocks(l, p0 + n, views);
      });
    }
    for (auto& w : workers) w.join();
    cache.commit(n);
    (void)cache.stats();
  }
  ASSERT_TRUE(cache.flush().ok());
  EXPECT_TRUE(rows_match(cache, seed, cache.n_tokens()));
  EXPECT_TRUE(tiers_match(cache, 4));
}

}  // namespace
}  // namespace spw::kv
