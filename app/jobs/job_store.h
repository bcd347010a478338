// The runner's side of the job store (internal to app/jobs): leases, per-document claims and
// result writes, each one BEGIN IMMEDIATE transaction that checks who holds what, so a runner
// whose lease was taken over can never store a result or change the job.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/jobs/jobs.h"
#include "engine/common/expected.h"

namespace spw::app {
namespace sql {
class Stmt;
}

/// The database's words back to values (unknown words: Pending / Now).
DocState parse_doc_state(const std::string& s);
ScheduleKind parse_schedule_kind(const std::string& s);

}  // namespace spw::app

namespace spw::app::jobs_db {

/// Unix seconds / milliseconds from the system clock.
int64_t now_s();
int64_t now_ms();

/// Whether SQLite's last error on `db` was a busy/locked database (worth retrying).
bool last_error_busy(sqlite3* db);
/// Whether an error message came from a busy/locked database (the text sql::db_error writes).
bool is_busy_message(const std::string& message);

/// Opens a connection to an existing, migrated library file with the library's pragmas and a
/// busy timeout (ms).
Expected<sqlite3*> open_connection(const std::filesystem::path& db_file, int busy_timeout_ms);

/// The progress row's columns of a query joining job_document_progress as `p` (LEFT JOIN),
/// read back by read_progress from column `col` on.
inline constexpr const char* kProgressColumns =
    "p.job_id IS NOT NULL, COALESCE(p.phase, ''), COALESCE(p.prompt, 0), COALESCE(p.n_prompts, "
    "0), COALESCE(p.part, 0), COALESCE(p.n_parts, 0), COALESCE(p.parts_done, 0), "
    "COALESCE(p.tokens_done, 0), COALESCE(p.tokens_total, 0), COALESCE(p.eta_s, -1), "
    "COALESCE(p.updated_ms, 0)";
JobDocumentProgress read_progress(const sql::Stmt& st, int col);

/// Reads one job by id from `db` (JobStore::job without a store).
Expected<JobRecord> read_job(sqlite3* db, int64_t id);
/// Every job row matching `where` (SQL after FROM ... , e.g. " WHERE j.id = ?" with `id` bound
/// to parameter 1 when non-zero), unordered.
Expected<std::vector<JobRecord>> read_jobs(sqlite3* db, const std::string& where, int64_t id);
/// The state word of job `id`; error "no job with id N".
Expected<std::string> job_state_text(sqlite3* db, int64_t id);
/// Prepares `text`, lets `bind` bind its parameters and runs it to completion.
Status run_sql(sqlite3* db, const char* text, const std::function<void(sql::Stmt&)>& bind);
/// The params column's JSON of a spec (summary length, prompt, clauses, sampling).
std::string params_json(const JobSpec& s);
/// job_results.citations JSON text back to citations (bad JSON: none).
std::vector<JobCitation> read_citations(const std::string& text);

enum class LeaseResult { Acquired, HeldByOther, NotRunnable };
/// Takes (or renews) the lease on job `id` for `owner` when free, expired or already ours, and
/// makes a queued job running (started set). NotRunnable: the job is finished or paused (the
/// reason in `why`). HeldByOther: a live lease (its owner in `why`).
Expected<LeaseResult> acquire_lease(sqlite3* db, int64_t id, const std::string& owner,
                                    int64_t now_ms, int64_t lease_ms, int64_t now_s,
                                    std::string* why);
/// Renews the lease; false when it is no longer ours (taken over or the job removed).
Expected<bool> renew_lease(sqlite3* db, int64_t id, const std::string& owner, int64_t now_ms,
                           int64_t lease_ms);
/// Drops our lease (no error when it is not ours any more).
Status release_lease(sqlite3* db, int64_t id, const std::string& owner);

/// Claims the first unfinished document of job `id` (pending, or running under another owner:
/// orphaned by a runner whose lease we took over) while we hold the lease and the job runs.
/// std::nullopt: nothing left to claim, or the lease/job state says stop (`stop` set then).
/// An orphaned document is a death of its runner: it counts toward JobDocument::deaths when that
/// run got no further (its progress row's prompt and part) than the death before it, else the
/// count starts again at 1 there. The returned document's `progress` is the row as the last run
/// left it.
Expected<std::optional<JobDocument>> claim_next_document(sqlite3* db, int64_t id,
                                                         const std::string& owner, int64_t now_ms,
                                                         bool* stop);

/// The figures stored with a finished document.
struct DocStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double decode_s = 0;
  bool reused_snapshot = false;
  int n_parts = 0, parts_kept = 0;
};
/// Stores a document's results and marks it done, only while our claim holds. false: the claim
/// was lost (nothing written). `hook` runs inside the transaction before commit (tests).
Expected<bool> store_document_results(sqlite3* db, int64_t job_id, int64_t doc_id,
                                      const std::string& owner,
                                      const std::vector<JobResult>& results, const DocStats& stats,
                                      int64_t now_ms, int64_t now_s,
                                      const std::function<Status(int64_t, int64_t)>& hook);
/// Writes a claimed document's progress row (only while our claim holds; nothing otherwise).
Status write_document_progress(sqlite3* db, int64_t job_id, int64_t doc_id,
                               const std::string& owner, const JobDocumentProgress& p);
/// Marks a claimed document failed with `reason` (only while our claim holds).
Status fail_document(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner,
                     const std::string& reason, int64_t now_ms);
/// Returns a claimed document to pending (a runner stopped on purpose: SIGTERM, pause, cancel);
/// the claim's attempt is given back, so only runs that died count toward giving up, and its
/// deaths are forgotten (a run that was stopped was alive: the deaths before it were not in a
/// row).
Status release_document(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner);
/// Returns every document of job `id` running under `owner` to pending (a cancelled job).
Status release_owned_documents(sqlite3* db, int64_t id, const std::string& owner);
/// Records a transient failure's reason on a claimed document that will be retried.
Status note_document_retry(sqlite3* db, int64_t job_id, int64_t doc_id, const std::string& owner,
                           const std::string& reason);

/// When no document is left unfinished: running -> done (or failed when a document failed,
/// reason "N of M documents failed"), lease dropped. Returns the job's state afterwards.
Expected<JobState> finish_job(sqlite3* db, int64_t id, const std::string& owner, int64_t now_s);
/// running -> failed with `reason` (the model did not load), lease dropped.
Status fail_job(sqlite3* db, int64_t id, const std::string& owner, const std::string& reason,
                int64_t now_s);
/// A runner stopping a job it holds: running -> queued (paused stays as set), lease dropped.
Status requeue_job(sqlite3* db, int64_t id, const std::string& owner);

}  // namespace spw::app::jobs_db
