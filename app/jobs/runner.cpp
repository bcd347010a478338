// The job runner (app/jobs/jobs.h): leases, the heartbeat thread, per-document claims, retries
// with backoff, and the job's final state.
#include "app/jobs/runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "app/jobs/doc_progress.h"
#include "app/jobs/job_store.h"
#include "app/store/sqlite_stmt.h"

namespace spw::app {

namespace fs = std::filesystem;
using jobs_db::now_ms;
using jobs_db::now_s;

namespace {

std::string default_owner() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "host");
  std::random_device rd;
  return fmt::format("{}:{}:{:08x}", host, static_cast<long>(getpid()), rd());
}

// Retries an operation that failed on a busy database (beyond SQLite's own busy timeout).
template <typename F>
auto retry_busy(F&& f) -> decltype(f()) {
  for (int attempt = 0;; ++attempt) {
    auto r = f();
    if (r || attempt >= 4 || !jobs_db::is_busy_message(r.error().message)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
  }
}

enum class StopWhy { None = 0, LostLease, Cancelled, Paused, Removed };

// Renews the job's lease every `every_ms` on a connection of its own, and watches the job's
// row: cancelled, paused or the lease lost sets `why` (the runner polls it).
class Heartbeat final {
 public:
  Heartbeat(fs::path db_file, int64_t job_id, std::string owner, int64_t every_ms, int64_t lease_ms)
      : db_file_(std::move(db_file)),
        job_id_(job_id),
        owner_(std::move(owner)),
        every_ms_(every_ms),
        lease_ms_(lease_ms) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  StopWhy why() const { return why_.load(); }
  bool stop() const { return why_.load() != StopWhy::None; }

 private:
  void loop() {
    auto db =
        jobs_db::open_connection(db_file_, static_cast<int>(std::min<int64_t>(every_ms_, 1000)));
    if (!db) return;  // the lease then expires: another runner may take over (no double work)
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, std::chrono::milliseconds(every_ms_), [this] { return quit_; });
      if (quit_) break;
      lock.unlock();
      check(*db);
      lock.lock();
    }
    lock.unlock();
    sqlite3_close(*db);
  }

  void check(sqlite3* db) {
    auto mine = jobs_db::renew_lease(db, job_id_, owner_, now_ms(), lease_ms_);
    if (mine && !*mine) {
      why_ = StopWhy::LostLease;
      return;
    }
    auto st = sql::Stmt::prepare(db, "SELECT state, paused FROM jobs WHERE id = ?");
    if (!st) return;
    st->bind(1, job_id_);
    auto row = st->step();
    if (!row) return;  // busy: try again next beat
    if (!*row) {
      why_ = StopWhy::Removed;
      return;
    }
    if (st->text(0) == "cancelled")
      why_ = StopWhy::Cancelled;
    else if (st->flag(1))
      why_ = StopWhy::Paused;
  }

  fs::path db_file_;
  int64_t job_id_;
  std::string owner_;
  int64_t every_ms_, lease_ms_;
  std::atomic<StopWhy> why_{StopWhy::None};
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

enum class DocOutcome { Done, Failed, Stopped, Lost };

// "part 3 of 5", "the combination of 5 parts' answers", "prompt 2 of 5, part 1 of 3", "its
// start": where a run was when it last wrote its progress.
std::string place_text(const JobDocumentProgress& p) {
  std::string part;
  if (p.n_parts > 0 && p.part > p.n_parts)
    part = fmt::format("the combination of its {} parts' answers", p.n_parts);
  else if (p.n_parts > 0 && p.part > 0)
    part = fmt::format("part {} of {}", p.part, p.n_parts);
  if (p.n_prompts > 1) {
    const std::string prompt = fmt::format("prompt {} of {}", p.prompt + 1, p.n_prompts);
    return part.empty() ? prompt : prompt + ", " + part;
  }
  return part.empty() ? std::string("its start") : part;
}

}  // namespace

struct Runner::Impl {
  RunnerOptions opt;
  RunnerCallbacks cb;
  std::unique_ptr<JobStore> store;
  std::string owner;

  sqlite3* db() { return store->handle(); }
  bool stopping() const { return opt.stop && opt.stop->load(); }

  void note(const std::string& line) const {
    if (cb.note) cb.note(line);
  }
  void job_state(int64_t id, JobState s, const std::string& reason) const {
    if (cb.job_state) cb.job_state(id, s, reason);
  }
  void doc_state(int64_t job, int64_t doc, DocState s, const std::string& reason) const {
    if (cb.document) cb.document(job, doc, s, reason);
  }

