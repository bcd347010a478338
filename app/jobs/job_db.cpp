// The runner's side of the job store (app/jobs/job_store.h): connections, job rows, leases,
// claims and result writes.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/jobs/job_store.h"
#include "app/store/sqlite_stmt.h"

namespace spw::app {

using sql::Stmt;

namespace jobs_db {

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool last_error_busy(sqlite3* db) {
  const int rc = sqlite3_errcode(db) & 0xff;
  return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

bool is_busy_message(const std::string& m) {
  if (m.find("database is locked") != std::string::npos ||
      m.find("database table is locked") != std::string::npos)
    return true;
  // sql::db_error ends with the extended code: SQLITE_BUSY (5), BUSY_RECOVERY (261),
  // BUSY_SNAPSHOT (517), SQLITE_LOCKED (6), LOCKED_SHAREDCACHE (262).
  for (const char* code : {"(5)", "(261)", "(517)", "(6)", "(262)"}) {
    const std::string c = code;
    if (m.size() >= c.size() && m.compare(m.size() - c.size(), c.size(), c) == 0) return true;
  }
  return false;
}

Expected<sqlite3*> open_connection(const std::filesystem::path& db_file, int busy_timeout_ms) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = make_error("cannot open the library database '{}': {}", db_file.string(),
                         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return e;
  }
  sqlite3_busy_timeout(db, busy_timeout_ms);
  if (auto s = sql::exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                         "setting up the library database");
      !s) {
    sqlite3_close(db);
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  return db;
}

constexpr const char* kJobColumns =
    "SELECT j.id, j.title, j.task, j.params, j.model_path, j.engine_json, j.endpoint, j.schedule,"
    " j.nightly_minute, j.idle_minutes, j.due, j.priority, j.ord, j.state, j.paused, j.reason,"
    " j.created, j.started, j.finished,"
    " (SELECT COUNT(*) FROM job_documents d WHERE d.job_id = j.id),"
    " (SELECT COUNT(*) FROM job_documents d WHERE d.job_id = j.id AND d.state = 'done'),"
    " (SELECT COUNT(*) FROM job_documents d WHERE d.job_id = j.id AND d.state = 'failed'),"
    " (SELECT COUNT(*) FROM job_documents d WHERE d.job_id = j.id AND d.state = 'running'),"
    " COALESCE(l.owner, ''), COALESCE(l.expires_ms, 0),"
    " (SELECT COALESCE(SUM(generated_tokens), 0) FROM job_documents d"
    "   WHERE d.job_id = j.id AND d.state = 'done'),"
    " (SELECT COALESCE(SUM(decode_s), 0) FROM job_documents d"
    "   WHERE d.job_id = j.id AND d.state = 'done'),"
    " (SELECT COALESCE(AVG(finished_ms - started_ms), 0) FROM job_documents d"
    "   WHERE d.job_id = j.id AND d.state = 'done' AND finished_ms >= started_ms),"
    " COALESCE(l.heartbeat_ms, 0)"
    " FROM jobs j LEFT JOIN job_leases l ON l.job_id = j.id";

std::string params_json(const JobSpec& s) {
  nlohmann::json j;
  j["summary_length"] = s.summary_length;
  j["prompt"] = s.prompt;
  j["clauses"] = s.clauses;
  j["n_predict"] = s.n_predict;
  j["temp"] = s.temp;
  j["seed"] = s.seed;
  j["map_reduce"] = s.map_reduce;
  return j.dump();
}

void read_params(const std::string& text, JobSpec& s) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return;
  s.summary_length = j.value("summary_length", s.summary_length);
  s.prompt = j.value("prompt", s.prompt);
  if (j.contains("clauses") && j["clauses"].is_array())
    s.clauses = j["clauses"].get<std::vector<std::string>>();
  s.n_predict = j.value("n_predict", s.n_predict);
  s.temp = j.value("temp", s.temp);
  s.seed = j.value("seed", s.seed);
  s.map_reduce = j.value("map_reduce", s.map_reduce);
}

JobRecord read_job_row(const Stmt& st) {
  JobRecord r;
  r.id = st.i64(0);
  r.spec.title = st.text(1);
  if (auto t = parse_job_task(st.text(2))) r.spec.task = *t;
  read_params(st.text(3), r.spec);
  r.spec.model_path = st.text(4);
  r.spec.engine_json = st.text(5);
  r.spec.endpoint = st.text(6);
  r.spec.schedule.kind = parse_schedule_kind(st.text(7));
  r.spec.schedule.nightly_minute = st.i32(8);
  r.spec.schedule.idle_minutes = st.i32(9);
  r.due = st.i64(10);
  if (r.spec.schedule.kind == ScheduleKind::At || r.spec.schedule.kind == ScheduleKind::Nightly)
    r.spec.schedule.at = r.due;
  r.spec.priority = st.i32(11);
  r.order = st.i64(12);
  if (auto s = parse_job_state(st.text(13))) r.state = *s;
  r.paused = st.flag(14);
  r.reason = st.text(15);
  r.created = st.i64(16);
  r.started = st.i64(17);
  r.finished = st.i64(18);
  r.n_docs = st.i32(19);
  r.n_done = st.i32(20);
  r.n_failed = st.i32(21);
  r.n_running = st.i32(22);
  r.lease_owner = st.text(23);
  r.lease_expires_ms = st.i64(24);
  r.lease_heartbeat_ms = st.i64(28);
  const int64_t gen = st.i64(25);
  const double dec = st.f64(26);
  r.tokens_per_s = dec > 0 ? static_cast<double>(gen) / dec : 0;
  const double mean_ms = st.f64(27);
  const int left = r.n_docs - r.n_done - r.n_failed;
  r.eta_s = r.n_done > 0 ? left * mean_ms / 1000.0 : -1;
  if (left == 0) r.eta_s = 0;
  return r;
}

Expected<std::vector<JobRecord>> read_jobs(sqlite3* db, const std::string& where, int64_t id) {
  auto st = Stmt::prepare(db, std::string(kJobColumns) + where);
  if (!st) return st.error();
  if (id != 0) st->bind(1, id);
  std::vector<JobRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(read_job_row(*st));
  }
  return out;
}

