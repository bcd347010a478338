// The job runner with a scripted generator (no model): results stored per document, clause
// rows, a failed document not stopping the others, retries of transient failures, a failed
// result write ("disk full"), a model that does not load, cancel and pause mid-job, a lease
// taken over from a dead runner (and waited for, or skipped, while it runs), deaths at the same
// part (a crash loop) or further on, per-document progress rows, and two runners at once
// processing every document once.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "app/jobs/doc_progress.h"
#include "app/jobs/job_store.h"
#include "app/jobs/jobs.h"
#include "app/jobs/jobs_test_util.h"
#include "app/jobs/runner.h"
#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

using testing::add_test_document;
using testing::Script;
using testing::TempDir;
using testing::test_runner_options;

struct Fixture {
  TempDir tmp{"spillway-runner"};
  std::filesystem::path db = library_db_file(tmp.path());
  std::unique_ptr<JobStore> store;
  std::vector<int64_t> docs;
  std::shared_ptr<Script> script = std::make_shared<Script>();
  explicit Fixture(int n_docs = 3) {
    store = JobStore::open(db).value();
    for (int i = 0; i < n_docs; ++i)
      docs.push_back(add_test_document(db, "contract-" + std::to_string(i + 1)));
  }
  int64_t add(JobTask task = JobTask::Summary, std::vector<int64_t> ids = {}) {
    JobSpec s;
    s.task = task;
    s.doc_ids = ids.empty() ? docs : ids;
    s.model_path = "/models/m.gguf";
    if (task == JobTask::Clauses) s.clauses = {"termination", "governing law", "renewal"};
    if (task == JobTask::Prompt) s.prompt = "Who signs?";
    auto id = store->add(s);
    EXPECT_TRUE(id.ok());
    return *id;
  }
  std::unique_ptr<Runner> runner(const std::string& owner = "R1", RunnerCallbacks cb = {},
                                 std::function<void(RunnerOptions&)> tweak = {}) {
    RunnerOptions o = test_runner_options(db, script, owner);
    if (tweak) tweak(o);
    auto r = Runner::create(std::move(o), std::move(cb));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return std::move(*r);
  }
  std::vector<DocState> states(int64_t job) {
    std::vector<DocState> out;
    auto docs = store->documents(job);  // named: a range-for over *temporary would dangle
    EXPECT_TRUE(docs.ok());
    if (!docs) return out;
    for (const JobDocument& d : *docs) out.push_back(d.state);
    return out;
  }
  int64_t count(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(store->handle(), sql.c_str(), -1, &st, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_step(st), SQLITE_ROW);
    const int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
  }
};

TEST(JobRunner, RunsEveryDocumentAndStoresEachResult) {
  Fixture f;
  const int64_t id = f.add();
  std::vector<std::string> events;
  RunnerCallbacks cb;
  cb.job_state = [&](int64_t, JobState s, const std::string&) {
    events.push_back(std::string("job ") + job_state_name(s));
  };
  cb.document = [&](int64_t, int64_t doc, DocState s, const std::string&) {
    events.push_back(fmt::format("doc {} {}", doc, doc_state_name(s)));
  };
  auto r = f.runner("R1", cb);
  auto sum = r->run_due();
  ASSERT_TRUE(sum.ok()) << sum.error().message;
  EXPECT_EQ(sum->jobs_run, 1);
  EXPECT_EQ(sum->jobs_done, 1);
  EXPECT_EQ(sum->docs_done, 3);
  EXPECT_TRUE(sum->all_ok());
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Done);
  EXPECT_EQ(j->n_done, 3);
  EXPECT_GT(j->started, 0);
  EXPECT_GE(j->finished, j->started);
  EXPECT_TRUE(j->lease_owner.empty());
  EXPECT_DOUBLE_EQ(j->tokens_per_s, 20.0);  // 10 tokens per 0.5 s
  EXPECT_EQ(f.states(id), (std::vector<DocState>(3, DocState::Done)));
  auto results = f.store->results(id);
  ASSERT_EQ(results->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*results)[i].doc_id, f.docs[i]);
    EXPECT_EQ((*results)[i].text,
              fmt::format("Answer for document {}: [p. 1] \"The term ends\"", f.docs[i]));
    ASSERT_EQ((*results)[i].citations.size(), 2u);
    EXPECT_TRUE((*results)[i].citations[0].verified);
    EXPECT_EQ((*results)[i].citations[1].reason, "quote not found on page 2");
  }
  auto docs = f.store->documents(id);
  EXPECT_EQ((*docs)[0].attempts, 1);
  EXPECT_EQ((*docs)[0].generated_tokens, 10);
  EXPECT_EQ(events,
            (std::vector<std::string>{"job running", "doc 1 running", "doc 1 done", "doc 2 running",
                                      "doc 2 done", "doc 3 running", "doc 3 done", "job done"}));
  // Nothing is due any more.
  auto again = r->run_due();
  EXPECT_EQ(again->jobs_run, 0);
  EXPECT_EQ(f.script->total_calls(), 3);
}

