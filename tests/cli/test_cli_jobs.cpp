// spillway-cli jobs, black box, with a generated model (tests/support/test_model.h: answers are
// nonsense but deterministic with --temp 0) and PDFs written here: a runner killed with SIGKILL
// mid-job and a new one resuming it (between documents, and inside a map-reduce document), two
// runners at once, a deleted document row, a deleted model, a missing PDF file, the exports,
// schedules and bad input.
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"
#include "tests/support/pdf_builder.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-jobs-test"); }

CliResult run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

// A child `spillway-cli ARGS` that the test can kill; output goes to files in `dir`.
class Child {
 public:
  Child(const std::vector<std::string>& args, const fs::path& dir, const std::string& name) {
    out_ = dir / (name + ".out");
    err_ = dir / (name + ".err");
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* o = std::freopen(out_.c_str(), "w", stdout);
      FILE* e = std::freopen(err_.c_str(), "w", stderr);
      (void)o;
      (void)e;
      std::vector<char*> argv;
      std::string bin = SPILLWAY_CLI_PATH;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& s : copy) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void signal(int sig) { ::kill(pid_, sig); }
  void kill9() {
    ::kill(pid_, SIGKILL);
    wait();
  }
  // The exit code; -1 when killed by a signal.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  bool running() {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return false;
    }
    return !reaped_;
  }
  std::string err() const { return test::read_file(err_); }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_ = -1;
  fs::path out_, err_;
};

// A PDF with `n_pages` pages of a few lines of Helvetica text, distinct per `name`.
void write_contract(const fs::path& path, const std::string& name, int n_pages) {
  test::PdfDoc doc;
  doc.title = name;
  for (int p = 1; p <= n_pages; ++p) {
    test::PdfPage page;
    page.runs = test::column({name + " agreement, page " + std::to_string(p) + ".",
                              "Either party may terminate this agreement with thirty days notice.",
                              "This agreement is governed by the laws of the State of Delaware.",
                              "Liability is capped at the fees paid in the prior twelve months."},
                             72, 720, 11);
    doc.pages.push_back(std::move(page));
  }
  test::write_file(path, test::build_pdf(doc));
}

