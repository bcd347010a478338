#include "app/worker/engine_worker.h"

#include <fmt/format.h>
#include <QDateTime>
#include <QJsonDocument>
#include <QJsonObject>
#include <QThread>
#include <QTimer>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include "app/ask/citations.h"
#include "app/runtime/engine.h"
#include "app/runtime/speed_profile.h"
#include "app/store/library.h"
#include "engine/backend/device.h"
#include "engine/tokenizer/unicode.h"

namespace spw::app {

namespace {

QString qs(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// UTF-16 offset in QString::fromUtf8(s) of byte offset `byte` of `s`.
int utf16_offset(const std::string& s, int64_t byte) {
  byte = std::clamp<int64_t>(byte, 0, static_cast<int64_t>(s.size()));
  return static_cast<int>(QString::fromUtf8(s.data(), qsizetype(byte)).size());
}

QList<CitationInfo> citation_infos(const std::string& answer,
                                   const std::vector<CitationCheck>& checks) {
  QList<CitationInfo> out;
  for (const CitationCheck& c : checks) {
    CitationInfo i;
    i.page = c.citation.page;
    i.quote = qs(c.citation.quote);
    i.verified = c.verified;
    i.reason = qs(c.reason);
    i.found_on_page = c.found_on_page;
    i.answer_begin = utf16_offset(answer, c.citation.answer_begin);
    i.answer_end = utf16_offset(answer, c.citation.answer_end);
    out.push_back(i);
  }
  return out;
}

int64_t now_ms() { return QDateTime::currentMSecsSinceEpoch(); }

}  // namespace

std::string answer_text(const std::string& generated) {
  std::vector<uint32_t> unused;
  return unicode::sanitize_utf8(
      std::string_view(generated).substr(0, unicode::complete_utf8_prefix(generated)), unused);
}

std::string AnswerStream::add(const std::string& piece) {
  pending_ += piece;
  // Bytes before the held incomplete character are final: an incomplete sequence among them is
  // one a new character's first byte interrupted (U+FFFD), not a character cut at the end.
  const size_t k = unicode::complete_utf8_prefix(pending_);
  std::vector<uint32_t> unused;
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, k), unused);
  pending_.erase(0, k);
  return out;
}

std::string AnswerStream::finish() {
  std::string out = answer_text(pending_);
  pending_.clear();
  return out;
}

// The title the app shows for a document (its name, else the cleaned title).
const std::string& shown(const DocumentText& doc) {
  return doc.shown_title.empty() ? doc.title : doc.shown_title;
}

std::string selection_chat_title(std::vector<int64_t> doc_ids) {
  std::sort(doc_ids.begin(), doc_ids.end());
  std::string t = "Selection:";
  for (size_t i = 0; i < doc_ids.size(); ++i) t += (i ? ", " : " ") + std::to_string(doc_ids[i]);
  return t;
}

int64_t find_chat_for(Library& lib, const std::vector<int64_t>& doc_ids) {
  if (doc_ids.empty()) return 0;
  if (doc_ids.size() == 1) {
    auto chats = lib.chats(doc_ids[0]);
    return chats && !chats->empty() ? chats->front().id : 0;
  }
  auto chats = lib.chats(0);
  if (!chats) return 0;
  const std::string title = selection_chat_title(doc_ids);
  for (const ChatRecord& c : *chats) {
    if (c.doc_id == 0 && c.title == title) return c.id;
  }
  return 0;
}

// The worker-thread side. Everything here runs on thread_ except construction; results go to
// the EngineWorker (GUI thread) through post(), a queued call that Qt drops if the worker is
// gone (its destructor joins the thread first, so none is in flight then).
struct EngineWorker::Core final : QObject {
  EngineWorker* owner = nullptr;
  Params params;
  std::shared_ptr<std::atomic<int64_t>> cancel_upto;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Library> lib;
  PlanProbes probes;
  std::string profile_dir;  // where the speed profile is cached (empty: nowhere)

