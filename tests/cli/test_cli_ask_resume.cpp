// spillway-cli ask, black box: a long prefill killed with SIGKILL resumes from its last
// checkpoint. The model is a generated one with small dimensions (one layer, 32-wide), so a
// prefill of more than 16K tokens takes seconds; its answers are nonsense, the pipeline is what
// is checked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/pdf_builder.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-ask-resume-test"); }

// Starts the CLI with stdout and stderr into files; returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::vector<std::string> all = {SPILLWAY_CLI_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

std::vector<fs::path> files_ending(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().ends_with(suffix)) out.push_back(e.path());
  }
  return out;
}

// 40 pages of numbered clauses: about 40K characters, more than 16K tokens with the test
// vocabulary (bytes and a few words).
void write_contract(const fs::path& pdf) {
  test::PdfDoc doc;
  for (int p = 0; p < 40; ++p) {
    std::vector<std::string> lines;
    for (int l = 0; l < 14; ++l) {
      lines.push_back("Clause " + std::to_string(p * 14 + l + 1) +
                      ": the tenant pays the rent on the first day of each month.");
    }
    test::PdfPage page;
    page.runs = test::column(lines, 72, 720);
    doc.pages.push_back(page);
  }
  test::write_file(pdf, test::build_pdf(doc));
}

class CliAskResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
    TestModelSpec spec;
    spec.n_embd = 32;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.head_dim = 16;
    spec.n_ff = 64;
    spec.n_ctx = 40960;
    auto m = build_test_model(spec);
    ASSERT_TRUE(m) << m.error().message;
    model_ = dir_ / "small.gguf";
    ASSERT_TRUE(m->write(model_.string()).ok());
    pdf_ = dir_ / "contract.pdf";
    write_contract(pdf_);
  }
  std::vector<std::string> args(const fs::path& data) const {
    // clang-format off
    return {"ask", "-m", model_.string(), "-q", "Who pays the rent?", "-n", "8", "-t", "1",
            "--temp", "0", "-c", "40960", "--checkpoint-tokens", "2048",
            "--data-dir", data.string(), pdf_.string(), "--json"};
    // clang-format on
  }
  fs::path dir_, model_, pdf_;
};

