// Batch jobs: a queue of document tasks (summary, clauses, custom prompt) kept in the library
// database, and the runner that works through it (the GUI's Jobs dock and `spillway-cli jobs`).
//
// A job = documents + task + model + generation/KV settings + a schedule. States:
//   queued -> running -> done | failed | cancelled
// every change in its own transaction. Each document of a job has its own row (pending,
// running, done, failed) with attempts, the reason of a failure and its timing; its result
// rows are written in the same transaction that marks it done, so a finished document is never
// recomputed or lost.
//
// Crash safety: a runner holds a lease on the job it works on (owner id, heartbeat every
// RunnerOptions::heartbeat_ms, expiry after lease_ms without one). A lease whose heartbeat
// stopped (a killed process) is taken over by the next runner, which resumes at the first
// unfinished document, and inside a map-reduce document at its first part without a stored
// answer (the library's part_answers). Each document is claimed inside a BEGIN IMMEDIATE
// transaction that checks the lease, and a result is stored only while its claim is still held, so
// two runners (GUI and CLI, or two CLIs) on one database never process a document twice.
//
// Times: unix seconds for what users see (created, due, started, finished); leases and
// heartbeats in unix milliseconds.
//
// Threading: a JobStore is one SQLite connection (the library's rules: use it on the thread
// that opened it; several stores, threads and processes may share the file). A Runner opens its
// own connections on the thread that calls run_*; its callbacks run on that thread (the GUI
// forwards them with queued connections). Qt-free and engine-free: ui/ may include this header.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/runtime/progress.h"
#include "engine/common/expected.h"

struct sqlite3;

