// The memory planner (engine/kv/planner.h): KV bytes per token for each type, the split over
// window / host / disk against the budgets, what it suggests when the context does not fit, and
// the predictions' formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/common/size.h"
#include "engine/kv/planner.h"

namespace spw::kv {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024, kGiB = kMiB * 1024;

// Llama-3-8B's attention shape: 32 layers, 8 KV heads of 128.
PlanInput llama3_8b() {
  PlanInput in;
  in.n_layer = 32;
  in.n_kv_heads = 8;
  in.head_dim = 128;
  in.head_dim_v = 128;
  in.weights_bytes = int64_t{4700} * kMiB;
  in.n_ctx = 4096;
  return in;
}

// stories260K's: 5 layers, 4 KV heads of 8.
PlanInput stories() {
  PlanInput in;
  in.n_layer = 5;
  in.n_kv_heads = 4;
  in.head_dim = 8;
  in.head_dim_v = 8;
  in.weights_bytes = 1037312;
  in.n_ctx = 512;
  return in;
}

Plan plan_ok(const PlanInput& in) {
  auto p = make_plan(in);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return p.ok() ? *p : Plan{};
}

std::string plan_error(const PlanInput& in) {
  auto p = make_plan(in);
  EXPECT_FALSE(p.ok());
  return p.ok() ? "" : p.error().message;
}

const Suggestion* find(const Plan& p, const std::string& kind) {
  for (const Suggestion& s : p.suggestions) {
    if (s.kind == kind) return &s;
  }
  return nullptr;
}

// The value after the flag name: "--host-budget 9M" -> "9M".
std::string flag_value(const Suggestion& s) { return s.flag.substr(s.flag.find(' ') + 1); }

TEST(PlannerBytes, F16IsTwoBytesPerElement) {
  // 2 x n_layer x n_kv_heads x head_dim x 2 (docs/DESIGN.md §4.1: Llama-3-8B 128 KiB per token).
  EXPECT_EQ(plan_ok(llama3_8b()).kv_bytes_per_token, 2 * 32 * 8 * 128 * 2);
  EXPECT_EQ(plan_ok(llama3_8b()).kv_bytes_per_token, 128 * kKiB);
  EXPECT_EQ(plan_ok(stories()).kv_bytes_per_token, 640);
}

TEST(PlannerBytes, F32IsFourBytesPerElement) {
  PlanInput in = llama3_8b();
  in.type_k = in.type_v = GgmlType::F32;
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 2 * 32 * 8 * 128 * 4);
  in = stories();
  in.type_k = in.type_v = GgmlType::F32;
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 1280);
}

TEST(PlannerBytes, Q8_0Is34BytesPer32Elements) {
  PlanInput in = llama3_8b();
  in.type_k = in.type_v = GgmlType::Q8_0;
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 2 * 32 * 8 * 128 * 34 / 32);
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 69632);
}

TEST(PlannerBytes, KAndVCountSeparately) {
  PlanInput in = llama3_8b();
  in.type_k = GgmlType::Q8_0;
  in.type_v = GgmlType::F16;
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 32 * 8 * (128 * 34 / 32 + 128 * 2));
  // head_dim_v differs from head_dim: V rows use it.
  in = llama3_8b();
  in.head_dim_v = 64;
  EXPECT_EQ(plan_ok(in).kv_bytes_per_token, 32 * 8 * (128 + 64) * 2);
}

TEST(PlannerBytes, RowBytesPerType) {
  EXPECT_EQ(*kv_row_bytes(GgmlType::F32, 128, "head_dim"), 512);
  EXPECT_EQ(*kv_row_bytes(GgmlType::F16, 128, "head_dim"), 256);
  EXPECT_EQ(*kv_row_bytes(GgmlType::Q8_0, 128, "head_dim"), 136);
  EXPECT_FALSE(kv_row_bytes(GgmlType::Q4_0, 128, "head_dim").ok());
}

TEST(PlannerBytes, Q8_0NeedsHeadDimMultipleOf32) {
  PlanInput in = stories();
  in.type_k = GgmlType::Q8_0;
  EXPECT_NE(
      plan_error(in).find("q8_0 KV cache needs head_dim % 32 == 0 (this model has head_dim 8)"),
      std::string::npos);
  in = stories();
  in.type_v = GgmlType::Q8_0;
  EXPECT_NE(plan_error(in).find("head_dim_v % 32"), std::string::npos);
}

