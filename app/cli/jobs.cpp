#include "app/cli/jobs.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/option_checks.h"
#include "app/cli/progress_out.h"
#include "app/jobs/jobs.h"
#include "app/jobs/schedule.h"
#include "app/paths.h"
#include "app/runtime/engine.h"
#include "app/store/library.h"
#include "engine/kv/tier_policy.h"

namespace spw::cli {

namespace {

namespace fs = std::filesystem;

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

struct Opened {
  app::AppPaths paths;
  std::unique_ptr<app::JobStore> store;
};

Expected<Opened> open_store(const JobsArgs& a) {
  app::PathOverrides po;
  po.data_dir = a.data_dir;
  auto paths = app::prepare_paths(po);
  if (!paths) return paths.error();
  auto store = app::JobStore::open(app::library_db_file(paths->data_dir));
  if (!store) return store.error();
  return Opened{*paths, std::move(*store)};
}

// `jobs list` and `jobs show` only read: an existing library is opened read-only, without the
// data folder's write check, so they work in a read-only folder or on a full disk.
Expected<Opened> open_store_to_read(const JobsArgs& a) {
  app::PathOverrides po;
  po.data_dir = a.data_dir;
  auto paths = app::resolve_paths(po, app::PathEnv::from_process());
  if (!paths) return paths.error();
  const fs::path file = app::library_db_file(paths->data_dir);
  std::error_code ec;
  if (!fs::exists(file, ec)) return open_store(a);  // none yet: made as by any command
  auto store = app::JobStore::open_read_only(file);
  if (!store) return store.error();
  return Opened{*paths, std::move(*store)};
}

std::string schedule_text(const app::JobRecord& j) {
  const app::Schedule& s = j.spec.schedule;
  switch (s.kind) {
    case app::ScheduleKind::Now:
      return "now";
    case app::ScheduleKind::At:
      return "at " + app::format_local_time(j.due);
    case app::ScheduleKind::Nightly:
      return fmt::format("nightly {} ({})", app::format_hhmm(s.nightly_minute),
                         app::format_local_time(j.due));
    case app::ScheduleKind::WhenIdle:
      return fmt::format("when idle for {} min", s.idle_minutes);
  }
  return "";
}

std::string task_text(const app::JobSpec& s) {
  switch (s.task) {
    case app::JobTask::Summary:
      return fmt::format("summary ({})", s.summary_length);
    case app::JobTask::Prompt:
      return fmt::format("prompt \"{}\"", s.prompt);
    case app::JobTask::Clauses: {
      std::string list;
      for (const std::string& c : s.clauses) list += (list.empty() ? "" : ", ") + c;
      return fmt::format("clauses ({})", list);
    }
  }
  return "";
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The state word, with what is known beside it: "queued (paused)", "running (runner gone)".
std::string state_text(const app::JobRecord& j) {
  std::string s = app::job_state_name(j.state);
  if (j.paused) s += " (paused)";
  if (app::runner_health(j, now_ms()).gone) s += " (runner gone)";
  return s;
}

// `jobs show`'s first line: the state word, and for a running job whose runner is gone (killed,
// crashed, its machine off) that nobody works on it and how it goes on.
std::string show_state_line(const app::JobRecord& j, const app::RunnerHealth& h) {
  std::string s = app::job_state_name(j.state);
  if (j.paused) s += " (paused)";
  if (!h.gone) return s;
  const int64_t silent_s = h.silent_ms / 1000;
  if (j.lease_owner.empty()) {
    s += " (no runner holds it";
  } else if (h.ended) {
    s += fmt::format(" (its runner, process {}, has ended; it last reported {} s ago", h.pid,
                     silent_s);
  } else {
    s += fmt::format(" (its runner has not reported for {} s", silent_s);
  }
  return s + "; the next `jobs run-due` resumes it)";
}

nlohmann::json job_json(const app::JobRecord& j) {
  const app::RunnerHealth h = app::runner_health(j, now_ms());
  nlohmann::json o;
  o["id"] = j.id;
  o["title"] = j.spec.title;
  o["state"] = app::job_state_name(j.state);
  o["paused"] = j.paused;
  o["reason"] = j.reason;
  o["task"] = app::job_task_name(j.spec.task);
  o["model"] = j.spec.model_path;
  o["endpoint"] = j.spec.endpoint;
  o["schedule"] = app::schedule_kind_name(j.spec.schedule.kind);
  o["due"] = j.due;
  o["priority"] = j.spec.priority;
  o["n_docs"] = j.n_docs;
  o["n_done"] = j.n_done;
  o["n_failed"] = j.n_failed;
  o["created"] = j.created;
  o["started"] = j.started;
  o["finished"] = j.finished;
  o["lease_owner"] = j.lease_owner;
  // A running job nobody works on (its lease expired or its process ended); seconds since the
  // lease holder last reported (null without a lease).
  o["runner_gone"] = h.gone;
  o["runner_ended"] = h.ended;
  o["runner_silent_s"] =
      j.lease_owner.empty() ? nlohmann::json(nullptr) : nlohmann::json(h.silent_ms / 1000.0);
  o["tokens_per_s"] = j.tokens_per_s;
  return o;
}

// "part 3 of 5, prefill 1,024/1,730 tokens, ETA 2m10s": where a document's run is (or was when
// it stopped), from its progress row.
// `with_eta` false: a run that is not going on (its runner is gone) has no ETA.
std::string progress_text(const app::JobDocumentProgress& p, bool with_eta) {
  std::vector<std::string> bits;
  if (p.n_prompts > 1) bits.push_back(fmt::format("prompt {} of {}", p.prompt + 1, p.n_prompts));
  if (p.n_parts > 0) {
    if (p.part > p.n_parts)
      bits.push_back(fmt::format("combining {} parts", p.n_parts));
    else
      bits.push_back(
          fmt::format("part {} of {} ({} done)", std::max(p.part, 1), p.n_parts, p.parts_done));
  }
  if ((p.phase == "prefill" || p.phase == "decode") && p.tokens_done > 0) {
    std::string t = p.phase + " " + kv::group_thousands(p.tokens_done);
    if (p.tokens_total > 0) t += "/" + kv::group_thousands(p.tokens_total);
    bits.push_back(t + " tokens");
  }
  if (with_eta && p.eta_s >= 0) bits.push_back("ETA " + app::format_eta(p.eta_s));
  std::string out;
  for (const std::string& b : bits) out += (out.empty() ? "" : ", ") + b;
  return out;
}

nlohmann::json progress_json(const app::JobDocumentProgress& p) {
  if (!p.known) return nullptr;
  nlohmann::json o = {{"phase", p.phase},
                      {"prompt", p.prompt},
                      {"n_prompts", p.n_prompts},
                      {"part", p.part},
                      {"n_parts", p.n_parts},
                      {"parts_done", p.parts_done},
                      {"tokens_done", p.tokens_done},
                      {"tokens_total", p.tokens_total},
                      {"updated_ms", p.updated_ms}};
  o["eta_s"] = p.eta_s >= 0 ? nlohmann::json(p.eta_s) : nlohmann::json(nullptr);
  return o;
}

// --- add ---------------------------------------------------------------------------------------

int run_add(const JobsArgs& a) {
  app::JobSpec spec;
  auto task = app::parse_job_task(a.task);
  if (!task) return fail("--task: " + task.error().message);
  spec.task = *task;
  spec.title = a.title;
  spec.summary_length = a.length;
  spec.prompt = a.prompt;
  if (spec.task != app::JobTask::Prompt && !a.prompt.empty())
    return fail("--prompt goes with --task prompt");
  if (spec.task != app::JobTask::Clauses && !a.clauses.empty())
    return fail("--clauses goes with --task clauses");
  if (!a.clauses.empty()) {
    auto list = app::parse_clause_list(a.clauses);
    if (!list) return fail(list.error().message);
    spec.clauses = *list;
  }
  spec.doc_ids = a.docs;
  spec.n_predict = a.n_predict;
  spec.temp = a.temp;
  spec.seed = a.seed;
  spec.map_reduce = !a.no_map_reduce;
  spec.endpoint = a.endpoint;
  spec.priority = a.priority;
  spec.model_path = a.model;
  if (spec.endpoint.empty()) {
    if (a.model.empty()) return fail("a job needs a model: -m MODEL.gguf");
    std::error_code ec;
    const fs::path abs = fs::absolute(a.model, ec).lexically_normal();
    if (!fs::is_regular_file(abs, ec)) return fail(fmt::format("-m {}: no such file", a.model));
    spec.model_path = abs.string();  // the runner may start in another folder (systemd)
  } else {
    if (spec.endpoint.rfind("http://", 0) != 0 && spec.endpoint.rfind("https://", 0) != 0)
      return fail(fmt::format("--endpoint '{}': use an http:// or https:// URL", spec.endpoint));
    if (spec.model_path.empty()) spec.model_path = "default";
  }

  // Engine settings, checked now so a typo fails here and not at 2 a.m.
  if (auto st = check_ubatch_fits(a.kv, a.n_ctx); !st) return bad_value(st.error());
  KvArgs kv_args = a.kv;  // a disk tier without --spill-dir goes to the cache folder
  if (kv_args.spill_dir.empty() && kv_args.disk_budget && *kv_args.disk_budget != "0")
    kv_args.default_spill_dir = default_spill_dir(a.data_dir);
  auto kv_settings = make_kv_settings(kv_args);
  if (!kv_settings) return fail(kv_settings.error().message);
  app::EngineSettings es;
  es.model_path = spec.model_path;
  es.n_ctx = a.n_ctx;
  es.n_threads = a.n_threads;
  es.kv_type_k = a.cache_type_k;
  es.kv_type_v = a.cache_type_v;
  es.device = a.device;
  es.n_ubatch = a.kv.n_ubatch;
  es.kv = *kv_settings;
  es.template_name = a.template_name;
  es.use_snapshots = !a.no_snapshot;
  if (auto st = app::validate(es); !st) return fail(st.error().message);
  spec.engine_json = app::engine_settings_to_json(es);

  const int n_sched = !a.at.empty() + !a.nightly.empty() + a.when_idle;
  if (n_sched > 1) return fail("use one of --at, --nightly and --when-idle");
  if (!a.at.empty()) {
    auto t = app::parse_iso8601(a.at);
    if (!t) return fail("--at: " + t.error().message);
    spec.schedule.kind = app::ScheduleKind::At;
    spec.schedule.at = *t;
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    if (*t < now) {
      std::fprintf(stderr, "note: --at %s is in the past: the job runs at the next jobs run-due\n",
                   a.at.c_str());
    }
  } else if (!a.nightly.empty()) {
    auto m = app::parse_hhmm(a.nightly);
    if (!m) return fail("--nightly: " + m.error().message);
    spec.schedule.kind = app::ScheduleKind::Nightly;
    spec.schedule.nightly_minute = *m;
  } else if (a.when_idle) {
    spec.schedule.kind = app::ScheduleKind::WhenIdle;
  }
  if (a.idle_minutes < 0)
    return fail(fmt::format("--idle-minutes {} must not be negative", a.idle_minutes));
  spec.schedule.idle_minutes = a.idle_minutes;

  auto opened = open_store(a);
  if (!opened) return fail(opened.error().message);
  auto id = opened->store->add(spec);
  if (!id) return fail(id.error().message);
  auto rec = opened->store->job(*id);
  if (rec) {
    std::fprintf(stderr, "queued: %s, %d document%s, runs %s\n", rec->spec.title.c_str(),
                 rec->n_docs, rec->n_docs == 1 ? "" : "s", schedule_text(*rec).c_str());
  }
  std::printf("job %lld\n", static_cast<long long>(*id));
  return 0;
}

// --- list / show -------------------------------------------------------------------------------

int run_list(const JobsArgs& a) {
  auto opened = open_store_to_read(a);
  if (!opened) return fail(opened.error().message);
  auto jobs = opened->store->jobs();
  if (!jobs) return fail(jobs.error().message);
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& j : *jobs) arr.push_back(job_json(j));
    std::printf("%s\n", arr.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  if (jobs->empty()) {
    std::printf("no jobs\n");
    return 0;
  }
  std::printf("%5s  %-18s %7s %4s  %-34s %s\n", "ID", "STATE", "DONE", "PRI", "SCHEDULE", "TITLE");
  for (const auto& j : *jobs) {
    std::printf("%5lld  %-18s %3d/%-3d %4d  %-34s %s\n", static_cast<long long>(j.id),
                state_text(j).c_str(), j.n_done, j.n_docs, j.spec.priority,
                schedule_text(j).c_str(), j.spec.title.c_str());
  }
  return 0;
}

int run_show(const JobsArgs& a) {
  auto opened = open_store_to_read(a);
  if (!opened) return fail(opened.error().message);
  app::JobStore& store = *opened->store;
  auto j = store.job(a.id);
  if (!j) return fail(j.error().message);
  auto docs = store.documents(a.id);
  if (!docs) return fail(docs.error().message);
  if (a.json) {
    auto results = store.results(a.id);
    if (!results) return fail(results.error().message);
    nlohmann::json o = job_json(*j);
    o["documents"] = nlohmann::json::array();
    for (const auto& d : *docs) {
      nlohmann::json rs = nlohmann::json::array();
      for (const auto& r : *results) {
        if (r.doc_id != d.doc_id) continue;
        nlohmann::json cits = nlohmann::json::array();
        for (const auto& c : r.citations)
          cits.push_back({{"page", c.page},
                          {"quote", c.quote},
                          {"verified", c.verified},
                          {"reason", c.reason}});
        rs.push_back({{"clause", r.clause},
                      {"text", r.text},
                      {"found", r.found},
                      {"page", r.page},
                      {"quote", r.quote},
                      {"verified", r.verified},
                      {"citations", cits},
                      {"created", r.created}});
      }
      o["documents"].push_back({{"doc_id", d.doc_id},
                                {"title", d.title},
                                {"state", app::doc_state_name(d.state)},
                                {"attempts", d.attempts},
                                {"reason", d.reason},
                                {"generated_tokens", d.generated_tokens},
                                {"reused_snapshot", d.reused_snapshot},
                                {"n_parts", d.n_parts},
                                {"parts_kept", d.parts_kept},
                                {"deaths", d.deaths},
                                {"progress", progress_json(d.progress)},
                                {"results", rs}});
    }
    std::printf("%s\n", o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  const app::RunnerHealth health = app::runner_health(*j, now_ms());
  std::printf("%s\n", show_state_line(*j, health).c_str());
  std::printf("job %lld: %s\n", static_cast<long long>(j->id), j->spec.title.c_str());
  std::printf("task: %s\n", task_text(j->spec).c_str());
  std::printf("model: %s%s\n", j->spec.model_path.c_str(),
              j->spec.endpoint.empty() ? "" : (" at " + j->spec.endpoint).c_str());
  std::printf("schedule: %s; priority %d\n", schedule_text(*j).c_str(), j->spec.priority);
  std::printf("documents: %d of %d done, %d failed\n", j->n_done, j->n_docs, j->n_failed);
  if (!j->reason.empty()) std::printf("reason: %s\n", j->reason.c_str());
  if (!j->lease_owner.empty())
    std::printf("runner: %s%s\n", j->lease_owner.c_str(), health.gone ? " (gone)" : "");
  if (j->tokens_per_s > 0) std::printf("speed: %.1f tokens/s\n", j->tokens_per_s);
  for (const auto& d : *docs) {
    std::string line = fmt::format("  {}. document {} \"{}\": {}", d.position + 1, d.doc_id,
                                   d.title, app::doc_state_name(d.state));
    if (d.state == app::DocState::Done) {
      std::string parts;
      if (d.n_parts > 0) parts = fmt::format(", {} parts", d.n_parts);
      if (d.parts_kept > 0) parts += fmt::format(" ({} kept from an earlier run)", d.parts_kept);
      line += fmt::format(" ({} tokens{}{})", d.generated_tokens, parts,
                          d.reused_snapshot ? ", saved KV reused" : "");
    } else if (d.progress.known && d.state != app::DocState::Failed) {
      // A running document whose runner is gone stopped where its progress row says.
      const bool live = d.state == app::DocState::Running && !health.gone;
      const std::string where = progress_text(d.progress, live);
      if (!where.empty()) line += (live ? ": " : ": stopped at ") + where;
    }
    if (!d.reason.empty()) line += ": " + d.reason;
    if (d.attempts > 1) line += fmt::format(" [{} attempts]", d.attempts);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

// --- run ---------------------------------------------------------------------------------------

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {  // a second signal: die as before
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

int run_runner(const JobsArgs& a, bool one_job) {
  if (!(a.lease_s > 0) || !(a.heartbeat_s > 0) || a.heartbeat_s >= a.lease_s)
    return fail("--heartbeat must be shorter than --lease (both seconds, > 0)");
  if (!(a.poll_s > 0)) return fail("--poll must be more than 0 seconds");
  if (!(a.backoff_s >= 0)) return fail("--backoff must not be negative");
  app::PathOverrides po;
  po.data_dir = a.data_dir;
  auto paths = app::prepare_paths(po);
  if (!paths) return fail(paths.error().message);
  app::RunnerOptions o;
  o.db_file = app::library_db_file(paths->data_dir);
  o.cache_dir = paths->cache_dir;
  o.heartbeat_ms = static_cast<int64_t>(std::llround(a.heartbeat_s * 1000));
  o.lease_ms = static_cast<int64_t>(std::llround(a.lease_s * 1000));
  o.watch_poll_ms = static_cast<int64_t>(std::llround(a.poll_s * 1000));
  o.backoff_ms = static_cast<int64_t>(std::llround(a.backoff_s * 1000));
  o.stop = &g_stop;
  auto progress = ProgressOutput::open(a.progress_json);
  if (!progress) return fail(progress.error().message);
  app::RunnerCallbacks cb;
  cb.note = [&progress](const std::string& line) {
    (*progress)->interrupt();
    std::fprintf(stderr, "%s\n", line.c_str());
    (*progress)->wrote(true);
  };
  cb.events = (*progress)->sink();
  auto runner = app::Runner::create(std::move(o), cb);
  if (!runner) return fail(runner.error().message);

  // SIGINT/SIGTERM (systemd stop): finish bookkeeping, put the job back in the queue, exit.
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  Expected<app::RunSummary> r = one_job   ? (*runner)->run_job(a.id)
                                : a.watch ? (*runner)->run_watch()
                                          : (*runner)->run_due();
  (*progress)->finish();
  if (!r) return fail(r.error().message);
  std::fprintf(stderr,
               "%d job%s run: %d done, %d failed, %d cancelled; documents: %d done, %d failed\n",
               r->jobs_run, r->jobs_run == 1 ? "" : "s", r->jobs_done, r->jobs_failed,
               r->jobs_cancelled, r->docs_done, r->docs_failed);
  if (g_stop.load()) std::fprintf(stderr, "stopped by a signal; unfinished jobs are queued\n");
  return r->all_ok() ? 0 : 1;
}

int run_export(const JobsArgs& a) {
  auto fmt_ = app::parse_export_format(a.format);
  if (!fmt_) return fail(fmt_.error().message);
  auto opened = open_store(a);
  if (!opened) return fail(opened.error().message);
  if (auto st = app::export_job(*opened->store, a.id, *fmt_, a.output); !st)
    return fail(st.error().message);
  std::fprintf(stderr, "wrote %s\n", a.output.c_str());
  return 0;
}

}  // namespace

CLI::App* add_jobs_command(CLI::App& app, JobsArgs& a) {
  auto* c = app.add_subcommand("jobs", "Batch jobs: queue documents for a task and run them");
  a.self = c;
  c->require_subcommand(1);

  auto* add = c->add_subcommand("add", "Queue a job; prints \"job N\"");
  add->add_option("--task", a.task, "summary | clauses | prompt")
      ->capture_default_str()
      ->check(parsed_by(
          [](const std::string& v) {
            auto t = app::parse_job_task(v);
            return t ? std::string() : "--task: " + t.error().message;
          },
          "TASK"));
  add->add_option("--prompt", a.prompt, "The instruction of a prompt job");
  add->add_option("--clauses", a.clauses,
                  "Clause types, comma-separated (default: termination, governing law, liability "
                  "cap, renewal, assignment)");
  add->add_option("--length", a.length, "Summary length: short | medium | long")
      ->capture_default_str()
      ->check(parsed_by(
          [](const std::string& v) {
            const Status st = app::check_summary_length(v);
            return st ? std::string() : st.error().message;
          },
          "LENGTH"));
  add->add_option("--doc", a.docs, "Document id (repeat, or comma-separate, for several)")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->delimiter(',');
  add->add_option("-m,--model", a.model, "GGUF file (with --endpoint: the served model's name)");
  add->add_option("--title", a.title, "Shown in lists (default: the task and document count)");
  add->add_option("-n,--n-predict", a.n_predict, "Answer tokens per prompt")
      ->capture_default_str()
      ->check(int_range("-n", 1, kMaxInt));
  add->add_option("--temp", a.temp, "Temperature (0: greedy)")
      ->capture_default_str()
      ->check(real_range("--temp", 0, false, std::numeric_limits<double>::infinity(), false));
  add->add_option("-s,--seed", a.seed, "Sampling seed (with --temp > 0; -1: random)")
      ->capture_default_str()
      ->transform(seed_value("-s"));
  add_ctx_option(*add, a.n_ctx);
  add_threads_option(*add, a.n_threads);
  add_kv_type_options(*add, a.cache_type_k, a.cache_type_v);
  add_device_option(*add, a.device, "auto | cpu | cuda");
  add->add_option("--template", a.template_name, "Chat template instead of the detected one");
  add_kv_options(*add, a.kv);
  add->add_flag("--no-snapshot", a.no_snapshot, "Neither restore nor save documents' KV");
  add->add_flag("--no-map-reduce", a.no_map_reduce,
                "Fail a document longer than the context instead of answering over parts");
  // Checked while parsing, so a refused value exits 2 as other refused values do.
  add->add_option("--at", a.at, "Run at this ISO 8601 date-time (local, or with Z/+HH:MM)")
      ->check(parsed_by(
          [](const std::string& v) {
            auto t = app::parse_iso8601(v);
            return t ? std::string() : "--at: " + t.error().message;
          },
          "DATE-TIME"));
  add->add_option("--nightly", a.nightly, "Run at the next HH:MM, local time")
      ->check(parsed_by(
          [](const std::string& v) {
            auto m = app::parse_hhmm(v);
            return m ? std::string() : "--nightly: " + m.error().message;
          },
          "HH:MM"));
  add->add_flag("--when-idle", a.when_idle,
                "Run when Spillway has not been used interactively for --idle-minutes and the "
                "load is below one core");
  add->add_option("--idle-minutes", a.idle_minutes, "With --when-idle")
      ->capture_default_str()
      ->check(int_range("--idle-minutes", 0, kMaxInt));
  add->add_option("--endpoint", a.endpoint,
                  "An OpenAI-compatible server URL instead of the local engine (API key: "
                  "SPILLWAY_API_KEY)");
  add->add_option("--priority", a.priority, "Higher runs first")->capture_default_str();

  auto* list = c->add_subcommand("list", "Every job: state, progress, schedule");
  list->add_flag("--json", a.json, "One JSON array on stdout");
  auto* show = c->add_subcommand("show", "A job's state word, then per-document progress");
  show->add_option("id", a.id, "Job id")->required();
  show->add_flag("--json", a.json, "One JSON object on stdout");
  for (const char* name : {"cancel", "pause", "resume", "retry", "remove", "run"}) {
    const char* help = "";
    if (std::string(name) == "cancel") help = "Cancel a queued or running job";
    if (std::string(name) == "pause") help = "Hold a queued job back (a running one stops)";
    if (std::string(name) == "resume") help = "Release a paused job";
    if (std::string(name) == "retry") help = "Queue a job's failed documents again";
    if (std::string(name) == "remove") help = "Remove a job that is not running, with its results";
    if (std::string(name) == "run") help = "Run one job now, whatever its schedule";
    auto* s = c->add_subcommand(name, help);
    s->add_option("id", a.id, "Job id")->required();
    if (std::string(name) == "run") {
      s->add_option("--lease", a.lease_s,
                    "Seconds without heartbeat before another runner may "
                    "take the job over")
          ->capture_default_str();
      s->add_option("--heartbeat", a.heartbeat_s, "Seconds between heartbeats")
          ->capture_default_str();
      s->add_option("--backoff", a.backoff_s,
                    "Seconds before the first retry of a transient failure (doubles; 3 tries)")
          ->capture_default_str();
    }
  }
  auto* prio = c->add_subcommand("priority", "Change a queued job's priority (higher first)");
  prio->add_option("id", a.id, "Job id")->required();
  prio->add_option("priority", a.new_priority, "New priority")->required();
  auto* move = c->add_subcommand("move", "Move a queued job in the run order");
  move->add_option("id", a.id, "Job id")->required();
  auto* o_before = move->add_option("--before", a.before, "Just before this queued job");
  auto* o_last = move->add_flag("--last", a.last, "To the end of its priority");
  o_before->excludes(o_last);

  auto* due = c->add_subcommand("run-due", "Run every due job, then exit (0: all succeeded)");
  due->add_flag("--watch", a.watch, "Keep running, picking jobs up as they become due");
  due->add_option("--progress-json", a.progress_json,
                  "Write one JSON object per progress event (document, part, prefill, decode) to "
                  "FILE");
  due->add_option("--poll", a.poll_s, "--watch: seconds between queue checks")
      ->capture_default_str();
  due->add_option("--lease", a.lease_s,
                  "Seconds without heartbeat before another runner may take a job over")
      ->capture_default_str();
  due->add_option("--heartbeat", a.heartbeat_s, "Seconds between heartbeats")
      ->capture_default_str();
  due->add_option("--backoff", a.backoff_s,
                  "Seconds before the first retry of a transient failure (doubles; 3 tries)")
      ->capture_default_str();

  auto* exp = c->add_subcommand("export", "Write a job's results as Markdown or CSV");
  exp->add_option("id", a.id, "Job id")->required();
  exp->add_option("--format", a.format, "md | csv")
      ->required()
      ->check(parsed_by(
          [](const std::string& v) {
            auto f = app::parse_export_format(v);
            return f ? std::string() : f.error().message;
          },
          "FORMAT"));
  exp->add_option("-o,--output", a.output, "Output file")->required();

  // --data-dir (the global option) may follow any of these.
  for (CLI::App* s : c->get_subcommands({})) s->fallthrough();
  return c;
}

int run_jobs(JobsArgs& a) {
  const auto subs = a.self ? a.self->get_subcommands() : std::vector<CLI::App*>{};
  if (subs.empty()) return fail("jobs needs a subcommand (see jobs --help)");
  const std::string cmd = subs.front()->get_name();
  if (cmd == "add") return run_add(a);
  if (cmd == "list") return run_list(a);
  if (cmd == "show") return run_show(a);
  if (cmd == "run-due") return run_runner(a, false);
  if (cmd == "run") return run_runner(a, true);
  if (cmd == "export") return run_export(a);

  auto opened = open_store(a);
  if (!opened) return fail(opened.error().message);
  app::JobStore& store = *opened->store;
  Status st;
  if (cmd == "cancel") {
    st = store.cancel(a.id);
  } else if (cmd == "pause") {
    st = store.set_paused(a.id, true);
  } else if (cmd == "resume") {
    st = store.set_paused(a.id, false);
  } else if (cmd == "retry") {
    auto n = store.retry_failed(a.id);
    if (!n) return fail(n.error().message);
    std::fprintf(stderr, "job %lld: %d failed document%s queued again\n",
                 static_cast<long long>(a.id), *n, *n == 1 ? "" : "s");
  } else if (cmd == "remove") {
    st = store.remove(a.id);
  } else if (cmd == "priority") {
    st = store.set_priority(a.id, a.new_priority);
  } else if (cmd == "move") {
    if (a.before == 0 && !a.last) return fail("move needs --before ID or --last");
    if (a.before == a.id) return fail(fmt::format("job {} cannot move before itself", a.id));
    st = store.move_before(a.id, a.last ? 0 : a.before);
  } else {
    return fail("unknown jobs subcommand '" + cmd + "'");
  }
  if (!st) return fail(st.error().message);
  if (cmd == "remove") {
    std::printf("job %lld removed\n", static_cast<long long>(a.id));
    return 0;
  }
  auto j = store.job(a.id);
  if (j) std::printf("job %lld: %s\n", static_cast<long long>(a.id), state_text(*j).c_str());
  return 0;
}

}  // namespace spw::cli
