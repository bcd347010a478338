// The tier policy (engine/kv/tier_policy.h): how the budgets split a context's blocks over the
// window, host and disk tiers, which tier every position lies in, the auto and explicit window,
// the settings' checks, the fixed window pool's slots, and that a plan, a cache and a session
// made from the same settings agree to the token on what fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/planner.h"
#include "engine/kv/tier_policy.h"
#include "engine/model/model.h"
#include "tests/support/test_model.h"

namespace spw::kv {
namespace {

// The shape of the default test model: 2 layers, 2 KV heads of 16, f16 K and V. One position
// of one layer is 2 heads x 16 x 2 B = 64 B of K and as much of V: 256 B over both layers, so a
// block of 16 is 4 KiB.
TierConfig small_shape(int64_t n_ctx, int64_t block, int64_t sinks, int64_t window) {
  TierConfig c;
  c.n_layer = 2;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.head_dim_v = 16;
  c.n_ctx = n_ctx;
  c.block_size = block;
  c.n_sinks = sinks;
  c.window_tokens = window;
  return c;
}

constexpr int64_t kBlock16Bytes = 16 * 256;

TierLayout layout_ok(const TierConfig& c) {
  auto t = plan_tiers(c);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? *t : TierLayout{};
}

std::string layout_error(const TierConfig& c) {
  auto t = plan_tiers(c);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.error().message;
}

// ---- (a) The capacity split ------------------------------------------------------------------

TEST(TierPolicySplit, BlockGeometry) {
  const TierLayout t = layout_ok(small_shape(1000, 16, 4, 32));
  EXPECT_EQ(t.row_k, 32);
  EXPECT_EQ(t.row_v, 32);
  EXPECT_EQ(t.layer_k_bytes, 2 * 16 * 32);
  EXPECT_EQ(t.layer_bytes, 2 * 2 * 16 * 32);
  EXPECT_EQ(t.block_bytes, kBlock16Bytes);
  EXPECT_EQ(t.kv_bytes_per_token, 256);
  // Q8_0 K (34 B per 32) beside f32 V (4 B each), head_dim 32.
  TierConfig q = small_shape(1000, 16, 4, 32);
  q.head_dim = q.head_dim_v = 32;
  q.type_k = GgmlType::Q8_0;
  q.type_v = GgmlType::F32;
  const TierLayout tq = layout_ok(q);
  EXPECT_EQ(tq.row_k, 34);
  EXPECT_EQ(tq.row_v, 128);
  EXPECT_EQ(tq.block_bytes, 2 * 2 * 16 * (34 + 128));
}

TEST(TierPolicySplit, HostFillsFirstThenDiskInWholeBlocks) {
  TierConfig c = small_shape(1000, 16, 4, 32);             // 63 blocks, the last one 8 tokens
  c.host_budget = 10 * kBlock16Bytes + kBlock16Bytes / 2;  // 10.5 blocks: 10 hold
  c.disk_budget = 20 * kBlock16Bytes + kBlock16Bytes / 2;  // 20.5 blocks: 20 hold
  const TierLayout t = layout_ok(c);
  EXPECT_EQ(t.n_blocks, 63);
  EXPECT_EQ(t.window.sink_blocks, 1);
  EXPECT_EQ(t.window.recent_blocks, 2);
  EXPECT_EQ(t.window_blocks, 3);
  EXPECT_EQ(t.cold_blocks, 60);
  EXPECT_EQ(t.host_budget_blocks, 10);
  EXPECT_EQ(t.disk_budget_blocks, 20);
  EXPECT_EQ(t.host_slots, 10);
  EXPECT_EQ(t.disk_slots, 20);
  EXPECT_EQ(t.max_tokens, (3 + 10 + 20) * 16);
  EXPECT_EQ(t.max_blocks(), 33);
  EXPECT_EQ(t.capacity_detail(),
            "(window 48 tokens, host 42.0 KiB = 10 blocks, disk 82.0 KiB = 20 blocks)");

  // A host budget of less than one block holds none: everything cold goes to disk.
  c.host_budget = kBlock16Bytes - 1;
  const TierLayout d = layout_ok(c);
  EXPECT_EQ(d.host_slots, 0);
  EXPECT_EQ(d.disk_slots, 20);
  EXPECT_EQ(d.max_tokens, (3 + 20) * 16);

  // No disk tier: the host budget alone.
  c.host_budget = 4 * kBlock16Bytes;
  c.disk_budget = 0;
  const TierLayout h = layout_ok(c);
  EXPECT_EQ(h.host_slots, 4);
  EXPECT_EQ(h.disk_slots, 0);
  EXPECT_EQ(h.max_tokens, (3 + 4) * 16);
  EXPECT_EQ(h.capacity_detail(), "(window 48 tokens, host 16.0 KiB = 4 blocks, no disk budget)");
}

TEST(TierPolicySplit, NeverMoreColdSlotsThanTheContextHasColdBlocks) {
  TierConfig c = small_shape(1000, 16, 4, 32);  // 60 cold blocks
  // No host limit: exactly the cold blocks, and the disk budget gets none.
  c.host_budget = -1;
  c.disk_budget = 1024 * kBlock16Bytes;
  TierLayout t = layout_ok(c);
  EXPECT_EQ(t.host_budget_blocks, -1);
  EXPECT_EQ(t.host_slots, 60);
  EXPECT_EQ(t.disk_slots, 0);
  EXPECT_EQ(t.max_tokens, 1000);
  EXPECT_EQ(t.capacity_detail(),
            "(window 48 tokens, host unlimited, disk 4.0 MiB = 1024 blocks, context 1000 tokens)");
  // A host budget beyond the context: capped the same way.
  c.host_budget = 500 * kBlock16Bytes;
  t = layout_ok(c);
  EXPECT_EQ(t.host_budget_blocks, 500);
  EXPECT_EQ(t.host_slots, 60);
  EXPECT_EQ(t.disk_slots, 0);
  // Host full after 45: the disk budget holds the other 15, not its 1024.
  c.host_budget = 45 * kBlock16Bytes;
  t = layout_ok(c);
  EXPECT_EQ(t.host_slots, 45);
  EXPECT_EQ(t.disk_slots, 15);
  EXPECT_EQ(t.max_tokens, 1000);
  // Disk only.
  c.host_budget = 0;
  t = layout_ok(c);
  EXPECT_EQ(t.host_slots, 0);
  EXPECT_EQ(t.disk_slots, 60);
  EXPECT_EQ(t.host_slots + t.disk_slots, t.cold_blocks);
}

TEST(TierPolicySplit, PartialLastBlockCountsOnlyItsTokens) {
  TierConfig c = small_shape(1000, 16, 4, 32);  // 62 full blocks + 8 tokens
  c.host_budget = -1;
  TierLayout t = layout_ok(c);
  EXPECT_EQ(t.n_blocks, 63);
  EXPECT_EQ(t.max_tokens, 1000) << "not 63 x 16 = 1008";
  EXPECT_EQ(t.max_blocks(), 63);
  // 1000 = 3 x 256 + 232 with 256-token blocks: 4 blocks, the window 1 + 1 of them.
  c = small_shape(1000, 256, 4, 200);
  c.host_budget = 2 * 256 * 256;
  t = layout_ok(c);
  EXPECT_EQ(t.n_blocks, 4);
  EXPECT_EQ(t.window_blocks, 2);
  EXPECT_EQ(t.host_slots, 2);
  EXPECT_EQ(t.max_tokens, 1000);
  // One host block fewer: the budgets hold 3 whole blocks.
  c.host_budget = 256 * 256;
  t = layout_ok(c);
  EXPECT_EQ(t.max_tokens, 3 * 256);
}

TEST(TierPolicySplit, SettingsLongerThanTheContextAreCutToIt) {
  // A window longer than the context: the whole context is the window, nothing is cold.
  TierConfig c = small_shape(1000, 16, 4, 5000);
  c.host_budget = 0;
  TierLayout t = layout_ok(c);
  EXPECT_EQ(t.window_tokens, 1000);
  EXPECT_EQ(t.window.recent_blocks, 63);
  EXPECT_EQ(t.window_blocks, 63) << "min(1 + 63, 63)";
  EXPECT_EQ(t.cold_blocks, 0);
  EXPECT_EQ(t.host_slots + t.disk_slots, 0);
  EXPECT_EQ(t.max_tokens, 1000);
  // A block longer than the context: one block of the context's length.
  c = small_shape(300, 4096, 4, 64);
  t = layout_ok(c);
  EXPECT_EQ(t.block_size, 300);
  EXPECT_EQ(t.n_blocks, 1);
  EXPECT_EQ(t.block_bytes, 300 * 256);
  EXPECT_EQ(t.max_tokens, 300);
  // Sinks longer than the context.
  c = small_shape(40, 16, 100, 16);
  t = layout_ok(c);
  EXPECT_EQ(t.n_sinks, 40);
  EXPECT_EQ(t.window.sink_blocks, 3);
  EXPECT_EQ(t.max_tokens, 40);
}

TEST(TierPolicySplit, SinksRoundUpToBlocksAndZeroSinksHaveNone) {
  TierConfig c = small_shape(1000, 16, 0, 16);
  c.host_budget = 0;
  TierLayout t = layout_ok(c);
  EXPECT_EQ(t.window.sink_blocks, 0);
  EXPECT_EQ(t.window_blocks, 1);
  EXPECT_EQ(t.max_tokens, 16);
  c.n_sinks = 1;  // one sink token holds a whole block
  t = layout_ok(c);
  EXPECT_EQ(t.window.sink_blocks, 1);
  EXPECT_EQ(t.max_tokens, 32);
  c.n_sinks = 17;  // two blocks
  t = layout_ok(c);
  EXPECT_EQ(t.window.sink_blocks, 2);
  EXPECT_EQ(t.window.total(), 3);
  EXPECT_EQ(t.max_tokens, 48);
  // The window: 10 tokens are one block; 17 are two.
  c.n_sinks = 0;
  c.window_tokens = 10;
  EXPECT_EQ(layout_ok(c).window.recent_blocks, 1);
  c.window_tokens = 17;
  EXPECT_EQ(layout_ok(c).window.recent_blocks, 2);
}

TEST(TierPolicySplit, BadConfigsAreRefusedNamingTheirFlag) {
  TierConfig c = small_shape(1000, 16, 4, 32);
  c.n_layer = 0;
  EXPECT_EQ(layout_error(c).rfind("invalid KV cache shape: n_layer 0", 0), 0u);
  c = small_shape(0, 16, 4, 32);
  EXPECT_NE(layout_error(c).find("context of 0 tokens"), std::string::npos);
  c = small_shape(kMaxContextTokens + 1, 16, 4, 32);
  EXPECT_NE(layout_error(c).find("too large"), std::string::npos);
  c = small_shape(1000, 0, 4, 32);
  EXPECT_EQ(layout_error(c), "--kv-block 0: a block holds at least 1 token");
  c = small_shape(1000, kMaxBlockTokens + 1, 4, 32);
  EXPECT_EQ(layout_error(c), "--kv-block 65537 is too large (at most 65536 tokens)");
  c = small_shape(1000, 16, -1, 32);
  EXPECT_EQ(layout_error(c), "--kv-sinks -1 must not be negative");
  c = small_shape(1000, 16, 4, 0);
  EXPECT_EQ(layout_error(c), "--kv-window 0: the window holds at least 1 token");
  c = small_shape(1000, 16, 4, 32);
  c.disk_budget = -1;
  EXPECT_EQ(layout_error(c), "--disk-budget -1 must not be negative");
  c = small_shape(1000, 16, 4, 32);
  c.type_k = GgmlType::Q8_0;
  EXPECT_EQ(layout_error(c), "q8_0 KV cache needs head_dim % 32 == 0 (this model has head_dim 16)");
  c = small_shape(1000, 16, 4, 32);
  c.type_v = GgmlType::Q4_K;
  EXPECT_EQ(layout_error(c), "unsupported KV cache type Q4_K (accepted: f32, f16, q8_0)");
}

// ---- (b) Position -> tier ----------------------------------------------------------------------

TEST(TierPolicyTierOf, SinksColdInOrderThenRecent) {
  // Block 16, 4 sinks (block 0), a 32-token window (2 blocks), 2 host blocks.
  TierConfig c = small_shape(1000, 16, 4, 32);
  c.host_budget = 2 * kBlock16Bytes;
  c.disk_budget = 100 * kBlock16Bytes;
  const TierLayout t = layout_ok(c);
  // 100 positions: blocks 0..6, the last (6) partial; blocks 5 and 6 recent.
  EXPECT_EQ(t.tier_of(0, 100), Tier::Window);
  EXPECT_EQ(t.tier_of(15, 100), Tier::Window) << "the whole sink block, not only 4 tokens";
  EXPECT_EQ(t.tier_of(16, 100), Tier::Host);
  EXPECT_EQ(t.tier_of(47, 100), Tier::Host);
  EXPECT_EQ(t.tier_of(48, 100), Tier::Disk);
  EXPECT_EQ(t.tier_of(79, 100), Tier::Disk);
  EXPECT_EQ(t.tier_of(80, 100), Tier::Window);
  EXPECT_EQ(t.tier_of(99, 100), Tier::Window);
  // While the context is short everything is in the window.
  for (int64_t pos = 0; pos < 48; ++pos) EXPECT_EQ(t.tier_of(pos, 48), Tier::Window) << pos;
  // One more position opens block 3: block 1 leaves the window.
  EXPECT_EQ(t.tier_of(16, 49), Tier::Host);
  EXPECT_EQ(t.tier_of(32, 49), Tier::Window);
}

TEST(TierPolicyTierOf, NoSinksAndAnOddWindow) {
  // No sinks, a 10-token window (1 block), 1 host block: block 0 is the first cold one.
  TierConfig c = small_shape(1000, 16, 0, 10);
  c.host_budget = kBlock16Bytes;
  c.disk_budget = 100 * kBlock16Bytes;
  const TierLayout t = layout_ok(c);
  EXPECT_EQ(t.tier_of(5, 16), Tier::Window);
  EXPECT_EQ(t.tier_of(0, 50), Tier::Host);
  EXPECT_EQ(t.tier_of(16, 50), Tier::Disk);
  EXPECT_EQ(t.tier_of(47, 50), Tier::Disk);
  EXPECT_EQ(t.tier_of(48, 50), Tier::Window);
}

TEST(TierPolicyTierOf, WindowRuleQueries) {
  const WindowRule w{16, 1, 2};
  QueryBlocks q = w.query(100);  // block 6
  EXPECT_EQ(q.last, 6);
  EXPECT_EQ(q.sink_end, 1);
  EXPECT_EQ(q.cold_end, 5);
  EXPECT_FALSE(q.cold(0));
  EXPECT_TRUE(q.cold(1));
  EXPECT_TRUE(q.cold(4));
  EXPECT_FALSE(q.cold(5));
  q = w.query(5);  // block 0: the sink block is the query's own
  EXPECT_EQ(q.sink_end, 1);
  EXPECT_EQ(q.cold_end, 1);
  EXPECT_EQ(w.cold_end(0), 0);
  EXPECT_EQ(w.cold_end(3), 1);
  EXPECT_EQ(w.cold_end(7), 5);
  EXPECT_EQ(fit_recent_blocks(10, 3, w), 6);
  EXPECT_EQ(fit_recent_blocks(4, 3, w), 0);
  EXPECT_EQ(fit_recent_blocks(2, 3, w), 0);
}

struct TierCase {
  int64_t block, sinks, window, host_blocks;  // host_blocks < 0: no limit
  int64_t ubatch;                             // positions per reserve()
};

// A cache filled to n_past positions (ubatch by ubatch) puts every block, once its spills have
// landed, in the tier tier_of() names, for every n_past on the way.
TEST(TierPolicyTierOf, AKvCacheAgreesBlockForBlock) {
  const TierCase cases[] = {
      {16, 4, 32, 2, 7}, {16, 0, 16, 1, 16},    {16, 20, 10, 3, 5},  {16, 4, 64, -1, 33},
      {16, 4, 16, 0, 1}, {256, 4, 300, 1, 100}, {64, 0, 100, 2, 64},
  };
  TempDir dir("spillway-tier");
  for (const TierCase& tc : cases) {
    KvCacheConfig c(small_shape(1500, tc.block, tc.sinks, tc.window));
    const int64_t bb = layout_ok(c).block_bytes;
    c.host_budget = tc.host_blocks < 0 ? -1 : tc.host_blocks * bb;
    c.disk_budget = 200 * bb;
    c.spill_dir = dir.path();
    auto made = KvCache::create(c);
    ASSERT_TRUE(made.ok()) << made.error().message;
    KvCache& cache = **made;
    const TierLayout& t = cache.layout();
    ASSERT_EQ(cache.max_tokens(), 1500);
    const std::string what = "block " + std::to_string(tc.block) + " sinks " +
                             std::to_string(tc.sinks) + " window " + std::to_string(tc.window) +
                             " host " + std::to_string(tc.host_blocks);
    const std::vector<float> k(2 * 16, 0.5f), v(2 * 16, -0.25f);
    std::vector<BlockView> views;
    int64_t cold_seen = 0;
    while (cache.n_tokens() < 1500) {
      const int64_t p0 = cache.n_tokens();
      const int64_t n = std::min(tc.ubatch, 1500 - p0);
      ASSERT_TRUE(cache.reserve(n).ok()) << what;
      for (int64_t pos = p0; pos < p0 + n; ++pos) {
        for (int64_t l = 0; l < 2; ++l) cache.store(l, pos, k.data(), v.data());
      }
      cache.commit(n);
      ASSERT_TRUE(cache.flush().ok()) << what;
      const int64_t n_past = cache.n_tokens();
      cache.blocks(1, n_past, views);
      ASSERT_EQ(static_cast<int64_t>(views.size()), ceil_div(n_past, t.block_size)) << what;
      int64_t counts[3] = {0, 0, 0};
      for (const BlockView& bv : views) {
        ++counts[static_cast<int>(bv.tier)];
        // Every position of the block lies in the block's tier.
        for (const int64_t pos : {bv.pos0, bv.pos0 + bv.n_tokens - 1}) {
          ASSERT_EQ(tier_name(t.tier_of(pos, n_past)), tier_name(bv.tier))
              << what << ", n_past " << n_past << ", pos " << pos << " (block " << bv.block << ")";
        }
      }
      cold_seen = std::max(cold_seen, counts[1] + counts[2]);
      const KvStats s = cache.stats();
      EXPECT_EQ(s.window_blocks, counts[0]) << what << ", n_past " << n_past;
      EXPECT_EQ(s.host_blocks, counts[1]) << what << ", n_past " << n_past;
      EXPECT_EQ(s.disk_blocks, counts[2]) << what << ", n_past " << n_past;
    }
    EXPECT_GT(cold_seen, 0) << what << ": the case must spill";
  }
}

// ---- (c) Auto and explicit window, parsing, validation ---------------------------------------

TEST(TierPolicySettings, AutoWindowDependsOnWhereItLives) {
  KvSettings s;
  EXPECT_FALSE(s.window_tokens.has_value()) << "auto is the default";
  EXPECT_EQ(window_tokens(s, WindowHome::Ram, 100000), kDefaultRamWindowTokens);
  EXPECT_EQ(kDefaultRamWindowTokens, 4096);
  EXPECT_EQ(window_tokens(s, WindowHome::Ram, 100), 4096) << "cut to the context by plan_tiers";
  EXPECT_EQ(window_tokens(s, WindowHome::Device, 100000), 100000);
  EXPECT_EQ(window_tokens(s, WindowHome::Device, 300), 300);
  s.window_tokens = 64;
  EXPECT_EQ(window_tokens(s, WindowHome::Ram, 100000), 64);
  EXPECT_EQ(window_tokens(s, WindowHome::Device, 100000), 64);

  // tier_config carries the settings with the window resolved.
  s.block_size = 32;
  s.n_sinks = 0;
  s.host_budget = 12345;
  s.disk_budget = 678910;
  s.window_tokens.reset();
  const TierConfig c = tier_config(s, WindowHome::Device, 2000);
  EXPECT_EQ(c.n_ctx, 2000);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.n_sinks, 0);
  EXPECT_EQ(c.window_tokens, 2000);
  EXPECT_EQ(c.host_budget, 12345);
  EXPECT_EQ(c.disk_budget, 678910);
  EXPECT_EQ(tier_config(s, WindowHome::Ram, 2000).window_tokens, 4096);
}

TEST(TierPolicySettings, ParseKvWindow) {
  KvSettings s;
  ASSERT_TRUE(parse_kv_window("64", s).ok());
  ASSERT_TRUE(s.window_tokens.has_value());
  EXPECT_EQ(*s.window_tokens, 64);
  EXPECT_EQ(kv_window_name(s), "64");
  ASSERT_TRUE(parse_kv_window("auto", s).ok());
  EXPECT_FALSE(s.window_tokens.has_value());
  EXPECT_EQ(kv_window_name(s), "auto");
  for (const char* any_case : {"AUTO", "Auto"}) {  // a hand-edited settings row, a typed flag
    ASSERT_TRUE(parse_kv_window("64", s).ok());
    ASSERT_TRUE(parse_kv_window(any_case, s).ok()) << any_case;
    EXPECT_FALSE(s.window_tokens.has_value()) << any_case;
  }
  ASSERT_TRUE(parse_kv_window("1", s).ok());
  EXPECT_EQ(s.window_tokens, std::optional<int64_t>(1));
  for (const char* bad : {"x", "-3", "", "64k", " 64", "+5", "auto2", "99999999999999999999"}) {
    const Status st = parse_kv_window(bad, s);
    ASSERT_FALSE(st.ok()) << "'" << bad << "'";
    EXPECT_EQ(st.error().message, std::string("--kv-window '") + bad +
                                      "': give a number of tokens (at least 1) or auto");
  }
  // A number, but no window: validate()'s message.
  const Status zero = parse_kv_window("0", s);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message, "--kv-window 0: the window holds at least 1 token");
  EXPECT_EQ(s.window_tokens, std::optional<int64_t>(1)) << "a refused value changes nothing";
}