Expected<std::string> job_state_text(sqlite3* db, int64_t id) {
  auto st = Stmt::prepare(db, "SELECT state FROM jobs WHERE id = ?");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return make_error("no job with id {}", id);
  return st->text(0);
}

Status run_sql(sqlite3* db, const char* text, const std::function<void(Stmt&)>& bind) {
  auto st = Stmt::prepare(db, text);
  if (!st) return st.error();
  if (bind) bind(*st);
  return st->run();
}

std::string citations_json(const std::vector<JobCitation>& cs) {
  nlohmann::json a = nlohmann::json::array();
  for (const JobCitation& c : cs)
    a.push_back(
        {{"page", c.page}, {"quote", c.quote}, {"verified", c.verified}, {"reason", c.reason}});
  return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<JobCitation> read_citations(const std::string& text) {
  std::vector<JobCitation> out;
  const nlohmann::json a = nlohmann::json::parse(text, nullptr, false);
  if (!a.is_array()) return out;
  for (const auto& c : a) {
    if (!c.is_object()) continue;
    JobCitation jc;
    jc.page = c.value("page", 0);
    jc.quote = c.value("quote", std::string());
    jc.verified = c.value("verified", false);
    jc.reason = c.value("reason", std::string());
    out.push_back(std::move(jc));
  }
  return out;
}

// Whether `owner` holds the lease of job `id` and the job is running; `stop` gets why not.
Expected<bool> holds_running(sqlite3* db, int64_t id, const std::string& owner) {
  auto st = Stmt::prepare(
      db,
      "SELECT j.state, j.paused, COALESCE(l.owner, '') FROM jobs j LEFT JOIN job_leases l ON "
      "l.job_id = j.id WHERE j.id = ?");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return false;
  return st->text(0) == "running" && !st->flag(1) && st->text(2) == owner;
}

JobDocumentProgress read_progress(const Stmt& st, int col) {
  JobDocumentProgress p;
  p.known = st.flag(col);
  p.phase = st.text(col + 1);
  p.prompt = st.i32(col + 2);
  p.n_prompts = st.i32(col + 3);
  p.part = st.i32(col + 4);
  p.n_parts = st.i32(col + 5);
  p.parts_done = st.i32(col + 6);
  p.tokens_done = st.i64(col + 7);
  p.tokens_total = st.i64(col + 8);
  p.eta_s = p.known ? st.f64(col + 9) : -1;
  p.updated_ms = st.i64(col + 10);
  return p;
}

Expected<JobRecord> read_job(sqlite3* db, int64_t id) {
  auto r = read_jobs(db, " WHERE j.id = ?", id);
  if (!r) return r.error();
  if (r->empty()) return make_error("no job with id {}", id);
  return std::move(r->front());
}

Expected<LeaseResult> acquire_lease(sqlite3* db, int64_t id, const std::string& owner,
                                    int64_t now_ms, int64_t lease_ms, int64_t now_s,
                                    std::string* why) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s.error();
  auto st = Stmt::prepare(
      db,
      "SELECT j.state, j.paused, COALESCE(l.owner, ''), COALESCE(l.expires_ms, 0) FROM jobs j "
      "LEFT JOIN job_leases l ON l.job_id = j.id WHERE j.id = ?");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return make_error("no job with id {}", id);
  const std::string state = st->text(0);
  const bool paused = st->flag(1);
  const std::string holder = st->text(2);
  const int64_t expires = st->i64(3);
  if (state != "queued" && state != "running") {
    if (why) *why = fmt::format("job {} is {}", id, state);
    return LeaseResult::NotRunnable;
  }
  if (paused) {
    if (why) *why = fmt::format("job {} is paused", id);
    return LeaseResult::NotRunnable;
  }
  if (!holder.empty() && holder != owner && expires > now_ms) {
    if (why) *why = holder;
    return LeaseResult::HeldByOther;
  }
  if (auto s = run_sql(db,
                       "INSERT INTO job_leases (job_id, owner, heartbeat_ms, expires_ms) VALUES "
                       "(?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET owner = excluded.owner, "
                       "heartbeat_ms = excluded.heartbeat_ms, expires_ms = excluded.expires_ms",
                       [&](Stmt& s) {
                         s.bind(1, id).bind(2, owner).bind(3, now_ms).bind(4, now_ms + lease_ms);
                       });
      !s)
    return s.error();
  if (auto s = run_sql(db,
                       "UPDATE jobs SET state = 'running', reason = '', started = CASE WHEN "
                       "started = 0 THEN ? ELSE started END WHERE id = ?",
                       [&](Stmt& s) { s.bind(1, now_s).bind(2, id); });
      !s)
    return s.error();
  if (auto s = tx.commit(); !s) return s.error();
  return LeaseResult::Acquired;
}

