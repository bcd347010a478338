// The engine as the app's front ends run it (the desktop worker, the job runner, the OpenAI-
// compatible server, spillway-cli ask): a model loaded once with its tokenizer and chat
// template, the user's engine settings as plain values that round-trip through SQLite and
// JSON, sessions made from them, a library document asked, and a chat or text completion with
// stop strings and cancellation.
//
// Threading: an Engine is read-only after load() and may be shared between threads; every
// call that runs the model creates its own Session and runs on the calling thread. Callbacks
// run on that thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/ask/ask.h"
#include "app/runtime/engine_settings.h"
#include "app/runtime/progress.h"
#include "app/store/library.h"
#include "engine/backend/device.h"
#include "engine/chat/chat_template.h"
#include "engine/common/expected.h"
#include "engine/common/machine.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"
#include "engine/session/session.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::app {

/// What a GGUF file is, read from its header without loading weights (model lists, Settings).
struct ModelInfo {
  std::string path;
  std::string name;          // general.name, else the file name
  std::string architecture;  // "llama", "qwen2", ...
  int64_t file_bytes = 0;
  int64_t n_ctx_train = 0, n_layer = 0, n_head = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<std::string> tensor_types;  // distinct ggml type names, most bytes first
  int64_t kv_bytes_per_token_f16 = 0;     // all layers, K + V
  std::string chat_family;                // "chatml", "llama3", "plain", ...
};
/// Reads and validates `path` as the loader would (shapes, tensor types, tokenizer). Errors:
/// the loader's message (truncated file, unsupported quant type, not a GGUF, ...).
Expected<ModelInfo> probe_model(const std::string& path);

/// One model loaded for running.
class Engine {
 public:
  /// Loads settings.model_path and checks the settings. `note` receives load-time warnings
  /// (unknown pre-tokenizer, approximated chat template, context past the trained one) and the
  /// default context's note when it was cut to fit the machine (context_note()). The context is
  /// chosen here, once, for `machine` (read now when not given): settings.n_ctx when set, else
  /// the trained context if its KV fits the default budgets, else the largest that fits
  /// (choose_session_context(), engine/backend/device.h).
  static Expected<std::unique_ptr<Engine>> load(
      const EngineSettings& settings, const std::function<void(const std::string&)>& note = {},
      const std::optional<MachineMemory>& machine = std::nullopt);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const;
  const Tokenizer& tokenizer() const;
  ChatFamily family() const;
  const ModelInfo& info() const;
  const EngineSettings& settings() const;
  uint64_t fingerprint() const;  // kv::model_fingerprint(model)
  /// The context every session runs (see load()).
  int64_t n_ctx() const;
  /// The KV settings every session runs: the settings' own, with the default host budget
  /// filled in when the default context needed one.
  const kv::KvSettings& kv_settings() const;
  /// "note: context 32,768 of 131,072 trained: ..." when the default context was cut; else "".
  const std::string& context_note() const;

  /// A new session by the settings (SessionChoice::note says when auto fell back to the CPU).
  /// `for_snapshots`: the CPU session when the device is auto (saved KV needs it).
  Expected<SessionChoice> new_session(bool for_snapshots = false) const;

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Hooks of a run: all optional, called on the running thread.
struct RunCallbacks {
  std::function<void(const std::string&)> note;  // a line for the user
  /// Generated text as it comes (held back while it could still be the start of a stop string).
  std::function<void(const std::string&)> piece;
  /// Polled after every ubatch and every token: true stops the run ("cancelled").
  std::function<bool()> cancelled;
  /// After every ubatch and token: the session's counters (the dashboard's feed).
  std::function<void(const SessionUsage&)> usage;
  /// Progress events (app/runtime/progress.h): prefill per ubatch, decode per token, and for a
  /// map-reduce document ask the parts (AskCallbacks::progress).
  ProgressSink progress;
};

// --- asking a library document ---------------------------------------------------------------

/// The library's kv_snapshots table as the ask pipeline's snapshot index. find() records the
/// use (the budget's least recently used order); with a budget set, put() then removes the least
/// recently used files of the folder until it fits (app/runtime/snapshot_budget.h).
class LibrarySnapshots final : public SnapshotIndex {
 public:
  explicit LibrarySnapshots(Library& lib);
  std::optional<std::string> find(const SnapshotKey& key) override;
  Status put(const SnapshotKey& key, const std::string& path, int64_t size_bytes,
             int64_t n_tokens) override;
  void remove(const SnapshotKey& key) override;
  /// Enforces `budget` bytes (> 0) over the *.kv files of `dir` after each put().
  void set_budget(const std::filesystem::path& dir, int64_t budget);
  /// Files and bytes the budget removed so far.
  int evicted_files() const { return evicted_files_; }
  int64_t evicted_bytes() const { return evicted_bytes_; }