  template <class F>
  void post(F&& f) {
    QMetaObject::invokeMethod(owner, std::forward<F>(f), Qt::QueuedConnection);
  }
  void post_note(const std::string& text) {
    EngineWorker* o = owner;
    post([o, t = qs(text)] { emit o->note(t); });
  }
  void post_failed(const std::string& text) {
    EngineWorker* o = owner;
    post([o, t = qs(text)] { emit o->answerFailed(t); });
  }
  void post_done() {
    EngineWorker* o = owner;
    post([o] { o->finishRequest(); });
  }

  Status open_library() {
    if (lib) return Status::Ok();
    auto l = Library::open(params.library_file.toStdString());
    if (!l) return l.error();
    lib = std::move(*l);
    return Status::Ok();
  }

  // The model's measured speed here for the planner: cached in the cache folder (the spill
  // folder's home), else calibrated now (seconds). None without a cache folder.
  void load_profile(const EngineSettings& settings) {
    probes.profile.reset();
    profile_dir = settings.kv.spill_dir;
    if (profile_dir.empty()) return;
    SessionParams sp;
    const unsigned hw = std::thread::hardware_concurrency();
    sp.n_threads = settings.n_threads > 0 ? settings.n_threads : static_cast<int>(std::max(1u, hw));
    sp.kv_type_k = *parse_kv_type(settings.kv_type_k);
    sp.kv_type_v = *parse_kv_type(settings.kv_type_v);
    BackendOptions bo;
    bo.n_ubatch = settings.n_ubatch;
    bool calibrated = false;
    auto p = cached_or_calibrated_profile(engine->model(), sp, bo, profile_dir, {}, &calibrated);
    if (!p) {
      post_note("no measured speed profile (" + p.error().message +
                "); the planner predicts from memory bandwidth alone");
      return;
    }
    if (calibrated) post_note("measured this model's speed on this machine for the planner");
    probes.profile = std::make_shared<const SpeedProfile>(*p);
  }

  // A real one-prompt answer refines the profile (map-reduce runs many prompts from depth 0).
  void refine_profile(const DocumentAnswer& a) {
    if (!probes.profile || profile_dir.empty() || a.result.map_reduce) return;
    SpeedProfile p = *probes.profile;
    refine_with_run(p, a.result.reused_tokens, a.result.prefill_tokens_computed, a.prefill_s,
                    a.decode_tokens, a.decode_s);
    (void)save_speed_profile(profile_dir, p);
    probes.profile = std::make_shared<const SpeedProfile>(p);
  }

  void load(const std::string& json) {
    EngineWorker* o = owner;
    auto settings = engine_settings_from_json(json);
    if (!settings) {
      post([o, m = qs(settings.error().message)] {
        o->has_model_ = false;
        emit o->modelFailed(m);
      });
      return;
    }
    engine.reset();  // the old model's memory first
    QStringList notes;
    auto e = Engine::load(*settings, [&](const std::string& n) { notes.push_back(qs(n)); });
    if (!e) {
      post([o, m = qs(e.error().message)] {
        o->has_model_ = false;
        emit o->modelFailed(m);
      });
      return;
    }
    engine = std::move(*e);
    probes = measure_plan_probes(settings->kv.spill_dir);
    load_profile(*settings);
    const ModelInfo& mi = engine->info();
    ModelLoadedInfo info;
    info.path = qs(mi.path);
    info.name = qs(mi.name);
    info.architecture = qs(mi.architecture);
    info.file_bytes = mi.file_bytes;
    info.n_ctx_train = mi.n_ctx_train;
    info.n_ctx = engine->n_ctx();  // the default context may be cut to fit the machine
    info.device = qs(settings->device);
    info.notes = notes;
    post([o, info] {
      o->has_model_ = true;
      emit o->modelLoaded(info);
    });
    if (!engine->context_note().empty()) post_note(engine->context_note());
    count_tokens();
  }

