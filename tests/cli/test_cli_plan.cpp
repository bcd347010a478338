// spillway-cli plan as a user runs it: the JSON contract (one object, integer
// kv_bytes_per_token, the probes' fields), the tier split against the budgets, a context that
// does not fit (exit 2, with suggestions) and refused flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common/size.h"
#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-plan-test"); }

// Every run keeps its cache folder (where the disk probe writes) inside the test's folder.
CliResult run(std::vector<std::string> args) {
  args.insert(args.begin(), {"--data-dir", (tmp_dir() / "data").string()});
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

fs::path stories() { return fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf"; }

// stories260K's attention shape (5 layers, 4 KV heads of 8 dims), generated, so the byte
// arithmetic is tested even without the shared models.
const fs::path& stories_shaped() {
  static const fs::path p = [] {
    TestModelSpec spec;
    spec.n_layer = 5;
    spec.n_embd = 64;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.head_dim = 8;
    spec.n_ff = 96;
    spec.n_ctx = 2048;
    const fs::path path = tmp_dir() / "stories-shaped.gguf";
    EXPECT_TRUE(write_test_model(spec, path.string()).ok());
    return path;
  }();
  return p;
}

using test::parse_one_object;

void expect_probes(const nlohmann::json& j) {
  for (const char* key :
       {"probe_ram_gb_per_s", "probe_disk_gb_per_s", "probe_disk_write_gb_per_s"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    ASSERT_TRUE(j[key].is_number()) << key << " = " << j[key].dump();
    EXPECT_GT(j[key].get<double>(), 0) << key;
  }
  EXPECT_TRUE(j["predicted_decode_tokens_per_s"].is_number());
  EXPECT_TRUE(j["predicted_prefill_s"].is_number());
}

TEST(CliPlan, StoriesJsonIsOneObjectWith640BytesPerToken) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const CliResult r = run({"plan", "-m", stories().string(), "-c", "512", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  ASSERT_TRUE(j["kv_bytes_per_token"].is_number_integer()) << j["kv_bytes_per_token"].dump();
  EXPECT_EQ(j["kv_bytes_per_token"].get<int64_t>(), 640);
  EXPECT_EQ(j["n_ctx"], 512);
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["window_bytes"].get<int64_t>(), 2 * 256 * 640);  // two blocks of 256 tokens
  expect_probes(j);
}

TEST(CliPlan, NoBudgetsNoGpuFitsAndSaysSoInText) {
  const CliResult r = run({"plan", "-m", stories_shaped().string(), "-c", "1024"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("640 bytes per token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits        yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << r.out;
}

TEST(CliPlan, BudgetsSplitTheTiers) {
  // 2048 tokens in blocks of 16 (10 KiB each): a window of 1 sink + 16 recent blocks, 20 blocks
  // in 200K of host RAM (the window, 170K, is not counted in it), the rest on disk.
  const CliResult r =
      run({"plan", "-m", stories_shaped().string(), "-c", "2048", "--kv-block", "16", "--kv-window",
           "256", "--host-budget", "200K", "--disk-budget", "2M", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j["kv_bytes_per_token"], 640);
  EXPECT_EQ(j["block_bytes"], 16 * 640);
  EXPECT_EQ(j["fits"], true) << j["problems"].dump();
  EXPECT_EQ(j["window"]["blocks"], 17);
  EXPECT_EQ(j["window"]["where"], "ram");
  EXPECT_EQ(j["host"]["blocks"], 20);
  EXPECT_EQ(j["disk"]["blocks"], 128 - 17 - 20);
  EXPECT_EQ(j["window_bytes"].get<int64_t>() + j["host_bytes"].get<int64_t>() +
                j["disk_bytes"].get<int64_t>(),
            j["kv_bytes"].get<int64_t>());
  EXPECT_EQ(j["budgets"]["host_budget"], 200 * 1024);
  EXPECT_TRUE(j["budgets"]["vram"].is_null());
  expect_probes(j);
}

// "Does not fit" exits 2, with the whole plan on stdout.
TEST(CliPlan, TooSmallBudgetsExit2WithSuggestions) {
  const CliResult r =
      run({"plan", "-m", stories_shaped().string(), "-c", "2048", "--kv-block", "16", "--kv-window",
           "16", "--host-budget", "64K", "--vram", "8G", "--json"});
  ASSERT_EQ(r.exit_code, 3) << r.err;  // does not fit
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j["fits"], false);
  EXPECT_EQ(j["device"], "gpu");
  EXPECT_EQ(j["window"]["where"], "gpu");
  EXPECT_LT(j["max_tokens"].get<int64_t>(), 2048);
  EXPECT_FALSE(j["problems"].empty());
  std::vector<std::string> kinds;
  for (const auto& s : j["suggestions"]) kinds.push_back(s["kind"].get<std::string>());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "ctx"), kinds.end()) << j["suggestions"].dump();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "ram"), kinds.end()) << j["suggestions"].dump();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "disk"), kinds.end()) << j["suggestions"].dump();
}

