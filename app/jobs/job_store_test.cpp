// The job store: checks on add (nothing stored on error), run order by priority and position,
// due rules, state changes and their errors, the per-document claim and lease rules of the
// runner's side (app/jobs/job_store.h) on rows read back from SQLite.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include "app/jobs/job_store.h"
#include "app/jobs/jobs.h"
#include "app/jobs/jobs_test_util.h"
#include "app/store/migrations.h"
#include "app/store/search_tokenizer.h"
#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

using testing::add_test_document;
using testing::TempDir;

struct Fixture {
  TempDir tmp{"spillway-jobs"};
  std::filesystem::path db = library_db_file(tmp.path());
  std::unique_ptr<JobStore> store;
  std::vector<int64_t> docs;
  explicit Fixture(int n_docs = 3) {
    auto s = JobStore::open(db);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    store = std::move(*s);
    for (int i = 0; i < n_docs; ++i)
      docs.push_back(add_test_document(db, "contract-" + std::to_string(i + 1)));
  }
  JobSpec spec(std::vector<int64_t> ids = {}) const {
    JobSpec s;
    s.task = JobTask::Summary;
    s.doc_ids = ids.empty() ? docs : ids;
    s.model_path = "/models/m.gguf";
    return s;
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

TEST(JobStore, AddStoresTheJobAndItsDocumentsInOrder) {
  Fixture f;
  auto id = f.store->add(f.spec({f.docs[2], f.docs[0]}));
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(*id, 1);
  auto j = f.store->job(*id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, JobState::Queued);
  EXPECT_EQ(j->spec.title, "summary of 2 documents");
  EXPECT_EQ(j->n_docs, 2);
  EXPECT_EQ(j->n_done, 0);
  EXPECT_EQ(j->spec.model_path, "/models/m.gguf");
  EXPECT_EQ(j->spec.n_predict, 256);
  auto docs = f.store->documents(*id);
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].doc_id, f.docs[2]);
  EXPECT_EQ((*docs)[0].title, "contract-3");
  EXPECT_EQ((*docs)[0].state, DocState::Pending);
  EXPECT_EQ((*docs)[1].doc_id, f.docs[0]);
  EXPECT_EQ((*docs)[1].position, 1);
}

TEST(JobStore, BadJobsAreRefusedAndNothingIsStored) {
  Fixture f;
  auto expect_error = [&](JobSpec s, const std::string& part) {
    auto id = f.store->add(s);
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.error().message.find(part), std::string::npos) << id.error().message;
  };
  expect_error(f.spec({f.docs[0], 999}), "no document with id 999");
  expect_error(f.spec({f.docs[0], f.docs[0]}), "listed twice");
  JobSpec s = f.spec();
  s.doc_ids.clear();
  expect_error(s, "at least one document");
  s = f.spec();
  s.task = JobTask::Prompt;
  s.prompt = "  ";
  expect_error(s, "--prompt");
  s = f.spec();
  s.n_predict = 0;
  expect_error(s, "-n 0");
  s = f.spec();
  s.summary_length = "huge";
  expect_error(s, "short, medium or long");
  s = f.spec();
  s.model_path.clear();
  expect_error(s, "model");
  s = f.spec();
  s.schedule.kind = ScheduleKind::Nightly;
  s.schedule.nightly_minute = 1440;
  expect_error(s, "--nightly");
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM jobs"), 0);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_documents"), 0);
}

TEST(JobStore, ClausesDefaultToTheFiveCommonTypes) {
  Fixture f(1);
  JobSpec s = f.spec();
  s.task = JobTask::Clauses;
  auto id = f.store->add(s);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(f.store->job(*id)->spec.clauses, default_clause_types());
  auto list = parse_clause_list(" Termination ; governing law,termination,, renewal ");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, (std::vector<std::string>{"Termination", "governing law", "renewal"}));
  EXPECT_FALSE(parse_clause_list(" , ;").ok());
}