namespace spw::app {

class Library;

// --- values ----------------------------------------------------------------------------------

enum class JobState { Queued, Running, Done, Failed, Cancelled };
enum class JobTask { Summary, Clauses, Prompt };
enum class DocState { Pending, Running, Done, Failed };
enum class ScheduleKind { Now, At, Nightly, WhenIdle };

/// "queued" | "running" | "done" | "failed" | "cancelled" (the CLI's and the database's words).
const char* job_state_name(JobState s);
Expected<JobState> parse_job_state(const std::string& s);
/// "summary" | "clauses" | "prompt".
const char* job_task_name(JobTask t);
Expected<JobTask> parse_job_task(const std::string& s);
/// A summary's length: "short" | "medium" | "long"; else "--length 'x': use short, medium or
/// long".
Status check_summary_length(const std::string& s);
/// "pending" | "running" | "done" | "failed".
const char* doc_state_name(DocState s);
/// "now" | "at" | "nightly" | "when-idle".
const char* schedule_kind_name(ScheduleKind k);

/// The clause types a clauses job looks for when none are given.
std::vector<std::string> default_clause_types();  // termination, governing law, liability cap,
                                                  // renewal, assignment
/// Splits "termination, governing law;renewal" at commas/semicolons, trims, drops empties and
/// duplicates (case-insensitive). Error when nothing is left.
Expected<std::vector<std::string>> parse_clause_list(const std::string& list);

/// When a job may start.
struct Schedule {
  ScheduleKind kind = ScheduleKind::Now;
  int64_t at = 0;           // At: unix seconds. Nightly: filled by add() with the next occurrence
  int nightly_minute = -1;  // Nightly: minutes after local midnight (HH*60+MM), 0..1439
  int idle_minutes = 15;    // WhenIdle: no interactive use for this long (>= 0)
};

/// Everything a job needs to run. The engine settings travel as the JSON text of
/// app::EngineSettings (app/runtime/engine.h, engine_settings_to_json), so this header stays
/// engine-free; `model_path` is stored apart and wins over the JSON's model_path.
struct JobSpec {
  std::string title;  // shown in lists; empty: "<task> of N documents"
  JobTask task = JobTask::Summary;
  std::string summary_length = "medium";  // Summary: short | medium | long
  std::string prompt;                     // Prompt: the question/instruction, non-empty
  std::vector<std::string> clauses;       // Clauses: clause types; empty: default_clause_types()
  std::vector<int64_t> doc_ids;           // library document ids, in run order, no duplicates
  std::string model_path;                 // GGUF (local engine), or the model name for --endpoint
  std::string engine_json;                // EngineSettings JSON; empty: defaults
  int32_t n_predict = 256;                // answer tokens per prompt (> 0)
  float temp = 0.0f;                      // 0: greedy
  uint32_t seed = 0;                      // sampling seed (used when temp > 0)
  bool map_reduce = true;                 // documents longer than the context: answer over parts
  std::string endpoint;  // OpenAI-compatible base URL; empty: the local engine. The API key
                         // comes from SPILLWAY_API_KEY when the job runs and is never stored.
  Schedule schedule;
  int priority = 0;  // higher runs first
};

/// A job as listed (JobStore::jobs/job).
struct JobRecord {
  int64_t id = 0;
  JobSpec spec;
  JobState state = JobState::Queued;
  bool paused = false;  // a queued job held back (not due while paused)
  std::string reason;   // why it failed or was cancelled; empty otherwise
  int64_t created = 0, started = 0, finished = 0;  // unix seconds; 0: not yet
  int64_t due = 0;    // unix seconds it becomes due (Now: created; WhenIdle: 0)
  int64_t order = 0;  // queue position key (lower first, within a priority)
  int n_docs = 0, n_done = 0, n_failed = 0, n_running = 0;
  std::string lease_owner;  // runner holding the job; empty: none
  int64_t lease_expires_ms = 0;
  int64_t lease_heartbeat_ms = 0;  // the lease's last heartbeat (unix ms); 0: no lease
  double tokens_per_s = 0;         // generated tokens / decode seconds over finished documents
  double eta_s = -1;  // remaining documents x mean seconds per finished one; -1: unknown
};

/// Where a document's run is, as its runner last wrote it (migration 009): at most about once a
/// second and at every map-reduce part. Kept after the document finishes (its last state).
struct JobDocumentProgress {
  bool known = false;             // a runner wrote it; false: the document has not run yet
  std::string phase;              // "prefill" | "part" | "decode"; empty before the first event
  int prompt = 0, n_prompts = 0;  // the prompt in progress (0-based) of the document's prompts
  /// Map-reduce: the part in progress (1-based; n_parts + 1 while the parts' answers are
  /// combined) and the parts answered so far (kept ones included); 0 when not map-reduce.
  int part = 0, n_parts = 0, parts_done = 0;
  /// The phase's tokens: prompt positions in the KV (prefill) or tokens generated of n_predict
  /// (decode; total 0 when unbounded).
  int64_t tokens_done = 0, tokens_total = 0;
  double eta_s = -1;       // the document's answer (map-reduce: every part left); < 0: unknown
  int64_t updated_ms = 0;  // unix milliseconds
};

/// One document of a job.
struct JobDocument {
  int64_t job_id = 0;
  int64_t doc_id = 0;
  int position = 0;   // 0-based run order within the job
  std::string title;  // the library title when the job was added (kept if the row is deleted)
  DocState state = DocState::Pending;
  int attempts = 0;    // runs started (retries included)
  std::string reason;  // last failure (also kept on a later success's retry: empty then)
  std::string owner;   // runner holding the claim while running
  int64_t started_ms = 0, finished_ms = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double decode_s = 0;
  bool reused_snapshot = false;  // the document's saved KV was restored
  /// Map-reduce, once done: parts over all its prompts, and how many of them an earlier run
  /// (killed or stopped) had answered (kept, not asked again).
  int n_parts = 0, parts_kept = 0;
  /// Runs that died (the process killed or crashed) in a row without getting past the same
  /// place (prompt, part); RunnerOptions::crash_loop_deaths of them give the document up.
  int deaths = 0;
  JobDocumentProgress progress;
};

/// A citation of a result, as checked against the page text (app/ask/citations.h).
struct JobCitation {
  int page = 0;
  std::string quote;
  bool verified = false;
  std::string reason;  // empty when verified
};

/// One result row: one per document for summary/prompt, one per document x clause type.
struct JobResult {
  int64_t job_id = 0, doc_id = 0;
  std::string clause;     // Clauses: the clause type; empty otherwise
  std::string text;       // the model's answer (Clauses: its raw answer for this clause)
  bool found = true;      // Clauses: false when the model answered that there is none
  int page = 0;           // Clauses: the page of the first citation; 0 when none
  std::string quote;      // Clauses: the quoted clause text; empty when none
  bool verified = false;  // Clauses: the quote was found on that page
  std::vector<JobCitation> citations;  // every citation of `text`
  int64_t created = 0;                 // unix seconds
};

/// Whether the lease holder `owner` (a runner's default owner id "<host>:<pid>:<random>") is a
/// process of this host that has ended; its pid in *pid_out when the id names one of this host.
/// Unknown (another host, another form of id): false.
bool lease_holder_ended(const std::string& owner, int64_t* pid_out);

/// What `jobs show` and the Jobs dock say of a running job's runner.
struct RunnerHealth {
  bool gone = false;      // its lease expired, or its process has ended: nobody works on the job
  bool ended = false;     // the holder is a process of this host that has ended (pid below)
  int64_t pid = 0;        // the holder's pid when its id names one of this host; 0: unknown
  int64_t silent_ms = 0;  // since its last heartbeat (0 without a lease)
};
/// The runner health of job `j` at `now_ms`. Only a running job has a runner: for any other
/// state `gone` is false. A running job without a lease row is gone.
RunnerHealth runner_health(const JobRecord& j, int64_t now_ms);

/// The facts a due check needs, so tests can pass their own.
struct DueContext {
  int64_t now = 0;               // unix seconds
  int64_t last_interactive = 0;  // unix seconds (settings key kLastInteractiveKey); 0: never
  double load_1min = 0;          // /proc/loadavg's first field
};
/// The settings key the GUI and `spillway-cli ask` update on interactive use (unix seconds as
/// decimal text).
inline constexpr const char* kLastInteractiveKey = "last_interactive";
/// Whether a queued, unpaused job is due: Now/At/Nightly when now >= due; WhenIdle when
/// now - last_interactive >= idle_minutes*60 and load_1min < 1.0.
bool job_is_due(const JobRecord& job, const DueContext& ctx);
/// /proc/loadavg's 1-minute load; 0 when unreadable (not Linux).
double read_load_1min();
/// Stores now (unix seconds) under kLastInteractiveKey: call on interactive use.
Status mark_interactive(Library& lib, int64_t now_s);

// --- the store ---------------------------------------------------------------------------------

/// Jobs, their documents and results in the library database (migration 004_jobs.sql).
class JobStore final {
 public:
  /// Opens the library database `db_file` (created and migrated as Library::open does) with a
  /// connection of its own. Errors name the file.
  static Expected<std::unique_ptr<JobStore>> open(const std::filesystem::path& db_file);
  /// Opens an existing library database for reading only (Library::open_read_only's rules: a
  /// read-only folder or a full disk is fine; nothing is created or migrated). Only the reading
  /// calls (jobs, job, documents, results, due_jobs, leased_jobs) work on it.
  static Expected<std::unique_ptr<JobStore>> open_read_only(const std::filesystem::path& db_file);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  /// Checks and queues a job; returns its id. The documents must exist in the library (titles
  /// are copied). Errors: no documents, an unknown document id ("no document with id N"), a
  /// duplicate id, an empty prompt, n_predict < 1, temp < 0, a bad nightly time, a bad
  /// summary length, empty model_path. Nothing is stored on error.
  Expected<int64_t> add(const JobSpec& spec);