Expected<bool> renew_lease(sqlite3* db, int64_t id, const std::string& owner, int64_t now_ms,
                           int64_t lease_ms) {
  auto st = Stmt::prepare(
      db, "UPDATE job_leases SET heartbeat_ms = ?, expires_ms = ? WHERE job_id = ? AND owner = ?");
  if (!st) return st.error();
  st->bind(1, now_ms).bind(2, now_ms + lease_ms).bind(3, id).bind(4, owner);
  if (auto s = st->run(); !s) return s.error();
  return sqlite3_changes(db) > 0;
}

Status release_lease(sqlite3* db, int64_t id, const std::string& owner) {
  return run_sql(db, "DELETE FROM job_leases WHERE job_id = ? AND owner = ?",
                 [&](Stmt& s) { s.bind(1, id).bind(2, owner); });
}

Expected<std::optional<JobDocument>> claim_next_document(sqlite3* db, int64_t id,
                                                         const std::string& owner, int64_t now_ms,
                                                         bool* stop) {
  *stop = false;
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s.error();
  auto ok = holds_running(db, id, owner);
  if (!ok) return ok.error();
  if (!*ok) {
    *stop = true;
    return std::optional<JobDocument>();
  }
  // Pending, or running under another owner: we hold the job's lease, so that runner is gone.
  // A document running under our own owner id is one this runner left (a retry): take it too.
  auto st = Stmt::prepare(
      db,
      std::string("SELECT d.doc_id, d.position, d.title, d.attempts, d.state, d.owner, "
                  "d.deaths, d.death_prompt, d.death_part, ") +
          kProgressColumns +
          " FROM job_documents d LEFT JOIN job_document_progress p ON p.job_id = d.job_id AND "
          "p.doc_id = d.doc_id WHERE d.job_id = ? AND d.state IN ('pending', 'running') ORDER BY "
          "d.position LIMIT 1");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<JobDocument>();
  JobDocument d;
  d.job_id = id;
  d.doc_id = st->i64(0);
  d.position = st->i32(1);
  d.title = st->text(2);
  d.attempts = st->i32(3) + 1;
  const bool orphaned = st->text(4) == "running" && st->text(5) != owner;
  d.deaths = st->i32(6);
  int death_prompt = st->i32(7), death_part = st->i32(8);
  d.progress = read_progress(*st, 9);
  if (orphaned) {
    // Its runner died there: a repeat unless that run got past the last death's place.
    const int prompt = d.progress.prompt, part = d.progress.part;
    const bool further = prompt > death_prompt || (prompt == death_prompt && part > death_part);
    if (d.deaths > 0 && !further) {
      ++d.deaths;
    } else {
      d.deaths = 1;
      death_prompt = prompt;
      death_part = part;
    }
  }
  d.state = DocState::Running;
  d.owner = owner;
  d.started_ms = now_ms;
  if (auto s = run_sql(db,
                       "UPDATE job_documents SET state = 'running', owner = ?, attempts = "
                       "attempts + 1, started_ms = ?, deaths = ?, death_prompt = ?, death_part = "
                       "? WHERE job_id = ? AND doc_id = ?",
                       [&](Stmt& s) {
                         s.bind(1, owner).bind(2, now_ms).bind(3, d.deaths);
                         s.bind(4, death_prompt).bind(5, death_part).bind(6, id).bind(7, d.doc_id);
                       });
      !s)
    return s.error();
  if (auto s = tx.commit(); !s) return s.error();
  return std::optional<JobDocument>(std::move(d));
}

