// The desktop app's engine worker (docs/DESIGN.md §5.5): the loaded model (app::Engine), a
// Library connection of its own and every run live on one QThread that this object starts and
// owns; the object itself lives on the thread that created it (the GUI thread), so the UI calls
// its slots and connects to its signals as to any widget's.
//
// Threading: slots post work to the worker thread (Qt::QueuedConnection); results come back as
// signals of this object, posted back with Qt::QueuedConnection. Runs are taken one at a time
// in the order asked. stop() does not queue: it raises an atomic flag that the run polls after
// every prefill ubatch and every generated token, so generation ends within one ubatch or one
// token; the partial answer is kept, stored and marked stopped. The destructor stops a run and
// joins the thread (no hang; nothing is emitted after it).
//
// Engine-free header (ui/ includes it): plain structs and Qt types only.
#pragma once

#include <QHash>
#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "app/runtime/progress.h"
#include "app/worker/plan_summary.h"
#include "app/worker/telemetry.h"

class QThread;
class QTimer;

namespace spw::app {

class Library;

/// Appended (after a blank line) to a stopped answer's text by earlier versions; a stopped answer
/// is now marked in its meta (answer_meta_json). The chat still reads the old form.
inline constexpr const char* kStoppedMarker = "[stopped]";

/// What loadModel() loaded.
struct ModelLoadedInfo {
  QString path;
  QString name;          // general.name, else the file name
  QString architecture;  // "llama", ...
  qint64 file_bytes = 0;
  qint64 n_ctx = 0;        // the context sessions get (settings, else trained)
  qint64 n_ctx_train = 0;  // the model's trained context
  QString device;          // the settings' device: "auto" | "cpu" | "cuda"
  QStringList notes;       // load-time warnings
};

/// One question. A selection of several documents is asked one document after another, each
/// answer its own message (documents are not concatenated into one prompt).
struct AskRequest {
  qint64 chat_id = 0;     // 0: the newest chat of these documents, created when there is none
  QList<qint64> doc_ids;  // at least one
  QString question;
  int n_predict = 256;      // answer tokens at most
  bool map_reduce = false;  // answer over page-aligned parts when the document is too long
  bool skip_plan = false;   // "Run anyway": start even when the planner says it will not fit
  /// Continue a map-reduce answer stopped after part K: the stored answers of parts 1..K are
  /// kept and the ask resumes at part K + 1 (app/runtime/engine.h DocumentAsk::continue_parts).
  bool continue_parts = false;
  /// Continue a whole-document answer stopped at its length limit (or by Stop) from its kept KV
  /// with up to n_predict more tokens (DocumentAsk::continue_answer).
  bool continue_answer = false;
  /// Bytes of saved document KV kept in the snapshot folder (AppSettings::snapshot_budget; the
  /// least recently used files go first); 0: app/runtime/snapshot_budget.h's default.
  qint64 snapshot_budget = 0;
};

/// One `[p. N] "quote"` of an answer, checked against the page (app/ask/citations.h).
struct CitationInfo {
  int page = 0;
  QString quote;
  bool verified = false;
  QString reason;         // why not verified ("quote not found on page 3"); empty when verified
  int found_on_page = 0;  // unverified, but the quote is on this other page; 0 when not
  int answer_begin = 0, answer_end = 0;  // UTF-16 offsets of the marker (and quote) in answer
};

/// A finished (or stopped) answer over one document.
struct AnswerResult {
  qint64 chat_id = 0, doc_id = 0;
  qint64 message_id = 0;  // the stored assistant message; 0 when storing failed (see note())
  QString doc_title;
  QString answer;  // without the stopped marker
  QList<CitationInfo> citations;
  qint64 context_tokens = 0;  // tokens in the session's context at the end (prompt + answer)
  qint64 n_ctx = 0;           // the session's context length
  qint64 generated_tokens = 0;
  double prefill_s = 0;            // wall time of prefill, summed over the ask's sessions
  bool reused_kv = false;          // the document's saved KV was restored
  qint64 reused_tokens = 0;        // tokens restored from it
  double decode_tokens_per_s = 0;  // 0 when nothing was decoded
  bool stopped = false;            // the user stopped it: `answer` is partial
  bool map_reduce = false;         // answered over parts
  int n_parts = 0;                 // map-reduce: the parts
  int parts_reused = 0;            // map-reduce: parts whose document prefix came from saved KV
  QString early_stop;              // the engine stopped early ("context full: ..."), or empty
  QString backend;                 // "cpu (avx2, 2 threads)"
};

/// The stored form of an answer's header (MessageRecord::meta): a JSON object with
/// context_tokens, n_ctx, generated_tokens, prefill_s, reused_kv, reused_tokens,
/// decode_tokens_per_s, stopped, map_reduce, n_parts, parts_reused, early_stop and backend.
std::string answer_meta_json(const AnswerResult& r);
/// Fills those fields of `r` from answer_meta_json's text; false (r unchanged) when `json` is
/// empty or not such an object.
bool answer_from_meta(const std::string& json, AnswerResult& r);

/// The chat a question over `doc_ids` goes to: one document's newest chat, or for a selection
/// the newest chat titled selection_chat_title(doc_ids). 0 when there is none (or on a database
/// error). Call with a Library of the calling thread.
int64_t find_chat_for(Library& lib, const std::vector<int64_t>& doc_ids);
/// "Selection: 3, 5, 9" (ids in ascending order): the title of a selection's chat.
std::string selection_chat_title(std::vector<int64_t> doc_ids);

/// Generated bytes as the library stores an answer and the chat shows it: the bytes of a
/// character that a stop cut short are dropped, and every byte that no UTF-8 character can start
/// (a small model's stray byte token) becomes U+FFFD, so the stored message and the shown answer
/// are one valid UTF-8 text. The streamed pieces follow the same rule, so they add up to it.
std::string answer_text(const std::string& generated);

/// The streamed pieces of an answer by answer_text()'s rule: add() returns the text of the bytes
/// that are final (all but a character still incomplete at the end), finish() the rest. Whatever
/// the splits, the concatenation of all returned pieces is answer_text() of all added bytes (a
/// byte sequence that a new character's first byte interrupts is U+FFFD, not dropped).
class AnswerStream {
 public:
  std::string add(const std::string& piece);
  std::string finish();