TEST(PlannerInput, BadValuesAreErrors) {
  PlanInput in = stories();
  in.n_ctx = 0;
  EXPECT_NE(plan_error(in).find("context"), std::string::npos);
  in = stories();
  in.kv.block_size = 0;
  EXPECT_NE(plan_error(in).find("--kv-block"), std::string::npos);
  in = stories();
  in.kv.window_tokens = 0;
  EXPECT_NE(plan_error(in).find("--kv-window"), std::string::npos);
  in = stories();
  in.kv.n_sinks = -1;
  EXPECT_NE(plan_error(in).find("--kv-sinks"), std::string::npos);
  in = stories();
  in.type_k = GgmlType::Q4_K;
  EXPECT_NE(plan_error(in).find("accepted: f32, f16, q8_0"), std::string::npos);
}

TEST(PlannerSplit, NoBudgetsEverythingFitsInRam) {
  PlanInput in = llama3_8b();
  in.n_ctx = 32768;
  const Plan p = plan_ok(in);
  EXPECT_TRUE(p.fits);
  EXPECT_FALSE(p.gpu);
  EXPECT_EQ(p.n_blocks, 128);
  EXPECT_EQ(p.block_bytes, 256 * 128 * kKiB);
  // Window: 1 sink block + 16 recent blocks (4096 tokens).
  EXPECT_EQ(p.window.blocks, 17);
  EXPECT_EQ(p.host.blocks, 128 - 17);
  EXPECT_EQ(p.disk.blocks, 0);
  EXPECT_EQ(p.window.tokens + p.host.tokens + p.disk.tokens, in.n_ctx);
  EXPECT_EQ(p.kv_bytes, int64_t{4} * kGiB);
  EXPECT_EQ(p.ram_kv_bytes, p.kv_bytes);
  EXPECT_EQ(p.max_tokens, in.n_ctx);
  EXPECT_TRUE(p.suggestions.empty());
}

// 32K of Llama-3-8B KV is 4 GiB: without a host budget it all goes to RAM, so on a 2 GiB machine
// the plan does not fit, with the problem and what would: the default context's budgets (RAM
// for the window and a host tier, the disk tier for the rest), the context those hold, q8_0 when
// it helps (here 2.1 GiB: it does not). A host budget that keeps the RAM part (window + host)
// under the machine's, or an unknown machine size, fits.
TEST(PlannerFit, MoreKvInRamThanTheMachineHasDoesNotFit) {
  PlanInput in = llama3_8b();
  in.n_ctx = 32768;
  in.physical_ram = int64_t{2} * kGiB;
  const Plan p = plan_ok(in);
  EXPECT_FALSE(p.fits);
  EXPECT_TRUE(p.warnings.empty());
  ASSERT_EQ(p.problems.size(), 1u);
  EXPECT_EQ(p.problems[0], "KV in RAM 4.0 GiB is more than this machine's 2.0 GiB of memory");
  EXPECT_EQ(p.max_tokens, 32768);  // the budgets hold it: the machine does not
  // No RAM budget given: half the machine, 1 GiB; the window takes 17 blocks of 32 MiB, 15 host
  // blocks fill the 480 MiB left, and the other 96 blocks go to disk.
  const Suggestion* hd = find(p, "host-disk");
  ASSERT_NE(hd, nullptr);
  EXPECT_EQ(hd->flag, "--host-budget 480M --disk-budget 3072M");
  EXPECT_EQ(hd->why,
            "480.0 MiB of RAM (the RAM budget 1.0 GiB less the window) and 3.0 GiB of disk hold "
            "the 32768 tokens");
  const Suggestion* ctx = find(p, "ctx");
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->flag, "-c 8192");  // (17 + 15) x 256
  EXPECT_EQ(find(p, "cache-type"), nullptr);
  // The default context's budget when known: 512 MiB is less than the window, so no host tier.
  in.ram_budget = 512 * kMiB;
  const Plan q = plan_ok(in);
  // Host and disk budgets cannot help (the window alone is over the budget): a shorter -c can.
  EXPECT_EQ(find(q, "host-disk"), nullptr);
  EXPECT_EQ(find(q, "ctx")->flag, "-c 4096");  // 16 blocks of 32 MiB in 512 MiB, as -c auto
  // q8_0 KV fits a 3 GiB machine: suggested.
  in.physical_ram = int64_t{3} * kGiB;
  const Plan r = plan_ok(in);
  EXPECT_FALSE(r.fits);
  EXPECT_NE(find(r, "cache-type"), nullptr);
  in.physical_ram = int64_t{8} * kGiB;
  EXPECT_TRUE(plan_ok(in).fits);
  in.physical_ram = 0;
  EXPECT_TRUE(plan_ok(in).fits);
  in.physical_ram = int64_t{2} * kGiB;
  in.kv.host_budget = int64_t{1} * kGiB;  // + the 544 MiB window: 1.5 GiB of RAM
  in.kv.disk_budget = int64_t{8} * kGiB;
  in.kv.spill_dir = "/tmp";
  const Plan b = plan_ok(in);
  EXPECT_TRUE(b.fits);
  EXPECT_TRUE(b.problems.empty());
}

