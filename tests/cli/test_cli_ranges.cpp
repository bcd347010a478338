// Numeric and size options out of range, on every command that takes them: refused while the
// command line is parsed, exit 2, with the option, the value given and the allowed range, and
// nothing on stdout, queued or written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/cli_runner.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-ranges-test"); }

CliResult run(std::vector<std::string> args) {
  args.insert(args.begin(), {"--data-dir", (tmp_dir() / "data").string()});
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

// The default generated model: a context of 256 tokens.
const std::string& model() {
  static const std::string p = [] {
    const fs::path path = tmp_dir() / "tiny.gguf";
    EXPECT_TRUE(write_test_model(TestModelSpec{}, path.string()).ok());
    return path.string();
  }();
  return p;
}

struct Case {
  std::vector<std::string> args;
  std::string message;  // the whole error line, without "error: "
};

void expect_refused(const std::vector<std::string>& command, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    std::vector<std::string> args = command;
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string line;
    for (const std::string& a : args) line += a + " ";
    SCOPED_TRACE(line);
    const CliResult r = run(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("error: " + c.message + "\n"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// The options generate and ask share (-t, -c, -n, sampling, --ubatch, sizes).
const std::vector<Case>& shared_cases() {
  static const std::vector<Case> cases = {
      {{"-t", "0"}, "-t must be 1..1024, got 0"},
      {{"-t", "-3"}, "-t must be 1..1024, got -3"},
      {{"--threads", "5000"}, "-t must be 1..1024, got 5000"},
      {{"-t", "two"}, "-t must be a whole number 1..1024, got 'two'"},
      {{"-c", "0"}, "-c must be 1..2147483648, got 0"},
      {{"-c", "-5"}, "-c must be 1..2147483648, got -5"},
      {{"-n", "0"}, "-n must be -1 (until the end of text) or 1..2147483647, got 0"},
      {{"-n", "-2"}, "-n must be -1 (until the end of text) or 1..2147483647, got -2"},
      {{"--ubatch", "0"}, "--ubatch must be 1..2147483648, got 0"},
      {{"--temp", "-1"}, "--temp must be at least 0, got -1"},
      {{"--temp", "abc"}, "--temp must be a number at least 0, got 'abc'"},
      {{"--top-p", "1.5"}, "--top-p must be in (0, 1], got 1.5"},
      {{"--top-p", "0"}, "--top-p must be in (0, 1], got 0"},
      {{"--top-k", "-1"}, "--top-k must be 0..2147483647, got -1"},
      {{"--min-p", "2"}, "--min-p must be in [0, 1], got 2"},
      {{"--repeat-penalty", "0"}, "--repeat-penalty must be more than 0, got 0"},
      {{"--host-budget", "8Q"},
       "--host-budget: invalid size '8Q' (use a number with K, M, G or T, e.g. 512M or 8GiB; all "
       "powers of 1024)"},
      {{"--mem-available", "0"}, "--mem-available must be at least 1 byte, got '0'"},
      {{"-s", "-2"}, "-s must be -1 (a random seed) or 0..4294967295, got -2"},
      {{"--seed", "4294967296"}, "-s must be -1 (a random seed) or 0..4294967295, got 4294967296"},
  };
  return cases;
}

TEST(CliRanges, GenerateRefusesValuesOutOfRange) {
  expect_refused({"generate", "-m", model(), "-p", "the cat"}, shared_cases());
}

TEST(CliRanges, AskRefusesValuesOutOfRange) {
  std::vector<Case> cases = shared_cases();
  cases.push_back(
      {{"--snapshot-budget", "0"}, "--snapshot-budget must be at least 1 byte, got '0'"});
  expect_refused({"ask", "-m", model(), "-q", "who?", "--doc", "1"}, cases);
  EXPECT_FALSE(fs::exists(tmp_dir() / "data" / "library.sqlite3"))
      << "a refused command line opens no library";
}

TEST(CliRanges, BenchRefusesValuesOutOfRange) {
  expect_refused({"bench", "-m", model()},
                 {
                     {{"-t", "0"}, "-t must be 1..1024, got 0"},
                     {{"-p", "0"}, "-p must be 1..2147483647, got 0"},
                     {{"-n", "-4"}, "-n must be 1..2147483647, got -4"},
                     {{"-r", "0"}, "-r must be 1..2147483647, got 0"},
                     {{"-d", "-1"}, "-d must be 0..2147483647, got -1"},
                     {{"--ubatch", "0"}, "--ubatch must be 1..2147483648, got 0"},
                 });
}

TEST(CliRanges, PlanRefusesValuesOutOfRange) {
  expect_refused({"plan", "-m", model(), "--no-calibrate"},
                 {
                     {{"-c", "0"}, "-c must be 1..2147483648, got 0"},
                     {{"-t", "-3"}, "-t must be 1..1024, got -3"},
                     {{"--vram", "lots"},
                      "--vram: invalid size 'lots' (use a number with K, M, G or T, e.g. 512M or "
                      "8GiB; all powers of 1024)"},
                 });
}

TEST(CliRanges, ServeRefusesValuesOutOfRange) {
  expect_refused({"serve", "-m", model()},
                 {
                     {{"--port", "70000"}, "--port must be 0..65535, got 70000"},
                     {{"--port", "-1"}, "--port must be 0..65535, got -1"},
                     {{"--max-body", "0"}, "--max-body must be at least 1 byte, got '0'"},
                     {{"--max-queue", "0"}, "--max-queue must be 1..2147483647, got 0"},
                     {{"--max-connections", "0"}, "--max-connections must be 1..2147483647, got 0"},
                     {{"--header-timeout", "0"}, "--header-timeout must be in (0, 3600], got 0"},
                     {{"-t", "0"}, "-t must be 1..1024, got 0"},
                     {{"-c", "-1"}, "-c must be 1..2147483648, got -1"},
                 });
}

TEST(CliRanges, JobsAddRefusesValuesOutOfRangeAndQueuesNothing) {
  expect_refused({"jobs", "add", "-m", model(), "--doc", "1"},
                 {
                     {{"-t", "0"}, "-t must be 1..1024, got 0"},
                     {{"-c", "-4"}, "-c must be 1..2147483648, got -4"},
                     {{"-n", "0"}, "-n must be 1..2147483647, got 0"},
                     {{"--temp", "-0.5"}, "--temp must be at least 0, got -0.5"},
                     {{"--ubatch", "0"}, "--ubatch must be 1..2147483648, got 0"},
                     {{"--idle-minutes", "-1"}, "--idle-minutes must be 0..2147483647, got -1"},
                     {{"-s", "-5"}, "-s must be -1 (a random seed) or 0..4294967295, got -5"},
                 });
  const CliResult list = run({"jobs", "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "no jobs\n");
}

// In range, the values run: the bounds themselves are allowed, and a value in another spelling
// ("+2", "010") means its decimal number.
TEST(CliRanges, ValuesInRangeRun) {
  const CliResult r = run({"generate", "-m", model(), "-p", "the cat", "-t", "1", "-c", "+16", "-n",
                           "2", "--temp", "0", "--top-p", "1", "--ubatch", "010", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"generated_tokens\""), std::string::npos) << r.out;
  // -s -1 is the random seed the help names (llama.cpp's spelling), and the seed's bounds run.
  for (const char* seed : {"-1", "0", "4294967295"}) {
    const CliResult s = run({"generate", "-m", model(), "-p", "the cat", "-t", "1", "-n", "2",
                             "--temp", "0.8", "-s", seed});
    EXPECT_EQ(s.exit_code, 0) << seed << ": " << s.err;
  }
}

// A --ubatch larger than the context: refused with both numbers before the model runs.
TEST(CliRanges, UbatchLargerThanTheContextIsRefused) {
  const std::string with_c =
      "--ubatch 128 is larger than the context (-c 64): a prefill step cannot hold more tokens "
      "than the context; give --ubatch 64 or less, or a larger -c";
  expect_refused({"generate", "-m", model(), "-p", "the cat"},
                 {{{"-c", "64", "--ubatch", "128"}, with_c}});
  expect_refused({"ask", "-m", model(), "-q", "who?", "--doc", "1"},
                 {{{"-c", "64", "--ubatch", "128"}, with_c}});
  expect_refused({"serve", "-m", model()}, {{{"-c", "64", "--ubatch", "128"}, with_c}});
  expect_refused({"jobs", "add", "-m", model(), "--doc", "1"},
                 {{{"-c", "64", "--ubatch", "128"}, with_c}});
  // Without -c: the context chosen for the model (its trained 256 tokens) is named.
  const std::string chosen =
      "--ubatch 1024 is larger than the context (256 tokens, chosen without -c): a prefill step "
      "cannot hold more tokens than the context; give --ubatch 256 or less, or a larger -c";
  expect_refused({"generate", "-m", model(), "-p", "the cat"}, {{{"--ubatch", "1024"}, chosen}});
  expect_refused({"bench", "-m", model(), "-p", "8", "-n", "2"}, {{{"--ubatch", "1024"}, chosen}});
  // Equal to the context is fine; the default --ubatch (512) with a smaller -c runs as before.
  for (const std::vector<std::string>& ok :
       {std::vector<std::string>{"--ubatch", "64"}, std::vector<std::string>{}}) {
    std::vector<std::string> args = {"generate", "-m", model(), "-p",     "the cat", "-c",
                                     "64",       "-n", "1",     "--temp", "0"};
    args.insert(args.end(), ok.begin(), ok.end());
    const CliResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

}  // namespace
}  // namespace spw