// Killed (SIGKILL) after a prefill checkpoint: the next ask restores the checkpoint, prefills
// only the rest and answers as an uninterrupted run does (greedy, token for token).
TEST_F(CliAskResume, KilledPrefillResumesFromItsLastCheckpoint) {
  const fs::path data = dir_ / "data";
  const fs::path snapshots = data / "cache" / "snapshots";
  const pid_t pid = spawn_cli(args(data), dir_ / "killed.out", dir_ / "killed.err");
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (files_ending(snapshots, "-checkpoint.kv").empty() &&
         std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      FAIL() << "the ask ended before a checkpoint was written:\n"
             << test::read_file(dir_ / "killed.err");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << test::read_file(dir_ / "killed.err");
  ASSERT_EQ(files_ending(snapshots, "-checkpoint.kv").size(), 1u)
      << test::read_file(dir_ / "killed.err");
  // Killed before the whole prefix was saved: only the checkpoint is there.
  for (const fs::path& f : files_ending(snapshots, ".kv"))
    EXPECT_TRUE(f.string().ends_with("-checkpoint.kv")) << f;

  const CliResult resumed = run_cli(SPILLWAY_CLI_PATH, args(data), tmp_dir());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const nlohmann::json r = test::parse_one_object(resumed.out);
  ASSERT_GE(r["prompt_tokens"].get<int64_t>(), 16384) << resumed.err;
  const int64_t from = r["resumed_from_tokens"].get<int64_t>();
  EXPECT_GE(from, 2048);
  EXPECT_EQ(from % 512, 0);
  EXPECT_LT(from, r["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(r["prefill_tokens_computed"].get<int64_t>(), r["prompt_tokens"].get<int64_t>() - from);
  EXPECT_FALSE(r["reused_snapshot"].get<bool>());
  EXPECT_NE(
      resumed.err.find("resuming the prefill from a checkpoint: " + std::to_string(from) + " of "),
      std::string::npos)
      << resumed.err;
  // The whole prefix is saved now and its checkpoint gone.
  EXPECT_TRUE(files_ending(snapshots, "-checkpoint.kv").empty());
  EXPECT_EQ(files_ending(snapshots, ".kv").size(), 1u);

  // An uninterrupted run in another library gives the same answer.
  const CliResult fresh = run_cli(SPILLWAY_CLI_PATH, args(dir_ / "fresh"), tmp_dir());
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const nlohmann::json f = test::parse_one_object(fresh.out);
  EXPECT_EQ(f["resumed_from_tokens"], 0);
  EXPECT_EQ(f["prefill_tokens_computed"], f["prompt_tokens"]);
  EXPECT_EQ(f["prompt_tokens"], r["prompt_tokens"]);
  EXPECT_EQ(f["generated_tokens"], r["generated_tokens"]);
  EXPECT_EQ(f["answer"], r["answer"]);
}

// Ctrl-C (SIGINT) stops an ask and keeps its work: during the prefill the checkpoint (the next
// ask resumes from it), during the answer the tokens so far (`--continue` goes on from them and
// ends where one uninterrupted answer of the summed length ends, greedy).
TEST_F(CliAskResume, CtrlCStopsAnAskAndKeepsItsWork) {
  const fs::path data = dir_ / "data";
  const fs::path snapshots = data / "cache" / "snapshots";
  const auto wait_for = [](const std::function<bool()>& ready, pid_t pid, const fs::path& err) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (!ready() && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid)
        return testing::AssertionFailure() << "the ask ended first:\n" << test::read_file(err);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return ready() ? testing::AssertionSuccess() : testing::AssertionFailure() << "timed out";
  };
  const auto interrupt = [](pid_t pid) {
    ::kill(pid, SIGINT);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  };

  // During the prefill.
  const pid_t p1 = spawn_cli(args(data), dir_ / "p1.out", dir_ / "p1.err");
  ASSERT_TRUE(wait_for([&] { return !files_ending(snapshots, "-checkpoint.kv").empty(); }, p1,
                       dir_ / "p1.err"));
  EXPECT_EQ(interrupt(p1), 130) << test::read_file(dir_ / "p1.err");
  const std::string err1 = test::read_file(dir_ / "p1.err");
  EXPECT_NE(err1.find("stopped by Ctrl-C: what was answered and prefilled is kept"),
            std::string::npos)
      << err1;
  EXPECT_EQ(files_ending(snapshots, "-checkpoint.kv").size(), 1u);

  // During the answer (text mode: the answer streams to stdout), after the resumed prefill.
  std::vector<std::string> long_answer = args(data);
  long_answer.pop_back();   // --json
  long_answer[6] = "4000";  // -n
  const pid_t p2 = spawn_cli(long_answer, dir_ / "p2.out", dir_ / "p2.err");
  const auto answering = [&] {
    return test::read_file(dir_ / "p2.err").find("saved KV of the document prefix") !=
               std::string::npos &&
           fs::exists(dir_ / "p2.out") && fs::file_size(dir_ / "p2.out") > 0;
  };
  const testing::AssertionResult started = wait_for(answering, p2, dir_ / "p2.err");
  if (!started) GTEST_SKIP() << "the answer ended before Ctrl-C: " << started.message();
  const int code2 = interrupt(p2);
  const std::string err2 = test::read_file(dir_ / "p2.err");
  ASSERT_EQ(code2, 130) << err2;
  EXPECT_NE(err2.find("resuming the prefill from a checkpoint"), std::string::npos) << err2;
  const std::vector<fs::path> kept = files_ending(snapshots, "-answer.tokens");
  ASSERT_EQ(kept.size(), 1u) << err2;
  EXPECT_GT(fs::file_size(dir_ / "p2.out"), 0u) << "the answer so far was printed";
  // The kept file says how many tokens were answered before Ctrl-C.
  const std::string kept_text = test::read_file(kept[0]);
  const size_t at = kept_text.find("\nanswer_tokens ");
  ASSERT_NE(at, std::string::npos) << kept_text;
  const int64_t n_kept = std::stoll(kept_text.substr(at + 15));

  std::vector<std::string> cont = args(data);
  cont.push_back("--continue");
  const CliResult c = run_cli(SPILLWAY_CLI_PATH, cont, tmp_dir());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const nlohmann::json cj = test::parse_one_object(c.out);
  const int64_t k = cj["continued_tokens"].get<int64_t>();
  ASSERT_GT(k, 0) << c.err;
  EXPECT_EQ(cj["generated_tokens"], 8);
  EXPECT_TRUE(cj["reused_snapshot"].get<bool>());
  EXPECT_EQ(cj["prefill_tokens_computed"].get<int64_t>(), cj["question_tokens"].get<int64_t>() + k);
  EXPECT_EQ(k, n_kept);
  const std::string answer = cj["answer"];
  EXPECT_NE(
      c.err.find("continuing the earlier answer: its " + std::to_string(k) + " tokens are kept"),
      std::string::npos)
      << c.err;

  // One uninterrupted answer of k + 8 tokens in another library: the same text.
  std::vector<std::string> whole = args(dir_ / "fresh");
  whole[6] = std::to_string(k + 8);
  const CliResult f = run_cli(SPILLWAY_CLI_PATH, whole, tmp_dir());
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(test::parse_one_object(f.out)["answer"], answer);
}

}  // namespace
}  // namespace spw