TEST(PlannerSplit, ShortContextLivesInTheWindow) {
  PlanInput in = stories();
  in.n_ctx = 1000;  // not a multiple of the block
  const Plan p = plan_ok(in);
  EXPECT_EQ(p.n_blocks, 4);
  EXPECT_EQ(p.window.blocks, 4);
  EXPECT_EQ(p.window.tokens, 1000);
  EXPECT_EQ(p.window.bytes, 4 * 256 * 640);
  EXPECT_EQ(p.host.blocks + p.disk.blocks, 0);
}

TEST(PlannerSplit, BudgetsFillHostThenDisk) {
  PlanInput in = stories();
  in.n_ctx = 4000;  // 16 blocks, the last partial
  in.kv.block_size = 256;
  in.kv.window_tokens = 512;
  in.kv.n_sinks = 4;
  const int64_t block = 256 * 640;
  in.kv.host_budget = 5 * block + block / 2;  // 5 host blocks and a half (the window apart)
  in.kv.disk_budget = 8 * block;
  const Plan p = plan_ok(in);
  EXPECT_EQ(p.block_bytes, block);
  EXPECT_EQ(p.window.blocks, 3);  // 1 sink block + 2 recent
  EXPECT_EQ(p.host.blocks, 5);
  EXPECT_EQ(p.disk.blocks, 8);
  EXPECT_TRUE(p.fits) << (p.problems.empty() ? "" : p.problems[0]);
  EXPECT_EQ(p.window.tokens, 4000 - 13 * 256);
  EXPECT_EQ(p.window.tokens + p.host.tokens + p.disk.tokens, 4000);
  EXPECT_EQ(p.host.bytes, 5 * block);
  EXPECT_EQ(p.disk.bytes, 8 * block);
  EXPECT_EQ(p.ram_kv_bytes, 8 * block);  // the window (in RAM: no GPU) + the host tier
  EXPECT_EQ(p.ram_kv_bytes, p.window.bytes + p.host.bytes);
  EXPECT_LE(p.host.bytes, in.kv.host_budget);
  EXPECT_LE(p.disk.bytes, in.kv.disk_budget);
}

// The disk tier must fit where its spill file goes: a folder with too little room, or none the
// file can be made in, makes the plan not fit (generate would refuse to start).
TEST(PlannerSplit, ADiskTierNeedsRoomInItsFolder) {
  PlanInput in = stories();
  in.n_ctx = 4000;
  in.kv.window_tokens = 512;
  const int64_t block = 256 * 640;
  in.kv.host_budget = 2 * block;
  in.kv.disk_budget = 20 * block;
  const Plan free_enough = [&] {
    PlanInput i = in;
    i.spill_free_bytes = 11 * block;
    return plan_ok(i);
  }();
  ASSERT_EQ(free_enough.disk.blocks, 11);  // 16 blocks - 3 window - 2 host
  EXPECT_TRUE(free_enough.fits);
  PlanInput tight = in;
  tight.spill_free_bytes = 10 * block;
  const Plan t = plan_ok(tight);
  EXPECT_FALSE(t.fits);
  ASSERT_EQ(t.problems.size(), 1u);
  EXPECT_NE(t.problems[0].find("does not fit in the spill folder (1.6 MiB free)"),
            std::string::npos)
      << t.problems[0];
  PlanInput none = in;
  none.spill_problem = "the spill folder '/x' is not writable";
  const Plan n = plan_ok(none);
  EXPECT_FALSE(n.fits);
  ASSERT_EQ(n.problems.size(), 1u);
  EXPECT_EQ(n.problems[0],
            "the disk tier (1.7 MiB) has no spill folder: the spill folder '/x' is not writable");
  // Without a disk tier planned the folder does not matter.
  none.kv.host_budget = -1;
  EXPECT_TRUE(plan_ok(none).fits);
}

