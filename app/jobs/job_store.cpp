#include "app/jobs/job_store.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/jobs/schedule.h"
#include "app/store/display_title.h"
#include "app/store/library.h"
#include "app/store/sqlite_stmt.h"

namespace spw::app {

using sql::Stmt;

// --- names -------------------------------------------------------------------------------------

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::Queued:
      return "queued";
    case JobState::Running:
      return "running";
    case JobState::Done:
      return "done";
    case JobState::Failed:
      return "failed";
    case JobState::Cancelled:
      return "cancelled";
  }
  return "queued";
}

Expected<JobState> parse_job_state(const std::string& s) {
  for (JobState v :
       {JobState::Queued, JobState::Running, JobState::Done, JobState::Failed, JobState::Cancelled})
    if (s == job_state_name(v)) return v;
  return make_error("unknown job state '{}'", s);
}

const char* job_task_name(JobTask t) {
  switch (t) {
    case JobTask::Summary:
      return "summary";
    case JobTask::Clauses:
      return "clauses";
    case JobTask::Prompt:
      return "prompt";
  }
  return "summary";
}

Expected<JobTask> parse_job_task(const std::string& s) {
  for (JobTask v : {JobTask::Summary, JobTask::Clauses, JobTask::Prompt})
    if (s == job_task_name(v)) return v;
  return make_error("unknown task '{}' (summary, clauses or prompt)", s);
}

Status check_summary_length(const std::string& s) {
  if (s == "short" || s == "medium" || s == "long") return Status::Ok();
  return make_error("--length '{}': use short, medium or long", s);
}

const char* doc_state_name(DocState s) {
  switch (s) {
    case DocState::Pending:
      return "pending";
    case DocState::Running:
      return "running";
    case DocState::Done:
      return "done";
    case DocState::Failed:
      return "failed";
  }
  return "pending";
}

DocState parse_doc_state(const std::string& s) {
  if (s == "running") return DocState::Running;
  if (s == "done") return DocState::Done;
  if (s == "failed") return DocState::Failed;
  return DocState::Pending;
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Now:
      return "now";
    case ScheduleKind::At:
      return "at";
    case ScheduleKind::Nightly:
      return "nightly";
    case ScheduleKind::WhenIdle:
      return "when-idle";
  }
  return "now";
}

ScheduleKind parse_schedule_kind(const std::string& s) {
  if (s == "at") return ScheduleKind::At;
  if (s == "nightly") return ScheduleKind::Nightly;
  if (s == "when-idle") return ScheduleKind::WhenIdle;
  return ScheduleKind::Now;
}

std::vector<std::string> default_clause_types() {
  return {"termination", "governing law", "liability cap", "renewal", "assignment"};
}

Expected<std::vector<std::string>> parse_clause_list(const std::string& list) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::string cur;
  auto flush = [&]() {
    const size_t b = cur.find_first_not_of(" \t\r\n");
    const size_t e = cur.find_last_not_of(" \t\r\n");
    if (b != std::string::npos) {
      std::string item = cur.substr(b, e - b + 1);
      std::string key = item;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (seen.insert(key).second) out.push_back(item);
    }
    cur.clear();
  };
  for (char c : list) {
    if (c == ',' || c == ';') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (out.empty()) return make_error("--clauses '{}' names no clause type", list);
  return out;
}

// --- due checks --------------------------------------------------------------------------------

bool job_is_due(const JobRecord& job, const DueContext& ctx) {
  if (job.paused) return false;
  if (job.spec.schedule.kind == ScheduleKind::WhenIdle) {
    const int64_t idle_s = static_cast<int64_t>(job.spec.schedule.idle_minutes) * 60;
    return ctx.now - ctx.last_interactive >= idle_s && ctx.load_1min < 1.0;
  }
  return ctx.now >= job.due;
}

double read_load_1min() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  if (!(in >> v)) return 0;
  return v;
}

Status mark_interactive(Library& lib, int64_t now_s) {
  return lib.set_setting(kLastInteractiveKey, std::to_string(now_s));
}

