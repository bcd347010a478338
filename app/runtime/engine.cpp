#include "app/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/ask/document.h"
#include "app/runtime/snapshot_budget.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/snapshot.h"
#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/unicode.h"

namespace spw::app {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace

// ---- models -----------------------------------------------------------------------------------

namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ModelInfo info;
  ChatTemplateChoice chat;
};

Expected<Loaded> load_all(const std::string& path, const std::string& template_name) {
  auto model = Model::load(path);
  if (!model) return model.error();
  auto tok = Tokenizer::from_gguf((*model)->file());
  if (!tok) return tok.error();
  const ModelConfig& c = (*model)->config();
  if ((*tok)->n_vocab() != c.n_vocab) {
    return make_error("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", path,
                      (*tok)->n_vocab(), c.n_vocab);
  }
  auto tmpl = read_chat_template((*model)->file());
  if (!tmpl) return tmpl.error();
  const std::optional<std::string_view> tmpl_text =
      *tmpl ? std::optional<std::string_view>(**tmpl) : std::nullopt;
  auto choice = select_chat_template(tmpl_text, template_name);
  if (!choice) return choice.error();

  Loaded l;
  ModelInfo& i = l.info;
  i.path = path;
  i.name = c.name.empty() ? fs::path(path).stem().string() : c.name;
  i.architecture = c.arch_name;
  i.file_bytes = static_cast<int64_t>((*model)->file().file_size());
  i.n_ctx_train = c.n_ctx_train;
  i.n_layer = c.n_layer;
  i.n_head = c.n_head;
  i.n_kv_heads = c.n_head_kv;
  i.head_dim = c.head_dim;
  i.kv_bytes_per_token_f16 = c.kv_bytes_per_token(2);
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : (*model)->file().tensors())
    bytes[type_name(static_cast<uint32_t>(t.type))] += t.n_bytes;
  std::vector<std::pair<std::string, uint64_t>> by(bytes.begin(), bytes.end());
  std::stable_sort(by.begin(), by.end(), [](auto& a, auto& b) { return a.second > b.second; });
  for (auto& [name, n] : by) i.tensor_types.push_back(name);
  i.chat_family = std::string(chat_family_name(choice->family));
  l.model = std::move(*model);
  l.tokenizer = std::move(*tok);
  l.chat = *choice;
  return l;
}

}  // namespace

Expected<ModelInfo> probe_model(const std::string& path) {
  auto l = load_all(path, "");
  if (!l) return l.error();
  return l->info;
}

