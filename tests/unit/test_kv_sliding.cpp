// Sliding-window layers in the KV cache (tier_policy.h, kv_cache.h, kv_cache_set.h): a cache of
// span S holds the blocks of the last S positions and drops the rest, exactly (every position a
// query at n_tokens() or later attends reads back byte for byte; the dropped blocks' bytes are
// free); budgets do not limit it; read_block() refuses a dropped block and restore() rebuilds
// from the held ones. KvCacheSet routes a model's layers to one cache per span, so the global
// layers alone pay for the host and disk tiers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_set.h"
#include "engine/kv/tier_policy.h"
#include "tests/support/test_model.h"

namespace spw::kv {
namespace {

// K (which = 0) and V (which = 1) element i of (layer, pos): distinct, exact in f32.
float value(int64_t layer, int64_t pos, int64_t i, int which) {
  return static_cast<float>(layer * 1000003 + pos * 131 + i * 7 + which) * 0.25f;
}

KvCacheConfig shape(int64_t n_layer, int64_t n_ctx) {
  KvCacheConfig c;
  c.n_layer = n_layer;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.head_dim_v = 4;
  c.n_ctx = n_ctx;
  c.type_k = GgmlType::F32;
  c.type_v = GgmlType::F32;
  c.block_size = 16;
  c.n_sinks = 4;
  c.window_tokens = 32;
  return c;
}

// Stores positions [p0, p0 + n) of every layer of `n_layer` (model numbering) through `put`.
template <typename Put>
void store_rows(int64_t n_layer, int64_t width, int64_t p0, int64_t n, Put put) {
  std::vector<float> k(static_cast<size_t>(width)), v(static_cast<size_t>(width));
  for (int64_t il = 0; il < n_layer; ++il) {
    for (int64_t p = p0; p < p0 + n; ++p) {
      for (int64_t i = 0; i < width; ++i) {
        k[static_cast<size_t>(i)] = value(il, p, i, 0);
        v[static_cast<size_t>(i)] = value(il, p, i, 1);
      }
      put(il, p, k.data(), v.data());
    }
  }
}

// Whether the rows of positions [lo, hi) of model layer il read back from `views` (a layer's
// blocks, block size bs, [n_kv_heads = 2][bs][head_dim = 4] f32 per part).
bool rows_back(const std::vector<BlockView>& views, int64_t il, int64_t bs, int64_t lo,
               int64_t hi) {
  for (int64_t p = lo; p < hi; ++p) {
    const BlockView& b = views[static_cast<size_t>(p / bs)];
    if (b.k == nullptr || b.n_tokens <= p % bs) return false;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < 4; ++d) {
        const int64_t off = ((h * bs) + p % bs) * 4 + d;
        float k = 0, v = 0;
        std::memcpy(&k, b.k + off * 4, 4);
        std::memcpy(&v, b.v + off * 4, 4);
        if (k != value(il, p, h * 4 + d, 0) || v != value(il, p, h * 4 + d, 1)) return false;
      }
    }
  }
  return true;
}