// What the generator's session reports reaches the runner's callbacks: its usage (the
// dashboard's telemetry) and its progress events, between the job's document events (documents
// done of the job's, the ETA once one document is timed).
TEST(JobRunner, UsageAndProgressOfEachPromptReachTheCallbacks) {
  Fixture f(2);
  f.add();
  f.script->during = [](const GenRequest& req) {
    SessionUsage u;
    u.n_past = 100 + req.doc_id;
    if (req.usage) req.usage(u);
    ProgressEvent e;
    e.phase = ProgressPhase::Prefill;
    e.done = e.total = 100 + req.doc_id;
    if (req.events) req.events(e);
  };
  std::vector<int64_t> usage_n_past;
  std::vector<ProgressEvent> events;
  RunnerCallbacks cb;
  cb.usage = [&](const SessionUsage& u) { usage_n_past.push_back(u.n_past); };
  cb.events = [&](const ProgressEvent& e) { events.push_back(e); };
  auto r = f.runner("R1", cb);
  ASSERT_TRUE(r->run_due().ok());
  EXPECT_EQ(usage_n_past, (std::vector<int64_t>{100 + f.docs[0], 100 + f.docs[1]}));
  ASSERT_EQ(events.size(), 5u);  // document 0/2, prefill, document 1/2, prefill, document 2/2
  const std::vector<ProgressPhase> phases = {ProgressPhase::Document, ProgressPhase::Prefill,
                                             ProgressPhase::Document, ProgressPhase::Prefill,
                                             ProgressPhase::Document};
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].phase, phases[i]) << i;
  EXPECT_EQ(events[0].done, 0);
  EXPECT_EQ(events[0].total, 2);
  EXPECT_LT(events[0].eta_s, 0);  // nothing timed yet
  EXPECT_EQ(events[1].done, 100 + f.docs[0]);
  EXPECT_EQ(events[2].done, 1);
  EXPECT_GE(events[2].eta_s, 0);  // one document timed
  EXPECT_EQ(events[4].done, 2);
  EXPECT_EQ(events[4].total, 2);
  EXPECT_DOUBLE_EQ(events[4].eta_s, 0.0);
}

TEST(JobRunner, ClausesGiveOneRowPerDocumentAndClause) {
  Fixture f(2);
  f.script->absent_clauses = {"renewal"};
  const int64_t id = f.add(JobTask::Clauses);
  ASSERT_TRUE(f.runner()->run_due().ok());
  auto results = f.store->results(id);
  ASSERT_EQ(results->size(), 6u);
  const std::vector<std::string> order = {"termination", "governing law", "renewal"};
  for (size_t i = 0; i < 6; ++i) {
    const JobResult& r = (*results)[i];
    EXPECT_EQ(r.doc_id, f.docs[i / 3]);
    EXPECT_EQ(r.clause, order[i % 3]);
    if (r.clause == "renewal") {
      EXPECT_FALSE(r.found);
      EXPECT_EQ(r.page, 0);
      EXPECT_EQ(r.quote, "");
    } else {
      EXPECT_TRUE(r.found);
      EXPECT_EQ(r.page, 1);
      EXPECT_EQ(r.quote, "The term ends");
      EXPECT_TRUE(r.verified);
    }
  }
  EXPECT_EQ(f.script->total_calls(), 6);
}