  // Tokens of each document's page text (the "[p. N]" block the prompt holds) for the model; 0
  // for a document without text.
  void count_tokens() {
    if (!engine) return;
    if (!open_library()) return;
    auto docs = lib->documents();
    if (!docs) return;
    QHash<qint64, qint64> counts;
    for (const DocumentRecord& d : *docs) {
      // Without text (scanned, no OCR) a document is never put in a prompt: none of its tokens.
      if (d.no_text) {
        counts.insert(d.id, 0);
        continue;
      }
      auto pages = lib->pages(d.id);
      if (!pages) continue;
      const DocumentText doc = document_text(d, std::move(*pages));
      const std::string block = document_block(doc, PageRange{0, doc.pages.size()});
      counts.insert(d.id,
                    static_cast<qint64>(engine->tokenizer().encode(block, false, false).size()));
    }
    EngineWorker* o = owner;
    post([o, counts] { emit o->tokenCounts(counts); });
  }

  void run(const AskRequest& req, int64_t id) {
    run_request(req, id);
    post_done();
  }

  Expected<DocumentText> load_document(int64_t doc_id) {
    auto rec = lib->document(doc_id);
    if (!rec) return rec.error();
    auto pages = lib->pages(doc_id);
    if (!pages) return pages.error();
    return document_text(*rec, std::move(*pages));
  }

  void run_request(const AskRequest& req, int64_t id) {
    EngineWorker* o = owner;
    const auto cancelled = [this, id] { return cancel_upto->load() >= id; };
    if (cancelled()) {
      post_note("stopped before it started");
      return;
    }
    if (!engine) {
      post_failed("No model is loaded: pick a GGUF file in Settings > Model.");
      return;
    }
    if (req.doc_ids.isEmpty()) {
      post_failed("No document is selected: select one in the library first.");
      return;
    }
    if (req.question.trimmed().isEmpty()) {
      post_failed("The question is empty.");
      return;
    }
    if (auto s = open_library(); !s) {
      post_failed("The library could not be opened: " + s.error().message);
      return;
    }
    const std::string question = req.question.toStdString();

    // The planner's verdict for every document first: nothing is stored or run when one of
    // them needs the user's choice.
    std::vector<DocumentText> docs;
    for (qint64 doc_id : req.doc_ids) {
      auto doc = load_document(doc_id);
      if (!doc) {
        post_failed(doc.error().message);
        return;
      }
      PlanSummary plan = plan_document_ask(*engine, *doc, question, req.n_predict, probes);
      const bool gate = plan.needs_choice() && !req.skip_plan && !req.map_reduce;
      post([o, plan, req] { emit o->planReady(plan, req); });
      if (gate) return;
      docs.push_back(std::move(*doc));
    }

    // The chat and the question.
    std::vector<int64_t> ids(req.doc_ids.begin(), req.doc_ids.end());
    int64_t chat_id = req.chat_id > 0 ? req.chat_id : find_chat_for(*lib, ids);
    if (chat_id == 0) {
      auto c = ids.size() == 1 ? lib->create_chat(ids[0], shown(docs[0]))
                               : lib->create_chat(0, selection_chat_title(ids));
      if (!c) {
        post_failed("The chat could not be stored: " + c.error().message);
        return;
      }
      chat_id = *c;
    }
    auto user_msg = lib->add_message(chat_id, "user", question);
    if (!user_msg) {
      post_failed("The question could not be stored: " + user_msg.error().message);
      return;
    }
    post([o, chat_id, mid = *user_msg] { emit o->questionStored(chat_id, mid); });

    for (const DocumentText& doc : docs) {
      if (!answer_one(req, doc, chat_id, ids.size() > 1, cancelled)) break;
    }
  }

