#include "app/cli/ask.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/ask/ask.h"
#include "app/cli/cli_common.h"
#include "app/cli/option_checks.h"
#include "app/cli/progress_out.h"
#include "app/ingest/ingest.h"
#include "app/jobs/jobs.h"
#include "app/paths.h"
#include "app/runtime/engine.h"
#include "app/runtime/snapshot_budget.h"
#include "app/settings/app_settings.h"
#include "app/store/library.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/device.h"
#include "engine/chat/chat_template.h"
#include "engine/common/size.h"
#include "engine/kv/snapshot.h"
#include "engine/kv/spill_file.h"

namespace spw::cli {

namespace {

namespace fs = std::filesystem;

int ask_fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

// Opens the library and finds the document: by id, or by ingesting FILE (a file already in the
// library is found by its hash and not read again).
Expected<app::DocumentText> load_document(const AskArgs& a, app::Library& lib) {
  int64_t id = a.doc_id;
  if (!a.file.empty()) {
    app::IngestOptions io;
    io.password = a.password;
    io.ocr = a.ocr;
    auto r = app::ingest_file(lib, a.file, io);
    if (!r) return r.error();
    for (const app::PageWarning& w : r->warnings) {
      if (w.page_no > 0)
        std::fprintf(stderr, "warning: %s: page %d: %s\n", a.file.c_str(), w.page_no,
                     w.message.c_str());
      else
        std::fprintf(stderr, "warning: %s: %s\n", a.file.c_str(), w.message.c_str());
    }
    std::fprintf(stderr, "%s: %s document %lld\n", a.file.c_str(),
                 r->already_present ? "already in the library as" : "ingested as",
                 static_cast<long long>(r->doc_id));
    id = r->doc_id;
  }
  auto rec = lib.document(id);
  if (!rec) return rec.error();
  auto pages = lib.pages(id);
  if (!pages) return pages.error();
  return app::document_text(*rec, std::move(*pages));
}

nlohmann::json citation_json(const app::CitationCheck& c) {
  nlohmann::json j;
  j["page"] = c.citation.page;
  j["quote"] = c.citation.quote;
  j["verified"] = c.verified;
  j["begin"] = c.begin;
  j["end"] = c.end;
  j["byte_begin"] = c.byte_begin;
  j["byte_end"] = c.byte_end;
  if (!c.verified) j["reason"] = c.reason;
  j["found_on_page"] = c.found_on_page > 0 ? nlohmann::json(c.found_on_page) : nlohmann::json();
  return j;
}

std::string citation_line(const app::CitationCheck& c) {
  std::string line = fmt::format("  [p. {}]", c.citation.page);
  if (!c.citation.quote.empty()) line += fmt::format(" \"{}\"", c.citation.quote);
  if (c.verified) {
    line +=
        fmt::format(" -- verified (page {}, characters {}-{})", c.citation.page, c.begin, c.end);
  } else {
    line += fmt::format(" -- UNVERIFIED: {}", c.reason);
    if (c.found_on_page > 0) line += fmt::format(" (the quote is on page {})", c.found_on_page);
  }
  return line;
}

std::string pages_text(int first, int last) {
  return first == last ? fmt::format("p. {}", first) : fmt::format("pp. {}-{}", first, last);
}

// Ctrl-C (SIGINT) during an ask: the first stops it as the app's Stop does (the answer so far
// and a prefill's checkpoint are kept, a map-reduce ask keeps its finished parts); a second one
// ends the process as before (spill files removed, killed by the signal).
std::atomic<bool> g_interrupted{false};

extern "C" void stop_ask_on_sigint(int sig) {
  if (!g_interrupted.exchange(true)) return;
  kv::unlink_spill_files_for_signal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Installs stop_ask_on_sigint for its lifetime (unless SIGINT is ignored: nohup, background).
class StopOnSigint {
 public:
  StopOnSigint() {
    g_interrupted = false;
    struct sigaction sa = {};
    sa.sa_handler = stop_ask_on_sigint;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGINT, nullptr, &old_) == 0 && old_.sa_handler != SIG_IGN)
      installed_ = ::sigaction(SIGINT, &sa, nullptr) == 0;
  }
  ~StopOnSigint() {
    if (installed_) ::sigaction(SIGINT, &old_, nullptr);
  }
  StopOnSigint(const StopOnSigint&) = delete;
  StopOnSigint& operator=(const StopOnSigint&) = delete;