TEST(JobRunner, AFailedDocumentDoesNotStopTheOthersAndRetryRedoesOnlyIt) {
  Fixture f;
  f.script->failures[2].push_back({"no document with id 2", false});
  const int64_t id = f.add();
  auto sum = f.runner()->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->docs_done, 2);
  EXPECT_EQ(sum->docs_failed, 1);
  EXPECT_FALSE(sum->all_ok());
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Failed);
  EXPECT_EQ(j->reason, "1 of 3 documents failed");
  EXPECT_EQ(f.states(id),
            (std::vector<DocState>{DocState::Done, DocState::Failed, DocState::Done}));
  EXPECT_EQ((*f.store->documents(id))[1].reason, "no document with id 2");
  const auto before = *f.store->results(id);
  ASSERT_EQ(before.size(), 2u);

  EXPECT_EQ(*f.store->retry_failed(id), 1);
  EXPECT_EQ(f.store->job(id)->state, JobState::Queued);
  ASSERT_TRUE(f.runner()->run_due().ok());
  EXPECT_EQ(f.store->job(id)->state, JobState::Done);
  EXPECT_EQ(f.script->calls_for(1), 1);  // finished documents are never recomputed
  EXPECT_EQ(f.script->calls_for(2), 2);
  EXPECT_EQ(f.script->calls_for(3), 1);
  const auto after = *f.store->results(id);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[0].text, before[0].text);
  EXPECT_EQ(after[0].created, before[0].created);
  EXPECT_EQ(after[2].text, before[1].text);
}

TEST(JobRunner, TransientFailuresAreRetriedWithBackoff) {
  Fixture f(2);
  f.script->failures[1] = {{"HTTP 503", true}, {"database is locked", true}};
  f.script->failures[2] = {{"timeout", true}, {"timeout", true}, {"timeout", true}};
  const int64_t id = f.add();
  auto sum = f.runner()->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(f.script->calls_for(1), 3);  // two retries, then the answer
  EXPECT_EQ(f.script->calls_for(2), 3);  // three tries (max_attempts), then failed
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[0].state, DocState::Done);
  EXPECT_EQ(docs[0].reason, "");
  EXPECT_EQ(docs[1].state, DocState::Failed);
  EXPECT_EQ(docs[1].reason, "timeout (after 3 attempts)");
}

TEST(JobRunner, AFailedResultWriteFailsThatDocumentWithTheReason) {
  Fixture f;
  const int64_t id = f.add();
  auto r = f.runner("R1", {}, [&](RunnerOptions& o) {
    o.result_write_hook = [&](int64_t, int64_t doc) -> Status {
      if (doc == f.docs[1]) return Error{"database or disk is full (13)"};
      return Status::Ok();
    };
  });
  auto sum = r->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(f.states(id),
            (std::vector<DocState>{DocState::Done, DocState::Failed, DocState::Done}));
  EXPECT_EQ((*f.store->documents(id))[1].reason,
            "cannot store the result: database or disk is full (13)");
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_results WHERE doc_id = 2"), 0);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_results"), 2);
}

TEST(JobRunner, AModelThatDoesNotLoadFailsTheJob) {
  Fixture f(2);
  const int64_t id = f.add();
  // The real local engine: the model file is not there.
  auto r = f.runner("R1", {}, [](RunnerOptions& o) { o.generator = {}; });
  auto sum = r->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->jobs_failed, 1);
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Failed);
  EXPECT_EQ(j->reason, "model '/models/m.gguf': no such file");
  EXPECT_EQ(f.states(id), (std::vector<DocState>(2, DocState::Pending)));
  EXPECT_TRUE(j->lease_owner.empty());
}