  // Asks one document; false when the request should go no further (stopped or failed).
  bool answer_one(const AskRequest& req, const DocumentText& doc, int64_t chat_id, bool selection,
                  const std::function<bool()>& cancelled) {
    EngineWorker* o = owner;
    post([o, chat_id, doc_id = doc.id, t = qs(shown(doc))] {
      emit o->answerStarted(chat_id, doc_id, t);
    });

    std::string answer;
    AnswerStream stream;
    SessionUsage last_usage;
    TelemetrySample prev;
    bool have_prev = false;
    TelemetryThrottle throttle(std::max(1, params.telemetry_interval_ms));
    const auto publish = [&](const SessionUsage& u, bool force) {
      const int64_t now = now_ms();
      if (!throttle.due(now) && !force) return;
      const int64_t vram_free = u.gpu ? probe_cuda().free_bytes : -1;
      TelemetrySample s = sample_from_usage(u, have_prev ? &prev : nullptr, vram_free);
      prev = s;
      have_prev = true;
      post([o, s] { o->onRunSample(s); });
    };

    RunCallbacks cb;
    cb.note = [this](const std::string& n) { post_note(n); };
    cb.piece = [&](const std::string& p) {
      answer += p;
      // Streamed by the rule the stored answer follows (answer_text), so the pieces add up to it.
      if (const std::string part = stream.add(p); !part.empty()) {
        QString text = qs(part);
        post([o, text] { emit o->piece(text); });
      }
      if (params.piece_hook) params.piece_hook();
    };
    cb.cancelled = cancelled;
    cb.usage = [&](const SessionUsage& u) {
      last_usage = u;
      publish(u, false);
    };
    // Prefill (per ubatch) and decode (per token) events from the pipeline; the parts' events
    // come from part_start below (one meter over the whole answer).
    cb.progress = [this, o](const ProgressEvent& e) {
      if (e.phase == ProgressPhase::Prefill || e.phase == ProgressPhase::Decode) {
        post([o, e] { emit o->progress(e); });
      }
    };
    DocumentAsk ask;
    ask.doc_id = doc.id;
    ask.question = req.question.toStdString();
    ask.n_predict = req.n_predict;
    ask.map_reduce = req.map_reduce;
    ask.continue_parts = req.continue_parts;
    ask.continue_answer = req.continue_answer;
    ask.snapshot_budget = req.snapshot_budget;
    if (!params.snapshot_dir.isEmpty()) {
      std::error_code ec;
      std::filesystem::create_directories(params.snapshot_dir.toStdString(), ec);
      if (!ec) ask.snapshot_dir = params.snapshot_dir.toStdString();
    }
    // Parts: one meter from the first part's start (its clock in seconds, as ProgressMeter
    // wants); the event says how many parts are done when the next one starts.
    std::optional<ProgressMeter> parts_meter;
    const auto part_start = [this, o, &parts_meter](int part, int n_parts, int first, int last) {
      const double now_s = static_cast<double>(now_ms()) / 1000.0;
      if (!parts_meter) parts_meter.emplace(ProgressPhase::Part, n_parts, now_s);
      const int64_t done = part == 0 ? n_parts : part - 1;
      const ProgressEvent e = parts_meter->at(done, now_s);
      post([o, e] { emit o->progress(e); });
      if (part == 0) {  // the combining prompt (app/ask/ask.h AskCallbacks::part_start)
        post_note(fmt::format("combining the answers of the {} parts", n_parts));
      } else if (first == last) {
        post_note(fmt::format("part {} of {}: page {}", part, n_parts, first));
      } else {
        post_note(fmt::format("part {} of {}: pages {}-{}", part, n_parts, first, last));
      }
    };
    auto res = ask_library_document(*engine, *lib, ask, cb, part_start);
    if (last_usage.n_past > 0) publish(last_usage, true);           // the run's last state
    if (const std::string tail = stream.finish(); !tail.empty()) {  // a cut character: none
      QString text = qs(tail);
      post([o, text] { emit o->piece(text); });
    }

    AnswerResult r;
    r.chat_id = chat_id;
    r.doc_id = doc.id;
    r.doc_title = qs(shown(doc));
    std::string stored;
    if (res) refine_profile(*res);
    if (res) {
      const AskResult& a = res->result;
      stored = answer_text(a.answer);
      r.answer = qs(stored);
      r.citations = citation_infos(a.answer, a.citations);
      r.context_tokens =
          last_usage.n_past > 0 ? last_usage.n_past : a.prompt_tokens + a.generated_tokens;
      r.n_ctx = a.context;
      r.generated_tokens = a.generated_tokens;
      r.prefill_s = res->prefill_s;
      r.reused_kv = a.reused_snapshot;
      r.reused_tokens = a.reused_tokens;
      r.decode_tokens_per_s =
          res->decode_s > 0 ? static_cast<double>(res->decode_tokens) / res->decode_s : 0;
      r.map_reduce = a.map_reduce;
      r.n_parts = a.n_parts;
      r.parts_reused = a.parts_reused;
      r.early_stop = qs(a.stopped);
      r.backend = qs(res->backend);
      if (a.stopped_between_parts) {
        // Stopped between parts: the finished parts' answers are the work kept (each also in
        // the library's part_answers, so a continue request starts at the next part).
        std::string kept;
        for (const PartAnswer& p : a.parts) {
          kept += p.first_page == p.last_page
                      ? fmt::format("(page {})\n{}\n\n", p.first_page, p.run.text)
                      : fmt::format("(pages {}-{})\n{}\n\n", p.first_page, p.last_page, p.run.text);
        }
        kept = answer_text(kept);
        r.answer = qs(kept);
        r.stopped = true;
        stored = kept + stopped_mark(a.stopped);  // the message says where it stopped
      }
    } else if (cancelled()) {
      // Stopped: keep what came, checked against the pages as far as it goes.
      answer = answer_text(answer);
      r.answer = qs(answer);
      r.citations = citation_infos(answer, check_citations(answer, doc));
      r.context_tokens = last_usage.n_past;
      r.n_ctx = last_usage.n_ctx;
      r.generated_tokens = last_usage.decode_tokens;
      r.prefill_s = last_usage.prefill_s;
      r.decode_tokens_per_s =
          last_usage.decode_s > 0
              ? static_cast<double>(last_usage.decode_tokens) / last_usage.decode_s
              : 0;
      r.map_reduce = req.map_reduce;
      r.stopped = true;
      stored = answer;
    } else {
      post_failed(res.error().message);
      return false;
    }
    if (selection) stored = "From \"" + shown(doc) + "\":\n" + stored;
    if (auto mid = lib->add_message(chat_id, "assistant", stored, answer_meta_json(r))) {
      r.message_id = *mid;
    } else {
      post_note("the answer could not be stored: " + mid.error().message);
    }
    post([o, r] { emit o->answerFinished(r); });
    return !r.stopped;
  }
};