  /// Every job: running first, then queued in run order (priority desc, order asc, id), then
  /// finished ones newest first.
  Expected<std::vector<JobRecord>> jobs();
  /// One job. Error "no job with id N".
  Expected<JobRecord> job(int64_t id);
  /// A job's documents in run order, each with its progress.
  Expected<std::vector<JobDocument>> documents(int64_t job_id);
  /// A job's results, by document position then clause order.
  Expected<std::vector<JobResult>> results(int64_t job_id);

  /// queued|running -> cancelled (a running job's runner stops at its next check, within a
  /// heartbeat). Finished documents keep their results. Error when already done/failed/
  /// cancelled ("job N is done").
  Status cancel(int64_t id, const std::string& reason = "cancelled by the user");
  /// Holds a queued job back (paused) or releases it. A running job's runner stops within a
  /// heartbeat (the prompt in progress is abandoned and its document runs again later) and the
  /// job returns to queued, paused. Error on a finished job.
  Status set_paused(int64_t id, bool paused);
  /// Makes a queued job due now (its schedule becomes Now) and unpauses it.
  Status run_now(int64_t id);
  /// Changes a queued job's priority (higher runs first). Error unless queued.
  Status set_priority(int64_t id, int priority);
  /// Moves queued job `id` just before queued job `before_id` in the run order (taking that
  /// job's priority); before_id 0 moves it to the end of its priority. Error unless both queued.
  Status move_before(int64_t id, int64_t before_id);
  /// Failed documents (and a failed or cancelled job) back to pending/queued, attempts reset.
  /// Returns how many documents were reset. Error when the job is running.
  Expected<int> retry_failed(int64_t id);
  /// Removes a job that is not running, with its documents and results.
  Status remove(int64_t id);