TEST(JobRunner, CancelMidJobStopsAtTheRunningDocument) {
  Fixture f;
  const int64_t id = f.add();
  auto other = JobStore::open(f.db);
  f.script->during = [&](const GenRequest& req) {
    if (req.doc_id != f.docs[1]) return;
    ASSERT_TRUE((*other)->cancel(id).ok());
    for (int i = 0; i < 500 && !req.cancelled(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  auto sum = f.runner()->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->jobs_cancelled, 1);
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Cancelled);
  EXPECT_TRUE(j->lease_owner.empty());
  EXPECT_EQ(f.states(id),
            (std::vector<DocState>{DocState::Done, DocState::Pending, DocState::Pending}));
  EXPECT_EQ(f.script->calls_for(3), 0);
}

TEST(JobRunner, PauseMidJobRequeuesAndResumeFinishesWithoutRecomputing) {
  Fixture f;
  const int64_t id = f.add();
  auto other = JobStore::open(f.db);
  bool paused_once = false;
  f.script->during = [&](const GenRequest& req) {
    if (req.doc_id != f.docs[1] || paused_once) return;
    paused_once = true;
    ASSERT_TRUE((*other)->set_paused(id, true).ok());
    for (int i = 0; i < 500 && !req.cancelled(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  ASSERT_TRUE(f.runner()->run_due().ok());
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Queued);
  EXPECT_TRUE(j->paused);
  EXPECT_EQ(f.states(id),
            (std::vector<DocState>{DocState::Done, DocState::Pending, DocState::Pending}));
  EXPECT_EQ(f.runner()->run_due()->jobs_run, 0);  // paused: not due
  ASSERT_TRUE(f.store->set_paused(id, false).ok());
  ASSERT_TRUE(f.runner()->run_due().ok());
  EXPECT_EQ(f.store->job(id)->state, JobState::Done);
  EXPECT_EQ(f.script->calls_for(1), 1);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_results"), 3);
}

TEST(JobRunner, ALeaseWithoutHeartbeatIsTakenOverAtTheFirstUnfinishedDocument) {
  Fixture f(4);
  const int64_t id = f.add();
  sqlite3* db = f.store->handle();
  // A runner "dead" finished document 1, was working on document 2 and then stopped beating.
  std::string why;
  const int64_t long_ago = jobs_db::now_ms() - 60000;
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, "dead", long_ago, 1000, 1, &why),
            jobs_db::LeaseResult::Acquired);
  bool stop = false;
  ASSERT_TRUE(jobs_db::claim_next_document(db, id, "dead", long_ago, &stop)->has_value());
  JobResult r1;
  r1.text = "finished by the dead runner";
  ASSERT_TRUE(
      *jobs_db::store_document_results(db, id, f.docs[0], "dead", {r1}, {}, long_ago, 1, {}));
  ASSERT_TRUE(jobs_db::claim_next_document(db, id, "dead", long_ago, &stop)->has_value());
  EXPECT_EQ(f.store->job(id)->state, JobState::Running);

  auto sum = f.runner("R2")->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->docs_done, 3);
  EXPECT_EQ(f.store->job(id)->state, JobState::Done);
  EXPECT_EQ(f.script->calls_for(f.docs[0]), 0);
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[1].attempts, 2);
  EXPECT_EQ(docs[2].attempts, 1);
  auto results = *f.store->results(id);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].text, "finished by the dead runner");
}

// A runner that claims job `id`'s next document, writes its progress at `part` of `n_parts`
// and dies there (its lease expired long ago, its claim still running).
void die_at(sqlite3* db, int64_t id, const std::string& owner, int part, int n_parts) {
  std::string why;
  // Each death a little later than the one before, all long ago (their leases expired).
  static int64_t clock_ms = jobs_db::now_ms() - 3600 * 1000;
  clock_ms += 2000;
  const int64_t long_ago = clock_ms;
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, owner, long_ago, 1000, 1, &why),
            jobs_db::LeaseResult::Acquired)
      << why;
  bool stop = false;
  auto doc = jobs_db::claim_next_document(db, id, owner, long_ago, &stop);
  ASSERT_TRUE(doc.ok() && doc->has_value());
  JobDocumentProgress p;
  p.phase = "prefill";
  p.n_prompts = 1;
  p.part = part;
  p.n_parts = n_parts;
  p.parts_done = part - 1;
  p.updated_ms = long_ago;
  ASSERT_TRUE(jobs_db::write_document_progress(db, id, (*doc)->doc_id, owner, p).ok());
}

TEST(JobRunner, ThreeDeathsAtTheSamePartAreACrashLoopAndTheDocumentIsGivenUp) {
  Fixture f(2);
  const int64_t id = f.add();
  sqlite3* db = f.store->handle();
  for (int i = 0; i < 3; ++i) die_at(db, id, "dead" + std::to_string(i), 2, 5);
  // The second and third runners found the document orphaned at part 2: two deaths there so
  // far; this runner finds the third.
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 2);
  std::vector<std::string> notes;
  RunnerCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  ASSERT_TRUE(f.runner("R", cb)->run_due().ok());
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[0].state, DocState::Failed);
  EXPECT_EQ(docs[0].deaths, 3);
  EXPECT_EQ(docs[0].reason,
            "given up: its runner died 3 times in a row at part 2 of 5 without getting further "
            "(a crash loop; 'jobs retry 1' tries it again)");
  EXPECT_EQ(docs[1].state, DocState::Done);
  EXPECT_EQ(f.script->calls_for(f.docs[0]), 0);
  EXPECT_EQ(f.store->job(id)->state, JobState::Failed);
  // Retried, it runs again from a clean count.
  ASSERT_EQ(*f.store->retry_failed(id), 1);
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 0);
  ASSERT_TRUE(f.runner("R")->run_due().ok());
  EXPECT_EQ(f.store->job(id)->state, JobState::Done);
  EXPECT_EQ(f.script->calls_for(f.docs[0]), 1);
}