struct Engine::Impl {
  EngineSettings settings;
  Loaded loaded;
  SessionParams sp;
  BackendOptions opts;
  uint64_t fingerprint = 0;
  std::string context_note;
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::load(const EngineSettings& settings,
                                               const std::function<void(const std::string&)>& note,
                                               const std::optional<MachineMemory>& machine) {
  if (settings.model_path.empty()) return Error{"no model chosen: pick a GGUF file"};
  if (auto st_ = validate(settings); !st_) return st_.error();
  auto l = load_all(settings.model_path, settings.template_name);
  if (!l) return l.error();
  std::unique_ptr<Engine> e(new Engine());
  Impl& m = *e->impl_;
  m.settings = settings;
  m.sp.n_ctx = settings.n_ctx;
  m.sp.n_threads = settings.n_threads > 0 ? settings.n_threads : hardware_threads();
  m.sp.kv_type_k = *parse_kv_type(settings.kv_type_k);
  m.sp.kv_type_v = *parse_kv_type(settings.kv_type_v);
  m.opts.device = *parse_device(settings.device);
  m.opts.n_ubatch = settings.n_ubatch;
  m.opts.kv = settings.kv;
  // The CUDA self-test's result is kept in the cache folder, where the spill files go.
  m.opts.cache_dir = settings.kv.spill_dir;
  if (!m.opts.kv.spill_dir.empty()) kv::remove_stale_spill_files(m.opts.kv.spill_dir);
  m.fingerprint = kv::model_fingerprint(*l->model);
  // The context, once for every session: the machine read after the model is mapped.
  auto context = choose_session_context(*l->model, m.sp, m.opts.kv,
                                        machine ? *machine : read_machine_memory());
  if (!context) return context.error();
  m.sp.n_ctx = context->n_ctx;
  m.opts.kv = context->kv;
  if (!context->note.empty()) m.context_note = "note: " + context->note;
  if (note) {
    for (const std::string& w : l->tokenizer->warnings()) note("warning: " + w);
    if (!l->chat.warning.empty()) note("warning: " + l->chat.warning);
    if (settings.n_ctx > l->model->config().n_ctx_train) {
      note(fmt::format(
          "warning: a context of {} tokens is longer than the {} tokens the model was trained "
          "on; quality degrades past that",
          settings.n_ctx, l->model->config().n_ctx_train));
    }
    if (!m.context_note.empty()) note(m.context_note);
  }
  m.loaded = std::move(*l);
  return e;
}

const Model& Engine::model() const { return *impl_->loaded.model; }
const Tokenizer& Engine::tokenizer() const { return *impl_->loaded.tokenizer; }
ChatFamily Engine::family() const { return impl_->loaded.chat.family; }
const ModelInfo& Engine::info() const { return impl_->loaded.info; }
const EngineSettings& Engine::settings() const { return impl_->settings; }
uint64_t Engine::fingerprint() const { return impl_->fingerprint; }
int64_t Engine::n_ctx() const { return impl_->sp.n_ctx; }
const kv::KvSettings& Engine::kv_settings() const { return impl_->opts.kv; }
const std::string& Engine::context_note() const { return impl_->context_note; }

Expected<SessionChoice> Engine::new_session(bool for_snapshots) const {
  BackendOptions opts = impl_->opts;
  if (for_snapshots && opts.device == DeviceKind::Auto) opts.device = DeviceKind::Cpu;
  return create_session(*impl_->loaded.model, impl_->sp, opts);
}

// ---- runs ---------------------------------------------------------------------------------------

namespace {

// Installs the progress hook of `s`: usage to the callback, the cancel flag polled.
void hook(Session& s, const RunCallbacks& cb) {
  if (!cb.usage && !cb.cancelled) return;
  s.set_eval_progress([&s, &cb](int64_t, int64_t) {
    if (cb.usage) cb.usage(s.usage());
    return !(cb.cancelled && cb.cancelled());
  });
}

}  // namespace

LibrarySnapshots::LibrarySnapshots(Library& lib) : lib_(lib) {}

std::optional<std::string> LibrarySnapshots::find(const SnapshotKey& key) {
  auto r = lib_.find_snapshot(key.model_fingerprint, key.prefix_hash);
  if (!r || !*r) return std::nullopt;
  (void)lib_.touch_snapshot(key.model_fingerprint, key.prefix_hash);
  return (*r)->path;
}

void LibrarySnapshots::set_budget(const std::filesystem::path& dir, int64_t budget) {
  dir_ = dir;
  budget_ = budget;
}

Status LibrarySnapshots::put(const SnapshotKey& key, const std::string& path, int64_t size_bytes,
                             int64_t n_tokens) {
  SnapshotRecord rec;
  rec.model_fingerprint = key.model_fingerprint;
  rec.prefix_hash = key.prefix_hash;
  rec.path = path;
  rec.size_bytes = size_bytes;
  rec.n_tokens = n_tokens;
  if (auto st = lib_.put_snapshot(rec); !st) return st;
  if (budget_ <= 0 || dir_.empty()) return Status::Ok();
  auto ev = enforce_snapshot_budget(lib_, dir_, budget_, path);
  if (!ev) return ev.error();
  evicted_files_ += ev->files_removed;
  evicted_bytes_ += ev->bytes_removed;
  return Status::Ok();
}

void LibrarySnapshots::remove(const SnapshotKey& key) {
  (void)lib_.remove_snapshot(key.model_fingerprint, key.prefix_hash);
}

LibraryPartStore::LibraryPartStore(Library& lib, int64_t doc_id) : lib_(lib), doc_id_(doc_id) {}

std::optional<PartAnswer> LibraryPartStore::find(uint64_t model_fingerprint, uint64_t key) {
  auto r = lib_.find_part_answer(model_fingerprint, key);
  if (!r || !*r) return std::nullopt;
  PartAnswer a;
  a.first_page = (*r)->first_page;
  a.last_page = (*r)->last_page;
  a.run.text = (*r)->answer;
  a.run.prompt_tokens = (*r)->prompt_tokens;
  a.run.generated_tokens = (*r)->generated_tokens;
  a.run.stopped = (*r)->stopped;
  return a;
}

Status LibraryPartStore::put(uint64_t model_fingerprint, uint64_t key, int part, int n_parts,
                             const PartAnswer& answer) {
  PartAnswerRecord r;
  r.model_fingerprint = model_fingerprint;
  r.answer_key = key;
  r.doc_id = doc_id_;
  r.part = part;
  r.n_parts = n_parts;
  r.first_page = answer.first_page;
  r.last_page = answer.last_page;
  r.answer = answer.run.text;
  r.prompt_tokens = answer.run.prompt_tokens;
  r.generated_tokens = answer.run.generated_tokens;
  r.stopped = answer.run.stopped;
  return lib_.put_part_answer(r);
}

DocumentText document_text(const DocumentRecord& d, std::vector<PageRecord> pages) {
  DocumentText doc;
  doc.id = d.id;
  doc.title = d.title;
  doc.shown_title = d.shown_title();
  doc.pages.reserve(pages.size());
  for (PageRecord& p : pages) {
    PageText t;
    t.page_no = p.page_no;
    t.text = std::move(p.text);
    t.scanned = p.scanned;
    t.ocr = p.ocr;
    t.undecodable = p.undecodable;
    t.boilerplate = std::move(p.boilerplate);
    doc.pages.push_back(std::move(t));
  }
  return doc;
}

Expected<DocumentAnswer> ask_library_document(
    const Engine& engine, Library& lib, const DocumentAsk& ask, const RunCallbacks& cb,
    const std::function<void(int part, int n_parts, int first_page, int last_page)>& part_start) {
  auto rec = lib.document(ask.doc_id);
  if (!rec) return rec.error();
  auto pages = lib.pages(ask.doc_id);
  if (!pages) return pages.error();
  const DocumentText doc = document_text(*rec, std::move(*pages));
  if (auto st_ = validate(ask.sampling); !st_) return st_.error();

  const EngineSettings& es = engine.settings();
  bool snapshots = es.use_snapshots && !ask.snapshot_dir.empty();
  const DeviceKind device = *parse_device(es.device);
  if (snapshots && device == DeviceKind::Auto && probe_cuda().usable && cb.note)
    cb.note("note: saved document KV needs the CPU session's paged KV cache; running on the CPU");
  if (snapshots && device == DeviceKind::Cuda) {
    if (cb.note) cb.note("note: the CUDA session has no saved KV yet; the document is prefilled");
    snapshots = false;
  }

  DocumentAnswer out;
  bool noted = false;
  // Timings of the sessions already finished, and of the current one.
  SessionUsage done, current;
  const auto close_current = [&] {
    done.prefill_s += current.prefill_s;
    done.decode_s += current.decode_s;
    done.decode_tokens += current.decode_tokens;
    current = SessionUsage{};
  };
  RunCallbacks hooked = cb;
  hooked.usage = [&](const SessionUsage& u) {
    current = u;
    if (cb.usage) cb.usage(u);
  };
  const SessionFactory make_session = [&]() -> Expected<std::unique_ptr<Session>> {
    close_current();
    auto c = engine.new_session(snapshots);
    if (!c) return c.error();
    if (!noted) {
      out.backend = c->backend;
      if (!c->note.empty() && cb.note) cb.note("note: " + c->note);
      noted = true;
    }
    hook(*c->session, hooked);
    return std::move(c->session);
  };

  AskParams ap;
  ap.question = ask.question;
  ap.n_predict = ask.n_predict;
  ap.sampling = ask.sampling;
  ap.map_reduce = ask.map_reduce;
  ap.use_snapshots = snapshots;
  ap.snapshot_dir = ask.snapshot_dir.string();
  ap.model_fingerprint = engine.fingerprint();
  SessionParams sp;
  sp.kv_type_k = *parse_kv_type(es.kv_type_k);
  sp.kv_type_v = *parse_kv_type(es.kv_type_v);
  ap.kv_config = snapshot_kv_config(sp, es.kv);
  ap.family = engine.family();

  AskCallbacks acb;
  acb.note = cb.note;
  acb.piece = [&](int part, const std::string& piece) {
    if (part == 0 && cb.piece) cb.piece(piece);
  };
  acb.cancelled = cb.cancelled;
  acb.part_start = part_start;
  acb.progress = cb.progress;
  acb.prefill_cost = model_prefill_cost(engine.model());
  LibrarySnapshots index(lib);
  if (snapshots) {
    const StaleFiles stale = remove_stale_files(ask.snapshot_dir, {});
    if (stale.snapshot_temps > 0 && cb.note) {
      cb.note(fmt::format("removed {} unfinished snapshot file(s) of processes that ended",
                          stale.snapshot_temps));
    }
    index.set_budget(ask.snapshot_dir,
                     effective_snapshot_budget(ask.snapshot_budget, ask.snapshot_dir));
  }
  ap.continue_parts = ask.continue_parts;
  ap.continue_answer = ask.continue_answer;
  LibraryPartStore part_store(lib, doc.id);
  auto res = ask_document(engine.tokenizer(), doc, ap, make_session, &index, acb, &part_store);
  close_current();
  if (!res) return res.error();
  out.result = std::move(*res);
  out.prefill_s = done.prefill_s;
  out.decode_s = done.decode_s;
  out.decode_tokens = done.decode_tokens;
  return out;
}

namespace {

// Streams text through stop strings and incomplete UTF-8: emits what can no longer become
// (part of) a stop string, and reports where the first stop string begins.
class StopFilter {
 public:
  StopFilter(const std::vector<std::string>& stop,
             const std::function<void(const std::string&)>& out)
      : stop_(stop), out_(out) {
    std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  }
  /// Appends generated bytes; true when a stop string now occurs (the text is cut before it).
  bool add(const std::string& piece) {
    text_ += piece;
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) {
      const size_t from = emitted_ > s.size() ? emitted_ - s.size() : 0;
      const size_t at = text_.find(s, from);
      if (at != std::string::npos && at < cut) cut = at;
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      flush_to(text_.size());
      return true;
    }
    // Hold back the longest tail that is a prefix of a stop string.
    size_t hold = 0;
    for (const std::string& s : stop_) {
      for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k) {
        if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    flush_to(std::min(text_.size() - hold, unicode::complete_utf8_prefix(text_)));
    return false;
  }
  void finish() { flush_to(text_.size()); }
  const std::string& text() const { return text_; }