// The library's stored map-reduce part answers (part, answer, created), by part.
std::vector<std::string> stored_parts(const fs::path& data_dir) {
  std::vector<std::string> out;
  sqlite3* db = nullptr;
  const fs::path file = data_dir / "library.sqlite3";
  EXPECT_TRUE(fs::exists(file)) << file;
  if (sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT part, answer, created FROM part_answers ORDER BY part",
                               -1, &st, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  while (st && sqlite3_step(st) == SQLITE_ROW) {
    out.push_back(std::to_string(sqlite3_column_int(st, 0)) + "|" +
                  reinterpret_cast<const char*>(sqlite3_column_text(st, 1)) + "|" +
                  std::to_string(sqlite3_column_int64(st, 2)));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// How jobs show writes a finished map-reduce document's parts.
std::string fmt_parts(int n_parts, int kept) {
  return ", " + std::to_string(n_parts) + " parts (" + std::to_string(kept) +
         " kept from an earlier run)";
}

class CliJobs : public ::testing::Test {
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
  std::vector<std::string> with_data(std::vector<std::string> args) const {
    args.push_back("--data-dir");
    args.push_back(data_.string());
    return args;
  }
  // Ingests `n` contracts; returns their ids.
  std::vector<int64_t> ingest(int n, int pages = 1) {
    std::vector<std::string> args = {"ingest"};
    for (int i = 0; i < n; ++i) {
      const fs::path pdf = data_ / ("contract" + std::to_string(i + 1) + ".pdf");
      write_contract(pdf, "Contract " + std::to_string(i + 1), pages);
      args.push_back(pdf.string());
    }
    const CliResult r = run(with_data(args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<int64_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(i + 1);
    return ids;
  }
  int64_t add_job(const std::vector<int64_t>& docs, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"jobs", "add", "-m", model_, "--temp",
                                     "0",    "-n",  "24", "-t",   "1"};
    for (int64_t d : docs) {
      args.push_back("--doc");
      args.push_back(std::to_string(d));
    }
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run(with_data(args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("job ", 0), 0u) << r.out;
    return r.out.size() > 4 ? std::stoll(r.out.substr(4)) : 0;
  }
  nlohmann::json show(int64_t id) {
    const CliResult r = run(with_data({"jobs", "show", std::to_string(id), "--json"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  fs::path data_;
  std::string model_;
};

TEST_F(CliJobs, AddListShowRunAndExport) {
  const auto docs = ingest(2);
  const int64_t id = add_job(docs, {"--task", "clauses", "--clauses", "termination,governing law"});
  EXPECT_EQ(id, 1);
  CliResult list = run(with_data({"jobs", "list"}));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("queued"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("clauses of 2 documents"), std::string::npos) << list.out;
  CliResult shown = run(with_data({"jobs", "show", "1"}));
  ASSERT_EQ(shown.exit_code, 0);
  EXPECT_EQ(shown.out.rfind("queued\n", 0), 0u) << shown.out;

  CliResult ran = run(with_data({"jobs", "run-due"}));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.err.find("1 job run: 1 done, 0 failed"), std::string::npos) << ran.err;
  shown = run(with_data({"jobs", "show", "1"}));
  EXPECT_EQ(shown.out.rfind("done\n", 0), 0u) << shown.out;
  EXPECT_NE(shown.out.find("documents: 2 of 2 done, 0 failed"), std::string::npos) << shown.out;
  const nlohmann::json j = show(1);
  ASSERT_EQ(j["documents"].size(), 2u);
  for (const auto& d : j["documents"]) {
    EXPECT_EQ(d["state"], "done");
    ASSERT_EQ(d["results"].size(), 2u);
    EXPECT_EQ(d["results"][0]["clause"], "termination");
    EXPECT_EQ(d["results"][1]["clause"], "governing law");
  }

  const fs::path csv = data_ / "out.csv", md = data_ / "out.md";
  ASSERT_EQ(
      run(with_data({"jobs", "export", "1", "--format", "csv", "-o", csv.string()})).exit_code, 0);
  const std::string c = test::read_file(csv);
  EXPECT_EQ(c.rfind("job,document_id,document,clause,found,page,quote,verified,state,reason,"
                    "answer\r\n1,1,Contract 1,termination,",
                    0),
            0u)
      << c;
  // Header + 2 documents x 2 clauses; answers may hold CRLF-free newlines, so count row starts.
  size_t rows = 0;
  for (size_t p = 0; (p = c.find("\r\n1,", p)) != std::string::npos; ++p) ++rows;
  EXPECT_EQ(rows, 4u) << c;
  EXPECT_NE(c.find("\r\n1,2,Contract 2,governing law,"), std::string::npos) << c;
  ASSERT_EQ(run(with_data({"jobs", "export", "1", "--format", "md", "-o", md.string()})).exit_code,
            0);
  const std::string m = test::read_file(md);
  EXPECT_EQ(m.rfind("# Job 1: clauses of 2 documents\n", 0), 0u) << m;
  EXPECT_NE(m.find("## 1. Contract 1 (document 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("## 2. Contract 2 (document 2)"), std::string::npos) << m;
  EXPECT_NE(m.find("### governing law"), std::string::npos) << m;

  // The same job again gives the same answers (greedy), with the saved KV reused.
  const int64_t again =
      add_job(docs, {"--task", "clauses", "--clauses", "termination,governing law"});
  ASSERT_EQ(run(with_data({"jobs", "run", std::to_string(again)})).exit_code, 0);
  const nlohmann::json j2 = show(again);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j2["documents"][i]["results"][0]["text"], j["documents"][i]["results"][0]["text"]);
    EXPECT_EQ(j2["documents"][i]["reused_snapshot"], true) << j2.dump();
  }
}

TEST_F(CliJobs, AKilledRunnerIsResumedAndFinishedResultsStayAsTheyWere) {
  const int n_docs = 8;
  const auto docs = ingest(n_docs, 2);
  const int64_t id = add_job(docs, {"-n", "160"});
  const fs::path events = data_ / "runner1.progress.jsonl";
  Child runner(with_data({"jobs", "run-due", "--lease", "2", "--heartbeat", "0.5",
                          "--progress-json", events.string()}),
               data_, "runner1");
  // Kill it once a document is done and before the last is: the runner's own document events
  // say when (reading a file is quick; a `jobs show` per poll let a fast runner finish first).
  const auto documents_done = [&events] {
    std::ifstream in(events);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      const auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_object() && e.value("phase", "") == "document")
        n = std::max<int64_t>(n, e.value("done", int64_t{0}));
    }
    return n;
  };
  for (int i = 0; i < 20000 && runner.running() && documents_done() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  runner.kill9();
  nlohmann::json j;
  int done = 0;
  j = show(id);
  done = j["n_done"].get<int>();
  ASSERT_GE(done, 1) << runner.err();
  ASSERT_LT(done, n_docs) << "the runner finished before it could be killed; make the job longer";
  EXPECT_EQ(j["state"], "running");
  EXPECT_FALSE(j["lease_owner"].get<std::string>().empty());
  std::vector<nlohmann::json> before;
  for (const auto& d : j["documents"])
    if (d["state"] == "done") before.push_back(d);

  // A new runner takes the job over once the dead one's lease (2 s) has expired.
  for (int i = 0; i < 40 && show(id)["state"] != "done"; ++i) {
    const CliResult r = run(with_data({"jobs", "run-due", "--lease", "2", "--heartbeat", "0.5"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (show(id)["state"] == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  j = show(id);
  ASSERT_EQ(j["state"], "done") << j.dump(1);
  ASSERT_EQ(j["documents"].size(), static_cast<size_t>(n_docs));
  for (const auto& d : j["documents"]) {
    EXPECT_EQ(d["state"], "done");
    EXPECT_EQ(d["results"].size(), 1u) << d.dump();
  }
  for (const auto& b : before) {
    const auto& after = j["documents"][static_cast<size_t>(b["doc_id"].get<int64_t>() - 1)];
    EXPECT_EQ(after["results"], b["results"]);  // text, citations and time: byte-identical
    EXPECT_EQ(after["attempts"], 1);
  }
  // The document the killed runner was on was claimed twice; the rest once.
  int twice = 0;
  for (const auto& d : j["documents"]) twice += d["attempts"].get<int>() == 2;
  EXPECT_LE(twice, 1);
}

// A map-reduce document (12 pages in a 1,024-token context) run once
// uninterrupted in a data folder of its own, and once killed (SIGKILL) after its second part:
// the next run-due waits for the dead runner's lease, keeps the stored parts, computes only the
// rest and ends with the uninterrupted run's answer. Both runs' progress rows hold real counts.
TEST_F(CliJobs, AMapReduceDocumentKilledAfterAPartResumesAtTheNextPart) {
  const std::vector<std::string> job = {"-c", "1024", "-n", "32"};
  const fs::path pdf = data_ / "long.pdf";
  write_contract(pdf, "Long lease", 12);
  // The uninterrupted reference.
  const fs::path ref = data_ / "reference";
  const auto in = [](const fs::path& dir, std::vector<std::string> args) {
    args.push_back("--data-dir");
    args.push_back(dir.string());
    return run(args);
  };
  ASSERT_EQ(in(ref, {"ingest", pdf.string()}).exit_code, 0);
  std::vector<std::string> add = {"jobs", "add", "-m", model_,  "--temp",
                                  "0",    "-t",  "1",  "--doc", "1"};
  add.insert(add.end(), job.begin(), job.end());
  ASSERT_EQ(in(ref, add).exit_code, 0);
  const CliResult ref_run = in(ref, {"jobs", "run-due"});
  ASSERT_EQ(ref_run.exit_code, 0) << ref_run.err;
  const nlohmann::json r =
      nlohmann::json::parse(in(ref, {"jobs", "show", "1", "--json"}).out)["documents"][0];
  ASSERT_EQ(r["state"], "done") << r.dump(1);
  const int n_parts = r["n_parts"].get<int>();
  ASSERT_GE(n_parts, 4) << "the document must need several parts: " << r.dump(1);
  EXPECT_EQ(r["parts_kept"], 0);
  const std::string answer = r["results"][0]["text"];
  ASSERT_FALSE(answer.empty());
  // Its progress row: every part done, the combination's answer decoded (of -n 32), ETA 0.
  const nlohmann::json& rp = r["progress"];
  EXPECT_EQ(rp["n_parts"], n_parts) << rp.dump();
  EXPECT_EQ(rp["parts_done"], n_parts) << rp.dump();
  EXPECT_EQ(rp["part"], n_parts + 1) << rp.dump();
  EXPECT_EQ(rp["tokens_total"], 32) << rp.dump();
  EXPECT_GT(rp["tokens_done"].get<int64_t>(), 0) << rp.dump();
  EXPECT_LE(rp["tokens_done"].get<int64_t>(), 32) << rp.dump();
  EXPECT_EQ(rp["eta_s"], 0.0) << rp.dump();
  EXPECT_GT(rp["updated_ms"].get<int64_t>(), 0);

  // Killed after part 2. The dead runner's lease must outlast the checks between the kill and
  // the next run-due (three CLI runs), so it is sized from how long one CLI run takes here: 2 s
  // in a Release build, up to 30 s under a sanitizer on a loaded machine.
  const auto cli_start = std::chrono::steady_clock::now();
  ASSERT_EQ(run(with_data({"ingest", pdf.string()})).exit_code, 0);
  const double cli_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cli_start).count();
  const int lease_s = std::clamp(static_cast<int>(std::ceil(2.0 + 8.0 * cli_s)), 2, 30);
  const std::string lease = std::to_string(lease_s);
  const int64_t id = add_job({1}, job);
  const fs::path events = data_ / "events.jsonl";
  Child runner(with_data({"jobs", "run-due", "--lease", lease, "--heartbeat", "0.5",
                          "--progress-json", events.string()}),
               data_, "runner");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (test::read_file(events).find("{\"phase\": \"part\", \"done\": 2,") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(runner.running()) << "the runner ended before part 2:\n" << runner.err();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  runner.kill9();
  const auto killed_at = std::chrono::steady_clock::now();
  nlohmann::json j = show(id);
  const nlohmann::json at_kill = j["documents"][0];
  ASSERT_EQ(at_kill["state"], "running") << at_kill.dump(1);
  const int done_at_kill = at_kill["progress"]["parts_done"].get<int>();
  ASSERT_GE(done_at_kill, 2) << at_kill.dump(1);
  ASSERT_LT(done_at_kill, n_parts) << "the run got too far before the kill";
  EXPECT_EQ(at_kill["progress"]["n_parts"], n_parts);
  const std::vector<std::string> parts_at_kill = stored_parts(data_);
  EXPECT_GE(parts_at_kill.size(), static_cast<size_t>(done_at_kill));
  // The killed runner is gone (its process ended): said so, where it stopped, and no ETA.
  EXPECT_EQ(j["runner_gone"], true) << j.dump(1);
  EXPECT_EQ(j["runner_ended"], true) << j.dump(1);
  const CliResult mid = run(with_data({"jobs", "show", std::to_string(id)}));
  EXPECT_EQ(mid.out.rfind("running (its runner, process ", 0), 0u) << mid.out;
  EXPECT_NE(mid.out.find("; the next `jobs run-due` resumes it)\n"), std::string::npos) << mid.out;
  EXPECT_NE(mid.out.find("\"Long lease\": running: stopped at part "), std::string::npos)
      << mid.out;
  EXPECT_NE(mid.out.find(" of " + std::to_string(n_parts) + " ("), std::string::npos) << mid.out;
  EXPECT_EQ(mid.out.find("ETA"), std::string::npos) << mid.out;

  // At once: the dead runner's lease is waited for, then the job resumes. The wait is said
  // when the lease was still running as the new run-due started: its last heartbeat was at most
  // 0.5 s before the kill, and the new run needs about one CLI start before it reads the lease.
  const double since_kill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const CliResult resumed =
      run(with_data({"jobs", "run-due", "--lease", lease, "--heartbeat", "0.5"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  if (since_kill_s + 0.5 + 2.0 * cli_s < lease_s) {
    EXPECT_NE(resumed.err.find("job " + std::to_string(id) + ": its runner "), std::string::npos)
        << resumed.err;
    EXPECT_NE(resumed.err.find(" s for its lease to expire, then resuming it"), std::string::npos)
        << resumed.err;
  } else {
    std::printf(
        "[ note ] the lease (%d s) may have run out %.1f s after the kill (one CLI run "
        "%.1f s): its wait message is not required\n",
        lease_s, since_kill_s, cli_s);
  }
  EXPECT_NE(resumed.err.find("its last runner died at part "), std::string::npos) << resumed.err;
  j = show(id);
  ASSERT_EQ(j["state"], "done") << j.dump(1);
  const nlohmann::json d = j["documents"][0];
  EXPECT_EQ(d["n_parts"], n_parts);
  // The parts stored before the kill are kept (the one finishing as it died may be too).
  const int kept = d["parts_kept"].get<int>();
  EXPECT_GE(kept, done_at_kill) << d.dump(1);
  EXPECT_LE(kept, done_at_kill + 1) << d.dump(1);
  EXPECT_LT(kept, n_parts);
  EXPECT_EQ(static_cast<size_t>(kept), parts_at_kill.size());
  // The parts stored before the kill are as they were (answer and time: not asked again); the
  // rest were added.
  const std::vector<std::string> parts_after = stored_parts(data_);
  ASSERT_EQ(parts_after.size(), static_cast<size_t>(n_parts));
  for (size_t k = 0; k < parts_at_kill.size(); ++k) EXPECT_EQ(parts_after[k], parts_at_kill[k]);
  EXPECT_EQ(d["results"][0]["text"], answer);
  EXPECT_EQ(d["attempts"], 2);
  EXPECT_EQ(d["deaths"], 0);
  EXPECT_EQ(d["progress"]["parts_done"], n_parts);
  const CliResult shown = run(with_data({"jobs", "show", std::to_string(id)}));
  EXPECT_NE(shown.out.find(fmt_parts(n_parts, kept)), std::string::npos) << shown.out;
}

// A running job's runner as `jobs show` tells it, from the lease row: a runner of another host
// whose lease expired, a process of this host that has ended (its lease not expired yet), and a
// live one (this test's own process). Only the live one's document shows an ETA.
TEST_F(CliJobs, ShowSaysWhenARunningJobsRunnerIsGone) {
  const auto docs = ingest(1);
  const int64_t id = add_job(docs);
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const auto set_lease = [&](const std::string& owner, int64_t heartbeat_ms, int64_t expires_ms) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((data_ / "library.sqlite3").c_str(), &db), SQLITE_OK);
    const std::string sql =
        "UPDATE jobs SET state = 'running'; UPDATE job_documents SET state = 'running', owner = '" +
        owner +
        "'; INSERT OR REPLACE INTO job_document_progress (job_id, doc_id, phase, tokens_done, "
        "tokens_total, eta_s, updated_ms) VALUES (1, 1, 'decode', 5, 24, 90, 1); INSERT OR "
        "REPLACE INTO job_leases (job_id, owner, heartbeat_ms, expires_ms) VALUES (1, '" +
        owner + "', " + std::to_string(heartbeat_ms) + ", " + std::to_string(expires_ms) + ")";
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
    sqlite3_free(err);
    sqlite3_close(db);
  };
  const auto show_text = [&] { return run(with_data({"jobs", "show", std::to_string(id)})).out; };

  // Another host's runner, last heard of 42 s ago, its lease expired 30 s ago.
  set_lease("elsewhere:1:0000abcd", now - 42000, now - 30000);
  std::string out = show_text();
  const std::string head = "running (its runner has not reported for ";
  ASSERT_EQ(out.rfind(head, 0), 0u) << out;
  const int silent = std::stoi(out.substr(head.size()));
  EXPECT_GE(silent, 42) << out;
  EXPECT_LT(silent, 42 + 600) << out;  // the seconds since the heartbeat, not since 1970
  EXPECT_NE(out.find(" s; the next `jobs run-due` resumes it)\njob 1: "), std::string::npos) << out;
  EXPECT_NE(out.find("runner: elsewhere:1:0000abcd (gone)\n"), std::string::npos) << out;
  EXPECT_NE(out.find(": running: stopped at decode 5/24 tokens\n"), std::string::npos) << out;
  nlohmann::json j = show(id);
  EXPECT_EQ(j["runner_gone"], true);
  EXPECT_EQ(j["runner_ended"], false);
  EXPECT_GE(j["runner_silent_s"].get<double>(), 42.0);
  EXPECT_EQ(run(with_data({"jobs", "list"})).out.find("running (runner gone)") != std::string::npos,
            true);

  // A process of this host that has ended: gone although its lease runs 10 minutes more.
  const std::string ended = std::string(host) + ":" + std::to_string(dead) + ":00001234";
  set_lease(ended, now - 3000, now + 600000);
  out = show_text();
  EXPECT_EQ(out.rfind("running (its runner, process " + std::to_string(dead) +
                          ", has ended; it last reported ",
                      0),
            0u)
      << out;
  EXPECT_NE(out.find(" s ago; the next `jobs run-due` resumes it)\n"), std::string::npos) << out;
  j = show(id);
  EXPECT_EQ(j["runner_gone"], true);
  EXPECT_EQ(j["runner_ended"], true);

  // A live runner (this process) with a live lease: running, with its ETA.
  const std::string live = std::string(host) + ":" + std::to_string(::getpid()) + ":00005678";
  set_lease(live, now, now + 600000);
  out = show_text();
  EXPECT_EQ(out.rfind("running\njob 1: ", 0), 0u) << out;
  EXPECT_NE(out.find("runner: " + live + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find(": running: decode 5/24 tokens, ETA 1m30s\n"), std::string::npos) << out;
  j = show(id);
  EXPECT_EQ(j["runner_gone"], false);
  EXPECT_EQ(j["runner_ended"], false);
}

TEST_F(CliJobs, SigtermPutsTheJobBackInTheQueue) {
  const auto docs = ingest(6, 2);
  const int64_t id = add_job(docs, {"-n", "160"});
  Child runner(with_data({"jobs", "run-due"}), data_, "runner");
  for (int i = 0; i < 2000 && show(id)["n_done"].get<int>() < 1 && runner.running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  runner.signal(SIGTERM);
  EXPECT_EQ(runner.wait(), 0) << runner.err();
  const nlohmann::json j = show(id);
  if (j["n_done"].get<int>() == 6) GTEST_SKIP() << "the job finished before the signal";
  EXPECT_EQ(j["state"], "queued") << runner.err();
  EXPECT_EQ(j["lease_owner"], "");
  for (const auto& d : j["documents"]) EXPECT_NE(d["state"], "running");
  EXPECT_NE(runner.err().find("stopped by a signal"), std::string::npos) << runner.err();
  // The next run finishes it.
  ASSERT_EQ(run(with_data({"jobs", "run-due"})).exit_code, 0);
  EXPECT_EQ(show(id)["state"], "done");
}

TEST_F(CliJobs, TwoRunnersAtOnceProcessEveryDocumentOnce) {
  const auto docs = ingest(6);
  const int64_t a = add_job({docs[0], docs[1], docs[2]}, {"-n", "48"});
  const int64_t b = add_job({docs[3], docs[4], docs[5]}, {"-n", "48"});
  const int64_t c = add_job(docs, {"--task", "prompt", "--prompt", "Who signs?", "-n", "8"});
  Child r1(with_data({"jobs", "run-due"}), data_, "r1");
  Child r2(with_data({"jobs", "run-due"}), data_, "r2");
  EXPECT_EQ(r1.wait(), 0) << r1.err();
  EXPECT_EQ(r2.wait(), 0) << r2.err();
  // A job one runner held when the other looked is left to it, so all three finish here.
  for (int64_t id : {a, b, c}) {
    const nlohmann::json j = show(id);
    EXPECT_EQ(j["state"], "done") << j.dump(1) << r1.err() << r2.err();
    for (const auto& d : j["documents"]) {
      EXPECT_EQ(d["attempts"], 1) << d.dump();
      EXPECT_EQ(d["results"].size(), 1u);
    }
  }
}

TEST_F(CliJobs, DeletedDocumentFailsItsRowMissingFileDoesNot) {
  const auto docs = ingest(3);
  const int64_t id = add_job(docs);
  fs::remove(data_ / "contract1.pdf");  // the library has its text: fine
  ASSERT_EQ(run(with_data({"docs", "remove", "2"})).exit_code, 0);
  const CliResult r = run(with_data({"jobs", "run-due"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("document 2 failed: no document with id 2"), std::string::npos) << r.err;
  const nlohmann::json j = show(id);
  EXPECT_EQ(j["state"], "failed");
  EXPECT_EQ(j["reason"], "1 of 3 documents failed");
  EXPECT_EQ(j["documents"][0]["state"], "done");
  EXPECT_EQ(j["documents"][1]["state"], "failed");
  EXPECT_EQ(j["documents"][1]["reason"], "no document with id 2");
  EXPECT_EQ(j["documents"][1]["title"], "Contract 2");
  EXPECT_EQ(j["documents"][2]["state"], "done");
  const CliResult shown = run(with_data({"jobs", "show", std::to_string(id)}));
  EXPECT_EQ(shown.out.rfind("failed\n", 0), 0u);
  EXPECT_NE(shown.out.find("2. document 2 \"Contract 2\": failed: no document with id 2"),
            std::string::npos)
      << shown.out;
}

TEST_F(CliJobs, DeletedModelFailsTheJobAndOtherJobsRun) {
  const auto docs = ingest(1);
  const fs::path doomed = data_ / "doomed.gguf";
  fs::copy_file(model_, doomed);
  const CliResult add = run(with_data({"jobs", "add", "-m", doomed.string(), "--doc", "1"}));
  ASSERT_EQ(add.exit_code, 0) << add.err;
  const int64_t ok = add_job(docs);
  fs::remove(doomed);
  const CliResult r = run(with_data({"jobs", "run-due"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("2 jobs run: 1 done, 1 failed"), std::string::npos) << r.err;
  const nlohmann::json j = show(1);
  EXPECT_EQ(j["state"], "failed");
  EXPECT_EQ(j["reason"], "model '" + doomed.string() + "': no such file");
  EXPECT_EQ(show(ok)["state"], "done");
  // A file that is not a model: the loader's message.
  test::write_file(doomed, "not a gguf file");
  ASSERT_EQ(run(with_data({"jobs", "add", "-m", doomed.string(), "--doc", "1"})).exit_code, 0);
  EXPECT_EQ(run(with_data({"jobs", "run-due"})).exit_code, 1);
  const std::string reason = show(3)["reason"];
  EXPECT_EQ(reason.rfind("model '" + doomed.string() + "': ", 0), 0u) << reason;
}

TEST_F(CliJobs, SchedulesPriorityCancelAndRetry) {
  const auto docs = ingest(1);
  const int64_t later = add_job(docs, {"--at", "2099-01-01T00:00Z"});
  const int64_t nightly = add_job(docs, {"--nightly", "02:30"});
  const int64_t idle = add_job(docs, {"--when-idle", "--idle-minutes", "100000000"});
  const int64_t gone = add_job(docs);
  ASSERT_EQ(run(with_data({"jobs", "cancel", std::to_string(gone)})).exit_code, 0);
  const CliResult r = run(with_data({"jobs", "run-due"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("0 jobs run"), std::string::npos) << r.err;
  EXPECT_EQ(show(later)["state"], "queued");
  EXPECT_EQ(show(nightly)["schedule"], "nightly");
  EXPECT_EQ(show(idle)["state"], "queued");
  EXPECT_EQ(show(gone)["state"], "cancelled");
  const CliResult again = run(with_data({"jobs", "cancel", std::to_string(gone)}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("job 4 is cancelled: cannot cancel it"), std::string::npos) << again.err;
  ASSERT_EQ(run(with_data({"jobs", "priority", std::to_string(nightly), "5"})).exit_code, 0);
  EXPECT_EQ(show(nightly)["priority"], 5);
  ASSERT_EQ(
      run(with_data({"jobs", "move", std::to_string(idle), "--before", std::to_string(nightly)}))
          .exit_code,
      0);
  const CliResult self =
      run(with_data({"jobs", "move", std::to_string(idle), "--before", std::to_string(idle)}));
  EXPECT_EQ(self.exit_code, 1);
  EXPECT_EQ(self.err, "error: job " + std::to_string(idle) + " cannot move before itself\n");
  const CliResult list = run(with_data({"jobs", "list", "--json"}));
  const nlohmann::json arr = nlohmann::json::parse(list.out);
  ASSERT_GE(arr.size(), 3u);
  EXPECT_EQ(arr[0]["id"], idle);
  EXPECT_EQ(arr[1]["id"], nightly);
  // `run` ignores the schedule.
  ASSERT_EQ(run(with_data({"jobs", "run", std::to_string(later)})).exit_code, 0);
  EXPECT_EQ(show(later)["state"], "done");
  EXPECT_EQ(run(with_data({"jobs", "retry", std::to_string(gone)})).exit_code, 0);
}

TEST_F(CliJobs, AnEndpointJobMatchesTheLocalEngineAndAnUnreachableOneFailsItsDocuments) {
  const auto docs = ingest(2);
  Child server({"serve", "-m", model_, "--port", "0", "-t", "1"}, data_, "serve");
  std::string url;
  for (int i = 0; i < 500 && url.empty(); ++i) {
    const std::string out = test::read_file(data_ / "serve.out");
    const size_t at = out.find("http://");
    if (at != std::string::npos && out.find('\n', at) != std::string::npos)
      url = out.substr(at, out.find('\n', at) - at);
    if (url.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(url.empty()) << server.err();
  const int64_t local = add_job(docs, {"--task", "prompt", "--prompt", "Who signs?"});
  const int64_t remote =
      add_job(docs, {"--task", "prompt", "--prompt", "Who signs?", "--endpoint", url});
  const CliResult r = run(with_data({"jobs", "run-due"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = show(local), b = show(remote);
  ASSERT_EQ(b["state"], "done") << b.dump(1);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(b["documents"][i]["results"][0]["text"], a["documents"][i]["results"][0]["text"]);
    EXPECT_FALSE(a["documents"][i]["results"][0]["text"].get<std::string>().empty());
  }
  server.kill9();
  // Nothing listens there now: connection refused is transient, retried, then the reason.
  const int64_t dead =
      add_job({docs[0]}, {"--task", "prompt", "--prompt", "Who signs?", "--endpoint", url});
  const CliResult d = run(with_data({"jobs", "run-due", "--backoff", "0.01"}));
  EXPECT_EQ(d.exit_code, 1);
  const nlohmann::json j = show(dead);
  EXPECT_EQ(j["state"], "failed");
  const std::string reason = j["documents"][0]["reason"];
  EXPECT_NE(reason.find("(after 3 attempts)"), std::string::npos) << reason;
  EXPECT_NE(reason.find(url), std::string::npos) << reason;
}

TEST_F(CliJobs, BadInputIsRefusedAndNothingIsQueued) {
  ingest(1);
  struct Case {
    std::vector<std::string> args;
    std::string message;
    int exit_code = 1;  // 2: not a value of its kind, refused while parsing
  };
  const std::vector<Case> cases = {
      {{"--doc", "1", "--task", "essay"}, "--task: unknown task 'essay'", 2},
      {{"--doc", "1", "--length", "huge"}, "--length 'huge': use short, medium or long", 2},
      {{"--doc", "9"}, "no document with id 9"},
      {{"--doc", "1", "--nightly", "25:00"}, "--nightly: '25:00' is not a time of day", 2},
      {{"--doc", "1", "--at", "soon"}, "--at: 'soon' is not an ISO 8601 date-time", 2},
      {{"--doc", "1", "--at", "2030-01-01T00:00Z", "--nightly", "02:00"}, "use one of --at"},
      {{"--doc", "1", "--task", "prompt"}, "a prompt job needs --prompt TEXT"},
      {{"--doc", "1", "--prompt", "x"}, "--prompt goes with --task prompt"},
      {{"--doc", "1", "--cache-type-k", "q3"}, "--cache-type-k", 2},
      {{"--doc", "1", "--endpoint", "ftp://x"}, "--endpoint 'ftp://x'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"jobs", "add", "-m", model_};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run(with_data(args));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.message;
    EXPECT_NE(r.err.find("error: " + c.message), std::string::npos) << r.err;
  }
  const CliResult n0 = run(with_data({"jobs", "add", "-m", model_, "--doc", "1", "-n", "0"}));
  EXPECT_EQ(n0.exit_code, 2) << "a value out of range";
  EXPECT_NE(n0.err.find("error: -n must be 1..2147483647, got 0"), std::string::npos) << n0.err;
  const CliResult nomodel = run(with_data({"jobs", "add", "-m", "/no/such.gguf", "--doc", "1"}));
  EXPECT_EQ(nomodel.exit_code, 1);
  EXPECT_NE(nomodel.err.find("-m /no/such.gguf: no such file"), std::string::npos);
  const CliResult list = run(with_data({"jobs", "list"}));
  EXPECT_EQ(list.out, "no jobs\n");
  const CliResult show_missing = run(with_data({"jobs", "show", "3"}));
  EXPECT_EQ(show_missing.exit_code, 1);
  EXPECT_NE(show_missing.err.find("no job with id 3"), std::string::npos);
  const CliResult fmt_bad = run(with_data({"jobs", "export", "1", "--format", "pdf", "-o", "x"}));
  EXPECT_EQ(fmt_bad.exit_code, 2);
  EXPECT_NE(fmt_bad.err.find("--format 'pdf': use md or csv"), std::string::npos) << fmt_bad.err;
}

}  // namespace
}  // namespace spw