TEST(JobRunner, ARunStoppedOnPurposeBreaksARowOfDeaths) {
  Fixture f(1);
  const int64_t id = f.add();
  sqlite3* db = f.store->handle();
  die_at(db, id, "dead1", 2, 5);
  die_at(db, id, "dead2", 2, 5);
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 1);
  // A live runner takes it (the second death there) and is stopped: Stop, pause, SIGTERM.
  std::string why;
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, "live", jobs_db::now_ms(), 1, 1, &why),
            jobs_db::LeaseResult::Acquired);
  bool stop = false;
  auto c = jobs_db::claim_next_document(db, id, "live", jobs_db::now_ms(), &stop);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->deaths, 2);
  ASSERT_TRUE(jobs_db::release_document(db, id, (*c)->doc_id, "live").ok());
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 0);
  // Two more deaths at part 2: not yet a crash loop (two in a row), so the runner finishes it.
  ASSERT_TRUE(jobs_db::release_lease(db, id, "live").ok());
  die_at(db, id, "dead3", 2, 5);
  die_at(db, id, "dead4", 2, 5);
  ASSERT_TRUE(f.runner()->run_due().ok());
  EXPECT_EQ((*f.store->documents(id))[0].state, DocState::Done);
}

TEST(JobRunner, DeathsAtAdvancingPartsAreNotCountedAndTheJobFinishes) {
  Fixture f(1);
  const int64_t id = f.add();
  sqlite3* db = f.store->handle();
  // Killed seven times, each time one part further (the first claim's death is found by the
  // second runner, and so on).
  for (int k = 1; k <= 7; ++k) {
    die_at(db, id, "dead" + std::to_string(k), k, 8);
    EXPECT_EQ((*f.store->documents(id))[0].deaths, k == 1 ? 0 : 1) << "after the death at " << k;
  }
  // A death no further than the one before counts: part 7 again, then part 6.
  die_at(db, id, "again", 7, 8);
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 1);  // the death at 7 found here
  die_at(db, id, "earlier", 6, 8);
  EXPECT_EQ((*f.store->documents(id))[0].deaths, 2);  // 7 again: a repeat
  std::vector<std::string> notes;
  RunnerCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  ASSERT_TRUE(f.runner("R", cb)->run_due().ok());  // finds 6 after 7: a third death there
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[0].state, DocState::Failed);
  EXPECT_NE(docs[0].reason.find("died 3 times in a row at part 6 of 8"), std::string::npos)
      << docs[0].reason;

  // The same seven advancing deaths on a fresh job, then a runner that lives: done.
  const int64_t id2 = f.add();
  for (int k = 1; k <= 7; ++k) die_at(db, id2, "dead" + std::to_string(k), k, 8);
  notes.clear();
  ASSERT_TRUE(f.runner("R", cb)->run_job(id2).ok());
  docs = *f.store->documents(id2);
  EXPECT_EQ(docs[0].state, DocState::Done) << docs[0].reason;
  EXPECT_EQ(docs[0].attempts, 8);
  EXPECT_EQ(docs[0].deaths, 0);
  bool said = false;
  for (const std::string& n : notes)
    said = said || n.find("its last runner died at part 7 of 8; resuming (1 of 3 deaths") !=
                       std::string::npos;
  EXPECT_TRUE(said);
}