TEST(KvSliding, TheSpanIsHeldAndEverythingBeforeItDropped) {
  KvCacheConfig c = shape(2, 3000);
  c.span_tokens = 40;
  c.host_budget = 0;  // budgets do not apply to sliding layers
  auto made = KvCache::create(c);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCache& cache = **made;
  const TierLayout& t = cache.layout();
  EXPECT_TRUE(t.drops());
  EXPECT_EQ(cache.max_tokens(), 3000);   // the context, whatever the budgets
  EXPECT_EQ(t.window.recent_blocks, 4);  // ceil(39 / 16) + 1
  EXPECT_EQ(t.window.sink_blocks, 0);
  EXPECT_EQ(t.host_slots + t.disk_slots, 0);

  const int64_t sizes[] = {100, 1, 1, 3, 17, 1, 64, 1, 2, 5};
  std::vector<BlockView> views;
  int64_t step = 0;
  while (cache.n_tokens() < 3000) {
    const int64_t p0 = cache.n_tokens();
    const int64_t n = std::min<int64_t>(sizes[step++ % 10], 3000 - p0);
    ASSERT_TRUE(cache.reserve(n).ok());
    // The ubatch's first query attends back to p0 - 39: still held while it is written.
    for (int64_t il = 0; il < 2; ++il) {
      cache.blocks(il, p0, views);
      ASSERT_TRUE(rows_back(views, il, 16, std::max<int64_t>(0, p0 - 39), p0)) << "at " << p0;
    }
    store_rows(2, 8, p0, n, [&](int64_t il, int64_t p, const float* k, const float* v) {
      cache.store(il, p, k, v);
    });
    cache.commit(n);
    const int64_t end = cache.n_tokens();
    const int64_t first = std::max<int64_t>(0, end - 40) / 16;
    const KvStats s = cache.stats();
    EXPECT_EQ(s.dropped_blocks, first) << "at " << end;
    EXPECT_EQ(cache.first_held_block(), first);
    EXPECT_EQ(s.window_blocks, ceil_div(end, 16) - first);
    EXPECT_LE(s.window_blocks, t.window.recent_blocks);
    EXPECT_EQ(s.host_blocks + s.disk_blocks + s.window_to_host_bytes + s.window_to_disk_bytes, 0);
    cache.blocks(1, end, views);
    ASSERT_EQ(static_cast<int64_t>(views.size()), ceil_div(end, 16));
    for (int64_t b = 0; b < first; ++b) {  // dropped: no bytes
      EXPECT_EQ(views[static_cast<size_t>(b)].k, nullptr);
      EXPECT_EQ(views[static_cast<size_t>(b)].n_tokens, 0);
    }
    ASSERT_TRUE(rows_back(views, 1, 16, std::max<int64_t>(0, end - 39), end)) << "at " << end;
  }
}

TEST(KvSliding, ADroppedBlockIsRefusedAndRestoreRebuildsFromTheHeldOnes) {
  KvCacheConfig c = shape(2, 1000);
  c.span_tokens = 20;
  auto a = KvCache::create(c);
  auto b = KvCache::create(c);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->reserve(333).ok());
  store_rows(2, 8, 0, 333, [&](int64_t il, int64_t p, const float* k, const float* v) {
    (*a)->store(il, p, k, v);
  });
  (*a)->commit(333);
  const int64_t first = (333 - 20) / 16;
  ASSERT_EQ((*a)->first_held_block(), first);
  std::vector<uint8_t> buf(static_cast<size_t>((*a)->block_bytes()));
  const Status refused = (*a)->read_block(first - 1, buf);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("dropped"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("last 20 positions"), std::string::npos);

  std::vector<int64_t> asked;
  const Status st = (*b)->restore(333, [&](int64_t blk, std::span<uint8_t> dst) {
    asked.push_back(blk);
    return (*a)->read_block(blk, dst);
  });
  ASSERT_TRUE(st.ok()) << st.error().message;
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.front(), first);
  EXPECT_EQ(asked.back(), ceil_div(333, 16) - 1);
  EXPECT_EQ((*b)->n_tokens(), 333);
  EXPECT_EQ((*b)->stats().dropped_blocks, first);
  std::vector<BlockView> views;
  for (int64_t il = 0; il < 2; ++il) {
    (*b)->blocks(il, 333, views);
    EXPECT_TRUE(rows_back(views, il, 16, 333 - 19, 333));
  }
}

TEST(KvSliding, ASpanLongerThanTheContextIsTheContext) {
  KvCacheConfig c = shape(1, 50);
  c.span_tokens = 4096;
  auto t = plan_tiers(c);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->span_tokens, 50);
  EXPECT_EQ(t->window_blocks, t->n_blocks);
  EXPECT_EQ(t->pool_slots(512), t->n_blocks);
  c.span_tokens = -1;
  EXPECT_FALSE(plan_tiers(c).ok());
}