namespace {

Expected<bool> claim_held(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner) {
  auto st =
      Stmt::prepare(db, "SELECT state, owner FROM job_documents WHERE job_id = ? AND doc_id = ?");
  if (!st) return st.error();
  st->bind(1, job_id).bind(2, doc_id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return false;
  return st->text(0) == "running" && st->text(1) == owner;
}

}  // namespace

Expected<bool> store_document_results(sqlite3* db, int64_t job_id, int64_t doc_id,
                                      const std::string& owner,
                                      const std::vector<JobResult>& results, const DocStats& stats,
                                      int64_t now_ms, int64_t now_s,
                                      const std::function<Status(int64_t, int64_t)>& hook) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s.error();
  auto held = claim_held(db, job_id, doc_id, owner);
  if (!held) return held.error();
  if (!*held) return false;
  int idx = 0;
  for (const JobResult& r : results) {
    auto st = Stmt::prepare(db,
                            "INSERT INTO job_results (job_id, doc_id, clause, idx, text, found, "
                            "page, quote, verified, citations, created) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st) return st.error();
    st->bind(1, job_id).bind(2, doc_id).bind(3, r.clause).bind(4, idx++).bind(5, r.text);
    st->bind(6, r.found).bind(7, r.page).bind(8, r.quote).bind(9, r.verified);
    st->bind(10, citations_json(r.citations)).bind(11, now_s);
    if (auto s = st->run(); !s) return s.error();
  }
  if (auto s = run_sql(db,
                       "UPDATE job_documents SET state = 'done', owner = '', reason = '', "
                       "finished_ms = ?, prompt_tokens = ?, generated_tokens = ?, decode_s = ?, "
                       "reused_snapshot = ?, n_parts = ?, parts_kept = ?, deaths = 0 WHERE job_id "
                       "= ? AND doc_id = ?",
                       [&](Stmt& s) {
                         s.bind(1, now_ms).bind(2, stats.prompt_tokens);
                         s.bind(3, stats.generated_tokens).bind(4, stats.decode_s);
                         s.bind(5, stats.reused_snapshot).bind(6, stats.n_parts);
                         s.bind(7, stats.parts_kept).bind(8, job_id).bind(9, doc_id);
                       });
      !s)
    return s.error();
  if (hook) {
    if (auto s = hook(job_id, doc_id); !s) return s.error();
  }
  if (auto s = tx.commit(); !s) return s.error();
  return true;
}

Status write_document_progress(sqlite3* db, int64_t job_id, int64_t doc_id,
                               const std::string& owner, const JobDocumentProgress& p) {
  return run_sql(
      db,
      "INSERT INTO job_document_progress (job_id, doc_id, phase, prompt, n_prompts, part, "
      "n_parts, parts_done, tokens_done, tokens_total, eta_s, updated_ms) SELECT ?1, ?2, ?3, ?4, "
      "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12 WHERE EXISTS (SELECT 1 FROM job_documents WHERE job_id "
      "= ?1 AND doc_id = ?2 AND state = 'running' AND owner = ?13) ON CONFLICT (job_id, doc_id) "
      "DO UPDATE SET phase = excluded.phase, prompt = excluded.prompt, n_prompts = "
      "excluded.n_prompts, part = excluded.part, n_parts = excluded.n_parts, parts_done = "
      "excluded.parts_done, tokens_done = excluded.tokens_done, tokens_total = "
      "excluded.tokens_total, eta_s = excluded.eta_s, updated_ms = excluded.updated_ms",
      [&](Stmt& s) {
        s.bind(1, job_id).bind(2, doc_id).bind(3, p.phase).bind(4, p.prompt).bind(5, p.n_prompts);
        s.bind(6, p.part).bind(7, p.n_parts).bind(8, p.parts_done).bind(9, p.tokens_done);
        s.bind(10, p.tokens_total).bind(11, p.eta_s).bind(12, p.updated_ms).bind(13, owner);
      });
}

Status fail_document(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner,
                     const std::string& reason, int64_t now_ms) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s;
  auto held = claim_held(db, job_id, doc_id, owner);
  if (!held) return held.error();
  if (!*held) return Status::Ok();
  if (auto s = run_sql(
          db,
          "UPDATE job_documents SET state = 'failed', owner = '', reason = ?, "
          "finished_ms = ? WHERE job_id = ? AND doc_id = ?",
          [&](Stmt& s) { s.bind(1, reason).bind(2, now_ms).bind(3, job_id).bind(4, doc_id); });
      !s)
    return s;
  return tx.commit();
}