TEST(JobStore, RunOrderFollowsPriorityThenPosition) {
  Fixture f(1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.store->add(f.spec()).ok());
  DueContext ctx;
  ctx.now = 4102444800;  // 2100: everything "now" is due
  auto order = [&]() {
    auto d = f.store->due_jobs(ctx, 0);
    EXPECT_TRUE(d.ok());
    return *d;
  };
  EXPECT_EQ(order(), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(f.store->set_priority(3, 5).ok());
  EXPECT_EQ(order(), (std::vector<int64_t>{3, 1, 2}));
  ASSERT_TRUE(f.store->move_before(2, 1).ok());
  EXPECT_EQ(order(), (std::vector<int64_t>{3, 2, 1}));
  ASSERT_TRUE(f.store->move_before(3, 0).ok());  // to the end of priority 5: still first
  EXPECT_EQ(order(), (std::vector<int64_t>{3, 2, 1}));
  ASSERT_TRUE(f.store->move_before(3, 1).ok());  // before job 1: takes its priority 0
  EXPECT_EQ(order(), (std::vector<int64_t>{2, 3, 1}));
  ASSERT_TRUE(f.store->cancel(1).ok());
  EXPECT_EQ(order(), (std::vector<int64_t>{2, 3}));
  auto st = f.store->set_priority(1, 9);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "job 1 is cancelled: cannot change its priority");
  EXPECT_FALSE(f.store->move_before(2, 1).ok());
  EXPECT_FALSE(f.store->set_priority(42, 1).ok());
}

TEST(JobStore, DueRulesForEachSchedule) {
  Fixture f(1);
  f.store->set_clock([] { return int64_t{1000000}; });
  JobSpec at = f.spec();
  at.schedule.kind = ScheduleKind::At;
  at.schedule.at = 1000500;
  JobSpec idle = f.spec();
  idle.schedule.kind = ScheduleKind::WhenIdle;
  idle.schedule.idle_minutes = 15;
  const int64_t a = *f.store->add(at), i = *f.store->add(idle), n = *f.store->add(f.spec());
  DueContext ctx;
  ctx.now = 1000100;
  ctx.last_interactive = 1000000;  // 100 s ago
  ctx.load_1min = 0.2;
  EXPECT_EQ(*f.store->due_jobs(ctx, 0), (std::vector<int64_t>{n}));
  ctx.now = 1000500;  // the --at time
  EXPECT_EQ(*f.store->due_jobs(ctx, 0), (std::vector<int64_t>{a, n}));
  ctx.now = 1000000 + 15 * 60;  // idle for 15 minutes
  EXPECT_EQ(*f.store->due_jobs(ctx, 0), (std::vector<int64_t>{a, i, n}));
  ctx.load_1min = 1.5;  // busy machine: the idle job waits
  EXPECT_EQ(*f.store->due_jobs(ctx, 0), (std::vector<int64_t>{a, n}));
  ctx.load_1min = 0.2;
  ASSERT_TRUE(f.store->set_paused(a, true).ok());
  EXPECT_EQ(*f.store->due_jobs(ctx, 0), (std::vector<int64_t>{i, n}));
  ASSERT_TRUE(f.store->set_paused(a, false).ok());
  // run_now makes a future --at job due now.
  JobSpec later = f.spec();
  later.schedule.kind = ScheduleKind::At;
  later.schedule.at = 9000000;
  const int64_t l = *f.store->add(later);
  EXPECT_EQ(f.store->due_jobs(ctx, 0)->size(), 3u);
  ASSERT_TRUE(f.store->run_now(l).ok());
  EXPECT_EQ(f.store->due_jobs(ctx, 0)->size(), 4u);
}

TEST(JobStore, NightlyJobsAreDueAtTheirNextOccurrence) {
  Fixture f(1);
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  f.store->set_clock([] { return int64_t{86400 * 100 + 3600 * 22}; });  // 22:00 UTC
  JobSpec s = f.spec();
  s.schedule.kind = ScheduleKind::Nightly;
  s.schedule.nightly_minute = 150;
  const int64_t id = *f.store->add(s);
  EXPECT_EQ(f.store->job(id)->due, 86400 * 101 + 150 * 60);
  ::unsetenv("TZ");
  ::tzset();
}

