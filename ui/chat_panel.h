// The chat (right side of the main window): questions to the selected document (or selection of
// documents), answers streamed token by token from the EngineWorker with a Stop button, each
// `[p. N]` citation a link (citationActivated -> the page viewer), unverified citations marked,
// and a header over each answer: tokens in context, prefill time, saved KV reused or not,
// decode tokens/s. The chat of a document is persisted by the worker (Library chats/messages)
// and reloaded here when the document is selected.
//
// Under the chat, while an answer runs: a progress bar with ETA (prefill, map-reduce parts) from
// EngineWorker::progress, the run's notes collapsed under it (RunProgress), so the chat view holds
// questions and answers only and selecting an answer selects no log lines. Stop or Esc stops.
// The question box is multi-line (Enter asks, Shift+Enter a new line). Each answer has a Copy
// link (its text with its citations, to the clipboard); "Export…" writes the chat as Markdown
// with each answer's citations.
//
// Before a run the worker sends the planner's verdict; when it says the run will not fit, a
// banner shows it with "Run anyway" / "Use map-reduce" instead of starting and failing. Its
// "Always answer this document over parts" is remembered for the document (Library::
// set_answer_over_parts): later questions on it are asked over parts at once, without the
// banner, with a note in the chat saying why and an Undo link.
// Without a model the chat explains how to get a GGUF file and where Spillway looks for one.
//
// GUI thread only. Reads the library through its own connection (setLibraryFile); all writes
// are the worker's but the answer-over-parts choice (one column of the document's row).
#pragma once

#include <QList>
#include <QSet>
#include <QString>
#include <QWidget>
#include <memory>
#include <vector>

#include "app/worker/engine_worker.h"

class QFrame;
class QLabel;
class QPushButton;
class QShortcut;
class QToolButton;
class QTextBrowser;
class QUrl;

namespace spw::app {
class Library;
}

namespace spw::ui {

class ElidedLabel;
class PlanBanner;
class QuestionBox;
class RunProgress;

class ChatPanel final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(ChatPanel)

 public:
  explicit ChatPanel(QWidget* parent = nullptr);
  ~ChatPanel() override;

  /// The worker that answers (not owned; must outlive this panel or be set to nullptr first).
  void setWorker(app::EngineWorker* worker);
  /// Opens the library database (read-only use, on this thread) for chats and page texts.
  /// False with `error` set when it cannot be opened; the chat then says so.
  bool setLibraryFile(const QString& db_file, QString* error = nullptr);
  /// The documents questions go to (empty: none selected); shows their chat from the library.
  void setDocuments(const QList<qint64>& doc_ids);
  QList<qint64> documents() const { return doc_ids_; }
  /// Reads the documents' titles again (one was renamed); the chat itself is left as it is.
  void refreshTitles();
  /// Answer length in tokens at most (default 256).
  void setMaxAnswerTokens(int n) { n_predict_ = n; }
  /// An engine message as the chat shows it: hints that name a CLI flag name what to click
  /// in the app instead ("ingest with --ocr" -> the library's "Read scanned pages with OCR").
  static QString appWording(QString message);
  /// The request continueAnswer(`entry`) sends; false when answer `entry` is not one that
  /// stopped early (map-reduce after part K of N, or the length limit).
  bool continueRequest(int entry, app::AskRequest* out) const;
  /// Notices shown at once in a run of them (the older ones fold behind "N earlier notices").
  static constexpr int kShownNotices = 3;
  /// Adds a notice to the chat (an error when `error`), as the run's notes and errors are:
  /// a repeat of the one before is counted ("×3") instead of shown again.
  void addNotice(const QString& text, bool error);
  /// Entries shown (questions, answers, notes), for tests.
  int entryCount() const { return static_cast<int>(entries_.size()); }
  /// The snapshot budget questions are asked with (bytes; 0: the default), from Settings.
  void setSnapshotBudget(qint64 bytes) { snapshot_budget_ = bytes; }
  qint64 snapshotBudget() const { return snapshot_budget_; }
  /// The chat shown (0: none yet: the first question creates it).
  qint64 chatId() const { return chat_id_; }
  /// Whether questions on `doc_id` are always answered over parts (the library's
  /// DocumentRecord::answer_over_parts; false without a library or such a document).
  bool answersOverParts(qint64 doc_id) const;
  /// Stores that choice for `doc_id` in the library (what the banner's box with Use map-reduce
  /// and the note's Undo do). False with `error` set when it cannot be stored.
  bool setAnswerOverParts(qint64 doc_id, bool always, QString* error = nullptr);

  // Parts, for tests and the main window's shortcuts.
  QTextBrowser* view() const { return view_; }
  QuestionBox* input() const { return input_; }
  QPushButton* askButton() const { return ask_; }
  QPushButton* stopButton() const { return stop_; }
  PlanBanner* planBanner() const { return plan_box_; }
  QPushButton* runAnywayButton() const;
  QPushButton* mapReduceButton() const;
  RunProgress* runProgress() const { return progress_; }
  QToolButton* exportButton() const { return export_; }