Status release_document(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner) {
  return run_sql(db,
                 "UPDATE job_documents SET state = 'pending', owner = '', "
                 "attempts = MAX(attempts - 1, 0), deaths = 0 WHERE job_id = ? AND "
                 "doc_id = ? AND state = 'running' AND owner = ?",
                 [&](Stmt& s) { s.bind(1, job_id).bind(2, doc_id).bind(3, owner); });
}

Status release_owned_documents(sqlite3* db, int64_t id, const std::string& owner) {
  return run_sql(db,
                 "UPDATE job_documents SET state = 'pending', owner = '', "
                 "attempts = MAX(attempts - 1, 0), deaths = 0 WHERE job_id = ? AND "
                 "state = 'running' AND owner = ?",
                 [&](Stmt& s) { s.bind(1, id).bind(2, owner); });
}

Status note_document_retry(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner,
                           const std::string& reason) {
  return run_sql(
      db,
      "UPDATE job_documents SET reason = ? WHERE job_id = ? AND doc_id = ? AND state "
      "= 'running' AND owner = ?",
      [&](Stmt& s) { s.bind(1, reason).bind(2, job_id).bind(3, doc_id).bind(4, owner); });
}

Expected<JobState> finish_job(sqlite3* db, int64_t id, const std::string& owner, int64_t now_s) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s.error();
  auto state = job_state_text(db, id);
  if (!state) return state.error();
  auto ok = holds_running(db, id, owner);
  if (!ok) return ok.error();
  if (!*ok) {
    auto p = parse_job_state(*state);
    if (!p) return p.error();
    return *p;
  }
  auto st = Stmt::prepare(db,
                          "SELECT COUNT(*), SUM(state = 'failed'), SUM(state IN ('pending', "
                          "'running')) FROM job_documents WHERE job_id = ?");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  const int64_t total = st->i64(0), failed = st->i64(1), open = st->i64(2);
  if (open > 0) return JobState::Running;
  const JobState final_state = failed > 0 ? JobState::Failed : JobState::Done;
  const std::string reason =
      failed > 0 ? fmt::format("{} of {} document{} failed", failed, total, total == 1 ? "" : "s")
                 : std::string();
  if (auto s = run_sql(db, "UPDATE jobs SET state = ?, reason = ?, finished = ? WHERE id = ?",
                       [&](Stmt& s) {
                         s.bind(1, job_state_name(final_state)).bind(2, reason);
                         s.bind(3, now_s).bind(4, id);
                       });
      !s)
    return s.error();
  if (auto s = release_lease(db, id, owner); !s) return s.error();
  if (auto s = tx.commit(); !s) return s.error();
  return final_state;
}