// --- JobStore ----------------------------------------------------------------------------------

struct JobStore::Impl {
  sqlite3* db = nullptr;
  std::filesystem::path file;
  std::function<int64_t()> clock = [] { return jobs_db::now_s(); };
  ~Impl() { sqlite3_close(db); }
};

JobStore::JobStore() : impl_(std::make_unique<Impl>()) {}
JobStore::~JobStore() = default;

Expected<std::unique_ptr<JobStore>> JobStore::open(const std::filesystem::path& db_file) {
  {
    auto lib = Library::open(db_file);  // creates and migrates
    if (!lib) return lib.error();
  }
  auto db = jobs_db::open_connection(db_file, 5000);
  if (!db) return db.error();
  std::unique_ptr<JobStore> s(new JobStore());
  s->impl_->db = *db;
  s->impl_->file = db_file;
  return s;
}

Expected<std::unique_ptr<JobStore>> JobStore::open_read_only(const std::filesystem::path& db_file) {
  {
    auto lib = Library::open_read_only(db_file);  // the schema check
    if (!lib) return lib.error();
  }
  auto db = open_read_only_connection(db_file, 5000);
  if (!db) return db.error();
  std::unique_ptr<JobStore> s(new JobStore());
  s->impl_->db = *db;
  s->impl_->file = db_file;
  return s;
}

const std::filesystem::path& JobStore::file() const { return impl_->file; }
sqlite3* JobStore::handle() { return impl_->db; }
void JobStore::set_clock(std::function<int64_t()> now_s) { impl_->clock = std::move(now_s); }