EngineWorker::EngineWorker(const Params& params, QObject* parent)
    : QObject(parent), params_(params), cancel_upto_(std::make_shared<std::atomic<int64_t>>(0)) {
  qRegisterMetaType<spw::app::TelemetrySample>();
  qRegisterMetaType<spw::app::PlanSummary>();
  qRegisterMetaType<spw::app::ModelLoadedInfo>();
  qRegisterMetaType<spw::app::AskRequest>();
  qRegisterMetaType<spw::app::AnswerResult>();
  qRegisterMetaType<spw::app::ProgressEvent>();

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("spillway-engine"));
  core_ = new Core;
  core_->owner = this;
  core_->params = params;
  core_->cancel_upto = cancel_upto_;
  core_->moveToThread(thread_);
  // The model and the library connection are released on the worker thread as it ends.
  Core* core = core_;
  connect(
      thread_, &QThread::finished, core_,
      [core] {
        core->engine.reset();
        core->lib.reset();
      },
      Qt::DirectConnection);
  thread_->start();

  idle_timer_ = new QTimer(this);
  idle_timer_->setInterval(std::max(50, params.idle_interval_ms));
  connect(idle_timer_, &QTimer::timeout, this, &EngineWorker::onIdleTick);
  idle_timer_->start();
}

EngineWorker::~EngineWorker() {
  stop();
  thread_->quit();
  thread_->wait();
  delete core_;
}

void EngineWorker::loadModel(const QString& settings_json) {
  has_model_ = false;
  Core* core = core_;
  QMetaObject::invokeMethod(
      core_, [core, json = settings_json.toStdString()] { core->load(json); },
      Qt::QueuedConnection);
}

void EngineWorker::ask(const AskRequest& request) {
  const int64_t id = ++next_request_;
  if (pending_++ == 0) {
    last_run_sample_ = TelemetrySample{};  // no KV state of an earlier run while this one starts
    emit busyChanged(true);
  }
  Core* core = core_;
  QMetaObject::invokeMethod(
      core_, [core, request, id] { core->run(request, id); }, Qt::QueuedConnection);
}