TEST(JobStore, CancelAndItsErrors) {
  Fixture f(1);
  const int64_t id = *f.store->add(f.spec());
  ASSERT_TRUE(f.store->cancel(id).ok());
  auto j = f.store->job(id);
  EXPECT_EQ(j->state, JobState::Cancelled);
  EXPECT_EQ(j->reason, "cancelled by the user");
  auto again = f.store->cancel(id);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, "job 1 is cancelled: cannot cancel it");
  EXPECT_EQ(f.store->cancel(7).error().message, "no job with id 7");
  ASSERT_TRUE(f.store->remove(id).ok());
  EXPECT_FALSE(f.store->job(id).ok());
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_documents"), 0);
}

TEST(JobStore, ClaimsFollowTheLeaseAndAStaleOwnerCannotStore) {
  Fixture f(2);
  const int64_t id = *f.store->add(f.spec());
  sqlite3* db = f.store->handle();
  std::string why;
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, "A", 1000, 500, 1, &why),
            jobs_db::LeaseResult::Acquired);
  EXPECT_EQ(f.store->job(id)->state, JobState::Running);
  // B cannot take a live lease.
  EXPECT_EQ(*jobs_db::acquire_lease(db, id, "B", 1400, 500, 1, &why),
            jobs_db::LeaseResult::HeldByOther);
  EXPECT_EQ(why, "A");
  bool stop = false;
  auto c = jobs_db::claim_next_document(db, id, "A", 1000, &stop);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->doc_id, f.docs[0]);
  // B without the lease claims nothing and is told to stop.
  auto cb = jobs_db::claim_next_document(db, id, "B", 1000, &stop);
  ASSERT_TRUE(cb.ok());
  EXPECT_FALSE(cb->has_value());
  EXPECT_TRUE(stop);
  // A's heartbeat stops; at 1600 the lease (expiring at 1500) is B's.
  ASSERT_EQ(*jobs_db::acquire_lease(db, id, "B", 1600, 500, 1, &why),
            jobs_db::LeaseResult::Acquired);
  EXPECT_FALSE(*jobs_db::renew_lease(db, id, "A", 1700, 500));
  // B resumes at the first unfinished document: the one A left running.
  auto c2 = jobs_db::claim_next_document(db, id, "B", 1600, &stop);
  ASSERT_TRUE(c2.ok() && c2->has_value());
  EXPECT_EQ((*c2)->doc_id, f.docs[0]);
  EXPECT_EQ((*c2)->attempts, 2);
  // A wakes up and tries to store: refused, nothing written.
  JobResult r;
  r.text = "from A";
  auto stale = jobs_db::store_document_results(db, id, f.docs[0], "A", {r}, {}, 1800, 2, {});
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(*stale);
  EXPECT_EQ(f.count("SELECT COUNT(*) FROM job_results"), 0);
  r.text = "from B";
  ASSERT_TRUE(*jobs_db::store_document_results(db, id, f.docs[0], "B", {r}, {}, 1800, 2, {}));
  // Storing twice is refused too (the claim ended with the first).
  EXPECT_FALSE(*jobs_db::store_document_results(db, id, f.docs[0], "B", {r}, {}, 1800, 2, {}));
  auto results = f.store->results(id);
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].text, "from B");
}