TEST(TierPolicySettings, ValidateNamesTheFlag) {
  const auto message = [](const KvSettings& s) {
    const Status st = validate(s);
    return st.ok() ? std::string("ok") : st.error().message;
  };
  KvSettings s;
  EXPECT_EQ(message(s), "ok") << "the defaults are valid";
  s.block_size = 0;
  EXPECT_EQ(message(s), "--kv-block 0: a block holds at least 1 token");
  s.n_sinks = -1;
  EXPECT_EQ(message(s), "--kv-block 0: a block holds at least 1 token") << "in order";
  s = KvSettings{};
  s.block_size = 70000;
  EXPECT_EQ(message(s), "--kv-block 70000 is too large (at most 65536 tokens)");
  s = KvSettings{};
  s.n_sinks = -1;
  EXPECT_EQ(message(s), "--kv-sinks -1 must not be negative");
  s = KvSettings{};
  s.window_tokens = 0;
  EXPECT_EQ(message(s), "--kv-window 0: the window holds at least 1 token");
  s = KvSettings{};
  s.disk_budget = -1;
  EXPECT_EQ(message(s), "--disk-budget -1 must not be negative");
  s = KvSettings{};
  s.disk_budget = 1 << 20;
  EXPECT_EQ(message(s), "--disk-budget needs a folder for the spill file: set --spill-dir DIR");
  s.spill_dir = "/tmp";
  EXPECT_EQ(message(s), "ok");
  s = KvSettings{};
  s.attention = KvAttention::TopK;
  EXPECT_EQ(message(s), "--attention topk needs K >= 1 (got 0)");
  s.top_k = 3;
  EXPECT_EQ(message(s), "ok");
  s = KvSettings{};
  s.host_budget = 0;  // a host budget of nothing is valid: no host tier
  EXPECT_EQ(message(s), "ok");
}

