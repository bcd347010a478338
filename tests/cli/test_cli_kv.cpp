// spillway-cli and the tiered, paged KV cache: the flags of generate (and bench), --stats,
// --stats-json, snapshots, budget errors, the spill folder.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/huge_pages.h"
#include "tests/support/cli_runner.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-kv-test"); }

CliResult run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

fs::path stories() { return fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf"; }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// "stats: disk      3 blocks ..." -> 3; -1 when the line is missing.
int64_t stat_blocks(const std::string& err, const std::string& tier) {
  const std::regex re("stats: " + tier + " +([0-9]+) blocks");
  std::smatch m;
  if (!std::regex_search(err, m, re)) return -1;
  return std::stoll(m[1].str());
}

std::vector<nlohmann::json> read_json_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    try {
      lines.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "not one JSON object per line: " << e.what() << "\n" << line;
    }
  }
  return lines;
}

const std::vector<std::string> kGen = {"generate", "-p", "Once upon a time", "-n", "64",
                                       "--temp",   "0"};
const std::vector<std::string> kSpill = {"--kv-block",    "16", "--kv-window",   "16",
                                         "--host-budget", "8K", "--disk-budget", "1M"};

TEST(CliKv, DoneMeansSpilledStoryEqualsThePlainOne) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const std::vector<std::string> base = with(kGen, {"-m", stories().string()});
  const CliResult plain = run(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const CliResult spilled =
      run(with(with(base, kSpill), {"--stats", "--spill-dir", tmp_dir().string()}));
  ASSERT_EQ(spilled.exit_code, 0) << spilled.err;
  EXPECT_EQ(spilled.out, plain.out);
  EXPECT_NE(spilled.out.find("Lily"), std::string::npos) << spilled.out;
  EXPECT_GT(stat_blocks(spilled.err, "disk"), 0) << spilled.err;
  EXPECT_GE(stat_blocks(spilled.err, "window"), 1) << spilled.err;
  EXPECT_NE(spilled.err.find("cold->window 0 B"), std::string::npos) << spilled.err;
  EXPECT_NE(spilled.err.find("attention exact"), std::string::npos) << spilled.err;
  // The spill file is gone with the process.
  for (const auto& e : fs::directory_iterator(tmp_dir()))
    EXPECT_EQ(e.path().filename().string().rfind("spillway-spill-", 0), std::string::npos)
        << e.path();
}