 private:
  struct sigaction old_ = {};
  bool installed_ = false;
};

}  // namespace

CLI::App* add_ask_command(CLI::App& app, AskArgs& a) {
  a.sampling.temp = 0.0f;
  auto* c = app.add_subcommand(
      "ask", "Ask a question about a document (whole document in context, cited pages)");
  c->add_option("-m,--model", a.model, "GGUF file")->required();
  // One document per ask: a second --doc is refused instead of silently replacing the first.
  auto* o_doc = c->add_option("--doc", a.doc_id, "Document id in the library (see docs list)")
                    ->multi_option_policy(CLI::MultiOptionPolicy::Throw)
                    ->check(int_range("--doc", 1, kMaxInt));
  auto* o_file = c->add_option("file", a.file, "A PDF file: ingested first (or found by hash)");
  o_doc->excludes(o_file);
  c->add_option("-q,--question", a.question, "The question")
      ->required()
      ->check(parsed_by(
          [](const std::string& v) {
            return v.find_first_not_of(" \t\r\n") == std::string::npos
                       ? std::string("-q: the question is empty")
                       : std::string();
          },
          "TEXT"));
  c->add_option("-n,--n-predict", a.n_predict,
                "Answer tokens (-1: until end of text or the context is full)")
      ->capture_default_str()
      ->check(count_or_unlimited("-n", kMaxInt));
  add_ctx_option(*c, a.n_ctx);
  add_threads_option(*c, a.n_threads);
  add_sampling_options(*c, a.sampling);
  add_kv_type_options(*c, a.cache_type_k, a.cache_type_v);
  add_device_option(*c, a.device,
                    "Where the model runs: auto | cpu | cuda (saved KV needs the CPU session)");
  c->add_option("--template", a.template_name,
                "Chat template instead of the detected one: " + chat_family_names());
  add_kv_options(*c, a.kv);
  c->add_flag("--map-reduce", a.map_reduce,
              "When the document is longer than the context: answer over page-aligned parts, "
              "then combine");
  c->add_flag("--no-snapshot", a.no_snapshot,
              "Neither restore nor save the document's prefilled KV");
  c->add_flag("--json", a.json, "Stream to stderr; print one JSON object on stdout");
  c->add_flag("--continue", a.continue_parts,
              "Continue an earlier ask of this question: an answer stopped at its -n limit (or "
              "by Ctrl-C) goes on from its kept KV for up to -n more tokens; with --map-reduce "
              "the parts it finished are kept and the ask continues at the next part");
  c->add_option("--snapshot-budget", a.snapshot_budget,
                "Disk for saved document KV, least recently used removed first (e.g. 2G; default: "
                "the settings', else 4 GiB at most a tenth of the free space)")
      ->check(size_at_least("--snapshot-budget", 1));
  c->add_option("--checkpoint-tokens", a.checkpoint_tokens,
                "Prefill checkpoint every N tokens (0: none)")
      ->group("");
  c->add_option("--checkpoint-seconds", a.checkpoint_seconds,
                "Prefill checkpoint every S seconds of prefill")
      ->group("");
  c->add_option("--progress-json", a.progress_json,
                "Write one JSON object per progress event (prefill, part, decode) to FILE");
  c->add_option("--password", a.password, "FILE: the PDF's password (never stored)");
  c->add_flag("--ocr", a.ocr, "FILE: OCR pages without a text layer (tesseract)");
  return c;
}