Expected<int64_t> JobStore::add(const JobSpec& spec_in) {
  JobSpec spec = spec_in;
  sqlite3* db = impl_->db;
  if (spec.doc_ids.empty()) return make_error("a job needs at least one document (--doc ID)");
  {
    std::set<int64_t> seen;
    for (int64_t id : spec.doc_ids)
      if (!seen.insert(id).second) return make_error("document {} is listed twice", id);
  }
  if (spec.model_path.empty()) return make_error("a job needs a model (-m MODEL)");
  if (spec.n_predict < 1) return make_error("-n {}: use a count of 1 or more", spec.n_predict);
  if (!(spec.temp >= 0.0f) || !std::isfinite(spec.temp))
    return make_error("--temp {} must be 0 or more", spec.temp);
  switch (spec.task) {
    case JobTask::Summary:
      if (Status st = check_summary_length(spec.summary_length); !st) return st.error();
      break;
    case JobTask::Prompt:
      if (spec.prompt.find_first_not_of(" \t\r\n") == std::string::npos)
        return make_error("a prompt job needs --prompt TEXT");
      break;
    case JobTask::Clauses:
      if (spec.clauses.empty()) spec.clauses = default_clause_types();
      break;
  }
  const int64_t now = impl_->clock();
  int64_t due = now;
  Schedule& sc = spec.schedule;
  switch (sc.kind) {
    case ScheduleKind::Now:
      due = now;
      break;
    case ScheduleKind::At:
      due = sc.at;
      break;
    case ScheduleKind::Nightly:
      if (sc.nightly_minute < 0 || sc.nightly_minute >= 24 * 60)
        return make_error("--nightly: the time must be 00:00 to 23:59");
      due = next_nightly(now, sc.nightly_minute);
      break;
    case ScheduleKind::WhenIdle:
      if (sc.idle_minutes < 0)
        return make_error("--idle-minutes {} must not be negative", sc.idle_minutes);
      due = 0;
      break;
  }
  if (spec.title.empty()) {
    spec.title = fmt::format("{} of {} document{}", job_task_name(spec.task), spec.doc_ids.size(),
                             spec.doc_ids.size() == 1 ? "" : "s");
  }

  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s.error();
  std::vector<std::string> titles;
  for (int64_t id : spec.doc_ids) {
    auto st = Stmt::prepare(db, "SELECT title, path, custom_title FROM documents WHERE id = ?");
    if (!st) return st.error();
    st->bind(1, id);
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return make_error("no document with id {}", id);
    // As the library shows it: the user's name for it, else the cleaned title.
    titles.push_back(st->text(2).empty() ? display_title(st->text(0), st->text(1)) : st->text(2));
  }
  auto ord = Stmt::prepare(db, "SELECT COALESCE(MAX(ord), 0) + 1 FROM jobs");
  if (!ord) return ord.error();
  if (auto r = ord->step(); !r) return r.error();
  const int64_t order = ord->i64(0);
  auto ins = Stmt::prepare(
      db,
      "INSERT INTO jobs (title, task, params, model_path, engine_json, endpoint, schedule, "
      "nightly_minute, idle_minutes, due, priority, ord, created) VALUES "
      "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!ins) return ins.error();
  ins->bind(1, spec.title).bind(2, job_task_name(spec.task)).bind(3, jobs_db::params_json(spec));
  ins->bind(4, spec.model_path).bind(5, spec.engine_json).bind(6, spec.endpoint);
  ins->bind(7, schedule_kind_name(sc.kind)).bind(8, sc.nightly_minute).bind(9, sc.idle_minutes);
  ins->bind(10, due).bind(11, spec.priority).bind(12, order).bind(13, now);
  if (auto s = ins->run(); !s) return s.error();
  const int64_t job_id = sqlite3_last_insert_rowid(db);
  for (size_t i = 0; i < spec.doc_ids.size(); ++i) {
    auto st = Stmt::prepare(
        db, "INSERT INTO job_documents (job_id, doc_id, position, title) VALUES (?, ?, ?, ?)");
    if (!st) return st.error();
    st->bind(1, job_id)
        .bind(2, spec.doc_ids[i])
        .bind(3, static_cast<int64_t>(i))
        .bind(4, titles[i]);
    if (auto s = st->run(); !s) return s.error();
  }
  if (auto s = tx.commit(); !s) return s.error();
  return job_id;
}

Expected<std::vector<JobRecord>> JobStore::jobs() {
  auto all = jobs_db::read_jobs(impl_->db, "", 0);
  if (!all) return all;
  auto group = [](const JobRecord& r) {
    return r.state == JobState::Running ? 0 : r.state == JobState::Queued ? 1 : 2;
  };
  std::stable_sort(all->begin(), all->end(), [&](const JobRecord& a, const JobRecord& b) {
    const int ga = group(a), gb = group(b);
    if (ga != gb) return ga < gb;
    if (ga == 2) {
      if (a.finished != b.finished) return a.finished > b.finished;
      return a.id > b.id;
    }
    if (a.spec.priority != b.spec.priority) return a.spec.priority > b.spec.priority;
    if (a.order != b.order) return a.order < b.order;
    return a.id < b.id;
  });
  return all;
}

Expected<JobRecord> JobStore::job(int64_t id) { return jobs_db::read_job(impl_->db, id); }

Expected<std::vector<JobDocument>> JobStore::documents(int64_t job_id) {
  if (auto j = job(job_id); !j) return j.error();
  auto st = Stmt::prepare(
      impl_->db, std::string("SELECT d.doc_id, d.position, d.title, d.state, d.attempts, d.reason, "
                             "d.owner, d.started_ms, d.finished_ms, d.prompt_tokens, "
                             "d.generated_tokens, d.decode_s, d.reused_snapshot, d.n_parts, "
                             "d.parts_kept, d.deaths, ") +
                     jobs_db::kProgressColumns +
                     " FROM job_documents d LEFT JOIN job_document_progress p ON p.job_id = "
                     "d.job_id AND p.doc_id = d.doc_id WHERE d.job_id = ? ORDER BY d.position");
  if (!st) return st.error();
  st->bind(1, job_id);
  std::vector<JobDocument> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    JobDocument d;
    d.job_id = job_id;
    d.doc_id = st->i64(0);
    d.position = st->i32(1);
    d.title = st->text(2);
    d.state = parse_doc_state(st->text(3));
    d.attempts = st->i32(4);
    d.reason = st->text(5);
    d.owner = st->text(6);
    d.started_ms = st->i64(7);
    d.finished_ms = st->i64(8);
    d.prompt_tokens = st->i64(9);
    d.generated_tokens = st->i64(10);
    d.decode_s = st->f64(11);
    d.reused_snapshot = st->flag(12);
    d.n_parts = st->i32(13);
    d.parts_kept = st->i32(14);
    d.deaths = st->i32(15);
    d.progress = jobs_db::read_progress(*st, 16);
    out.push_back(std::move(d));
  }
  return out;
}