 private:
  std::string pending_;
};

class EngineWorker final : public QObject {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(EngineWorker)

 public:
  struct Params {
    QString library_file;             // the library database (library_db_file(data_dir)); required
    QString snapshot_dir;             // where saved document KV goes; empty: no snapshots
    int telemetry_interval_ms = 300;  // run samples at most this often (>= 1)
    int idle_interval_ms = 500;       // process-memory samples while no run sample comes
    /// Tests only: called on the worker thread after each piece of answer text (a test holds
    /// the run there to stop it at a known point). Must return promptly once stop() is called.
    std::function<void()> piece_hook;
  };

  explicit EngineWorker(const Params& params, QObject* parent = nullptr);
  /// Stops a run (as stop()), then joins the worker thread.
  ~EngineWorker() override;

  /// A model is loaded (modelLoaded came, no modelFailed since).
  bool hasModel() const { return has_model_; }
  /// A request is queued or running.
  bool isBusy() const { return pending_ > 0; }

 public slots:
  /// Loads the model of `settings_json` (app::engine_settings_to_json's text) on the worker
  /// thread, replacing the current one. modelLoaded or modelFailed follows.
  void loadModel(const QString& settings_json);
  /// Queues a question. Before running, the planner's verdict comes as planReady; when it says
  /// the run will not fit (and the request has neither skip_plan nor map_reduce) nothing runs
  /// and nothing is stored: ask again with one of them. Otherwise the question is stored, then
  /// for each document answerStarted, piece..., answerFinished (or answerFailed).
  void ask(const spw::app::AskRequest& request);
  /// Counts each library document's tokens for the loaded model (the page text as the prompt
  /// holds it) on the worker thread; tokenCounts follows. Done after every model load too.
  void countTokens();
  /// Stops the running request and any queued before this call (thread-safe, immediate).
  void stop();
  /// A run sample of a run this worker does not do (a batch job of the Jobs dock's runner,
  /// UsageSampler over RunnerCallbacks::usage): published on telemetry() as this worker's own
  /// run samples are, so the dashboard shows whatever the engine runs; the idle samples pause
  /// while they come. Call on the worker's (GUI) thread, e.g. through a queued connection.
  void addRunSample(const spw::app::TelemetrySample& sample);

 signals:
  void modelLoaded(const spw::app::ModelLoadedInfo& info);
  void modelFailed(const QString& message);
  /// The planner's verdict for one document of `request`, before its run.
  void planReady(const spw::app::PlanSummary& plan, const spw::app::AskRequest& request);
  /// The question was stored in chat `chat_id` (created when the request had none).
  void questionStored(qint64 chat_id, qint64 message_id);
  void answerStarted(qint64 chat_id, qint64 doc_id, const QString& doc_title);
  /// Answer text as it is generated (whole UTF-8 characters).
  void piece(const QString& text);
  void answerFinished(const spw::app::AnswerResult& result);
  /// The request failed (no model, a document without text, an engine error); a stopped
  /// answer is not a failure.
  void answerFailed(const QString& message);
  /// A line for the user: notes of the engine (saved KV reused, map-reduce parts, fallbacks).
  void note(const QString& text);
  void telemetry(const spw::app::TelemetrySample& sample);
  /// How far the running answer is (app/runtime/progress.h): map-reduce parts as each part
  /// starts (done = parts finished; the combining prompt: done == total).
  /// Prefill events per ubatch and decode events per token come from the ask pipeline.
  void progress(const spw::app::ProgressEvent& event);
  /// Tokens per document id for the loaded model (after a load and countTokens()).
  void tokenCounts(const QHash<qint64, qint64>& counts);
  void busyChanged(bool busy);

 private:
  struct Core;
  void onIdleTick();
  void onRunSample(const TelemetrySample& s);
  void finishRequest();

  QThread* thread_ = nullptr;
  Core* core_ = nullptr;  // lives on thread_; deleted after the thread has ended
  QTimer* idle_timer_ = nullptr;
  Params params_;
  // Cross-thread: request ids are handed out here; a run with id <= cancel_upto_ stops.
  std::shared_ptr<std::atomic<int64_t>> cancel_upto_;
  int64_t next_request_ = 0;
  int pending_ = 0;  // GUI thread only
  bool has_model_ = false;
  TelemetrySample last_run_sample_;
  int64_t last_sample_ms_ = 0;
  int64_t external_sample_ms_ = -1;  // when addRunSample last came (a job's long ubatch)
};

}  // namespace spw::app

Q_DECLARE_METATYPE(spw::app::ModelLoadedInfo)
Q_DECLARE_METATYPE(spw::app::AskRequest)
Q_DECLARE_METATYPE(spw::app::AnswerResult)
Q_DECLARE_METATYPE(spw::app::ProgressEvent)