 private:
  Library& lib_;
  std::filesystem::path dir_;
  int64_t budget_ = 0;
  int evicted_files_ = 0;
  int64_t evicted_bytes_ = 0;
};

/// The library's part_answers table as the ask pipeline's PartStore, for document `doc_id`.
class LibraryPartStore final : public PartStore {
 public:
  LibraryPartStore(Library& lib, int64_t doc_id);
  std::optional<PartAnswer> find(uint64_t model_fingerprint, uint64_t key) override;
  Status put(uint64_t model_fingerprint, uint64_t key, int part, int n_parts,
             const PartAnswer& answer) override;

 private:
  Library& lib_;
  int64_t doc_id_ = 0;
};

/// A library document and its pages as the ask pipeline reads them.
DocumentText document_text(const DocumentRecord& d, std::vector<PageRecord> pages);

struct DocumentAsk {
  int64_t doc_id = 0;
  std::string question;
  int32_t n_predict = 256;
  SamplerParams sampling;
  bool map_reduce = false;
  std::filesystem::path snapshot_dir;  // empty: no snapshots
  int64_t snapshot_budget = 0;  // bytes of saved KV in snapshot_dir; 0: default_snapshot_budget
  /// Map-reduce: parts answered by an earlier ask (stopped, killed) are kept, the ask continues
  /// at the next part (AskParams::continue_parts). Every finished part is stored either way.
  bool continue_parts = false;
  /// A whole-document answer stopped at the length limit or cancelled keeps its KV; this
  /// continues it with up to n_predict more tokens (AskParams::continue_answer).
  bool continue_answer = false;
};
struct DocumentAnswer {
  AskResult result;
  std::string backend;                 // "cpu (avx2, 2 threads)"
  double prefill_s = 0, decode_s = 0;  // summed over every session of the ask
  int64_t decode_tokens = 0;
};
/// Asks document `doc_id` of `lib` (snapshots in ask.snapshot_dir, recorded in lib's
/// kv_snapshots; a CPU session then runs when the device is auto). The `piece` callback gets the
/// final answer's text only (a map-reduce part's answer is not streamed; `part_start` says when
/// each part begins). Errors: as ask_document, "cancelled", "no document with id N".
Expected<DocumentAnswer> ask_library_document(
    const Engine& engine, Library& lib, const DocumentAsk& ask, const RunCallbacks& cb,
    const std::function<void(int part, int n_parts, int first_page, int last_page)>& part_start =
        {});

// --- completions (the server, custom job prompts) --------------------------------------------

struct Completion {
  int32_t max_tokens = 256;  // < 0: until the end of text or the context
  SamplerParams sampling;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any
};
struct CompletionResult {
  std::string text;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // "stop" (end of text or a stop string), "length", "cancelled"
  double prefill_s = 0, decode_s = 0;
};
/// The chat rendered with the model's template (add_generation_prompt), then generated.
/// A cancelled run is not an error: finish_reason "cancelled" with the text so far.
/// Errors: a prompt longer than the context, eval errors.
Expected<CompletionResult> complete_chat(const Engine& engine,
                                         const std::vector<ChatMessage>& messages,
                                         const Completion& c, const RunCallbacks& cb);
/// A raw text prompt (BOS as the tokenizer adds it), then generated.
Expected<CompletionResult> complete_text(const Engine& engine, const std::string& prompt,
                                         const Completion& c, const RunCallbacks& cb);

}  // namespace spw::app