Expected<std::vector<JobResult>> JobStore::results(int64_t job_id) {
  if (auto j = job(job_id); !j) return j.error();
  auto st = Stmt::prepare(impl_->db,
                          "SELECT r.doc_id, r.clause, r.text, r.found, r.page, r.quote, "
                          "r.verified, r.citations, r.created FROM job_results r JOIN "
                          "job_documents d ON d.job_id = r.job_id AND d.doc_id = r.doc_id WHERE "
                          "r.job_id = ? ORDER BY d.position, r.idx");
  if (!st) return st.error();
  st->bind(1, job_id);
  std::vector<JobResult> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    JobResult r;
    r.job_id = job_id;
    r.doc_id = st->i64(0);
    r.clause = st->text(1);
    r.text = st->text(2);
    r.found = st->flag(3);
    r.page = st->i32(4);
    r.quote = st->text(5);
    r.verified = st->flag(6);
    r.citations = jobs_db::read_citations(st->text(7));
    r.created = st->i64(8);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Runs `body` inside BEGIN IMMEDIATE after checking job `id` exists; commits when it succeeds.
Status in_transaction(sqlite3* db, const std::function<Status()>& body) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s;
  if (auto s = body(); !s) return s;
  return tx.commit();
}

Status require_state(sqlite3* db, int64_t id, std::initializer_list<const char*> allowed,
                     const char* action) {
  auto st = jobs_db::job_state_text(db, id);
  if (!st) return st.error();
  for (const char* a : allowed)
    if (*st == a) return Status::Ok();
  return make_error("job {} is {}: cannot {}", id, *st, action);
}

}  // namespace

Status JobStore::cancel(int64_t id, const std::string& reason) {
  sqlite3* db = impl_->db;
  const int64_t now = impl_->clock();
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued", "running"}, "cancel it"); !s) return s;
    return jobs_db::run_sql(
        db, "UPDATE jobs SET state = 'cancelled', reason = ?, finished = ? WHERE id = ?",
        [&](Stmt& s) { s.bind(1, reason).bind(2, now).bind(3, id); });
  });
}

Status JobStore::set_paused(int64_t id, bool paused) {
  sqlite3* db = impl_->db;
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued", "running"}, paused ? "pause it" : "resume it");
        !s)
      return s;
    return jobs_db::run_sql(db, "UPDATE jobs SET paused = ? WHERE id = ?",
                            [&](Stmt& s) { s.bind(1, paused).bind(2, id); });
  });
}

Status JobStore::run_now(int64_t id) {
  sqlite3* db = impl_->db;
  const int64_t now = impl_->clock();
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued"}, "run it now"); !s) return s;
    return jobs_db::run_sql(db,
                            "UPDATE jobs SET schedule = 'now', due = ?, paused = 0 WHERE id = ?",
                            [&](Stmt& s) { s.bind(1, now).bind(2, id); });
  });
}

Status JobStore::set_priority(int64_t id, int priority) {
  sqlite3* db = impl_->db;
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued"}, "change its priority"); !s) return s;
    return jobs_db::run_sql(db, "UPDATE jobs SET priority = ? WHERE id = ?",
                            [&](Stmt& s) { s.bind(1, priority).bind(2, id); });
  });
}