int run_ask(const AskArgs& a) {
  if (a.doc_id < 0 && a.file.empty())
    return ask_fail(Error{"ask needs a document: --doc ID or a PDF file"});
  if (a.question.find_first_not_of(" \t\r\n") == std::string::npos)
    return ask_fail(Error{"-q: the question is empty"});
  if (auto st = validate(a.sampling); !st) return ask_fail(st.error());
  if (a.n_ctx < 0) return ask_fail(make_error("-c {} must not be negative", a.n_ctx));
  if (a.n_threads < 0) return ask_fail(make_error("-t {} must not be negative", a.n_threads));
  if (auto st = check_ubatch_fits(a.kv, a.n_ctx); !st) return bad_value(st.error());
  if (a.n_predict < -1 || a.n_predict == 0)
    return ask_fail(
        make_error("-n {}: use a count of 1 or more, or -1 (until the end of text)", a.n_predict));
  auto kt = parse_kv_type(a.cache_type_k);
  if (!kt) return ask_fail(make_error("--cache-type-k: {}", kt.error().message));
  auto vt = parse_kv_type(a.cache_type_v);
  if (!vt) return ask_fail(make_error("--cache-type-v: {}", vt.error().message));
  auto device = parse_device(a.device);
  if (!device) return ask_fail(make_error("--device: {}", device.error().message));
  if (!a.template_name.empty()) {
    if (auto f = parse_chat_family(a.template_name); !f)
      return ask_fail(make_error("--template: {}", f.error().message));
  }
  auto kv_settings = make_kv_settings(a.kv);
  if (!kv_settings) return ask_fail(kv_settings.error());
  auto progress = ProgressOutput::open(a.progress_json);
  if (!progress) return ask_fail(progress.error());

  auto loaded = load_model(a.model);
  if (!loaded) return ask_fail(loaded.error());
  const Model& model = *loaded->model;
  const Tokenizer& tk = *loaded->tokenizer;
  warn_if_past_training(a.n_ctx, model);

  app::PathOverrides po;
  po.data_dir = a.data_dir;
  auto paths = app::prepare_paths(po);
  if (!paths) return ask_fail(paths.error());
  auto lib = app::Library::open(app::library_db_file(paths->data_dir));
  if (!lib) return ask_fail(lib.error());
  auto doc = load_document(a, **lib);
  if (!doc) return ask_fail(doc.error());
  // Interactive use: --when-idle jobs wait (app/jobs/jobs.h).
  (void)app::mark_interactive(**lib, static_cast<int64_t>(std::time(nullptr)));

  auto tmpl = read_chat_template(model.file());
  if (!tmpl) return ask_fail(tmpl.error());
  const std::optional<std::string_view> tmpl_text =
      *tmpl ? std::optional<std::string_view>(**tmpl) : std::nullopt;
  auto choice = select_chat_template(tmpl_text, a.template_name);
  if (!choice) return ask_fail(choice.error());
  if (!choice->warning.empty()) std::fprintf(stderr, "warning: %s\n", choice->warning.c_str());

  SessionParams sp;
  sp.n_ctx = a.n_ctx;
  sp.n_threads = session_threads(a.n_threads);
  sp.kv_type_k = *kt;
  sp.kv_type_v = *vt;
  // Without -c: the trained context if its KV fits this machine's default budgets.
  auto context = choose_context_or_note(model, sp, *kv_settings, a.kv);
  if (!context) return ask_fail(context.error());
  sp.n_ctx = context->n_ctx;
  if (auto st = check_ubatch_fits(a.kv, sp.n_ctx, a.n_ctx > 0); !st) return bad_value(st.error());
  BackendOptions opts;
  opts.device = *device;
  opts.n_ubatch = a.kv.n_ubatch;
  opts.kv = context->kv;
  opts.cache_dir = a.kv.default_spill_dir;  // the cache folder: the CUDA self-test's result
  bool snapshots = !a.no_snapshot;
  // Saved KV needs the CPU session's paged cache: auto picks it, as generate does for --save-kv.
  if (snapshots && *device == DeviceKind::Auto) {
    opts.device = DeviceKind::Cpu;
    if (probe_cuda().usable) {
      std::fprintf(stderr,
                   "note: saved document KV needs the CPU session's paged KV cache; running on "
                   "the CPU (--no-snapshot runs on CUDA)\n");
    }
  } else if (snapshots && *device == DeviceKind::Cuda) {
    std::fprintf(stderr,
                 "note: --device cuda has no saved KV yet (snapshots are the CPU session's); "
                 "the document is prefilled each time\n");
    snapshots = false;
  }
  bool noted = false;
  std::string backend;
  const app::SessionFactory make_session = [&]() -> Expected<std::unique_ptr<Session>> {
    auto c = create_session(model, sp, opts);
    if (!c) return c.error();
    if (!noted) {
      backend = c->backend;
      if (!c->note.empty()) std::fprintf(stderr, "note: %s\n", c->note.c_str());
      auto* cpu = dynamic_cast<cpu::CpuSession*>(c->session.get());
      if (cpu && cpu->kv_settings().attention != kv::KvAttention::Exact) {
        std::fprintf(stderr, "note: attention %s: an approximation of exact attention\n",
                     kv::kv_attention_name(cpu->kv_settings(), true).c_str());
      }
      noted = true;
    }
    return std::move(c->session);
  };

  app::AskParams ap;
  ap.question = a.question;
  ap.n_predict = a.n_predict;
  ap.sampling = a.sampling;
  ap.map_reduce = a.map_reduce;
  ap.use_snapshots = snapshots;
  ap.snapshot_dir = (paths->cache_dir / "snapshots").string();
  ap.model_fingerprint = kv::model_fingerprint(model);
  ap.kv_config = app::snapshot_kv_config(sp, *kv_settings);
  ap.family = choice->family;
  ap.continue_parts = a.continue_parts;
  ap.continue_answer = a.continue_parts;
  ap.checkpoint_tokens = a.checkpoint_tokens;
  ap.checkpoint_seconds = a.checkpoint_seconds;

  Utf8Streamer answer_out(a.json ? stderr : stdout);
  Utf8Streamer part_out(stderr);
  int current_part = -1;
  int first_page = 0, last_page = 0;
  app::AskCallbacks cb;
  cb.note = [&](const std::string& line) {
    part_out.finish();
    answer_out.finish();
    (*progress)->interrupt();
    std::fprintf(stderr, "%s\n", line.c_str());
    (*progress)->wrote(true);
  };
  cb.part_start = [&](int part, int n_parts, int first, int last) {
    (*progress)->interrupt();
    (*progress)->wrote(true);
    if (current_part > 0) {
      part_out.finish();
      std::fprintf(stderr, "\n");
    }
    current_part = part;
    if (part > 0) {
      std::fprintf(stderr, "[part %d of %d: %s]\n", part, n_parts, pages_text(first, last).c_str());
      if (first_page == 0) first_page = first;
      last_page = last;
      return;
    }
    std::fprintf(stderr, "[combining the answers of the %d parts]\n", n_parts);
    if (!a.json) {
      std::printf(
          "[map-reduce: the document is longer than the context; this answer combines "
          "the answers of %d parts of it (%s), each asked on its own]\n\n",
          n_parts, pages_text(first_page, last_page).c_str());
      std::fflush(stdout);
    }
  };
  cb.piece = [&](int part, const std::string& piece) {
    (*progress)->interrupt();
    (part > 0 ? part_out : answer_out).write(piece);
    (*progress)->wrote(piece.ends_with('\n'), /*generated=*/true);
  };
  cb.progress = (*progress)->sink();
  cb.prefill_cost = app::model_prefill_cost(model);

  app::LibrarySnapshots index(**lib);
  if (snapshots) {
    const fs::path dir = ap.snapshot_dir;
    const app::StaleFiles stale = app::remove_stale_files(dir, a.kv.default_spill_dir);
    if (stale.snapshot_temps > 0) {
      std::fprintf(stderr, "removed %d unfinished snapshot file(s) of processes that ended\n",
                   stale.snapshot_temps);
    }
    int64_t budget = 0;
    if (!a.snapshot_budget.empty()) {
      auto b = parse_size(a.snapshot_budget);
      if (!b || *b <= 0)
        return ask_fail(
            make_error("--snapshot-budget '{}': use a size such as 2G or 512M", a.snapshot_budget));
      budget = *b;
    } else if (auto st = app::load_app_settings(**lib)) {
      budget = st->snapshot_budget;
    }
    index.set_budget(dir, app::effective_snapshot_budget(budget, dir));
  }
  app::LibraryPartStore part_store(**lib, doc->id);
  cb.cancelled = [] { return g_interrupted.load(); };
  Expected<app::AskResult> res = [&] {
    StopOnSigint stop_on_sigint;
    return app::ask_document(tk, *doc, ap, make_session, &index, cb, &part_store);
  }();
  part_out.finish();
  answer_out.finish();
  (*progress)->finish();
  if (!res && g_interrupted && res.error().message == "cancelled") {
    if (!a.json) std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "stopped by Ctrl-C: what was answered and prefilled is kept; the same ask with "
                 "--continue goes on from there\n");
    return 130;
  }
  if (!res) return ask_fail(res.error());
  // Ctrl-C that stopped an answer which still returned its work (a map-reduce ask keeps its
  // finished parts): the output below says what was kept; the exit status says it was stopped.
  const bool stopped_by_sigint = g_interrupted.load() && !res->stopped.empty();
  const int done_status = stopped_by_sigint ? 130 : 0;
  if (stopped_by_sigint) {
    std::fprintf(stderr,
                 "stopped by Ctrl-C: what was answered is kept; the same ask with --continue "
                 "goes on from there\n");
  }
  if (!a.json) {  // the answer streamed to stdout: end its line before stderr's summary
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!res->stopped.empty()) {
    // Text mode: the mark ends the answer on stdout (a cut answer is never silently cut).
    std::fprintf(a.json ? stderr : stdout, "%s\n", app::stopped_mark(res->stopped).c_str());
    if (!a.json) std::fflush(stdout);
  }
  std::fprintf(stderr,
               "%sprefill: %lld tokens computed, %lld restored from saved KV; %lld "
               "tokens generated\n",
               a.json ? "\n" : "", static_cast<long long>(res->prefill_tokens_computed),
               static_cast<long long>(res->reused_tokens),
               static_cast<long long>(res->generated_tokens));
  if (index.evicted_files() > 0) {
    std::fprintf(stderr, "snapshot budget: removed %d least recently used saved KV file(s), %s\n",
                 index.evicted_files(), format_size(index.evicted_bytes()).c_str());
  }
  if (res->resumed_from_tokens > 0) {
    std::fprintf(stderr, "prefill resumed from a checkpoint of %lld tokens\n",
                 static_cast<long long>(res->resumed_from_tokens));
  }
  if (res->map_reduce) {
    std::fprintf(stderr, "parts: %d, %d of them with the document prefix from saved KV\n",
                 res->n_parts, res->parts_reused);
  }

  if (a.json) {
    nlohmann::json j;
    j["doc_id"] = doc->id;
    j["title"] = doc->title;
    j["question"] = a.question;
    j["answer"] = res->answer;
    j["citations"] = nlohmann::json::array();
    for (const auto& c : res->citations) j["citations"].push_back(citation_json(c));
    j["document_tokens"] = res->document_tokens;
    j["question_tokens"] = res->question_tokens;
    j["prompt_tokens"] = res->prompt_tokens;
    j["context"] = res->context;
    j["prefill_tokens_computed"] = res->prefill_tokens_computed;
    j["generated_tokens"] = res->generated_tokens;
    j["reused_snapshot"] = res->reused_snapshot;
    j["reused_tokens"] = res->reused_tokens;
    j["resumed_from_tokens"] = res->resumed_from_tokens;
    j["continued_tokens"] = res->continued_tokens;
    j["map_reduce"] = res->map_reduce;
    j["template"] = std::string(chat_family_name(choice->family));
    j["backend"] = backend;
    j["pages_without_text"] = res->pages_without_text;
    if (res->map_reduce) {
      j["n_parts"] = res->n_parts;
      j["parts_reused"] = res->parts_reused;
      j["part_question_budget"] = res->part_question_budget;
      j["parts_kept"] = res->parts_kept;
      j["parts"] = nlohmann::json::array();
      for (const auto& p : res->parts) {
        j["parts"].push_back({{"first_page", p.first_page},
                              {"last_page", p.last_page},
                              {"answer", p.run.text},
                              {"prompt_tokens", p.run.prompt_tokens},
                              {"prefill_tokens_computed", p.run.prefill_tokens_computed},
                              {"reused_tokens", p.run.reused_tokens},
                              {"reused_snapshot", p.run.reused_snapshot},
                              {"kept", p.kept},
                              {"stopped", p.run.stopped}});
      }
    }
    j["stopped"] = res->stopped.empty() ? nlohmann::json() : nlohmann::json(res->stopped);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return done_status;
  }
  std::printf("\n");
  if (res->citations.empty()) {
    std::printf("Citations: none\n");
  } else {
    size_t verified = 0;
    for (const auto& c : res->citations) verified += c.verified;
    std::printf("Citations: %zu verified, %zu unverified\n", verified,
                res->citations.size() - verified);
    for (const auto& c : res->citations) std::printf("%s\n", citation_line(c).c_str());
  }
  return done_status;
}

}  // namespace spw::cli