TEST(CliKv, StatsJsonHasOneObjectPerStepWithTheKeys) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const fs::path out = tmp_dir() / "stats.jsonl";
  const CliResult r = run(with(with(with(kGen, {"-m", stories().string()}), kSpill),
                               {"--spill-dir", tmp_dir().string(), "--stats-json", out.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_json_lines(out);
  ASSERT_EQ(lines.size(), 64u) << "the prompt, then 63 decode steps (no pass for the last token)";
  for (const auto& j : lines) {
    for (const char* key :
         {"window_blocks", "host_blocks", "disk_blocks", "window_bytes", "host_bytes", "disk_bytes",
          "cold_to_window_bytes", "prefill_tokens_computed"}) {
      ASSERT_TRUE(j.contains(key)) << key << " in " << j.dump();
      EXPECT_TRUE(j[key].is_number_integer()) << key << " in " << j.dump();
    }
    for (const char* key : {"decode_tokens_per_s", "rss_bytes"}) {
      ASSERT_TRUE(j.contains(key)) << key << " in " << j.dump();
      EXPECT_TRUE(j[key].is_number()) << key << " in " << j.dump();
    }
    EXPECT_EQ(j["cold_to_window_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(j["prefill_tokens_computed"].get<int64_t>(), 5);
    EXPECT_GT(j["rss_bytes"].get<double>(), 0);
  }
  EXPECT_EQ(lines.front()["phase"], "prefill");
  EXPECT_EQ(lines.back()["phase"], "decode");
  EXPECT_GT(lines.back()["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(lines.back()["disk_blocks"].get<int64_t>() + lines.back()["host_blocks"].get<int64_t>(),
            0);
}

TEST(CliKv, BadSizesAndSettingsAreRefused) {
  TestModelSpec spec;
  const fs::path model = tmp_dir() / "tiny.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const std::vector<std::string> base = {"generate", "-m", model.string(), "-p", "x", "-n", "2"};
  struct Case {
    std::vector<std::string> args;
    std::string expect;
    int exit_code = 1;  // 2: a value out of range, refused while parsing
  };
  for (const Case& c : std::vector<Case>{
           {{"--host-budget", "12Q"}, "--host-budget: invalid size '12Q'", 2},
           {{"--disk-budget=-1M"}, "--disk-budget", 2},
           {{"--host-budget", "lots"}, "lots", 2},
           {{"--kv-block", "0"}, "--kv-block 0", 2},
           {{"--kv-window", "0"}, "--kv-window 0", 2},
           {{"--kv-sinks", "-1"}, "--kv-sinks -1", 2},
           {{"--ubatch", "0"}, "--ubatch must be 1..2147483648, got 0", 2},
           {{"--attention", "fuzzy"}, "exact, streaming, topk:K", 2},
           {{"--attention", "topk:0"}, "topk:0", 2},
           {{"--kv-window", "64", "--reference"}, "--reference"},
           {{"--stats", "--device", "cuda"}, "--device cuda"},
           {{"--attention", "streaming", "--device", "cuda"}, "runs on the CPU only"},
           {{"--spill-dir", ""}, "empty folder name", 2},
           {{"--stats-json", (tmp_dir() / "same.kv").string(), "--save-kv",
             (tmp_dir() / "same.kv").string()},
            "is also the --save-kv file"},
           {{"--save-kv", model.string() + "/x.kv"}, "is not a folder"},
           {{"--huge-pages", "maybe"}, "--huge-pages 'maybe': give on or off", 2},
           {{"--numa-node", "x"},
            "--numa-node 'x': give auto, off or a node number (0, 1, ...)",
            2},
           {{"--numa-node", "1000"}, "--numa-node 1000: this machine has "},
       }) {
    const CliResult r = run(with(base, c.args));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args[0];
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// The host arena's pages in --stats and --stats-json: bytes mapped and backed by huge pages,
// none with --huge-pages off, some with it on where THP is madvise or always; the same text.
TEST(CliKv, StatsReportTheHostArenasHugePages) {
  TestModelSpec spec;
  spec.n_ctx = 1024;
  const fs::path model = tmp_dir() / "tiny-hp.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const std::string prompt(300, 'a');  // byte tokens: about 300 positions, 19 blocks of 16
  std::string text[2];
  for (const bool on : {true, false}) {
    const fs::path out = tmp_dir() / (on ? "hp-on.jsonl" : "hp-off.jsonl");
    const CliResult r = run({"generate", "-m", model.string(), "-p", prompt, "-n", "4", "--temp",
                             "0", "--kv-block", "16", "--kv-window", "16", "--huge-pages",
                             on ? "on" : "off", "--stats", "--stats-json", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    text[on ? 0 : 1] = r.out;
    const auto lines = read_json_lines(out);
    ASSERT_FALSE(lines.empty());
    const nlohmann::json& last = lines.back();
    ASSERT_TRUE(last["host_mapped_bytes"].is_number_integer()) << last.dump();
    ASSERT_TRUE(last["host_huge_page_bytes"].is_number_integer()) << last.dump();
    EXPECT_GT(last["host_blocks"].get<int64_t>(), 10) << last.dump();
    EXPECT_GE(last["host_mapped_bytes"].get<int64_t>(), last["host_bytes"].get<int64_t>());
    const std::regex line(
        "stats: host arena [0-9.]+ [KMG]?i?B mapped, [0-9.]+ [KMG]?i?B in 2 MiB "
        "huge pages \\(--huge-pages " +
        std::string(on ? "on" : "off") + ", THP [a-z]+\\)");
    EXPECT_TRUE(std::regex_search(r.err, line)) << r.err;
    if (!on) {
      EXPECT_EQ(last["host_huge_page_bytes"].get<int64_t>(), 0) << last.dump();
    } else if (thp_usable(read_thp_mode())) {
      EXPECT_GT(last["host_huge_page_bytes"].get<int64_t>(), 0) << last.dump();
    }
  }
  EXPECT_EQ(text[0], text[1]) << "huge pages changed the generated text";
}

TEST(CliKv, SmallBudgetsGiveContextFull) {
  TestModelSpec spec;
  spec.n_ctx = 1024;
  const fs::path model = tmp_dir() / "ctx.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const std::vector<std::string> small = {"--kv-block",    "16", "--kv-window",   "16",
                                          "--kv-sinks",    "0",  "--host-budget", "0",
                                          "--disk-budget", "0"};
  // The prompt does not fit: exit 1, nothing on stdout.
  CliResult r = run(with({"generate", "-m", model.string(), "-p",
                          "the cat sat on the mat and then the dog sat on the cat"},
                         small));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("context full: 16 tokens fit in the budgets you set ("), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Generation fills the 16 tokens: stops with the message, exit 0 with what it generated.
  r = run(with({"generate", "-m", model.string(), "-p", "a", "-n", "64", "--temp", "0", "--json"},
               small));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("[stopped: context full: 16 tokens fit in the budgets you set ("),
            std::string::npos)
      << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"].size() + j["generated_tokens"].size(), 17u)
      << "16 positions computed, the last sampled token needs no pass";
}

TEST(CliKv, SnapshotRoundTripSkipsThePrefill) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const fs::path snap = tmp_dir() / "story.kv", stats = tmp_dir() / "restored.jsonl";
  const std::vector<std::string> base = with(with(kGen, {"-m", stories().string()}), kSpill);
  const std::vector<std::string> dir = {"--spill-dir", tmp_dir().string()};
  const CliResult saved = run(with(with(base, dir), {"--save-kv", snap.string()}));
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  ASSERT_TRUE(fs::exists(snap));
  const CliResult loaded =
      run(with(with(base, dir), {"--load-kv", snap.string(), "--stats-json", stats.string()}));
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(loaded.out, saved.out) << "restoring then decoding gives the same story";
  // Both say what they did (a silent success looked like nothing happened).
  EXPECT_NE(saved.err.find("note: --save-kv " + snap.string() + ": "), std::string::npos)
      << saved.err;
  EXPECT_NE(loaded.err.find("note: --load-kv " + snap.string() + ": restored "), std::string::npos)
      << loaded.err;
  const auto lines = read_json_lines(stats);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front()["prefill_tokens_computed"].get<int64_t>(), 0);
  // A longer prompt reuses the snapshot and computes only the rest.
  const fs::path stats2 = tmp_dir() / "longer.jsonl";
  const CliResult longer = run(
      with(with({"generate", "-m", stories().string(), "-p", "Once upon a time there", "-n", "4",
                 "--temp", "0", "--load-kv", snap.string(), "--stats-json", stats2.string()},
                kSpill),
           dir));
  ASSERT_EQ(longer.exit_code, 0) << longer.err;
  const auto l2 = read_json_lines(stats2);
  ASSERT_FALSE(l2.empty());
  EXPECT_GT(l2.front()["prefill_tokens_computed"].get<int64_t>(), 0);
  EXPECT_LT(l2.front()["prefill_tokens_computed"].get<int64_t>(), 6);
  // A damaged snapshot is refused.
  const fs::path bad = tmp_dir() / "bad.kv";
  std::ofstream(bad) << "not a snapshot";
  const CliResult r = run(with(base, {"--load-kv", bad.string()}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: " + bad.string() +
                       " is not a Spillway KV snapshot (magic: a snapshot starts with bytes 53 "
                       "50 57 4b 56 00 00 01, this file with 6e 6f 74 20 61 20 73 6e)\n"),
            std::string::npos)
      << r.err;
  // A file shorter than the magic is not called a truncated snapshot either.
  std::ofstream(bad, std::ios::trunc) << "hi\n";
  const CliResult short_file = run(with(base, {"--load-kv", bad.string()}));
  EXPECT_EQ(short_file.exit_code, 1);
  EXPECT_NE(short_file.err.find(" is not a Spillway KV snapshot (magic: a snapshot starts with "
                                "bytes 53 50 57 4b 56 00 00 01, this file with 68 69 0a)\n"),
            std::string::npos)
      << short_file.err;
}

TEST(CliKv, ApproximateModesAreLabelled) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  for (const char* mode : {"streaming", "topk:2"}) {
    const CliResult r =
        run(with(with(kGen, {"-m", stories().string()}),
                 {"--kv-block", "16", "--kv-window", "16", "--attention", mode, "--stats"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(std::string("attention ") + mode + " (approximate)"), std::string::npos)
        << r.err;
  }
}

TEST(CliKv, StaleSpillFilesAreRemovedAtStart) {
  TestModelSpec spec;
  const fs::path model = tmp_dir() / "stale.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const fs::path data = tmp_dir() / "data";
  fs::create_directories(data / "cache");
  // A pid no process can have (above any pid_max).
  const fs::path stale = data / "cache" / "spillway-spill-999999999-0.kv";
  std::ofstream(stale) << "left by a crash";
  const CliResult r =
      run({"generate", "-m", model.string(), "-p", "x", "-n", "2", "--data-dir", data.string(),
           "--disk-budget", "64K", "--kv-window", "16", "--kv-block", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
}

TEST(CliKv, BenchTakesTheKvFlags) {
  TestModelSpec spec;
  const fs::path model = tmp_dir() / "bench.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const CliResult r = run({"bench",
                           "-m",
                           model.string(),
                           "--json",
                           "-p",
                           "8",
                           "-n",
                           "80",
                           "-r",
                           "1",
                           "--device",
                           "cpu",
                           "--kv-block",
                           "16",
                           "--kv-window",
                           "16",
                           "--host-budget",
                           "4K",
                           "--disk-budget",
                           "1M",
                           "--spill-dir",
                           tmp_dir().string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_block"], 16);
  EXPECT_EQ(j["attention"], "exact");
  EXPECT_GT(j["disk_blocks"].get<int64_t>(), 0) << r.out;
  const CliResult bad = run({"bench", "-m", model.string(), "--host-budget", "1X"});
  EXPECT_EQ(bad.exit_code, 2);  // a size it cannot read: refused while parsing
  EXPECT_NE(bad.err.find("--host-budget"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace spw

namespace spw {
namespace {

// Found by a fresh-user run: a block or window longer than the context made the session and
// the cache disagree about the block layout (non-finite logits, then a crash), and a huge
// block size divided by zero.
TEST(CliKv, SettingsLongerThanTheContextAreCutToIt) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const std::vector<std::string> base = {
      "generate", "-m", stories().string(), "-p", "Once upon a time", "-n", "30",
      "-c",       "40", "--temp",           "0",  "--device",         "cpu"};
  const CliResult plain = run(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("Lily"), std::string::npos) << plain.out;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--kv-block", "60000"},
        std::vector<std::string>{"--kv-block", "16", "--kv-window", "1000", "--kv-sinks", "500"},
        std::vector<std::string>{"--kv-window", "9223372036854775807"}}) {
    const CliResult r = run(with(base, extra));
    ASSERT_EQ(r.exit_code, 0) << extra[0] << " " << extra[1] << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << extra[0] << " " << extra[1];
  }
  const CliResult huge = run(with(base, {"--kv-block", "4611686018427387904"}));
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("--kv-block 4611686018427387904 is too large"), std::string::npos)
      << huge.err;
  const CliResult plan = run({"plan", "-m", stories().string(), "-c", "99999999999999"});
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_NE(plan.err.find("error: -c must be 1..2147483648, got 99999999999999"), std::string::npos)
      << plan.err;
}

TEST(CliKv, SaveKvNeverReplacesANonRegularFile) {
  if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
  const fs::path fifo = tmp_dir() / "snapshot.fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CliResult r = run({"generate", "-m", stories().string(), "-p", "Once", "-n", "2", "--temp",
                           "0", "--save-kv", fifo.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::remove(fifo);
}

// --save-kv is written after the prefill: a path it cannot be written to is refused before the
// prefill starts (no progress event is written), with the path and the errno text.
TEST(CliKv, UnwritableSaveKvIsRefusedBeforeThePrefill) {
  const fs::path model = tmp_dir() / "save-kv-check.gguf";
  ASSERT_TRUE(write_test_model(TestModelSpec{}, model.string()).ok());
  const fs::path progress = tmp_dir() / "save-kv-check.progress.jsonl";
  const std::vector<std::string> base = {
      "generate",       "-m", model.string(), "-p", "the cat sat", "-n", "1", "--progress-json",
      progress.string()};
  struct Case {
    std::string path, expect;
  };
  std::vector<Case> cases = {
      {(tmp_dir() / "no-such-folder" / "x.kv").string(),
       "--save-kv " + (tmp_dir() / "no-such-folder" / "x.kv").string() + ": folder " +
           (tmp_dir() / "no-such-folder").string() + " does not exist"},
  };
  // sysfs takes no new files, not even from root.
  if (fs::is_directory("/sys"))
    cases.push_back(
        {"/sys/spillway-x.kv", "--save-kv /sys/spillway-x.kv: cannot write in the folder /sys: " +
                                   std::string(std::strerror(EACCES))});
  for (const Case& c : cases) {
    fs::remove(progress);
    const CliResult r = run(with(base, {"--save-kv", c.path}));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("error: " + c.expect + "\n"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(!fs::exists(progress) || fs::file_size(progress) == 0)
        << "the prefill ran before the refusal";
  }
  // A writable path still works, and leaves no probe file behind.
  const fs::path ok = tmp_dir() / "save-kv-check.kv";
  const CliResult r = run(with(base, {"--save-kv", ok.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(fs::file_size(ok), 0u);
  for (const auto& e : fs::directory_iterator(tmp_dir()))
    EXPECT_EQ(e.path().filename().string().find(".probe-"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace spw