std::string answer_meta_json(const AnswerResult& r) {
  QJsonObject o;
  o[QStringLiteral("context_tokens")] = static_cast<double>(r.context_tokens);
  o[QStringLiteral("n_ctx")] = static_cast<double>(r.n_ctx);
  o[QStringLiteral("generated_tokens")] = static_cast<double>(r.generated_tokens);
  o[QStringLiteral("prefill_s")] = r.prefill_s;
  o[QStringLiteral("reused_kv")] = r.reused_kv;
  o[QStringLiteral("reused_tokens")] = static_cast<double>(r.reused_tokens);
  o[QStringLiteral("decode_tokens_per_s")] = r.decode_tokens_per_s;
  o[QStringLiteral("stopped")] = r.stopped;
  o[QStringLiteral("map_reduce")] = r.map_reduce;
  if (r.map_reduce) {
    o[QStringLiteral("n_parts")] = r.n_parts;
    o[QStringLiteral("parts_reused")] = r.parts_reused;
  }
  o[QStringLiteral("early_stop")] = r.early_stop;
  o[QStringLiteral("backend")] = r.backend;
  return QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString();
}

bool answer_from_meta(const std::string& json, AnswerResult& r) {
  if (json.empty()) return false;
  const QJsonDocument d = QJsonDocument::fromJson(QByteArray::fromStdString(json));
  if (!d.isObject()) return false;
  const QJsonObject o = d.object();
  const auto i64 = [&o](const char* k) {
    return static_cast<qint64>(o.value(QLatin1String(k)).toDouble());
  };
  r.context_tokens = i64("context_tokens");
  r.n_ctx = i64("n_ctx");
  r.generated_tokens = i64("generated_tokens");
  r.prefill_s = o.value(QLatin1String("prefill_s")).toDouble();
  r.reused_kv = o.value(QLatin1String("reused_kv")).toBool();
  r.reused_tokens = i64("reused_tokens");
  r.decode_tokens_per_s = o.value(QLatin1String("decode_tokens_per_s")).toDouble();
  r.stopped = o.value(QLatin1String("stopped")).toBool();
  r.map_reduce = o.value(QLatin1String("map_reduce")).toBool();
  r.n_parts = static_cast<int>(i64("n_parts"));
  r.parts_reused = static_cast<int>(i64("parts_reused"));
  r.early_stop = o.value(QLatin1String("early_stop")).toString();
  r.backend = o.value(QLatin1String("backend")).toString();
  return true;
}

void EngineWorker::countTokens() {
  Core* core = core_;
  QMetaObject::invokeMethod(
      core_, [core] { core->count_tokens(); }, Qt::QueuedConnection);
}

void EngineWorker::stop() { cancel_upto_->store(next_request_); }

void EngineWorker::finishRequest() {
  if (pending_ > 0 && --pending_ == 0) emit busyChanged(false);
}

void EngineWorker::addRunSample(const TelemetrySample& s) {
  external_sample_ms_ = now_ms();
  onRunSample(s);
}

void EngineWorker::onRunSample(const TelemetrySample& s) {
  last_run_sample_ = s;
  last_sample_ms_ = now_ms();
  emit telemetry(s);
}

void EngineWorker::onIdleTick() {
  const int64_t now = now_ms();
  if (now - last_sample_ms_ < idle_timer_->interval()) return;
  TelemetrySample s = idle_sample();
  // A job's ubatch may take seconds: its run state stands for a while after its last sample.
  constexpr int64_t kExternalRunHoldMs = 10000;
  const bool external_run =
      external_sample_ms_ >= 0 && now - external_sample_ms_ < kExternalRunHoldMs;
  if ((isBusy() || external_run) && last_run_sample_.running) {
    // A long ubatch: the run's last KV state, the process memory now.
    TelemetrySample run = last_run_sample_;
    run.t_ms = s.t_ms;
    run.rss_bytes = s.rss_bytes;
    run.available_bytes = s.available_bytes;
    run.running = true;
    s = run;
  }
  last_sample_ms_ = now;
  emit telemetry(s);
}

}  // namespace spw::app