  // Sleeps `ms`, waking early when the runner or the job is told to stop. false: stopped.
  bool nap(int64_t ms, const Heartbeat* hb) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      if (stopping() || (hb && hb->stop())) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  Expected<std::unique_ptr<Generator>> make_generator(const JobRecord& job) const {
    if (opt.generator) return opt.generator(job);
    if (!job.spec.endpoint.empty()) return make_remote_generator(job, opt.db_file);
    return make_local_generator(job, opt.db_file, opt.cache_dir);
  }

  DocOutcome run_document(const JobRecord& job, const JobDocument& doc, Generator& gen,
                          const Heartbeat& hb, JobProgress& progress, double& doc_seconds_sum,
                          int& docs_timed);
  Expected<RunSummary> run_job(int64_t id);
  Expected<RunSummary> run_due();
  Expected<int64_t> wait_for_dead_leases(const DueContext& ctx, const std::set<int64_t>& tried);

  // Lease notes already given (job, holder), so that --watch says each once.
  std::set<std::pair<int64_t, std::string>> lease_noted;
};

Runner::Runner() : impl_(std::make_unique<Impl>()) {}
Runner::~Runner() = default;

Expected<std::unique_ptr<Runner>> Runner::create(RunnerOptions options, RunnerCallbacks callbacks) {
  if (options.db_file.empty()) return Error{"the job runner needs the library database file"};
  if (options.heartbeat_ms <= 0 || options.lease_ms <= options.heartbeat_ms)
    return make_error("lease {} ms must be longer than the heartbeat {} ms", options.lease_ms,
                      options.heartbeat_ms);
  auto store = JobStore::open(options.db_file);
  if (!store) return store.error();
  std::unique_ptr<Runner> r(new Runner());
  r->impl_->owner = options.owner.empty() ? default_owner() : options.owner;
  r->impl_->opt = std::move(options);
  r->impl_->cb = std::move(callbacks);
  r->impl_->store = std::move(*store);
  return r;
}

const std::string& Runner::owner() const { return impl_->owner; }
Expected<RunSummary> Runner::run_job(int64_t id) { return impl_->run_job(id); }
Expected<RunSummary> Runner::run_due() { return impl_->run_due(); }

Expected<RunSummary> Runner::run_watch() {
  RunSummary total;
  while (!impl_->stopping()) {
    auto r = impl_->run_due();
    if (!r) {
      impl_->note("error: " + r.error().message);
    } else {
      total.jobs_run += r->jobs_run;
      total.jobs_done += r->jobs_done;
      total.jobs_failed += r->jobs_failed;
      total.jobs_cancelled += r->jobs_cancelled;
      total.docs_done += r->docs_done;
      total.docs_failed += r->docs_failed;
    }
    impl_->nap(impl_->opt.watch_poll_ms, nullptr);
  }
  return total;
}