 private:
  void flush_to(size_t end) {
    if (end > emitted_) {
      if (out_) out_(text_.substr(emitted_, end - emitted_));
      emitted_ = end;
    }
  }
  std::vector<std::string> stop_;
  const std::function<void(const std::string&)>& out_;
  std::string text_;
  size_t emitted_ = 0;
};

// What a completion cancelled while its prompt was being tokenized returns.
CompletionResult cancelled_before_prefill() {
  CompletionResult r;
  r.finish_reason = "cancelled";
  return r;
}

Expected<CompletionResult> run_completion(const Engine& engine, const std::vector<int32_t>& prompt,
                                          const Completion& c, const RunCallbacks& cb) {
  if (auto st_ = validate(c.sampling); !st_) return st_.error();
  CompletionResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (prompt.empty()) return Error{"the prompt is empty"};
  auto choice = engine.new_session(false);
  if (!choice) return choice.error();
  if (!choice->note.empty() && cb.note) cb.note("note: " + choice->note);
  Session& s = *choice->session;
  if (r.prompt_tokens >= s.n_ctx()) {
    return make_error("the prompt has {} tokens; the context holds {}", r.prompt_tokens, s.n_ctx());
  }
  hook(s, cb);
  AnswerProgress progress(cb.progress);
  progress.set_prefill_cost(model_prefill_cost(engine.model()));
  progress.prompt_begin(r.prompt_tokens, c.max_tokens);
  const auto finish_usage = [&] {
    const SessionUsage u = s.usage();
    r.prefill_s = u.prefill_s;
    r.decode_s = u.decode_s;
  };
  if (cb.cancelled && cb.cancelled()) {
    r.finish_reason = "cancelled";
    return r;
  }
  const EvalProgress outer = s.eval_progress();
  if (progress.enabled()) s.set_eval_progress(progress.prefill_hook(outer, r.prompt_tokens));
  Status prefilled = s.eval(prompt, true);
  s.set_eval_progress(outer);
  if (!prefilled) {
    if (prefilled.error().message == "cancelled") {
      r.finish_reason = "cancelled";
      finish_usage();
      return r;
    }
    return prefilled.error();
  }
  progress.prefill_done();
  if (auto st = check_logits_finite(s.logits()); !st) return st.error();
  const Tokenizer& tok = engine.tokenizer();
  Sampler sampler(c.sampling);
  std::vector<int32_t> history = prompt;
  StopFilter filter(c.stop, cb.piece);
  bool stop_string = false;
  r.finish_reason = "length";
  for (int32_t i = 0; c.max_tokens < 0 || i < c.max_tokens; ++i) {
    const int32_t id = sampler.sample(s.logits(), history);
    if (tok.is_eog(id)) {
      r.finish_reason = "stop";
      break;
    }
    history.push_back(id);
    ++r.completion_tokens;
    progress.decode_at(r.completion_tokens);
    if (filter.add(tok.token_to_piece(id))) {
      stop_string = true;
      r.finish_reason = "stop";
      break;
    }
    if (cb.cancelled && cb.cancelled()) {
      r.finish_reason = "cancelled";
      break;
    }
    if (c.max_tokens >= 0 && i + 1 == c.max_tokens) break;
    // The context is full ("length") once prompt and completion fill it: a token sampled past
    // that would be one the context cannot hold (and usage would report more than it).
    if (s.n_past() + 1 >= s.n_ctx()) break;
    const int32_t one[1] = {id};
    if (auto st = s.eval(one, true); !st) {
      if (st.error().message == "cancelled") {
        r.finish_reason = "cancelled";
        break;
      }
      if (st.error().message.rfind("context full", 0) == 0) break;
      return st.error();
    }
    if (auto st = check_logits_finite(s.logits()); !st) return st.error();
  }
  if (!stop_string) filter.finish();
  r.text = filter.text();
  finish_usage();
  return r;
}

}  // namespace

Expected<CompletionResult> complete_chat(const Engine& engine,
                                         const std::vector<ChatMessage>& messages,
                                         const Completion& c, const RunCallbacks& cb) {
  if (messages.empty()) return Error{"messages: at least one message is needed"};
  // Tokenizing a long prompt takes seconds: cb.cancelled stops it too (encode_poll.h).
  EncodePoll poll(cb.cancelled);
  const std::vector<int32_t> ids =
      tokenize_chat(engine.tokenizer(), engine.family(), messages, /*add_generation_prompt=*/true);
  if (poll.stopped()) return cancelled_before_prefill();
  return run_completion(engine, ids, c, cb);
}

Expected<CompletionResult> complete_text(const Engine& engine, const std::string& prompt,
                                         const Completion& c, const RunCallbacks& cb) {
  EncodePoll poll(cb.cancelled);
  const std::vector<int32_t> ids =
      engine.tokenizer().encode(prompt, /*add_special=*/true, /*parse_special=*/false);
  if (poll.stopped()) return cancelled_before_prefill();
  return run_completion(engine, ids, c, cb);
}

}  // namespace spw::app