// A library made by schema 8 (before the per-document progress of migration 009), with a job
// half done in it: opened now, its documents read back with no progress and no deaths, and the
// runner's progress rows and crash counts work on it.
TEST(JobStoreMigration, AJobOfTheSchemaBeforeProgressRowsIsReadAndRunsOn) {
  TempDir tmp{"spillway-jobs-migrate"};
  const std::filesystem::path file = library_db_file(tmp.path());
  const auto all = migrations();
  ASSERT_GE(all.size(), 9u);
  ASSERT_STREQ(all[8].name, "job_document_progress");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    ASSERT_TRUE(register_search_tokenizer(db).ok());  // 006 makes the index with it
    for (size_t i = 0; i < 8; ++i) {
      ASSERT_EQ(sqlite3_exec(db, all[i].sql, nullptr, nullptr, nullptr), SQLITE_OK)
          << all[i].name << ": " << sqlite3_errmsg(db);
    }
    const char* rows =
        "PRAGMA user_version = 8;"
        "INSERT INTO documents (id, sha256, title, path, n_pages, n_chars, added_at) VALUES "
        "(1, 'a', 'A', '/a.pdf', 1, 0, 0), (2, 'b', 'B', '/b.pdf', 1, 0, 0);"
        "INSERT INTO jobs (id, title, task, params, model_path, state, created) VALUES "
        "(1, 'old job', 'summary', '{}', '/m.gguf', 'running', 5);"
        "INSERT INTO job_documents (job_id, doc_id, position, title, state, attempts, "
        "generated_tokens) VALUES (1, 1, 0, 'A', 'done', 1, 42), (1, 2, 1, 'B', 'running', 2, 0);"
        "INSERT INTO job_results (job_id, doc_id, text, created) VALUES (1, 1, 'kept', 5);";
    ASSERT_EQ(sqlite3_exec(db, rows, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = JobStore::open(file);
  ASSERT_TRUE(store.ok()) << store.error().message;
  sqlite3* db = (*store)->handle();
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), static_cast<int>(all.size()));
  sqlite3_finalize(st);
  auto docs = (*store)->documents(1);
  ASSERT_TRUE(docs.ok()) << docs.error().message;
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].state, DocState::Done);
  EXPECT_EQ((*docs)[0].generated_tokens, 42);
  EXPECT_EQ((*docs)[1].attempts, 2);
  for (const JobDocument& d : *docs) {
    EXPECT_FALSE(d.progress.known);
    EXPECT_EQ(d.progress.eta_s, -1);
    EXPECT_EQ(d.deaths, 0);
    EXPECT_EQ(d.n_parts, 0);
    EXPECT_EQ(d.parts_kept, 0);
  }
  EXPECT_EQ((*(*store)->results(1))[0].text, "kept");
  // The old runner (owner '') is gone; a new one claims document 2: one death, at its start.
  std::string why;
  ASSERT_EQ(*jobs_db::acquire_lease(db, 1, "new", 1000, 500, 1, &why),
            jobs_db::LeaseResult::Acquired);
  bool stop = false;
  auto c = jobs_db::claim_next_document(db, 1, "new", 1000, &stop);
  ASSERT_TRUE(c.ok() && c->has_value()) << (c.ok() ? "" : c.error().message);
  EXPECT_EQ((*c)->doc_id, 2);
  EXPECT_EQ((*c)->deaths, 1);
  JobDocumentProgress p;
  p.phase = "decode";
  p.n_prompts = 1;
  p.tokens_done = 7;
  p.tokens_total = 24;
  p.eta_s = 1.5;
  p.updated_ms = 1234;
  ASSERT_TRUE(jobs_db::write_document_progress(db, 1, 2, "new", p).ok());
  const JobDocument d2 = (*(*store)->documents(1))[1];
  EXPECT_TRUE(d2.progress.known);
  EXPECT_EQ(d2.progress.phase, "decode");
  EXPECT_EQ(d2.progress.tokens_done, 7);
  EXPECT_EQ(d2.progress.tokens_total, 24);
  EXPECT_DOUBLE_EQ(d2.progress.eta_s, 1.5);
  EXPECT_EQ(d2.progress.updated_ms, 1234);
  EXPECT_EQ(d2.deaths, 1);
  // Removing the job removes its progress rows.
  ASSERT_TRUE(jobs_db::requeue_job(db, 1, "new").ok());
  ASSERT_TRUE((*store)->cancel(1).ok());
  ASSERT_TRUE((*store)->remove(1).ok());
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM job_document_progress", -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 0);
  sqlite3_finalize(st);
}

}  // namespace
}  // namespace spw::app