TEST(PlannerSplit, GpuHoldsWeightsAndWindow) {
  PlanInput in = llama3_8b();
  in.n_ctx = 32768;
  in.vram = 24 * kGiB;
  in.kv.window_tokens = 4096;
  in.kv.host_budget = 2 * kGiB;
  in.kv.disk_budget = 100 * kGiB;
  const Plan p = plan_ok(in);
  EXPECT_TRUE(p.gpu);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.vram_bytes, in.weights_bytes + p.window.bytes);
  // The host budget is all host tier, and the RAM KV is the host tier alone with the window on
  // the GPU.
  EXPECT_EQ(p.host.blocks, 2 * kGiB / p.block_bytes);
  EXPECT_EQ(p.ram_kv_bytes, p.host.bytes);
  EXPECT_EQ(p.disk.blocks, p.n_blocks - p.window.blocks - p.host.blocks);
}

// --kv-window auto on a GPU: the whole context when it fits beside the weights, else as many
// recent blocks as do (the rest spills to the host tier); an explicit window is kept.
TEST(PlannerSplit, GpuAutoWindowIsTheContextOrWhatFitsTheVram) {
  PlanInput in = llama3_8b();
  in.n_ctx = 32768;  // 128 blocks of 32 MiB: 4 GiB
  in.vram = 24 * kGiB;
  Plan p = plan_ok(in);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.window_tokens, 32768);
  EXPECT_EQ(p.window.blocks, 128);
  EXPECT_EQ(p.host.blocks + p.disk.blocks, 0);
  EXPECT_EQ(p.vram_bytes, in.weights_bytes + int64_t{4} * kGiB);
  EXPECT_EQ(p.ram_kv_bytes, 0);

  // 6 GiB less 4700 MiB of weights leave 1444 MiB: 45 blocks, the sink block and 44 recent.
  in.vram = 6 * kGiB;
  p = plan_ok(in);
  EXPECT_TRUE(p.fits) << (p.problems.empty() ? "" : p.problems[0]);
  EXPECT_EQ(p.window_tokens, 44 * 256);
  EXPECT_EQ(p.window.blocks, 45);
  EXPECT_EQ(p.host.blocks, 128 - 45);
  EXPECT_LE(p.vram_bytes, in.vram);

  in.kv.window_tokens = 4096;
  p = plan_ok(in);
  EXPECT_EQ(p.window_tokens, 4096);
  EXPECT_EQ(p.window.blocks, 17);
}