  /// The chat as Markdown: "## You" / "## <document title>" sections, each answer with its
  /// header line and a "Citations" list (page, quote, verified or why not); notes left out.
  QString toMarkdown() const;
  /// Writes toMarkdown() to `file` (UTF-8). False with `error` ("<file>: <why>") when it cannot.
  bool exportMarkdown(const QString& file, QString* error = nullptr) const;
  /// The text of answer `entry` with its citations as a Markdown list (what its Copy link puts
  /// on the clipboard); empty when `entry` is not an answer.
  QString answerText(int entry) const;

 public slots:
  /// Asks `question` about the current documents (as typing it and pressing Ask).
  void askQuestion(const QString& question);
  /// Stops the answer being generated (kept, marked stopped).
  void stop();
  /// Copies answer `entry` to the clipboard (its Copy link).
  void copyAnswer(int entry);
  /// Continues answer `entry` (its Continue link): a map-reduce answer stopped after part K of
  /// N asks again with continue_parts (the stored parts are kept, the run resumes at part
  /// K + 1); an answer cut by the length limit goes on from its kept tokens for up to the
  /// answer length more (continue_answer: only the question and the kept answer are prefilled
  /// on the document's saved KV), a combined map-reduce answer cut so is asked again with twice
  /// the room. False when the entry cannot be continued or nothing can ask now.
  bool continueAnswer(int entry);
  /// Asks for a file and exports the chat there (the Export button).
  void exportChat();

 signals:
  /// A citation link was clicked: show page `page_no` of `doc_id` with `quote` highlighted.
  void citationActivated(qint64 doc_id, int page_no, const QString& quote);
  /// What the chat is doing, for the status bar ("Generating an answer…", "Ready").
  void activityChanged(const QString& text);

 private:
  struct Entry {
    enum Kind { User, Assistant, Note, Error } kind = Note;
    QString text;
    qint64 doc_id = 0;  // assistant: the document its citations point into
    QString doc_title;
    QList<app::CitationInfo> citations;
    QString header;  // assistant: tokens in context, prefill, saved KV, decode speed
    bool stopped = false;
    bool streaming = false;
    QString early_stop;       // assistant: "stopped after part 2 of 6", "length limit 256 tokens"
    bool map_reduce = false;  // assistant: answered over parts
    QString question;         // assistant: the question it answers
    qint64 parts_doc = 0;     // note: about this document's answer-over-parts choice (Undo)
    static Entry of(Kind kind, const QString& text) {
      Entry e;
      e.kind = kind;
      e.text = text;
      return e;
    }
  };

  void onAskClicked();
  void onModelLoaded(const app::ModelLoadedInfo& info);
  void onModelFailed(const QString& message);
  void onPlanReady(const app::PlanSummary& plan, const app::AskRequest& request);
  void onQuestionStored(qint64 chat_id, qint64 message_id);
  void onAnswerStarted(qint64 chat_id, qint64 doc_id, const QString& title);
  void onPiece(const QString& text);
  void onAnswerFinished(const app::AnswerResult& r);
  void onAnswerFailed(const QString& message);
  void onNote(const QString& text);
  void onProgress(const app::ProgressEvent& e);
  void onBusyChanged(bool busy);
  void onAnchorClicked(const QUrl& url);
  void choosePlan(bool map_reduce);
  /// The banner's box was checked with Use map-reduce: store it, say so (or why not).
  void rememberOverParts(qint64 doc_id, const QString& title);
  /// A parts note's Undo: questions on `doc_id` get the verdict first again.
  void undoAnswerOverParts(qint64 doc_id);
  /// A note about `doc_id`'s answer-over-parts choice, with an Undo link while it holds.
  void addPartsNote(qint64 doc_id, const QString& text);
  QString partsNoteLink(qint64 doc_id) const;

  void reload();
  void updateTitles();
  void render();
  QString lastQuestionBefore(int entry) const;
  QString entryHtml(int index, const Entry& e) const;
  QString answerHtml(int index, const Entry& e) const;
  QString helpHtml() const;
  void updateControls();
  bool showsRunningRequest() const;
  QList<app::CitationInfo> checkStored(qint64 doc_id, const QString& answer) const;

  app::EngineWorker* worker_ = nullptr;
  std::unique_ptr<app::Library> lib_;
  QString lib_error_;
  QList<qint64> doc_ids_;
  QStringList doc_titles_;
  qint64 chat_id_ = 0;
  std::vector<Entry> entries_;
  int streaming_ = -1;            // index of the answer being streamed, -1: none
  QList<qint64> running_docs_;    // documents of the request being answered
  app::AskRequest pending_plan_;  // the request waiting for a plan choice
  qint64 pending_doc_ = 0;        // the document of the verdict shown
  QString pending_title_;
  bool parts_by_choice_ = false;  // the request running was made map-reduce by the user's choice
  bool model_ = false;
  QString model_name_;
  QString model_error_;
  bool busy_ = false;
  int n_predict_ = 256;
  qint64 snapshot_budget_ = 0;
  QSet<int> unfolded_;  // first entries of notice runs the user unfolded

  ElidedLabel* scope_ = nullptr;
  QTextBrowser* view_ = nullptr;
  PlanBanner* plan_box_ = nullptr;
  RunProgress* progress_ = nullptr;
  QuestionBox* input_ = nullptr;
  QToolButton* export_ = nullptr;
  QShortcut* esc_ = nullptr;
  QPushButton* ask_ = nullptr;
  QPushButton* stop_ = nullptr;
};

}  // namespace spw::ui