// ---- (d) A plan, a cache and a session agree to the token ----------------------------------

struct BudgetCase {
  int64_t block, sinks;
  std::optional<int64_t> window;  // none: auto
  double host_blocks;             // < 0: no host budget; fractions are partial blocks
  int64_t disk_blocks;
  int64_t n_ctx;
};

std::string describe(const BudgetCase& b) {
  return "block " + std::to_string(b.block) + " sinks " + std::to_string(b.sinks) + " window " +
         (b.window ? std::to_string(*b.window) : std::string("auto")) + " host " +
         std::to_string(b.host_blocks) + " disk " + std::to_string(b.disk_blocks) + " n_ctx " +
         std::to_string(b.n_ctx);
}

TEST(TierPolicyAgreement, PlanCacheAndSessionHoldTheSameTokens) {
  TempDir dir("spillway-tier");
  TestModelSpec spec;
  spec.n_ctx = 8192;
  const std::string path = dir.file("model.gguf");
  ASSERT_TRUE(write_test_model(spec, path).ok());
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const Model& model = **loaded;
  const ModelConfig& mc = model.config();

  // {block, sinks, window, host blocks, disk blocks, n_ctx}; the expected capacity in the
  // comment (window blocks + host + disk, cut to n_ctx).
  const BudgetCase cases[] = {
      {16, 4, 16, -1, 0, 1000},             // no host budget: all 1000
      {16, 0, 64, 0, 0, 1000},              // host 0, no disk: the window's 4 blocks, 64
      {16, 4, 64, 2.5, 0, 1000},            // 5 + 2 blocks: 112
      {16, 4, 16, 3, 5, 1000},              // 2 + 3 + 5: 160
      {16, 0, 16, 0.5, 3, 1000},            // half a block holds none: 1 + 0 + 3 = 64
      {256, 4, std::nullopt, -1, 0, 5000},  // auto (4096): 17 + 3, all 5000
      {256, 0, std::nullopt, 0, 2, 5000},   // 16 + 0 + 2: 4608
      {256, 4, 64, 1.5, 10, 1000},          // 2 + 1 + 1 of 4 blocks: all 1000
      {256, 4, std::nullopt, 0, 0, 300},    // the window cut to the context: 300
      {16, 4, 16, 7, 0, 1001},              // 2 + 7: 144
  };
  for (const BudgetCase& bc : cases) {
    const std::string what = describe(bc);
    SessionParams sp;
    sp.n_ctx = bc.n_ctx;
    sp.kv_type_k = sp.kv_type_v = KvType::F16;
    sp.n_threads = 2;
    // The settings, as generate's flags give them.
    KvSettings kv;
    kv.block_size = bc.block;
    kv.n_sinks = bc.sinks;
    kv.window_tokens = bc.window;
    const int64_t block_bytes = mc.n_layer * mc.n_head_kv * (mc.head_dim + mc.head_dim_v) * 2 *
                                std::min(bc.block, bc.n_ctx);
    kv.host_budget = bc.host_blocks < 0
                         ? -1
                         : static_cast<int64_t>(bc.host_blocks * static_cast<double>(block_bytes));
    kv.disk_budget = bc.disk_blocks * block_bytes;
    if (kv.disk_budget > 0) kv.spill_dir = dir.path();

    PlanInput in;
    in.n_layer = mc.n_layer;
    in.n_kv_heads = mc.n_head_kv;
    in.head_dim = mc.head_dim;
    in.head_dim_v = mc.head_dim_v;
    in.n_ctx = bc.n_ctx;
    in.type_k = in.type_v = GgmlType::F16;
    in.kv = kv;
    auto plan = make_plan(in);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.error().message;

    // The cache, configured by hand from the same settings (the window resolved for RAM).
    KvCacheConfig c(tier_config(kv, WindowHome::Ram, bc.n_ctx));
    c.n_layer = mc.n_layer;
    c.n_kv_heads = mc.n_head_kv;
    c.head_dim = mc.head_dim;
    c.head_dim_v = mc.head_dim_v;
    c.type_k = c.type_v = GgmlType::F16;
    c.spill_dir = kv.spill_dir;
    auto cache = KvCache::create(c);
    ASSERT_TRUE(cache.ok()) << what << ": " << cache.error().message;
    const TierLayout& t = (*cache)->layout();

    cpu::CpuSessionParams cp;
    cp.kv = kv;
    auto session = cpu::CpuSession::create(model, sp, cp);
    ASSERT_TRUE(session.ok()) << what << ": " << session.error().message;

    EXPECT_EQ(plan->block_bytes, block_bytes) << what;
    EXPECT_EQ((*cache)->block_bytes(), block_bytes) << what;
    EXPECT_EQ(plan->max_tokens, (*cache)->max_tokens()) << what;
    EXPECT_EQ((*session)->n_ctx(), (*cache)->max_tokens()) << what;
    EXPECT_EQ(plan->host.blocks, t.host_slots) << what;
    EXPECT_EQ(plan->disk.blocks, t.disk_slots) << what;
    EXPECT_EQ(plan->window.blocks, t.window_blocks) << what;
    EXPECT_EQ(plan->fits, t.max_tokens == bc.n_ctx) << what;
    EXPECT_EQ((*session)->cache().layout().host_slots, t.host_slots) << what;
    EXPECT_EQ((*session)->cache().layout().disk_slots, t.disk_slots) << what;

    // The session really holds that many tokens, and not one more.
    const int64_t cap = (*session)->n_ctx();
    std::vector<int32_t> prompt(static_cast<size_t>(cap));
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = static_cast<int32_t>(3 + (i * 7919) % static_cast<size_t>(mc.n_vocab - 3));
    const Status full = (*session)->eval(prompt, false);
    ASSERT_TRUE(full.ok()) << what << ": " << full.error().message;
    EXPECT_EQ((*session)->n_past(), cap) << what;
    const int32_t one = 5;
    const Status over = (*session)->eval(std::span<const int32_t>(&one, 1), true);
    ASSERT_FALSE(over.ok()) << what;
    EXPECT_EQ(over.error().message.rfind("context full: " + std::to_string(cap) + " tokens fit", 0),
              0u)
        << what << ": " << over.error().message;
  }
}