Status fail_job(sqlite3* db, int64_t id, const std::string& owner, const std::string& reason,
                int64_t now_s) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s;
  auto ok = holds_running(db, id, owner);
  if (!ok) return ok.error();
  if (*ok) {
    if (auto s =
            run_sql(db, "UPDATE jobs SET state = 'failed', reason = ?, finished = ? WHERE id = ?",
                    [&](Stmt& s) { s.bind(1, reason).bind(2, now_s).bind(3, id); });
        !s)
      return s;
    if (auto s = run_sql(db,
                         "UPDATE job_documents SET state = 'pending', owner = '' WHERE job_id = ? "
                         "AND state = 'running'",
                         [&](Stmt& s) { s.bind(1, id); });
        !s)
      return s;
  }
  if (auto s = release_lease(db, id, owner); !s) return s;
  return tx.commit();
}

Status requeue_job(sqlite3* db, int64_t id, const std::string& owner) {
  sql::Transaction tx(db);
  if (auto s = tx.begin(); !s) return s;
  auto st = Stmt::prepare(db, "SELECT owner FROM job_leases WHERE job_id = ?");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (*row && st->text(0) == owner) {
    if (auto s = run_sql(db, "UPDATE jobs SET state = 'queued' WHERE id = ? AND state = 'running'",
                         [&](Stmt& s) { s.bind(1, id); });
        !s)
      return s;
    if (auto s = run_sql(db,
                         "UPDATE job_documents SET state = 'pending', owner = '', "
                         "attempts = MAX(attempts - 1, 0), deaths = 0 WHERE job_id = ? "
                         "AND state = 'running' AND owner = ?",
                         [&](Stmt& s) { s.bind(1, id).bind(2, owner); });
        !s)
      return s;
  }
  if (auto s = release_lease(db, id, owner); !s) return s;
  return tx.commit();
}

}  // namespace jobs_db

bool lease_holder_ended(const std::string& owner, int64_t* pid_out) {
  const size_t last = owner.rfind(':');
  if (last == std::string::npos || last == 0) return false;
  const size_t mid = owner.rfind(':', last - 1);
  if (mid == std::string::npos) return false;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || owner.substr(0, mid) != host) return false;
  const std::string pid_text = owner.substr(mid + 1, last - mid - 1);
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (pid_text.empty() || *end != '\0' || pid <= 0) return false;
  *pid_out = pid;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

RunnerHealth runner_health(const JobRecord& j, int64_t now_ms) {
  RunnerHealth h;
  if (j.state != JobState::Running) return h;
  if (j.lease_owner.empty()) {
    h.gone = true;
    return h;
  }
  h.silent_ms = std::max<int64_t>(0, now_ms - j.lease_heartbeat_ms);
  h.ended = lease_holder_ended(j.lease_owner, &h.pid);
  h.gone = h.ended || j.lease_expires_ms <= now_ms;
  return h;
}

}  // namespace spw::app
