// spillway-cli on a machine that cannot hold a model's whole context: the host KV tier grows as
// blocks spill (a 131072-token model answers a 5-token prompt under an address-space limit far
// below its 4 GiB of KV), the default context without -c follows the memory there is and says
// so, and running out of memory is an error naming the bytes and the setting.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/test_model.h"

namespace spw {

// AddressSanitizer aborts on a failed allocation instead of returning null, and its shadow
// memory needs terabytes of address space: these limits are checked by the Release run.
#if defined(__SANITIZE_ADDRESS__)
#define SPW_SKIP_UNDER_ASAN() \
  GTEST_SKIP() << "address-space limits are not checked under AddressSanitizer"
#else
#define SPW_SKIP_UNDER_ASAN() static_cast<void>(0)
#endif
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-memory-test"); }

CliResult run(std::vector<std::string> args) {
  args.insert(args.begin(), {"--data-dir", (tmp_dir() / "data").string()});
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

// The same under `ulimit -v KIB` (the shell's address-space limit, RLIMIT_AS).
CliResult run_limited(int64_t kib, std::vector<std::string> args) {
  std::string cmd =
      "ulimit -v " + std::to_string(kib) + " && exec " + shell_quote(SPILLWAY_CLI_PATH);
  args.insert(args.begin(), {"--data-dir", (tmp_dir() / "data").string()});
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  return run_cli("/bin/sh", {"-c", cmd}, tmp_dir());
}

// 16 layers of 8 KV heads of 64: 32 KiB of f16 KV per token, 4 GiB for the 131072 tokens it was
// "trained" on; the weights are small (n_embd 64).
const fs::path& long_context_model() {
  static const fs::path p = [] {
    TestModelSpec spec;
    spec.n_layer = 16;
    spec.n_head = 8;
    spec.n_head_kv = 8;
    spec.head_dim = 64;
    spec.n_ctx = 131072;
    const fs::path path = tmp_dir() / "ctx131072.gguf";
    EXPECT_TRUE(write_test_model(spec, path.string()).ok());
    return path;
  }();
  return p;
}

constexpr int64_t kLimitKiB = 1536 * 1024;  // 1.5 GiB of address space, KV needs 4 GiB

// "abcd" in the test vocabulary: BOS and four byte-level pieces.
TEST(CliMemory, FiveTokenPromptOnA131072ContextModelUnderAnAddressSpaceLimit) {
  SPW_SKIP_UNDER_ASAN();
  const std::string m = long_context_model().string();
  const CliResult r = run_limited(kLimitKiB, {"generate", "-m", m, "-c", "131072", "-p", "abcd",
                                              "-n", "4", "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = test::parse_one_object(r.out);
  EXPECT_EQ(j["prompt_tokens"].size(), 5u) << j["prompt_tokens"].dump();
  EXPECT_EQ(j["generated_tokens"].size(), 4u);
  EXPECT_EQ(r.err.find("cannot reserve"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("note: context"), std::string::npos) << "-c is kept as given: " << r.err;
  // The same run without a limit gives the same tokens.
  const CliResult free_run =
      run({"generate", "-m", m, "-c", "131072", "-p", "abcd", "-n", "4", "--temp", "0", "--json"});
  ASSERT_EQ(free_run.exit_code, 0) << free_run.err;
  EXPECT_EQ(test::parse_one_object(free_run.out)["generated_tokens"], j["generated_tokens"]);
}

// An explicit -c with a prompt whose host-tier KV cannot be mapped under the limit: refused
// before the prefill (it used to fail minutes in, at the ubatch that reached the limit).
TEST(CliMemory, ALongPromptBeyondTheAddressSpaceIsRefusedBeforeItsPrefill) {
  SPW_SKIP_UNDER_ASAN();
  const fs::path prompt = tmp_dir() / "long-prompt.txt";
  std::ofstream(prompt) << std::string(60000, 'a');  // 60,000 byte tokens + BOS: 1.8 GiB of KV
  const CliResult r = run_limited(kLimitKiB, {"generate", "-m", long_context_model().string(), "-c",
                                              "131072", "-f", prompt.string(), "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("error: the 60001 tokens need "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" more RAM for the host KV tier, but the address-space limit (ulimit -v) "
                       "leaves "),
            std::string::npos)
      << r.err;
}

// Without -c the context follows the address space left: cut, said on stderr, and it runs.
TEST(CliMemory, DefaultContextFollowsTheAddressSpaceAndSaysSo) {
  SPW_SKIP_UNDER_ASAN();
  const CliResult r = run_limited(kLimitKiB, {"generate", "-m", long_context_model().string(), "-p",
                                              "abcd", "-n", "2", "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.err.find("note: context ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" of 131,072 trained: KV needs 4.0 GiB, RAM budget ", at), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" (half the address space the ulimit leaves); -c or Settings to change", at),
            std::string::npos)
      << r.err;
}

// A ubatch whose scratch does not fit: an error with the bytes and --ubatch, exit 1 (the
// largest --ubatch the context takes, so the range check lets it through).
TEST(CliMemory, ScratchThatDoesNotFitIsAnErrorNamingUbatch) {
  SPW_SKIP_UNDER_ASAN();
  const CliResult r =
      run_limited(1024 * 1024, {"generate", "-m", long_context_model().string(), "-c", "131072",
                                "--ubatch", "131072", "-p", "abcd", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Per token: x, h, tmp 64 + q, k, v, attention 512 + RoPE 64 = 2304 floats (the FFN's gate and
  // up hold 128 tokens whatever the ubatch).
  EXPECT_NE(r.err.find("error: cannot allocate 1.1 GiB of RAM for the CPU session's scratch (a "
                       "ubatch of 131072 tokens, 9216 bytes per token): out of memory; a smaller "
                       "--ubatch"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spw