// The expected capacities of the cases above, worked by hand, so a rule that changed the same
// way in the planner and the cache still fails here.
TEST(TierPolicyAgreement, HandWorkedCapacities) {
  const auto max_tokens = [](int64_t n_ctx, int64_t block, int64_t sinks, int64_t window,
                             int64_t host, int64_t disk) {
    TierConfig c = small_shape(n_ctx, block, sinks, window);
    const int64_t bb = layout_ok(c).block_bytes;
    c.host_budget = host < 0 ? -1 : host * bb;
    c.disk_budget = disk * bb;
    return layout_ok(c).max_tokens;
  };
  EXPECT_EQ(max_tokens(1000, 16, 4, 16, -1, 0), 1000);
  EXPECT_EQ(max_tokens(1000, 16, 0, 64, 0, 0), 64);
  EXPECT_EQ(max_tokens(1000, 16, 4, 64, 2, 0), 112);
  EXPECT_EQ(max_tokens(1000, 16, 4, 16, 3, 5), 160);
  EXPECT_EQ(max_tokens(1000, 16, 0, 16, 0, 3), 64);
  EXPECT_EQ(max_tokens(5000, 256, 4, 4096, -1, 0), 5000);
  EXPECT_EQ(max_tokens(5000, 256, 0, 4096, 0, 2), 4608);
  EXPECT_EQ(max_tokens(1000, 256, 4, 64, 1, 10), 1000);
  EXPECT_EQ(max_tokens(300, 256, 4, 4096, 0, 0), 300);
  EXPECT_EQ(max_tokens(1001, 16, 4, 16, 7, 0), 144);
}

