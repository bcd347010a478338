// spillway-cli progress, black box, with a generated model (tests/support/test_model.h) and
// PDFs written here: --progress-json of ask (one prompt and map-reduce), generate and
// jobs run-due (one JSON object per line and event), the plain stderr line when stderr is a
// file (at most one every 10 s, plus the last), and the redrawn line on a pseudo-terminal.
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/pdf_builder.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-progress-test"); }

CliResult run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

// Runs `spillway-cli args...` with stdin, stdout and stderr on a pseudo-terminal; returns what
// the terminal received and the exit code.
CliResult run_on_pty(const std::vector<std::string>& args) {
  CliResult r;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) {
    ADD_FAILURE() << "forkpty: " << std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    std::vector<std::string> copy = args;
    std::string bin = SPILLWAY_CLI_PATH;
    std::vector<char*> argv = {bin.data()};
    for (std::string& s : copy) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) {
      r.err.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO once the child has closed the terminal
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A PDF with `n_pages` pages of a few lines of Helvetica text.
void write_contract(const fs::path& path, int n_pages) {
  test::PdfDoc doc;
  doc.title = "Hosting agreement";
  for (int p = 1; p <= n_pages; ++p) {
    test::PdfPage page;
    page.runs = test::column({"Hosting agreement, page " + std::to_string(p) + ".",
                              "Either party may terminate this agreement with thirty days notice.",
                              "Liability is capped at the fees paid in the prior twelve months."},
                             72, 720, 11);
    doc.pages.push_back(std::move(page));
  }
  test::write_file(path, test::build_pdf(doc));
}

// Every line of `file` as a JSON object with the progress fields (fails the test otherwise).
std::vector<nlohmann::json> read_events(const fs::path& file) {
  std::vector<nlohmann::json> out;
  const std::string text = test::read_file(file);
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    EXPECT_NE(nl, std::string::npos) << "the last line has no newline: " << text.substr(at);
    const std::string line = text.substr(at, nl == std::string::npos ? nl : nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << line;
    if (!j.is_object()) continue;
    for (const char* key : {"phase", "done", "total", "tokens_per_s", "eta_s"})
      EXPECT_TRUE(j.contains(key)) << key << " missing: " << line;
    const std::string phase = j.value("phase", "");
    EXPECT_TRUE(phase == "prefill" || phase == "decode" || phase == "part" || phase == "document")
        << line;
    EXPECT_TRUE(j["eta_s"].is_null() || j["eta_s"].get<double>() >= 0) << line;
    out.push_back(j);
  }
  return out;
}

std::vector<nlohmann::json> of_phase(const std::vector<nlohmann::json>& ev, const char* phase) {
  std::vector<nlohmann::json> out;
  for (const auto& e : ev) {
    if (e["phase"] == phase) out.push_back(e);
  }
  return out;
}

// `done` never goes down within each run of prefill events (a new prompt starts after a part or
// decode event), nor over the decode events of one prompt.
void expect_prefill_non_decreasing(const std::vector<nlohmann::json>& ev) {
  int64_t last = -1;
  for (const auto& e : ev) {
    if (e["phase"] != "prefill") {
      last = -1;
      continue;
    }
    const auto done = e["done"].get<int64_t>();
    EXPECT_GE(done, last) << e.dump();
    EXPECT_LE(done, e["total"].get<int64_t>()) << e.dump();
    last = done;
  }
}

class CliProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(data_);
    fs::create_directories(data_);
    model_ = (data_ / "model.gguf").string();
    TestModelSpec spec;
    spec.n_ctx = 4096;
    ASSERT_TRUE(write_test_model(spec, model_).ok());
  }
  std::vector<std::string> ask(const fs::path& pdf, const fs::path& progress,
                               std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"ask",
                                     "-m",
                                     model_,
                                     "-q",
                                     "Who may terminate?",
                                     "--temp",
                                     "0",
                                     "-n",
                                     "6",
                                     "-t",
                                     "1",
                                     "--data-dir",
                                     data_.string(),
                                     pdf.string(),
                                     "--progress-json",
                                     progress.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  fs::path data_;
  std::string model_;
};

