// The job runner with a scripted generator (no model): results stored per document, clause
// rows, a failed document not stopping the others, retries of transient failures, a failed
// result write ("disk full"), a model that does not load, cancel and pause mid-job, a lease
// taken over from a dead runner, and two runners at once processing every document once.
#include <sqlite3.h>

#include <thread>

#include <gtest/gtest.h>

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

TEST(JobRunner, ADocumentWhoseRunsKeepDyingIsGivenUp) {
  Fixture f(2);
  const int64_t id = f.add();
  // Seven runners died on document 1 (each claim counts an attempt).
  ASSERT_EQ(
      sqlite3_exec(f.store->handle(), "UPDATE job_documents SET attempts = 6 WHERE position = 0",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  ASSERT_TRUE(f.runner()->run_due().ok());
  auto docs = *f.store->documents(id);
  EXPECT_EQ(docs[0].state, DocState::Failed);
  EXPECT_EQ(docs[0].reason, "given up after 6 runs that each stopped before it finished");
  EXPECT_EQ(docs[1].state, DocState::Done);
  EXPECT_EQ(f.script->calls_for(f.docs[0]), 0);
}

TEST(JobRunner, ALiveLeaseIsLeftAlone) {
  Fixture f(1);
  const int64_t id = f.add();
  std::string why;
  ASSERT_EQ(
      *jobs_db::acquire_lease(f.store->handle(), id, "alive", jobs_db::now_ms(), 600000, 1, &why),
      jobs_db::LeaseResult::Acquired);
  auto r = f.runner("R2");
  auto one = r->run_job(id);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.error().message, "job 1 is running in another runner (alive)");
  auto sum = r->run_due();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->jobs_run, 0);
  EXPECT_TRUE(sum->all_ok());
  EXPECT_EQ(f.script->total_calls(), 0);
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