// ---- (e) The fixed window pool ------------------------------------------------------------------

TEST(TierPolicyPool, AWindowHoldingTheContextNeedsExactlyItsBlocks) {
  // 1000 tokens of 16: 63 blocks, all in a window of 2000 tokens (or of exactly 63 blocks).
  const TierLayout all = layout_ok(small_shape(1000, 16, 4, 2000));
  EXPECT_EQ(all.pool_slots(1), 63);
  EXPECT_EQ(all.pool_slots(512), 63);
  EXPECT_EQ(all.pool_slots(100000), 63);
  const TierLayout exact = layout_ok(small_shape(1000, 16, 4, 62 * 16));  // 1 + 62 blocks
  EXPECT_EQ(exact.window.total(), 63);
  EXPECT_EQ(exact.pool_slots(512), 63);
  const TierLayout tiny = layout_ok(small_shape(48, 16, 4, 32));  // 1 + 2 = the 3 blocks
  EXPECT_EQ(tiny.pool_slots(512), 3);
}

TEST(TierPolicyPool, ASpillingWindowNeedsItsUbatchAndTheSpares) {
  // The window: 1 sink + 2 recent blocks of 63.
  const TierLayout t = layout_ok(small_shape(1000, 16, 4, 32));
  // One token touches at most 2 blocks (ceil(1 / 16) + 1).
  EXPECT_EQ(t.pool_slots(1), 3 + 2 + kSpareWindowSlots);
  EXPECT_EQ(t.pool_slots(16), 3 + 2 + kSpareWindowSlots);
  EXPECT_EQ(t.pool_slots(17), 3 + 3 + kSpareWindowSlots);
  EXPECT_EQ(t.pool_slots(512), 3 + 33 + kSpareWindowSlots);
  // A ubatch longer than the context: never more than the context's blocks + the spares.
  EXPECT_EQ(t.pool_slots(5000), 63 + kSpareWindowSlots);
  EXPECT_EQ(t.pool_slots(900), 3 + 58 + kSpareWindowSlots);  // 57 blocks + 1: 61 of 63
  EXPECT_EQ(t.pool_slots(950), 63 + kSpareWindowSlots);      // 60 blocks + 1: 64, cut to 63
  // One block short of holding the context.
  const TierLayout near = layout_ok(small_shape(1000, 16, 4, 61 * 16));  // 62 of 63 blocks
  EXPECT_EQ(near.pool_slots(1), 63 + kSpareWindowSlots);
}