Status JobStore::move_before(int64_t id, int64_t before_id) {
  sqlite3* db = impl_->db;
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued"}, "move it"); !s) return s;
    if (before_id == id) return Status::Ok();
    if (before_id == 0) {
      return jobs_db::run_sql(db,
                              "UPDATE jobs SET ord = (SELECT MAX(ord) + 1 FROM jobs) WHERE id = ?",
                              [&](Stmt& s) { s.bind(1, id); });
    }
    if (auto s = require_state(db, before_id, {"queued"}, "move another job before it"); !s)
      return s;
    auto st = Stmt::prepare(db, "SELECT ord, priority FROM jobs WHERE id = ?");
    if (!st) return st.error();
    st->bind(1, before_id);
    if (auto r = st->step(); !r) return r.error();
    const int64_t ord = st->i64(0);
    const int prio = st->i32(1);
    // Make room: every job at or after `ord` moves one down.
    if (auto s = jobs_db::run_sql(db, "UPDATE jobs SET ord = ord + 1 WHERE ord >= ?",
                                  [&](Stmt& s) { s.bind(1, ord); });
        !s)
      return s;
    return jobs_db::run_sql(db, "UPDATE jobs SET ord = ?, priority = ? WHERE id = ?",
                            [&](Stmt& s) { s.bind(1, ord).bind(2, prio).bind(3, id); });
  });
}

Expected<int> JobStore::retry_failed(int64_t id) {
  sqlite3* db = impl_->db;
  int n = 0;
  auto st = in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued", "done", "failed", "cancelled"}, "retry it"); !s)
      return s;
    if (auto s = jobs_db::run_sql(db,
                                  "UPDATE job_documents SET state = 'pending', attempts = 0, "
                                  "deaths = 0, owner = '' WHERE job_id = ? AND state = 'failed'",
                                  [&](Stmt& s) { s.bind(1, id); });
        !s)
      return s;
    n = sqlite3_changes(db);
    return jobs_db::run_sql(db,
                            "UPDATE jobs SET state = 'queued', reason = '', finished = 0, "
                            "paused = 0 WHERE id = ? AND EXISTS (SELECT 1 FROM job_documents "
                            "WHERE job_id = ? AND state IN ('pending', 'running'))",
                            [&](Stmt& s) { s.bind(1, id).bind(2, id); });
  });
  if (!st) return st.error();
  return n;
}

Status JobStore::remove(int64_t id) {
  sqlite3* db = impl_->db;
  return in_transaction(db, [&]() -> Status {
    if (auto s = require_state(db, id, {"queued", "done", "failed", "cancelled"}, "remove it"); !s)
      return s;
    return jobs_db::run_sql(db, "DELETE FROM jobs WHERE id = ?", [&](Stmt& s) { s.bind(1, id); });
  });
}

Expected<std::vector<int64_t>> JobStore::due_jobs(const DueContext& ctx, int64_t now_ms) {
  auto all = jobs();
  if (!all) return all.error();
  std::vector<int64_t> out;
  for (const JobRecord& j : *all) {
    const bool lease_free = j.lease_owner.empty() || j.lease_expires_ms <= now_ms;
    if (!lease_free) continue;
    if (j.state == JobState::Running) {  // its runner is gone: resume it
      if (!j.paused) out.push_back(j.id);
      continue;
    }
    if (j.state == JobState::Queued && job_is_due(j, ctx)) out.push_back(j.id);
  }
  return out;
}

Expected<std::vector<JobRecord>> JobStore::leased_jobs(const DueContext& ctx, int64_t now_ms) {
  auto all = jobs();
  if (!all) return all.error();
  std::vector<JobRecord> out;
  for (JobRecord& j : *all) {
    if (j.lease_owner.empty() || j.lease_expires_ms <= now_ms || j.paused) continue;
    if (j.state == JobState::Running || (j.state == JobState::Queued && job_is_due(j, ctx)))
      out.push_back(std::move(j));
  }
  return out;
}

}  // namespace spw::app