TEST_F(CliProgress, AskProgressJsonEndsAtThePromptsTokenCount) {
  const fs::path pdf = data_ / "contract.pdf", progress = data_ / "progress.jsonl";
  write_contract(pdf, 2);
  for (int round = 0; round < 2; ++round) {  // the second restores the saved document KV
    SCOPED_TRACE(round);
    const CliResult r = run(ask(pdf, progress, {"--json", "--ubatch", "64"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json a = test::parse_one_object(r.out);
    EXPECT_EQ(a["reused_snapshot"].get<bool>(), round == 1);
    const std::vector<nlohmann::json> ev = read_events(progress);
    const auto prefill = of_phase(ev, "prefill");
    ASSERT_GE(prefill.size(), round == 0 ? 2u : 1u);  // 64-token ubatches of a longer prompt
    expect_prefill_non_decreasing(ev);
    const auto prompt_tokens = a["prompt_tokens"].get<int64_t>();
    EXPECT_GT(prompt_tokens, 64);
    EXPECT_EQ(prefill.back()["done"].get<int64_t>(), prompt_tokens);
    EXPECT_EQ(prefill.back()["total"].get<int64_t>(), prompt_tokens);
    for (const auto& e : prefill) EXPECT_EQ(e["total"].get<int64_t>(), prompt_tokens);
    // One decode event per generated token, counting 1, 2, ... of -n 6.
    const auto decode = of_phase(ev, "decode");
    ASSERT_EQ(static_cast<int64_t>(decode.size()), a["generated_tokens"].get<int64_t>());
    for (size_t i = 0; i < decode.size(); ++i) {
      EXPECT_EQ(decode[i]["done"].get<int64_t>(), static_cast<int64_t>(i + 1));
      EXPECT_EQ(decode[i]["total"].get<int64_t>(), 6);
    }
    EXPECT_TRUE(of_phase(ev, "part").empty());  // one prompt: no parts
  }
}

TEST_F(CliProgress, MapReducePartEventsCountToTheParts) {
  const fs::path pdf = data_ / "long.pdf", progress = data_ / "progress.jsonl";
  write_contract(pdf, 6);
  const CliResult r = run(ask(pdf, progress, {"--json", "-c", "512", "--map-reduce"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = test::parse_one_object(r.out);
  ASSERT_TRUE(a["map_reduce"].get<bool>()) << r.out;
  const auto n_parts = static_cast<int64_t>(a["parts"].size());
  ASSERT_GE(n_parts, 2);
  const std::vector<nlohmann::json> ev = read_events(progress);
  const auto parts = of_phase(ev, "part");
  ASSERT_GE(parts.size(), 2u);
  EXPECT_EQ(parts.front()["done"].get<int64_t>(), 0);
  EXPECT_TRUE(parts.front()["eta_s"].is_null());  // nothing measured yet
  int64_t last = 0;
  for (const auto& p : parts) {
    EXPECT_EQ(p["total"].get<int64_t>(), n_parts);
    EXPECT_GE(p["done"].get<int64_t>(), last) << p.dump();
    last = p["done"].get<int64_t>();
  }
  EXPECT_EQ(parts.back()["done"].get<int64_t>(), n_parts);
  EXPECT_EQ(parts.back()["eta_s"].get<double>(), 0.0);
  // After part 1 the ETA of the whole answer is known and counts the parts still to come.
  EXPECT_FALSE(parts[1]["eta_s"].is_null()) << parts[1].dump();
  expect_prefill_non_decreasing(ev);
  // Every part's prompt ends its prefill at its prompt's token count, in order; the
  // combination's prompt comes last.
  std::vector<int64_t> prefill_ends;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i]["phase"] == "prefill" && (i + 1 == ev.size() || ev[i + 1]["phase"] != "prefill")) {
      EXPECT_EQ(ev[i]["done"], ev[i]["total"]) << ev[i].dump();
      prefill_ends.push_back(ev[i]["done"].get<int64_t>());
    }
  }
  ASSERT_GE(static_cast<int64_t>(prefill_ends.size()), n_parts + 1);
  for (int64_t k = 0; k < n_parts; ++k) {
    EXPECT_EQ(prefill_ends[static_cast<size_t>(k)], a["parts"][k]["prompt_tokens"].get<int64_t>())
        << "part " << k + 1;
  }
}

TEST_F(CliProgress, GenerateWritesJsonAndAtMostALineEveryTenSecondsOffATerminal) {
  const fs::path progress = data_ / "progress.jsonl";
  const CliResult r = run({"generate", "-m", model_, "-p", "Once upon a time in a hosting centre",
                           "-n", "5", "--temp", "0", "-t", "1", "--json", "--ubatch", "8",
                           "--progress-json", progress.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = test::parse_one_object(r.out);
  const auto n_prompt = static_cast<int64_t>(j["prompt_tokens"].size());
  const std::vector<nlohmann::json> ev = read_events(progress);
  const auto prefill = of_phase(ev, "prefill");
  ASSERT_GE(prefill.size(), 2u) << "8-token ubatches of a " << n_prompt << "-token prompt";
  expect_prefill_non_decreasing(ev);
  EXPECT_EQ(prefill.back()["done"].get<int64_t>(), n_prompt);
  EXPECT_EQ(prefill.back()["total"].get<int64_t>(), n_prompt);
  const auto decode = of_phase(ev, "decode");
  ASSERT_EQ(decode.size(), j["generated_tokens"].size());
  ASSERT_FALSE(decode.empty());
  EXPECT_EQ(decode.back()["done"].get<int64_t>(), 5);
  // stderr is a file here: the first line, then (the run takes far less than 10 s) the last.
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < r.err.size()) {
    const size_t nl = r.err.find('\n', at);
    const std::string line = r.err.substr(at, nl == std::string::npos ? nl : nl - at);
    if (line.starts_with("prefill ") || line.starts_with("decode ")) lines.push_back(line);
    at = nl == std::string::npos ? r.err.size() : nl + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_TRUE(lines[0].starts_with("prefill ")) << lines[0];
  EXPECT_TRUE(lines[1].starts_with("decode 5/5 tokens (100%)")) << lines[1];
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "no redraws off a terminal";
}

TEST_F(CliProgress, OneRedrawnLineOnAPseudoTerminal) {
  const fs::path pdf = data_ / "contract.pdf";
  write_contract(pdf, 2);
  const std::string prompt_tokens_file = (data_ / "p.jsonl").string();
  const CliResult r = run_on_pty(ask(pdf, prompt_tokens_file, {"--ubatch", "32", "--no-snapshot"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> ev = read_events(prompt_tokens_file);
  const auto prefill = of_phase(ev, "prefill");
  ASSERT_GE(prefill.size(), 3u);
  const std::string total = std::to_string(prefill.back()["total"].get<int64_t>());
  // Each redraw returns to the start of the line and clears what the last one left.
  const std::string first = "\rprefill 32/" + total + " tokens (";
  const size_t at = r.err.find(first);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\rprefill 64/" + total + " tokens ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\033[K", at), std::string::npos) << r.err;
  // The last prefill line is drawn (100%), then erased as the answer streams on the terminal
  // (or, without an answer, ended by the final newline).
  const size_t full = r.err.find("/" + total + " tokens (100%)");
  ASSERT_NE(full, std::string::npos) << r.err;
  EXPECT_TRUE(r.err.find("\r\033[K", full) != std::string::npos ||
              r.err.find('\n', full) != std::string::npos)
      << r.err;
  // A redrawn line is never followed by a newline until the run ends: the lines between the
  // first and the last prefill draw hold no newline.
  EXPECT_EQ(r.err.substr(at, full - at).find('\n'), std::string::npos) << r.err;
}

TEST_F(CliProgress, JobsRunDueReportsItsDocuments) {
  std::vector<std::string> ingest = {"ingest", "--data-dir", data_.string()};
  for (int i = 1; i <= 2; ++i) {
    const fs::path pdf = data_ / ("c" + std::to_string(i) + ".pdf");
    write_contract(pdf, i);
    ingest.push_back(pdf.string());
  }
  ASSERT_EQ(run(ingest).exit_code, 0);
  const CliResult added = run({"jobs", "add", "-m", model_, "--temp", "0", "-n", "4", "-t", "1",
                               "--doc", "1", "--doc", "2", "--data-dir", data_.string()});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  const fs::path progress = data_ / "progress.jsonl";
  const CliResult ran =
      run({"jobs", "run-due", "--progress-json", progress.string(), "--data-dir", data_.string()});
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const std::vector<nlohmann::json> ev = read_events(progress);
  const auto docs = of_phase(ev, "document");
  ASSERT_EQ(docs.size(), 3u);  // 0, 1 and 2 of 2
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(docs[i]["done"].get<int64_t>(), static_cast<int64_t>(i));
    EXPECT_EQ(docs[i]["total"].get<int64_t>(), 2);
  }
  EXPECT_TRUE(docs[0]["eta_s"].is_null());
  EXPECT_FALSE(docs[1]["eta_s"].is_null());  // one document timed
  // Each document's prompt reports its prefill and decode between the document events.
  EXPECT_FALSE(of_phase(ev, "prefill").empty());
  EXPECT_FALSE(of_phase(ev, "decode").empty());
  expect_prefill_non_decreasing(ev);
  EXPECT_NE(ran.err.find("document 2/2 (100%)"), std::string::npos) << ran.err;
}

}  // namespace
}  // namespace spw