TEST(PlannerFit, TooLittleRoomSuggestsContextRamDiskAndQ8_0) {
  PlanInput in = llama3_8b();
  in.n_ctx = 65536;  // 8 GiB of f16 KV, 4.25 GiB of q8_0
  in.kv.host_budget = 5 * kGiB;
  const Plan p = plan_ok(in);
  ASSERT_FALSE(p.fits);
  EXPECT_LT(p.max_tokens, in.n_ctx);
  EXPECT_FALSE(p.problems.empty());
  // What the budgets hold: the window's 17 blocks, and 5 GiB of 32 MiB blocks = 160 host blocks.
  EXPECT_EQ(p.max_tokens, (17 + 160) * 256);

  const Suggestion* ctx = find(p, "ctx");
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->flag, "-c " + std::to_string(p.max_tokens));
  PlanInput shorter = in;
  shorter.n_ctx = p.max_tokens;
  EXPECT_TRUE(plan_ok(shorter).fits);

  const Suggestion* q8 = find(p, "cache-type");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->flag, "--cache-type-k q8_0 --cache-type-v q8_0");
  PlanInput smaller = in;
  smaller.type_k = smaller.type_v = GgmlType::Q8_0;
  EXPECT_TRUE(plan_ok(smaller).fits);

  const Suggestion* ram = find(p, "ram");
  ASSERT_NE(ram, nullptr);
  EXPECT_EQ(ram->flag.rfind("--host-budget ", 0), 0u) << ram->flag;
  auto ram_value = parse_size(flag_value(*ram));
  ASSERT_TRUE(ram_value.ok()) << ram->flag;
  EXPECT_GE(*ram_value, p.kv_bytes - p.window.bytes);  // every block out of the window
  PlanInput more_ram = in;
  more_ram.kv.host_budget = *ram_value;
  EXPECT_TRUE(plan_ok(more_ram).fits) << ram->flag;

  const Suggestion* disk = find(p, "disk");
  ASSERT_NE(disk, nullptr);
  EXPECT_EQ(disk->flag.rfind("--disk-budget ", 0), 0u) << disk->flag;
  auto disk_value = parse_size(flag_value(*disk));
  ASSERT_TRUE(disk_value.ok()) << disk->flag;
  PlanInput with_disk = in;
  with_disk.kv.disk_budget = *disk_value;
  const Plan d = plan_ok(with_disk);
  EXPECT_TRUE(d.fits) << disk->flag;
  EXPECT_GT(d.disk.blocks, 0);
}

TEST(PlannerFit, Q8_0IsNotSuggestedWhenItDoesNotHelp) {
  PlanInput in = stories();  // head_dim 8: q8_0 impossible
  in.n_ctx = 4096;
  in.kv.window_tokens = 256;
  in.kv.host_budget = 256 * 640;  // one host block
  const Plan p = plan_ok(in);
  ASSERT_FALSE(p.fits);
  EXPECT_EQ(find(p, "cache-type"), nullptr);
  EXPECT_NE(find(p, "ctx"), nullptr);
  EXPECT_NE(find(p, "ram"), nullptr);
}

TEST(PlannerFit, WindowLargerThanVramSuggestsASmallerWindow) {
  PlanInput in = llama3_8b();
  in.n_ctx = 131072;
  in.kv.window_tokens = 65536;  // 8 GiB of window
  in.vram = 8 * kGiB;           // 4.6 GiB weights leave ~3.4 GiB
  const Plan p = plan_ok(in);
  ASSERT_FALSE(p.fits);
  const Suggestion* w = find(p, "kv-window");
  ASSERT_NE(w, nullptr) << (p.suggestions.empty() ? "no suggestions" : p.suggestions[0].flag);
  PlanInput smaller = in;
  smaller.kv.window_tokens = std::stoll(flag_value(*w));
  const Plan s = plan_ok(smaller);
  EXPECT_TRUE(s.fits) << w->flag;
  EXPECT_LE(s.vram_bytes, in.vram);
}

TEST(PlannerFit, WeightsLargerThanVramSuggestTheCpu) {
  PlanInput in = llama3_8b();
  in.vram = 2 * kGiB;
  in.kv.window_tokens = 4096;
  const Plan p = plan_ok(in);
  ASSERT_FALSE(p.fits);
  EXPECT_NE(find(p, "cpu"), nullptr);
}

TEST(PlannerPredict, CpuDecodeIsBytesOverBandwidth) {
  PlanInput in = stories();
  in.n_ctx = 4096;
  in.kv.window_tokens = 256;          // window: 2 blocks
  in.kv.host_budget = 256 * 640 * 2;  // 2 host blocks
  in.kv.disk_budget = 1 * kGiB;
  in.ram_gb_per_s = 10;
  in.disk_read_gb_per_s = 1;
  in.disk_write_gb_per_s = 0.5;
  const Plan p = plan_ok(in);
  ASSERT_TRUE(p.fits);
  ASSERT_GT(p.disk.tokens, 0);
  const double kv = 640;
  const double want =
      (in.weights_bytes + kv * (p.window.tokens + p.host.tokens)) / 10e9 + kv * p.disk.tokens / 1e9;
  EXPECT_NEAR(p.decode_s_per_token, want, want * 1e-12);
  EXPECT_NEAR(p.decode_tokens_per_s, 1 / want, 1e-9 / want);
  EXPECT_GT(p.prefill_s, 0);

  // The disk's bandwidth unknown while blocks lie there: no prediction rather than a wrong one.
  in.disk_read_gb_per_s = 0;
  const Plan u = plan_ok(in);
  EXPECT_EQ(u.decode_tokens_per_s, 0);
  EXPECT_EQ(u.prefill_s, 0);
}