TEST(JobRunner, EachDocumentsProgressIsStoredAsItRuns) {
  Fixture f(2);
  const int64_t id = f.add();
  f.script->parts[f.docs[0]] = 4;
  std::vector<JobDocumentProgress> seen;
  auto reader = JobStore::open(f.db).value();  // another connection, as the Jobs dock has
  f.script->at_part = [&](int64_t doc, int) {
    auto docs = reader->documents(id);
    ASSERT_TRUE(docs.ok());
    for (const JobDocument& d : *docs)
      if (d.doc_id == doc) seen.push_back(d.progress);
  };
  ASSERT_TRUE(f.runner()->run_due().ok());
  // Each part's start is written at once; its part event (k of 4 done) too.
  ASSERT_EQ(seen.size(), 4u);
  for (int k = 1; k <= 4; ++k) {
    const JobDocumentProgress& p = seen[static_cast<size_t>(k - 1)];
    EXPECT_TRUE(p.known);
    EXPECT_EQ(p.phase, "part") << k;
    EXPECT_EQ(p.part, k);
    EXPECT_EQ(p.n_parts, 4);
    EXPECT_EQ(p.parts_done, k);
    EXPECT_EQ(p.tokens_done, 50);  // the part's prefill event
    EXPECT_EQ(p.tokens_total, 100);
    EXPECT_DOUBLE_EQ(p.eta_s, 10.0 * (4 - k));
    EXPECT_GT(p.updated_ms, 0);
  }
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[0].state, DocState::Done);
  EXPECT_EQ(docs[0].n_parts, 4);
  EXPECT_EQ(docs[0].parts_kept, 0);
  EXPECT_EQ(docs[0].progress.part, 5);  // the combination
  EXPECT_EQ(docs[0].progress.parts_done, 4);
  // Not map-reduce: the prompt's row only.
  EXPECT_TRUE(docs[1].progress.known);
  EXPECT_EQ(docs[1].progress.n_parts, 0);
  EXPECT_EQ(docs[1].progress.n_prompts, 1);
  EXPECT_EQ(docs[1].n_parts, 0);
  // Every request asks to keep stored parts.
  bool all_continue = true;
  f.script->during = [&](const GenRequest& r) { all_continue = all_continue && r.continue_parts; };
  ASSERT_TRUE(f.runner()->run_job(f.add()).ok());
  EXPECT_TRUE(all_continue);
}

TEST(JobRunner, ProgressWritesAreThrottledExceptAtPartsAndPrompts) {
  Fixture f(1);
  const int64_t id = f.add();
  sqlite3* db = f.store->handle();
  std::string why;
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, "W", jobs_db::now_ms(), 60000, 1, &why),
            jobs_db::LeaseResult::Acquired);
  bool stop = false;
  auto doc = jobs_db::claim_next_document(db, id, "W", jobs_db::now_ms(), &stop);
  ASSERT_TRUE(doc.ok() && doc->has_value());
  double now = 100;
  DocProgressWriter::Params p;
  p.db = db;
  p.job_id = id;
  p.doc_id = (*doc)->doc_id;
  p.owner = "W";
  p.n_prompts = 2;
  p.clock = [&] { return now; };
  p.now_ms = [&] { return static_cast<int64_t>(now * 1000); };
  DocProgressWriter w(p);
  w.prompt_begin(0);
  EXPECT_EQ(w.writes(), 1);
  ProgressEvent e;
  e.phase = ProgressPhase::Prefill;
  e.total = 1000;
  for (int i = 1; i <= 25; ++i) {  // 2.5 s of ubatch events, ten a second
    now = 100 + i * 0.1;
    e.done = 40 * i;
    e.eta_s = (1000 - e.done) / 400.0;
    w.event(e);
  }
  EXPECT_EQ(w.writes(), 3);  // at 101.0 and 102.0 (plus the prompt's start)
  auto row = (*f.store->documents(id))[0].progress;
  EXPECT_EQ(row.phase, "prefill");
  EXPECT_EQ(row.tokens_done, 800);  // as written at 102.0, not the latest 1000
  EXPECT_EQ(row.updated_ms, 102000);
  w.part_start(1, 3);
  EXPECT_EQ(w.writes(), 4);
  // The second prompt: its ETA counts it at the first prompt's time (3 s).
  now += 0.5;
  w.prompt_begin(1);
  EXPECT_EQ(w.writes(), 5);
  row = (*f.store->documents(id))[0].progress;
  EXPECT_EQ(row.prompt, 1);
  EXPECT_EQ(row.n_prompts, 2);
  EXPECT_EQ(row.n_parts, 0);
  EXPECT_NEAR(row.eta_s, 3.0, 1e-9);
  // A runner whose claim was lost writes nothing.
  ASSERT_TRUE(jobs_db::release_document(db, id, (*doc)->doc_id, "W").ok());
  now += 5;
  w.event(e);
  EXPECT_EQ((*f.store->documents(id))[0].progress.updated_ms, row.updated_ms);
}