// ---- (f) The default context ------------------------------------------------------------------

// small_shape with a trained context of 4096: 256 B a token, blocks of 16 (4 KiB), a window of
// 1 sink block and 16 recent blocks (68 KiB); the trained context's KV is 256 blocks = 1 MiB.
ContextRequest default_request(int64_t available) {
  ContextRequest r;
  r.shape = small_shape(0, 16, 4, 256);
  r.n_ctx_train = 4096;
  r.kv.block_size = 16;
  r.kv.n_sinks = 4;
  r.kv.window_tokens = 256;
  r.machine.available_bytes = available;
  r.machine.physical_bytes = int64_t{24} << 30;
  return r;
}

ContextChoice choice_ok(const ContextRequest& r) {
  auto c = choose_context(r);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : ContextChoice{};
}

TEST(TierPolicyDefaultContext, RamBudgetIsHalfOfWhatTheWeightsLeave) {
  MachineMemory m;
  EXPECT_EQ(default_kv_ram_budget(m, 1000), -1);  // nothing known: no limit
  m.physical_bytes = 24'000'000;
  EXPECT_EQ(default_kv_ram_budget(m, 4'000'000), 10'000'000);  // no MemAvailable: the RAM
  m.available_bytes = 10'000'000;
  EXPECT_EQ(default_kv_ram_budget(m, 4'000'000), 3'000'000);
  EXPECT_EQ(default_kv_ram_budget(m, 20'000'000), 0);  // weights beyond what is available
  m.address_space_left = 2'000'000;  // RLIMIT_AS: the mapped weights are already counted
  EXPECT_EQ(default_kv_ram_budget(m, 4'000'000), 1'000'000);
  m.available_bytes = m.physical_bytes = 0;
  EXPECT_EQ(default_kv_ram_budget(m, 4'000'000), 1'000'000);
}