  /// Queued, unpaused jobs that are due under `ctx`, in run order, whose lease is free or
  /// expired at `now_ms`.
  Expected<std::vector<int64_t>> due_jobs(const DueContext& ctx, int64_t now_ms);
  /// Jobs that would be due under `ctx` (queued and due, or running) but whose lease is live at
  /// `now_ms`: held by a runner, or by one that died and whose lease has not expired yet.
  Expected<std::vector<JobRecord>> leased_jobs(const DueContext& ctx, int64_t now_ms);

  /// The database file.
  const std::filesystem::path& file() const;
  /// The raw connection (the runner's and tests' own SQL). Owned by the store.
  sqlite3* handle();

  /// Tests: the clock used for created/started/finished (unix seconds). Default: system clock.
  void set_clock(std::function<int64_t()> now_s);

 private:
  JobStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --- running -----------------------------------------------------------------------------------

/// One prompt over one library document, as a Generator runs it.
struct GenRequest {
  int64_t doc_id = 0;
  std::string question;  // the task's instruction for this document (and clause)
  int32_t n_predict = 256;
  float temp = 0.0f;
  uint32_t seed = 0;
  bool map_reduce = true;
  /// Map-reduce: parts whose answers are stored (a killed or stopped run of the same prompt)
  /// are kept, the prompt continues at the next part (app/ask/ask.h AskParams::continue_parts).
  bool continue_parts = true;
  /// Map-reduce: part `part` of `n_parts` begins (1-based; 0 when the combination begins),
  /// kept parts included.
  std::function<void(int part, int n_parts)> part_start;
  /// Polled during generation (every ubatch and token): true stops with error "cancelled".
  std::function<bool()> cancelled;
  /// Tokens generated so far (the live tokens/s).
  std::function<void(int64_t generated_tokens, double decode_s)> progress;
  /// Progress events of the prompt (app/runtime/progress.h): prefill, decode, parts.
  ProgressSink events;
  /// The running session's counters after every ubatch and token (the local engine only): the
  /// dashboard's telemetry, as a chat run feeds it.
  std::function<void(const SessionUsage&)> usage;
};
/// Its outcome. On failure `error` says why and `transient` whether retrying may help (a busy
/// database, a remote 503 or timeout).
struct GenResult {
  bool ok = false;
  std::string text;
  std::vector<JobCitation> citations;  // checked against the document's pages
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  bool reused_snapshot = false;
  int n_parts = 0, parts_kept = 0;  // map-reduce: the parts, and those kept from a stored run
  std::string error;
  bool transient = false;
};
/// What runs prompts: the local engine (with the document's saved KV reused when model and
/// prefix match) or an OpenAI-compatible endpoint. One per job run, used on the runner's thread.
class Generator {
 public:
  virtual ~Generator() = default;
  /// "cpu (avx2, 4 threads)", "http://host:8000/v1 (model)".
  virtual std::string describe() const = 0;
  virtual GenResult run(const GenRequest& req) = 0;
};
/// Makes the generator of a job (the model is loaded here). An error fails the whole job with
/// its message ("model: cannot open ...").
using GeneratorFactory = std::function<Expected<std::unique_ptr<Generator>>(const JobRecord& job)>;

/// Live progress of a running job.
struct JobProgress {
  int64_t job_id = 0;
  int n_docs = 0, n_done = 0, n_failed = 0;
  int64_t doc_id = 0;                   // the document in progress; 0 between documents
  int prompt_index = 0, n_prompts = 0;  // within the document (clauses: one per clause type)
  double tokens_per_s = 0;              // of the current prompt
  double eta_s = -1;                    // -1: unknown
};

struct RunnerCallbacks {
  std::function<void(int64_t job_id, JobState state, const std::string& reason)> job_state;
  std::function<void(int64_t job_id, int64_t doc_id, DocState state, const std::string& reason)>
      document;
  std::function<void(const JobProgress&)> progress;
  std::function<void(const std::string&)> note;  // a line for the user (the CLI: stderr)
  /// Progress events (app/runtime/progress.h): the job's documents (documents done of the
  /// job's, ETA from the documents timed so far), and inside each document its prompts'
  /// prefill, decode and map-reduce parts.
  ProgressSink events;
  /// The running prompt's session counters after every ubatch and token (GenRequest::usage):
  /// the desktop app turns them into the memory dashboard's samples, as for chat runs.
  std::function<void(const SessionUsage&)> usage;
};

struct RunnerOptions {
  std::filesystem::path db_file;    // the library database (required)
  std::filesystem::path cache_dir;  // snapshots go to <cache_dir>/snapshots; empty: none
  std::string owner;                // lease owner id; empty: "<hostname>:<pid>:<random>"
  int64_t heartbeat_ms = 2000;      // how often the lease is renewed
  int64_t lease_ms = 15000;         // a lease without heartbeat for this long may be taken over
  int max_attempts = 3;             // per document, transient failures only
  /// A document whose runs died this many times in a row at the same place (prompt and
  /// map-reduce part) is given up (a crash loop); deaths further on do not count.
  int crash_loop_deaths = 3;
  int64_t backoff_ms = 1000;     // first retry delay; doubles each retry
  int64_t watch_poll_ms = 5000;  // run_watch: how often the queue is checked
  /// Default (empty): the local engine, or the remote client for jobs with an endpoint.
  GeneratorFactory generator;
  /// Stops the runner (the current prompt is cancelled; its document returns to pending).
  std::atomic<bool>* stop = nullptr;
  /// Tests: the 1-minute load average the when-idle check uses (default: /proc/loadavg).
  std::function<double()> load_1min;
  /// Tests: called inside the transaction that stores a document's results, before commit;
  /// an error aborts that write as a failed disk write would ("disk full").
  std::function<Status(int64_t job_id, int64_t doc_id)> result_write_hook;
};

/// What a run did.
struct RunSummary {
  int jobs_run = 0;  // jobs this runner worked on
  int jobs_done = 0, jobs_failed = 0, jobs_cancelled = 0;
  int docs_done = 0, docs_failed = 0;
  bool all_ok() const { return jobs_failed == 0 && docs_failed == 0; }
};

class Runner final {
 public:
  /// Opens its connections on the calling thread (db_file must exist or be creatable).
  static Expected<std::unique_ptr<Runner>> create(RunnerOptions options,
                                                  RunnerCallbacks callbacks = {});
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  /// This runner's lease owner id.
  const std::string& owner() const;