TEST(CliPlan, BadFlagsAreRefused) {
  const std::string m = stories_shaped().string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
    int exit_code = 1;  // 2: a value out of range, refused while parsing
  };
  const Case cases[] = {
      {{"plan", "-m", m, "--host-budget", "12Q"}, "--host-budget: invalid size '12Q'", 2},
      {{"plan", "-m", m, "--disk-budget", "lots"}, "--disk-budget: invalid size 'lots'", 2},
      {{"plan", "-m", m, "--ram", "12Q"}, "--ram: invalid size '12Q'", 2},
      {{"plan", "-m", m, "--disk", "lots"}, "--disk: invalid size 'lots'", 2},
      {{"plan", "-m", m, "--vram=-4G"}, "--vram: invalid size '-4G'", 2},
      {{"plan", "-m", m, "--host-budget", "99999999999T"}, "--host-budget: invalid size", 2},
      {{"plan", "-m", m, "--ram", "1M", "--host-budget", "1M"}, "the same setting"},
      {{"plan", "-m", m, "--disk", "1M", "--disk-budget", "0"}, "the same setting"},
      {{"plan", "-m", m, "--host-budget", ""}, "--host-budget: invalid size ''", 2},
      {{"plan", "-m", m, "--ram", ""}, "--ram: invalid size ''", 2},
      {{"plan", "-m", m, "--kv-window", "none"}, "--kv-window 'none'", 2},
      {{"plan", "-m", m, "--cache-type-k", "q4_0"}, "unknown KV cache type 'q4_0'", 2},
      {{"plan", "-m", m, "--cache-type-v", "q8_0"}, "q8_0 KV cache needs head_dim_v % 32 == 0"},
      {{"plan", "-m", m, "--kv-block", "0"}, "--kv-block 0", 2},
      {{"plan", "-m", (tmp_dir() / "missing.gguf").string()}, "missing.gguf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args.back());
    const CliResult r = run(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

// A disk tier whose folder cannot take the spill file does not fit (generate refuses to start
// there): plan says so instead of "fits". /sys takes no new files, not even root's.
TEST(CliPlan, ADiskTierWithoutAUsableFolderDoesNotFit) {
  if (!fs::is_directory("/sys")) GTEST_SKIP() << "no /sys on this machine";
  const std::vector<std::string> kv = {
      "-c", "2048",          "--kv-block", "16",          "--kv-window", "16", "--host-budget",
      "0",  "--disk-budget", "1M",         "--spill-dir", "/sys"};
  std::vector<std::string> plan = {"plan", "-m", stories_shaped().string(), "--json"};
  plan.insert(plan.end(), kv.begin(), kv.end());
  const CliResult p = run(plan);
  ASSERT_EQ(p.exit_code, 3) << p.err;  // does not fit
  const nlohmann::json j = parse_one_object(p.out);
  EXPECT_EQ(j["fits"], false);
  ASSERT_FALSE(j["problems"].empty());
  EXPECT_NE(j["problems"].dump().find("has no spill folder"), std::string::npos) << j.dump();
  EXPECT_NE(p.err.find("choose another with --spill-dir"), std::string::npos) << p.err;
  std::vector<std::string> gen = {"generate", "-m", stories_shaped().string(), "-p", "a"};
  gen.insert(gen.end(), kv.begin(), kv.end());
  EXPECT_EQ(run(gen).exit_code, 1);
}

// Without --host-budget the whole cold part is planned into RAM: a context whose KV is more than
// this machine's memory (640 B x 2^31 tokens = 1.25 TiB) does not fit, with the problem naming
// both sizes and what would: the default context's budgets with a disk tier, or a shorter -c.
TEST(CliPlan, MoreKvThanPhysicalMemoryDoesNotFit) {
  const CliResult r = run({"plan", "-m", stories_shaped().string(), "-c", "2147483648", "--json"});
  ASSERT_EQ(r.exit_code, 3) << r.err;  // does not fit
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j["fits"], false);
  EXPECT_TRUE(j["warnings"].empty()) << j.dump();
  ASSERT_EQ(j["problems"].size(), 1u) << j.dump();
  EXPECT_EQ(j["problems"][0].get<std::string>().rfind("KV in RAM 1.2 TiB is more than this "
                                                      "machine's ",
                                                      0),
            0u)
      << j["problems"].dump();
  std::vector<std::string> kinds;
  for (const auto& s : j["suggestions"]) kinds.push_back(s["kind"].get<std::string>());
  // A disk tier is offered only where the spill folder has room for it (~1.2 TiB).
  const bool disk_holds_it =
      fs::space(j["probe_disk_dir"].get<std::string>()).available > (int64_t{1} << 40) * 5 / 4;
  EXPECT_EQ(std::find(kinds.begin(), kinds.end(), "host-disk") != kinds.end(), disk_holds_it)
      << j.dump();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "ctx"), kinds.end()) << j.dump();
  const CliResult t = run({"plan", "-m", stories_shaped().string(), "-c", "2147483648"});
  EXPECT_EQ(t.exit_code, 3) << t.err;
  EXPECT_NE(t.out.find("fits        no: "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("  problem   KV in RAM 1.2 TiB"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("  try       -c "), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("fits        yes"), std::string::npos) << t.out;
  // With a host budget the plan keeps to it and fits.
  const CliResult b =
      run({"plan", "-m", stories_shaped().string(), "-c", "4096", "--host-budget", "1M", "--json"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(parse_one_object(b.out)["problems"].empty());
}

// --mem-available with -c: the verdict checks the weights and the KV in RAM against it, says
// what it planned for, and fits again when the memory given holds them.
TEST(CliPlan, TheVerdictUsesMemAvailableWhenGiven) {
  const std::vector<std::string> base = {"plan", "-m",   stories_shaped().string(),
                                         "-c",   "2048", "--no-calibrate"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--mem-available", "100K", "--json"});
  const CliResult r = run(args);
  ASSERT_EQ(r.exit_code, 3) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j["fits"], false);
  EXPECT_EQ(j["mem_available"], 100 * 1024);
  EXPECT_EQ(j["max_tokens"], 2048);  // the budgets hold every token: the memory does not
  // 2048 tokens x 640 bytes of KV = 1.25 MiB in RAM, and the weights.
  EXPECT_EQ(j["ram_kv_bytes"], 2048 * 640);
  const int64_t weights = j["weights_bytes"].get<int64_t>();
  ASSERT_GT(weights, 0);
  ASSERT_EQ(j["problems"].size(), 1u) << j.dump();
  const std::string problem = j["problems"][0];
  EXPECT_EQ(problem.rfind("weights ", 0), 0u) << problem;
  EXPECT_NE(problem.find(" + KV in RAM 1.2 MiB = "), std::string::npos) << problem;
  EXPECT_NE(problem.find(" are more than --mem-available 100.0 KiB"), std::string::npos) << problem;
  EXPECT_EQ(
      j["summary"].get<std::string>().rfind("A 2,048-token context does not fit: weights ", 0), 0u)
      << j["summary"];

  args = base;
  args.insert(args.end(), {"--mem-available", "100K"});
  const CliResult t = run(args);
  EXPECT_EQ(t.exit_code, 3) << t.err;
  EXPECT_NE(t.out.find("planned for --mem-available 100.0 KiB, "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("fits        no: the budgets hold all 2048 tokens, --mem-available does "
                       "not\n"),
            std::string::npos)
      << t.out;

  // Room for the weights but not for the KV: the plan says which -c fits that memory, and
  // that -c does fit it.
  args = base;
  args.insert(args.end(), {"--mem-available", "1800K", "--json"});
  const CliResult tight = run(args);
  ASSERT_EQ(tight.exit_code, 3) << tight.err;
  const nlohmann::json tj = parse_one_object(tight.out);
  std::string ctx_flag;
  for (const auto& s : tj["suggestions"])
    if (s["kind"] == "ctx") ctx_flag = s["flag"].get<std::string>();
  ASSERT_EQ(ctx_flag.rfind("-c ", 0), 0u) << tj["suggestions"].dump();
  const CliResult shorter = run({"plan", "-m", stories_shaped().string(), "-c", ctx_flag.substr(3),
                                 "--no-calibrate", "--mem-available", "1800K"});
  EXPECT_EQ(shorter.exit_code, 0) << ctx_flag << "\n" << shorter.out << shorter.err;

  args = base;
  args.insert(args.end(), {"--mem-available", "64M"});
  const CliResult fits = run(args);
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.out.rfind("A 2,048-token context fits --mem-available 64.0 MiB.", 0), 0u)
      << fits.out;
  EXPECT_NE(fits.out.find("fits        yes: all 2048 tokens\n"), std::string::npos) << fits.out;
}

// A mixture of experts reads only the chosen experts per token, but holds every expert in
// memory: --mem-available between the two is refused, with the resident bytes named.
TEST(CliPlan, AMixtureOfExpertsHoldsEveryExpertInMemory) {
  TestModelSpec moe;
  moe.arch = "qwen3moe";
  moe.n_expert = 8;
  moe.n_expert_used = 2;
  moe.n_ff_exp = 256;
  moe.n_ctx = 2048;
  const fs::path path = tmp_dir() / "plan-qwen3moe.gguf";
  ASSERT_TRUE(write_test_model(moe, path.string()).ok());
  const std::vector<std::string> base = {"plan",           "-m",    path.string(), "-c", "2048",
                                         "--no-calibrate", "--json"};
  const CliResult big = run([&] {
    auto a = base;
    a.insert(a.end(), {"--mem-available", "1G"});
    return a;
  }());
  ASSERT_EQ(big.exit_code, 0) << big.err;
  const nlohmann::json j = parse_one_object(big.out);
  const int64_t read = j["weights_bytes"].get<int64_t>();
  const int64_t held = j["resident_weights_bytes"].get<int64_t>();
  const int64_t kv = j["ram_kv_bytes"].get<int64_t>();
  // Every tensor is held (the file's tensor data): more than the per-token share by at least
  // 3 x 6 of the 8 experts' matrices in each layer.
  const int64_t unused = 3 * moe.n_embd * moe.n_ff_exp * 6 * moe.n_layer * 4;  // f32 weights
  EXPECT_GE(held - read, unused) << j.dump();  // and token_embd, the norms
  EXPECT_LT(held, static_cast<int64_t>(fs::file_size(path)));
  // Room for what one token reads and the KV, not for every expert: does not fit.
  const int64_t between = read + kv + unused / 2;
  auto mid = base;
  mid.insert(mid.end(), {"--mem-available", std::to_string(between)});
  const CliResult r = run(mid);
  ASSERT_EQ(r.exit_code, 3) << r.err << r.out;
  const nlohmann::json m = parse_one_object(r.out);
  EXPECT_EQ(m["fits"], false);
  ASSERT_EQ(m["problems"].size(), 1u) << m.dump();
  EXPECT_NE(m["problems"][0].get<std::string>().find("weights " + format_size(held) + " + KV"),
            std::string::npos)
      << m["problems"][0];
}

// plan and generate mean the same by the same flags: for budgets, blocks, windows and sinks
// that limit the context, plan's max_tokens is the N of generate's "context full: N tokens fit"
// (a prompt longer than any of them), to the token. The deprecated --ram says what --host-budget
// says.
TEST(CliPlan, PlanAndGenerateAgreeToTheTokenOnWhatFits) {
  const fs::path prompt = tmp_dir() / "long-prompt.txt";
  {
    std::ofstream out(prompt);
    for (int i = 0; i < 7000; ++i) out << "the cat sat on the mat ";
  }
  struct Case {
    std::vector<std::string> kv;  // the KV flags, given to both commands
    std::string ctx;
    int64_t expect;  // tokens that fit, worked out by hand (a 16-token block is 10 KiB)
  };
  const Case cases[] = {
      // 1 sink + 1 recent block; 8K holds no 10K block.
      {{"--kv-block", "16", "--kv-window", "16", "--host-budget", "8K"}, "1024", 2 * 16},
      // No sinks, 4 recent blocks, 2 host blocks.
      {{"--kv-block", "16", "--kv-window", "64", "--kv-sinks", "0", "--host-budget", "20K"},
       "1000",
       6 * 16},
      // 2 window blocks, 2 host, 5 disk.
      {{"--kv-block", "16", "--kv-window", "16", "--host-budget", "25K", "--disk-budget", "50K"},
       "1000",
       9 * 16},
      // Blocks of 256 (160 KiB), the auto window (4096 + 4 sinks: 17 blocks), 6 host blocks.
      {{"--kv-window", "auto", "--host-budget", "1M"}, "9000", 23 * 256},
      // Blocks of 32 (20 KiB): 1 sink + 4 recent, no host RAM, 5 disk blocks.
      {{"--kv-block", "32", "--kv-window", "100", "--host-budget", "0", "--disk-budget", "100K"},
       "1000",
       10 * 32},
      // 20 sinks (2 blocks) + 3 recent, 1 host, 3 disk; a context not a multiple of the block.
      {{"--kv-block", "16", "--kv-window", "40", "--kv-sinks", "20", "--host-budget", "15K",
        "--disk-budget", "30K"},
       "777",
       9 * 16},
      // The old spelling of plan (a note on stderr; generate says --host-budget).
      {{"--kv-block", "16", "--kv-window", "16", "--host-budget", "25K"}, "1000", 4 * 16},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(i);
    std::vector<std::string> plan = {"plan", "-m",  stories_shaped().string(),
                                     "-c",   c.ctx, "--json"};
    std::vector<std::string> kv = c.kv;
    if (i + 1 == std::size(cases))
      std::replace(kv.begin(), kv.end(), std::string("--host-budget"), std::string("--ram"));
    plan.insert(plan.end(), kv.begin(), kv.end());
    const CliResult p = run(plan);
    ASSERT_TRUE(p.exit_code == 0 || p.exit_code == 3) << p.err;
    EXPECT_EQ(p.exit_code, parse_one_object(p.out)["fits"].get<bool>() ? 0 : 3) << p.out;
    if (i + 1 == std::size(cases)) {
      EXPECT_NE(p.err.find("--ram is deprecated: use --host-budget"), std::string::npos) << p.err;
    }
    const nlohmann::json j = parse_one_object(p.out);
    EXPECT_EQ(j["max_tokens"].get<int64_t>(), c.expect) << p.out;

    std::vector<std::string> gen = {
        "generate", "-m", stories_shaped().string(), "-c", c.ctx, "-f", prompt.string(), "-n", "1"};
    gen.insert(gen.end(), c.kv.begin(), c.kv.end());
    const CliResult g = run(gen);
    EXPECT_EQ(g.exit_code, 1);
    const std::string want =
        "context full: " + std::to_string(c.expect) + " tokens fit in the budgets you set (";
    EXPECT_NE(g.err.find(want), std::string::npos) << g.err;
  }

  // No -c: the default context, the trained one cut to what fits the machine's default budget.
  // --mem-available makes the machine the same for both: 2 MiB, less the weights, halved; the
  // window of 17 blocks of 16 tokens (170 KiB) first, then 10 KiB host blocks in what is left.
  const CliResult info = run({"info", "-m", stories_shaped().string(), "--json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const int64_t weights = parse_one_object(info.out)["tensor_bytes"].get<int64_t>();
  const int64_t budget = (2 * 1024 * 1024 - weights) / 2;
  const int64_t expect = (17 + (budget - 17 * 10240) / 10240) * 16;
  ASSERT_GT(expect, 17 * 16);
  ASSERT_LT(expect, 2048);
  const std::vector<std::string> kv = {"--kv-block",      "16", "--kv-window", "256",
                                       "--mem-available", "2M"};
  std::vector<std::string> plan = {"plan", "-m", stories_shaped().string(), "--json"};
  plan.insert(plan.end(), kv.begin(), kv.end());
  const CliResult p = run(plan);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json j = parse_one_object(p.out);
  EXPECT_EQ(j["n_ctx"].get<int64_t>(), expect) << p.out;
  EXPECT_EQ(j["max_tokens"].get<int64_t>(), expect);
  EXPECT_EQ(j["n_ctx_train"], 2048);
  EXPECT_EQ(j["context_chosen"], true);
  EXPECT_EQ(j["fits"], true) << j["problems"].dump();
  EXPECT_EQ(j["ram_budget"].get<int64_t>(), budget);
  EXPECT_EQ(j["budgets"]["host_budget"].get<int64_t>(), budget - 17 * 10240);
  std::string grouped = std::to_string(expect);  // "1,024"
  for (int at = static_cast<int>(grouped.size()) - 3; at > 0; at -= 3) grouped.insert(at, ",");
  const std::string note = "note: context " + grouped + " of 2,048 trained: ";
  EXPECT_NE(p.err.find(note), std::string::npos) << p.err;

  std::vector<std::string> gen = {
      "generate", "-m", stories_shaped().string(), "-f", prompt.string(), "-n", "1"};
  gen.insert(gen.end(), kv.begin(), kv.end());
  const CliResult g = run(gen);
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find(note), std::string::npos) << g.err;
  EXPECT_NE(g.err.find("but the context holds " + std::to_string(expect) + " (use -c)"),
            std::string::npos)
      << g.err;
  // Enough memory for the trained context: no note, 2048 tokens, host unlimited.
  plan.back() = "64M";
  const CliResult all = run(plan);
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const nlohmann::json ja = parse_one_object(all.out);
  EXPECT_EQ(ja["n_ctx"], 2048);
  EXPECT_EQ(ja["context_chosen"], false);
  EXPECT_TRUE(ja["budgets"]["host_budget"].is_null());
  EXPECT_EQ(all.err.find("note: context"), std::string::npos) << all.err;
}

}  // namespace
}  // namespace spw