TEST(JobRunner, ALiveLeaseIsLeftAlone) {
  Fixture f(1);
  const int64_t id = f.add();
  std::string why;
  ASSERT_EQ(
      *jobs_db::acquire_lease(f.store->handle(), id, "alive", jobs_db::now_ms(), 600000, 1, &why),
      jobs_db::LeaseResult::Acquired);
  std::vector<std::string> notes;
  RunnerCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  auto r = f.runner("R2", cb);
  auto one = r->run_job(id);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.error().message, "job 1 is running in another runner (alive)");
  auto sum = r->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->jobs_run, 0);
  EXPECT_TRUE(sum->all_ok());
  EXPECT_EQ(f.script->total_calls(), 0);
  // Said once, with the time left on the lease (600 s less the moments since).
  ASSERT_EQ(notes.size(), 1u);
  const std::string head = "job 1: skipped: runner alive holds its lease for ";
  ASSERT_EQ(notes[0].rfind(head, 0), 0u) << notes[0];
  const double left = std::stod(notes[0].substr(head.size()));
  EXPECT_GT(left, 590);
  EXPECT_LE(left, 600);
  EXPECT_NE(notes[0].find(" s more (renewed while that runner lives"), std::string::npos);
  ASSERT_TRUE(r->run_due().ok());
  EXPECT_EQ(notes.size(), 1u);
}

// The pid of a process that has ended (reaped).
int64_t ended_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(JobRunner, ADeadRunnersLeaseOnThisHostIsWaitedForAndTheJobResumed) {
  Fixture f(2);
  const int64_t id = f.add();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const int64_t pid = ended_pid();
  const std::string dead = fmt::format("{}:{}:0000beef", host, pid);
  std::string why;
  ASSERT_EQ(*jobs_db::acquire_lease(f.store->handle(), id, dead, jobs_db::now_ms(), 800, 1, &why),
            jobs_db::LeaseResult::Acquired);
  std::vector<std::string> notes;
  RunnerCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const auto t0 = std::chrono::steady_clock::now();
  auto sum = f.runner("R2", cb)->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(sum->jobs_run, 1);
  EXPECT_EQ(f.store->job(id)->state, JobState::Done);
  ASSERT_FALSE(notes.empty());
  const std::string want =
      fmt::format("job 1: its runner {} has ended (process {}); waiting 0.", dead, pid);
  EXPECT_EQ(notes[0].rfind(want, 0), 0u) << notes[0];
  EXPECT_NE(notes[0].find(" s for its lease to expire, then resuming it"), std::string::npos);

  // A lease longer than ours is not waited for: skipped, with the time left.
  const int64_t id2 = f.add();
  ASSERT_EQ(
      *jobs_db::acquire_lease(f.store->handle(), id2, dead, jobs_db::now_ms(), 300000, 1, &why),
      jobs_db::LeaseResult::Acquired);
  notes.clear();
  sum = f.runner("R3", cb)->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->jobs_run, 0);
  ASSERT_EQ(notes.size(), 1u);
  const std::string skip = fmt::format(
      "job {}: skipped: its runner {} has ended (process {}) but its lease runs ", id2, dead, pid);
  ASSERT_EQ(notes[0].rfind(skip, 0), 0u) << notes[0];
  const double runs = std::stod(notes[0].substr(skip.size()));
  EXPECT_GT(runs, 290);
  EXPECT_LE(runs, 300);
  EXPECT_NE(notes[0].find(" s more; run-due again after that resumes it"), std::string::npos);
}

TEST(JobRunner, TwoRunnersAtOnceProcessEveryDocumentOnce) {
  Fixture f(6);
  const int64_t a = f.add(JobTask::Summary, {f.docs[0], f.docs[1], f.docs[2]});
  const int64_t b = f.add(JobTask::Summary, {f.docs[3], f.docs[4], f.docs[5]});
  const int64_t c = f.add(JobTask::Prompt);
  f.script->during = [](const GenRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  std::vector<RunSummary> sums(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      auto r = f.runner("R" + std::to_string(i));
      auto s = r->run_due();
      ASSERT_TRUE(s.ok()) << s.error().message;
      sums[static_cast<size_t>(i)] = *s;
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t id : {a, b, c}) EXPECT_EQ(f.store->job(id)->state, JobState::Done) << id;
  EXPECT_EQ(sums[0].docs_done + sums[1].docs_done, 12);
  EXPECT_EQ(f.script->total_calls(), 12);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_results"), 12);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_documents WHERE attempts != 1"), 0);
}

}  // namespace
}  // namespace spw::app