  /// Runs job `id` now, whatever its schedule (queued or running with an expired lease).
  /// Errors: no such job, finished, leased by a live runner ("job N is running in OWNER").
  /// A job that ends failed is not an error here (see the summary and the job's reason).
  Expected<RunSummary> run_job(int64_t id);
  /// Runs every due job in run order, re-checking the queue after each, until none is due.
  Expected<RunSummary> run_due();
  /// run_due, then waits watch_poll_ms and repeats until *stop (the CLI: SIGINT/SIGTERM).
  Expected<RunSummary> run_watch();

 private:
  Runner();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --- export ------------------------------------------------------------------------------------

enum class ExportFormat { Markdown, Csv };
/// "md" | "markdown" | "csv".
Expected<ExportFormat> parse_export_format(const std::string& s);

/// The Markdown report: the job's task, model and state, then per document its state and
/// result (clauses: one entry per clause type), each citation marked verified or unverified
/// (with the reason).
std::string export_markdown(const JobRecord& job, const std::vector<JobDocument>& docs,
                            const std::vector<JobResult>& results);
/// CSV (RFC 4180: CRLF line ends, fields with , " CR or LF quoted, quotes doubled) with the
/// header job,document_id,document,clause,found,page,quote,verified,state,reason,answer: one row
/// per result (per document x clause for clauses; found/verified as yes|no, page empty when
/// none, reason: why the quote is unverified; summary and prompt jobs fill only state and
/// answer), and one per failed or unfinished document
/// (state failed|pending|running, reason its failure, the other fields empty).
std::string export_csv(const JobRecord& job, const std::vector<JobDocument>& docs,
                       const std::vector<JobResult>& results);
/// Writes the export of job `id` to `path` (a temporary file renamed into place, so a failed
/// write leaves no half file). Errors name the file.
Status export_job(JobStore& store, int64_t id, ExportFormat format,
                  const std::filesystem::path& path);

}  // namespace spw::app