TEST(TierPolicyDefaultContext, TheTrainedContextRunsWhenItsKvFits) {
  const ContextChoice c = choice_ok(default_request(4 << 20));  // a budget of 2 MiB for 1 MiB
  EXPECT_EQ(c.n_ctx, 4096);
  EXPECT_FALSE(c.chosen);
  EXPECT_EQ(c.kv, default_request(0).kv);
  EXPECT_EQ(c.ram_budget, 2 << 20);
  EXPECT_EQ(c.trained_kv_bytes, 1 << 20);
  EXPECT_EQ(c.note, "");
}

TEST(TierPolicyDefaultContext, OtherwiseTheLargestThatFitsWithTheNote) {
  // A budget of 200000 B: the window's 69632, then 31 host blocks of 4096 in the 130368 left:
  // (17 + 31) x 16 = 768 tokens.
  const ContextChoice c = choice_ok(default_request(400'000));
  EXPECT_TRUE(c.chosen);
  EXPECT_EQ(c.n_ctx, 768);
  EXPECT_EQ(c.kv.host_budget, 200'000 - 17 * kBlock16Bytes);
  EXPECT_EQ(c.note,
            "context 768 of 4,096 trained: KV needs 1.0 MiB, RAM budget 195.3 KiB (half the "
            "available memory less the weights); -c or Settings to change");
  // Under an address-space limit that decides, the note says so.
  ContextRequest lim = default_request(int64_t{16} << 30);
  lim.machine.address_space_left = 400'000;
  const ContextChoice l = choice_ok(lim);
  EXPECT_EQ(l.n_ctx, 768);
  EXPECT_NE(l.note.find("RAM budget 195.3 KiB (half the address space the ulimit leaves); -c"),
            std::string::npos)
      << l.note;
  // The weights come off the available memory first.
  ContextRequest w = default_request(400'000 + 123'456);
  w.weights_bytes = 123'456;
  EXPECT_EQ(choice_ok(w).n_ctx, 768);
  // A cache made of the choice holds exactly that context, as a context, not as a budget limit.
  TierConfig tc = tier_config(c.kv, WindowHome::Ram, c.n_ctx);
  tc.n_layer = 2;
  tc.n_kv_heads = 2;
  tc.head_dim = tc.head_dim_v = 16;
  const TierLayout t = layout_ok(tc);
  EXPECT_EQ(t.max_tokens, 768);
  EXPECT_EQ(t.n_ctx, 768);
  EXPECT_EQ(t.host_slots, 31);
}

// A budget below the window: the context is the blocks the budget holds, all in the window;
// a budget without room for one block is an error naming the numbers.
TEST(TierPolicyDefaultContext, ABudgetBelowTheWindowShrinksTheContextToIt) {
  // 2 x 30000 available: a budget of 30000 B = 7 blocks of 4096 (the window needs 17).
  const ContextChoice c = choice_ok(default_request(60'000));
  EXPECT_TRUE(c.chosen);
  EXPECT_EQ(c.n_ctx, 7 * 16);
  EXPECT_EQ(c.kv.host_budget, 0);
  EXPECT_NE(c.note.find("context 112 of 4,096 trained"), std::string::npos) << c.note;
  auto none = choose_context(default_request(1024));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            "no room for the KV cache: a block of 16 tokens needs 4.0 KiB, the RAM budget is "
            "512 B (half the available memory less the weights); free memory, or give -c and "
            "--host-budget (or --mem-available) to plan with");
}

// Sliding-window layers hold only their window: with layer 1 sliding (span 32), the global
// layer's blocks are 2048 B and the sliding window at its fullest (span + a 512 ubatch: 35
// blocks of 2048 B = 71680 B) comes off the budget first: 200000 - 71680 = 128320 B hold the
// window's 17 blocks and 45 host blocks, (17 + 45) x 16 = 992 tokens.
TEST(TierPolicyDefaultContext, SlidingLayersCountOnlyTheirWindow) {
  ContextRequest r = default_request(400'000);
  r.layer_span = {0, 32};
  const ContextChoice c = choice_ok(r);
  EXPECT_TRUE(c.chosen);
  EXPECT_EQ(c.trained_kv_bytes, 256 * 2048 + 35 * 2048);
  EXPECT_EQ(c.n_ctx, 992);
  // Every layer sliding: the trained context, whatever the budget.
  r.layer_span = {32, 32};
  const ContextChoice all = choice_ok(r);
  EXPECT_FALSE(all.chosen);
  EXPECT_EQ(all.n_ctx, 4096);
  EXPECT_EQ(all.trained_kv_bytes, 35 * 4096);
}

// A file that claims more context than a cache can hold (llama.context_length 4294967295):
// -c chooses the context as usual, and without it the budget does, within kMaxContextTokens
// (it was "context of 4294967295 tokens is too large" whatever -c said).
TEST(TierPolicyDefaultContext, ATrainedContextBeyondWhatACacheHoldsStillRuns) {
  ContextRequest r = default_request(400'000);
  r.n_ctx_train = 4294967295;
  r.n_ctx = 512;
  const ContextChoice given = choice_ok(r);
  EXPECT_EQ(given.n_ctx, 512);
  EXPECT_FALSE(given.chosen);
  r.n_ctx = 0;
  const ContextChoice chosen = choice_ok(r);
  EXPECT_TRUE(chosen.chosen);
  EXPECT_GT(chosen.n_ctx, 0);
  EXPECT_LE(chosen.n_ctx, kMaxContextTokens);
  EXPECT_NE(chosen.note.find(" of 4,294,967,295 trained"), std::string::npos) << chosen.note;
}

TEST(TierPolicyDefaultContext, ADiskBudgetHoldsTheBlocksPastTheRam) {
  ContextRequest r = default_request(400'000);
  r.kv.disk_budget = 10 * kBlock16Bytes;
  r.kv.spill_dir = "/tmp";
  const ContextChoice c = choice_ok(r);
  EXPECT_EQ(c.n_ctx, (17 + 31 + 10) * 16);
  EXPECT_EQ(c.kv.disk_budget, 10 * kBlock16Bytes);
  EXPECT_NE(c.note.find("RAM budget 195.3 KiB (half the available memory less the weights) + "
                        "disk budget 40.0 KiB; -c or Settings"),
            std::string::npos)
      << c.note;
  // Enough disk for all of it: the trained context, the host budget set so the rest spills.
  r.kv.disk_budget = 300 * kBlock16Bytes;
  const ContextChoice all = choice_ok(r);
  EXPECT_EQ(all.n_ctx, 4096);
  EXPECT_EQ(all.note, "");
  EXPECT_EQ(all.kv.host_budget, 200'000 - 17 * kBlock16Bytes);
}

TEST(TierPolicyDefaultContext, AnExplicitContextOrHostBudgetIsKeptAsGiven) {
  ContextRequest r = default_request(400'000);
  r.n_ctx = 3000;
  ContextChoice c = choice_ok(r);
  EXPECT_EQ(c.n_ctx, 3000);
  EXPECT_FALSE(c.chosen);
  EXPECT_EQ(c.kv.host_budget, -1);
  EXPECT_EQ(c.note, "");
  r.n_ctx = 0;
  r.kv.host_budget = 8 * kBlock16Bytes;
  c = choice_ok(r);
  EXPECT_EQ(c.n_ctx, 4096);  // the budget limits it as it always did ("context full")
  EXPECT_EQ(c.kv.host_budget, 8 * kBlock16Bytes);
  EXPECT_FALSE(c.chosen);
  // A machine that says nothing: the trained context.
  r = default_request(0);
  r.machine = MachineMemory{};
  EXPECT_EQ(choice_ok(r).n_ctx, 4096);
}

TEST(TierPolicyDefaultContext, GroupedThousandsAndMemAvailable) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1000), "1,000");
  EXPECT_EQ(group_thousands(131072), "131,072");
  EXPECT_EQ(group_thousands(2147483648), "2,147,483,648");
  EXPECT_EQ(parse_mem_available("MemTotal:       24000000 kB\nMemFree:  100 kB\n"
                                "MemAvailable:   2048 kB\nBuffers: 1 kB\n"),
            2048 * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 5 kB\n"), 0);
  EXPECT_EQ(parse_mem_available("XMemAvailable: 5 kB\n"), 0);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n"), 0);
  EXPECT_GT(read_machine_memory().physical_bytes, 0);
}

}  // namespace
}  // namespace spw::kv