TEST(PlannerPredict, GpuDecodeOverlapsTheTwoSides) {
  PlanInput in = llama3_8b();
  in.n_ctx = 32768;
  in.vram = 24 * kGiB;
  in.kv.window_tokens = 4096;
  in.ram_gb_per_s = 20;
  in.gpu_gb_per_s = 1000;
  const Plan p = plan_ok(in);
  const double kv = static_cast<double>(p.kv_bytes_per_token);
  const double gpu = (in.weights_bytes + kv * p.window.tokens) / 1000e9;
  const double cpu = kv * p.host.tokens / 20e9;
  EXPECT_NEAR(p.decode_s_per_token, std::max(gpu, cpu), 1e-12);
}

}  // namespace
}  // namespace spw::kv

// Sliding-window layers keep only their span's blocks: a gemma3-shaped model (5 sliding layers
// of span 1024 to 1 global) at 128K needs the host KV of its one global layer, 1/6 of a dense
// model of the same shape, plus the sliding layers' bounded windows.
namespace spw::kv {
namespace {
TEST(PlannerSliding, AGemma3ShapeNeedsASixthOfTheHostKv) {
  PlanInput dense;
  dense.n_layer = 6;
  dense.n_kv_heads = 4;
  dense.head_dim = 256;
  dense.head_dim_v = 256;
  dense.weights_bytes = 1000;
  dense.n_ctx = 131072;
  PlanInput gemma = dense;
  gemma.layer_span = {1024, 1024, 1024, 1024, 1024, 0};
  const Plan d = plan_ok(dense);
  const Plan g = plan_ok(gemma);
  const int64_t layer_block = 4 * 256 * 2 * 2 * 256;  // heads * dim * (K + V) * f16 * block
  EXPECT_EQ(d.block_bytes, 6 * layer_block);
  EXPECT_EQ(g.block_bytes, layer_block);
  EXPECT_EQ(g.host.blocks, d.host.blocks);  // the same blocks, of one layer instead of six
  EXPECT_EQ(g.host.bytes * 6, d.host.bytes);
  EXPECT_EQ(g.sliding_layers, 5);
  // ceil((1023 + 512) / 256) + 1 = 7 blocks per sliding layer at their fullest (a ubatch).
  EXPECT_EQ(g.sliding_window_bytes, 5 * 7 * layer_block);
  EXPECT_EQ(g.window.bytes, g.window.blocks * layer_block + g.sliding_window_bytes);
  EXPECT_EQ(g.dense_kv_bytes, d.kv_bytes);
  EXPECT_EQ(g.kv_bytes, 512 * layer_block + 5 * 7 * layer_block);
  EXPECT_EQ(g.max_tokens, 131072);
  EXPECT_TRUE(g.fits);
  // A host budget counts the global layer's bytes only: a sixth of the dense budget fits.
  gemma.kv.host_budget = d.host.bytes / 6;
  EXPECT_EQ(plan_ok(gemma).max_tokens, 131072);
  dense.kv.host_budget = d.host.bytes / 6;
  EXPECT_LT(plan_ok(dense).max_tokens, 131072 / 5);
}

TEST(PlannerSliding, EveryLayerSlidingHasNoColdTiers) {
  PlanInput in;
  in.n_layer = 4;
  in.n_kv_heads = 2;
  in.head_dim = 64;
  in.head_dim_v = 64;
  in.n_ctx = 32768;
  in.layer_span.assign(4, 2048);
  in.kv.host_budget = 0;
  const Plan p = plan_ok(in);
  EXPECT_EQ(p.host.bytes + p.disk.bytes, 0);
  EXPECT_EQ(p.max_tokens, 32768);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.sliding_layers, 4);
  EXPECT_EQ(p.kv_bytes, p.sliding_window_bytes);
  in.layer_span.assign(3, 2048);
  EXPECT_NE(plan_error(in).find("layer span for 3 layers"), std::string::npos);
}
}  // namespace
}  // namespace spw::kv