DocOutcome Runner::Impl::run_document(const JobRecord& job, const JobDocument& doc, Generator& gen,
                                      const Heartbeat& hb, JobProgress& progress,
                                      double& doc_seconds_sum, int& docs_timed) {
  sqlite3* d = db();
  const int64_t job_id = job.id;
  const auto fail = [&](const std::string& reason) {
    if (auto s = retry_busy(
            [&] { return jobs_db::fail_document(d, job_id, doc.doc_id, owner, reason, now_ms()); });
        !s) {
      note(fmt::format("job {}: document {}: cannot record its failure: {}", job_id, doc.doc_id,
                       s.error().message));
    }
    note(fmt::format("job {}: document {} failed: {}", job_id, doc.doc_id, reason));
    doc_state(job_id, doc.doc_id, DocState::Failed, reason);
    return DocOutcome::Failed;
  };
  const auto stop = [&]() {
    (void)jobs_db::release_document(d, job_id, doc.doc_id, owner);
    return DocOutcome::Stopped;
  };
  // A document whose runs keep dying at the same place (a crash in it) must not block the job
  // forever; runs killed further on each time are progress, not a crash loop.
  if (doc.deaths >= opt.crash_loop_deaths) {
    return fail(fmt::format(
        "given up: its runner died {} times in a row at {} without getting further (a crash "
        "loop; 'jobs retry {}' tries it again)",
        doc.deaths, place_text(doc.progress), job_id));
  }
  if (doc.deaths > 0) {
    note(fmt::format(
        "job {}: document {}: its last runner died at {}; resuming ({} of {} deaths "
        "there before it is given up)",
        job_id, doc.doc_id, place_text(doc.progress), doc.deaths, opt.crash_loop_deaths));
  }
  doc_state(job_id, doc.doc_id, DocState::Running, "");
  const auto started = std::chrono::steady_clock::now();
  const std::vector<TaskPrompt> prompts = task_prompts(job.spec);
  std::vector<JobResult> results;
  jobs_db::DocStats stats;
  stats.reused_snapshot = true;
  progress.doc_id = doc.doc_id;
  progress.n_prompts = static_cast<int>(prompts.size());
  auto last_emit = std::chrono::steady_clock::now();
  DocProgressWriter::Params wp;
  wp.db = d;
  wp.job_id = job_id;
  wp.doc_id = doc.doc_id;
  wp.owner = owner;
  wp.n_prompts = static_cast<int>(prompts.size());
  DocProgressWriter place(std::move(wp));
  for (size_t i = 0; i < prompts.size(); ++i) {
    place.prompt_begin(static_cast<int>(i));
    progress.prompt_index = static_cast<int>(i);
    progress.tokens_per_s = 0;
    if (cb.progress) cb.progress(progress);
    GenResult r;
    for (int attempt = 1;; ++attempt) {
      GenRequest req;
      req.doc_id = doc.doc_id;
      req.question = prompts[i].question;
      req.n_predict = job.spec.n_predict;
      req.temp = job.spec.temp;
      req.seed = job.spec.seed;
      req.map_reduce = job.spec.map_reduce;
      req.cancelled = [&] { return stopping() || hb.stop(); };
      req.continue_parts = true;  // a killed or stopped run's finished parts are kept
      req.part_start = [&](int part, int n_parts) { place.part_start(part, n_parts); };
      req.events = [&](const ProgressEvent& e) {
        place.event(e);  // first: an event seen outside is in the row already
        if (cb.events) cb.events(e);
      };
      req.usage = cb.usage;
      req.progress = [&](int64_t tokens, double decode_s) {
        const auto now = std::chrono::steady_clock::now();
        if (!cb.progress || now - last_emit < std::chrono::milliseconds(250)) return;
        last_emit = now;
        progress.tokens_per_s = decode_s > 0 ? static_cast<double>(tokens) / decode_s : 0;
        cb.progress(progress);
      };
      r = gen.run(req);
      if (r.ok) break;
      if (stopping() || hb.stop()) return stop();
      if (r.transient && attempt < opt.max_attempts) {
        const int64_t wait = opt.backoff_ms << (attempt - 1);
        note(fmt::format("job {}: document {}: {} (retry {} of {} in {} ms)", job_id, doc.doc_id,
                         r.error, attempt, opt.max_attempts - 1, wait));
        (void)jobs_db::note_document_retry(d, job_id, doc.doc_id, owner, r.error);
        if (!nap(wait, &hb)) return stop();
        continue;
      }
      std::string reason = r.error;
      if (r.transient) reason += fmt::format(" (after {} attempts)", attempt);
      return fail(reason);
    }
    if (job.spec.task == JobTask::Clauses) {
      results.push_back(clause_result(prompts[i].clause, r.text, r.citations));
    } else {
      JobResult jr;
      jr.text = r.text;
      jr.citations = r.citations;
      jr.found = true;
      results.push_back(std::move(jr));
    }
    stats.prompt_tokens += r.prompt_tokens;
    stats.generated_tokens += r.generated_tokens;
    stats.decode_s += r.decode_s;
    stats.reused_snapshot = stats.reused_snapshot && r.reused_snapshot;
    stats.n_parts += r.n_parts;
    stats.parts_kept += r.parts_kept;
  }
  if (stopping() || hb.stop()) return stop();
  for (int attempt = 1;; ++attempt) {
    auto stored = jobs_db::store_document_results(d, job_id, doc.doc_id, owner, results, stats,
                                                  now_ms(), now_s(), opt.result_write_hook);
    if (stored) {
      if (!*stored) {
        note(fmt::format("job {}: document {}: another runner holds it now; result dropped", job_id,
                         doc.doc_id));
        return DocOutcome::Lost;
      }
      break;
    }
    const std::string& msg = stored.error().message;
    if (jobs_db::is_busy_message(msg) && attempt < opt.max_attempts + 2) {
      if (!nap(opt.backoff_ms << (attempt - 1), &hb)) return stop();
      continue;
    }
    return fail("cannot store the result: " + msg);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  doc_seconds_sum += secs;
  ++docs_timed;
  doc_state(job_id, doc.doc_id, DocState::Done, "");
  std::string parts;
  if (stats.n_parts > 0) {
    parts = fmt::format(", {} parts", stats.n_parts);
    if (stats.parts_kept > 0)
      parts += fmt::format(" ({} kept from an earlier run)", stats.parts_kept);
  }
  note(fmt::format("job {}: document {} done ({} tokens, {:.1f} s{}{})", job_id, doc.doc_id,
                   stats.generated_tokens, secs, parts,
                   stats.reused_snapshot ? ", saved KV reused" : ""));
  return DocOutcome::Done;
}

Expected<RunSummary> Runner::Impl::run_job(int64_t id) {
  sqlite3* d = db();
  std::string why;
  auto lr = retry_busy(
      [&] { return jobs_db::acquire_lease(d, id, owner, now_ms(), opt.lease_ms, now_s(), &why); });
  if (!lr) return lr.error();
  if (*lr == jobs_db::LeaseResult::HeldByOther)
    return make_error("job {} is running in another runner ({})", id, why);
  if (*lr == jobs_db::LeaseResult::NotRunnable) return Error{why};

  RunSummary sum;
  sum.jobs_run = 1;
  Heartbeat hb(opt.db_file, id, owner, opt.heartbeat_ms, opt.lease_ms);
  auto job = jobs_db::read_job(d, id);
  if (!job) return job.error();
  job_state(id, JobState::Running, "");
  note(fmt::format("job {}: {} ({} of {} documents done)", id, job->spec.title, job->n_done,
                   job->n_docs));

  auto gen = make_generator(*job);
  if (!gen) {
    const std::string reason = gen.error().message;
    if (auto s = retry_busy([&] { return jobs_db::fail_job(d, id, owner, reason, now_s()); }); !s)
      return s.error();
    note(fmt::format("job {} failed: {}", id, reason));
    job_state(id, JobState::Failed, reason);
    sum.jobs_failed = 1;
    return sum;
  }
  note(fmt::format("job {}: running on {}", id, (*gen)->describe()));

  JobProgress progress;
  progress.job_id = id;
  progress.n_docs = job->n_docs;
  progress.n_done = job->n_done;
  progress.n_failed = job->n_failed;
  double doc_seconds = 0;
  int docs_timed = 0;
  bool stopped = false;
  const auto document_event = [&] {
    if (!cb.events) return;
    ProgressEvent e;
    e.phase = ProgressPhase::Document;
    e.done = progress.n_done + progress.n_failed;
    e.total = progress.n_docs;
    e.eta_s = progress.eta_s;
    e.elapsed_s = doc_seconds;
    cb.events(e);
  };
  progress.eta_s = -1;
  document_event();
  for (;;) {
    if (stopping() || hb.stop()) {
      stopped = true;
      break;
    }
    bool claim_stop = false;
    auto claimed = retry_busy(
        [&] { return jobs_db::claim_next_document(d, id, owner, now_ms(), &claim_stop); });
    if (!claimed) {
      note(fmt::format("job {}: {}", id, claimed.error().message));
      stopped = true;
      break;
    }
    if (claim_stop) {
      stopped = true;
      break;
    }
    if (!*claimed) break;  // every document finished
    const DocOutcome o =
        run_document(*job, **claimed, **gen, hb, progress, doc_seconds, docs_timed);
    if (o == DocOutcome::Done) {
      ++sum.docs_done;
      ++progress.n_done;
    } else if (o == DocOutcome::Failed) {
      ++sum.docs_failed;
      ++progress.n_failed;
    } else {
      stopped = true;
      break;
    }
    progress.doc_id = 0;
    const int left = progress.n_docs - progress.n_done - progress.n_failed;
    progress.eta_s = docs_timed > 0 ? left * doc_seconds / docs_timed : -1;
    if (cb.progress) cb.progress(progress);
    document_event();
  }
  gen->reset();  // unload the model before the bookkeeping below

  if (stopped) {
    const StopWhy w = hb.why();
    if (w == StopWhy::LostLease || w == StopWhy::Removed) {
      note(fmt::format(
          "job {}: {}; this runner stops", id,
          w == StopWhy::Removed ? "the job was removed" : "another runner took over its lease"));
      return sum;
    }
    auto cur = jobs_db::read_job(d, id);
    if (cur && cur->state == JobState::Cancelled) {
      (void)retry_busy([&] { return jobs_db::release_owned_documents(d, id, owner); });
      (void)jobs_db::release_lease(d, id, owner);
      note(fmt::format("job {} cancelled: {}", id, cur->reason));
      job_state(id, JobState::Cancelled, cur->reason);
      sum.jobs_cancelled = 1;
      return sum;
    }
    if (auto s = retry_busy([&] { return jobs_db::requeue_job(d, id, owner); }); !s)
      return s.error();
    const bool paused = cur && cur->paused;
    note(fmt::format("job {}: {}; back in the queue at its first unfinished document", id,
                     paused ? "paused" : "stopped"));
    job_state(id, JobState::Queued, paused ? "paused" : "stopped");
    return sum;
  }
  auto fin = retry_busy([&] { return jobs_db::finish_job(d, id, owner, now_s()); });
  if (!fin) return fin.error();
  auto after = jobs_db::read_job(d, id);
  const std::string reason = after ? after->reason : std::string();
  if (*fin == JobState::Done) ++sum.jobs_done;
  if (*fin == JobState::Failed) ++sum.jobs_failed;
  if (*fin == JobState::Cancelled) ++sum.jobs_cancelled;
  note(fmt::format("job {} {}{}", id, job_state_name(*fin), reason.empty() ? "" : ": " + reason));
  job_state(id, *fin, reason);
  return sum;
}

// Says which due jobs a lease keeps from this runner, with the time left on it. A holder that
// is a process of this host that has ended is a dead runner: its lease is waited for when it
// ends within our own lease length (the milliseconds to wait are returned; 0: none); other
// holders (alive, another host, a lease longer than that) are skipped.
Expected<int64_t> Runner::Impl::wait_for_dead_leases(const DueContext& ctx,
                                                     const std::set<int64_t>& tried) {
  const int64_t now = now_ms();
  auto held = retry_busy([&] { return store->leased_jobs(ctx, now); });
  if (!held) return held.error();
  int64_t wait_ms = 0;
  for (const JobRecord& j : *held) {
    if (tried.count(j.id) || j.lease_owner == owner) continue;
    const int64_t left = std::max<int64_t>(0, j.lease_expires_ms - now);
    int64_t pid = 0;
    const bool gone = lease_holder_ended(j.lease_owner, &pid);
    const bool wait = gone && left <= opt.lease_ms;
    if (wait) wait_ms = std::max(wait_ms, left + 50);
    if (!lease_noted.insert({j.id, j.lease_owner}).second) continue;
    if (wait) {
      note(
          fmt::format("job {}: its runner {} has ended (process {}); waiting {:.1f} s for its "
                      "lease to expire, then resuming it",
                      j.id, j.lease_owner, pid, left / 1000.0));
    } else if (gone) {
      note(
          fmt::format("job {}: skipped: its runner {} has ended (process {}) but its lease "
                      "runs {:.1f} s more; run-due again after that resumes it",
                      j.id, j.lease_owner, pid, left / 1000.0));
    } else {
      note(
          fmt::format("job {}: skipped: runner {} holds its lease for {:.1f} s more (renewed "
                      "while that runner lives; if it died, the job resumes once the lease "
                      "expires)",
                      j.id, j.lease_owner, left / 1000.0));
    }
  }
  return wait_ms;
}

Expected<RunSummary> Runner::Impl::run_due() {
  RunSummary total;
  std::set<int64_t> tried;
  while (!stopping()) {
    DueContext ctx;
    ctx.now = now_s();
    ctx.load_1min = opt.load_1min ? opt.load_1min() : read_load_1min();
    auto last = retry_busy([&]() -> Expected<int64_t> {
      auto st = sql::Stmt::prepare(db(), "SELECT value FROM settings WHERE key = ?");
      if (!st) return st.error();
      st->bind(1, kLastInteractiveKey);
      auto row = st->step();
      if (!row) return row.error();
      if (!*row) return int64_t{0};
      return static_cast<int64_t>(std::strtoll(st->text(0).c_str(), nullptr, 10));
    });
    if (!last) return last.error();
    ctx.last_interactive = *last;
    auto due = retry_busy([&] { return store->due_jobs(ctx, now_ms()); });
    if (!due) return due.error();
    int64_t next = 0;
    for (int64_t id : *due) {
      if (!tried.count(id)) {
        next = id;
        break;
      }
    }
    if (next == 0) {
      auto wait = wait_for_dead_leases(ctx, tried);
      if (!wait) return wait.error();
      if (*wait > 0 && nap(*wait, nullptr)) continue;
      break;
    }
    tried.insert(next);
    auto r = run_job(next);
    if (!r) {
      const std::string& m = r.error().message;
      note(fmt::format("job {}: {}", next, m));
      // A job another live runner holds is theirs, not a failure of this run.
      if (m.find("running in another runner") == std::string::npos) ++total.jobs_failed;
      continue;
    }
    total.jobs_run += r->jobs_run;
    total.jobs_done += r->jobs_done;
    total.jobs_failed += r->jobs_failed;
    total.jobs_cancelled += r->jobs_cancelled;
    total.docs_done += r->docs_done;
    total.docs_failed += r->docs_failed;
  }
  return total;
}

}  // namespace spw::app