TEST(KvSliding, PoolSlotsCoverTheSpanAndTheUbatch) {
  KvCacheConfig c = shape(1, 100000);
  c.span_tokens = 1024;
  c.block_size = 256;
  auto t = plan_tiers(c);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->pool_slots(1), 5);    // ceil(1024 / 256) + 1
  EXPECT_EQ(t->pool_slots(512), 7);  // ceil(1535 / 256) + 1
}

// gemma3's pattern: layers 5, 11, ... global, the others sliding. The global group alone has
// host and disk tiers (and the budgets count its bytes only); every layer reads back.
TEST(KvCacheSet, LayersGoToTheCacheOfTheirSpan) {
  KvCacheConfig base = shape(12, 2000);
  base.host_budget = 3 * 2 * base.n_kv_heads * 16 * (4 + 4) * 4;  // 3 blocks of the 2 globals
  std::vector<int64_t> span(12, 48);
  span[5] = span[11] = 0;
  auto made = KvCacheSet::create(base, span);
  ASSERT_TRUE(made.ok()) << made.error().message;
  KvCacheSet& set = **made;
  ASSERT_EQ(set.n_groups(), 2);
  EXPECT_EQ(set.group_span(0), 0);
  EXPECT_EQ(set.group_span(1), 48);
  EXPECT_EQ(std::vector<int64_t>(set.group_layers(0).begin(), set.group_layers(0).end()),
            (std::vector<int64_t>{5, 11}));
  EXPECT_EQ(set.group(1).config().n_layer, 10);
  EXPECT_EQ(set.group_of(11), 0);
  EXPECT_EQ(set.layer_in_group(11), 1);
  EXPECT_EQ(set.group_of(7), 1);
  EXPECT_EQ(set.layer_in_group(7), 6);  // 0 1 2 3 4 6 [7]
  // The global group's budget: 3 host blocks beside its window (sinks 1 block + recent 2).
  EXPECT_EQ(set.group(0).layout().host_slots, 3);
  EXPECT_EQ(set.max_tokens(), (1 + 2 + 3) * 16);
  EXPECT_EQ(set.group(1).max_tokens(), 2000);
  EXPECT_NE(set.capacity_detail().find("host"), std::string::npos);

  const int64_t n = set.max_tokens();
  ASSERT_TRUE(set.reserve(n).ok());
  store_rows(12, 8, 0, n, [&](int64_t il, int64_t p, const float* k, const float* v) {
    set.store(il, p, k, v);
  });
  set.commit(n);
  ASSERT_TRUE(set.flush().ok());
  std::vector<BlockView> views;
  for (int64_t il = 0; il < 12; ++il) {
    set.blocks(il, n, views);
    const int64_t lo = span[static_cast<size_t>(il)] == 0 ? 0 : n - 47;
    EXPECT_TRUE(rows_back(views, il, 16, lo, n)) << "layer " << il;
  }
  const KvStats s = set.stats();
  EXPECT_EQ(s.host_blocks, 3);                 // the global group's cold blocks
  EXPECT_EQ(s.dropped_blocks, (n - 48) / 16);  // the sliding group's
  EXPECT_FALSE(set.reserve(1).ok());           // the global group is full
}

TEST(KvCacheSet, OneGroupWhenEveryLayerIsGlobalOrEverySlides) {
  KvCacheConfig base = shape(3, 100);
  auto global = KvCacheSet::create(base, {});
  ASSERT_TRUE(global.ok());
  EXPECT_EQ((*global)->n_groups(), 1);
  EXPECT_FALSE((*global)->primary().layout().drops());
  const std::vector<int64_t> all(3, 10);
  auto sliding = KvCacheSet::create(base, all);
  ASSERT_TRUE(sliding.ok());
  EXPECT_EQ((*sliding)->n_groups(), 1);
  EXPECT_TRUE((*sliding)->primary().layout().drops());
  const std::vector<int64_t> wrong(2, 10);
  EXPECT_FALSE(KvCacheSet::create(base, wrong).ok());
}

}  // namespace
}  // namespace spw::kv
