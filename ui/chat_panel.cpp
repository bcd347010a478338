#include "ui/chat_panel.h"

#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QShortcut>
#include <QTextBrowser>
#include <QTextCursor>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>
#include <algorithm>

#include "app/ask/citations.h"
#include "app/ask/document.h"
#include "app/store/library.h"
#include "app/worker/plan_summary.h"
#include "ui/elided_label.h"
#include "ui/plan_banner.h"
#include "ui/question_box.h"
#include "ui/run_progress.h"

namespace spw::ui {

namespace {

constexpr const char* kWarnColor = "#c0392b";

QString qs(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// Escaped text with line breaks kept.
QString html_text(const QString& s) {
  QString e = s.toHtmlEscaped();
  e.replace(QLatin1Char('\n'), QStringLiteral("<br>"));
  return e;
}

int utf16_offset(const std::string& s, int64_t byte) {
  byte = std::clamp<int64_t>(byte, 0, static_cast<int64_t>(s.size()));
  return static_cast<int>(QString::fromUtf8(s.data(), qsizetype(byte)).size());
}

QString answer_header(const app::AnswerResult& r) {
  QStringList parts;
  parts << ChatPanel::tr("%1 of %2 tokens in context").arg(r.context_tokens).arg(r.n_ctx);
  parts << ChatPanel::tr("prefill %1 s").arg(r.prefill_s, 0, 'f', 2);
  parts << (r.reused_kv ? ChatPanel::tr("saved KV reused (%1 tokens)").arg(r.reused_tokens)
                        : ChatPanel::tr("no saved KV reused"));
  parts << ChatPanel::tr("decode %1 tokens/s").arg(r.decode_tokens_per_s, 0, 'f', 1);
  if (r.map_reduce) parts << ChatPanel::tr("map-reduce over parts");
  if (!r.early_stop.isEmpty()) parts << ChatPanel::tr("ended early: %1").arg(r.early_stop);
  return parts.join(QStringLiteral(" · "));
}

}  // namespace

ChatPanel::ChatPanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("chat"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);

  // One line, elided (the whole of it in the tooltip): a long title does not make the chat
  // taller in a narrow dock.
  scope_ = new ElidedLabel(this);
  scope_->setObjectName(QStringLiteral("chatScope"));
  export_ = new QToolButton(this);
  export_->setObjectName(QStringLiteral("chatExport"));
  export_->setText(tr("Export…"));
  export_->setToolTip(tr("Save this chat as a Markdown file, with each answer's citations"));
  export_->setAutoRaise(true);
  connect(export_, &QToolButton::clicked, this, &ChatPanel::exportChat);
  auto* top = new QHBoxLayout;
  top->addWidget(scope_, 1);
  top->addWidget(export_, 0, Qt::AlignTop);
  layout->addLayout(top);

  view_ = new QTextBrowser(this);
  view_->setObjectName(QStringLiteral("chatView"));
  view_->setOpenLinks(false);
  view_->setOpenExternalLinks(false);
  connect(view_, &QTextBrowser::anchorClicked, this, &ChatPanel::onAnchorClicked);
  layout->addWidget(view_, 1);

  progress_ = new RunProgress(this);
  layout->addWidget(progress_);

  // The planner's verdict when a run will not fit, with the choices.
  plan_box_ = new PlanBanner(this);
  connect(plan_box_, &PlanBanner::runAnyway, this, [this] { choosePlan(false); });
  connect(plan_box_, &PlanBanner::mapReduce, this, [this] { choosePlan(true); });
  connect(plan_box_, &PlanBanner::cancelled, this, [this] {
    entries_.push_back(Entry::of(Entry::Note, tr("Not asked.")));
    render();
  });
  plan_box_->hide();
  layout->addWidget(plan_box_);

  auto* row = new QHBoxLayout;
  input_ = new QuestionBox(this);
  input_->setObjectName(QStringLiteral("chatInput"));
  input_->setPlaceholderText(tr("Ask about the document…"));
  input_->setToolTip(tr("Enter asks; Shift+Enter starts a new line"));
  ask_ = new QPushButton(tr("Ask"), this);
  ask_->setObjectName(QStringLiteral("chatAsk"));
  ask_->setDefault(true);
  stop_ = new QPushButton(tr("Stop"), this);
  stop_->setObjectName(QStringLiteral("chatStop"));
  stop_->setToolTip(tr("Stop the answer (Esc); what it has so far is kept"));
  // As narrow as their words (the style's minimum is 80 px each), so the chat dock of a small
  // window leaves room for the page.
  for (QPushButton* b : {ask_, stop_})
    b->setMinimumWidth(b->fontMetrics().horizontalAdvance(b->text()) + 24);
  row->addWidget(input_, 1);
  row->addWidget(ask_, 0, Qt::AlignBottom);
  row->addWidget(stop_, 0, Qt::AlignBottom);
  layout->addLayout(row);
  connect(input_, &QuestionBox::submitted, this, &ChatPanel::onAskClicked);
  // Esc stops anywhere in the window, only while an answer runs (else Esc is the focus
  // widget's: closing a completer, clearing a search).
  esc_ = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  esc_->setContext(Qt::WindowShortcut);
  esc_->setEnabled(false);
  connect(esc_, &QShortcut::activated, this, &ChatPanel::stop);
  connect(ask_, &QPushButton::clicked, this, &ChatPanel::onAskClicked);
  connect(stop_, &QPushButton::clicked, this, &ChatPanel::stop);

  setDocuments({});
}

ChatPanel::~ChatPanel() = default;

void ChatPanel::setWorker(app::EngineWorker* worker) {
  if (worker_) disconnect(worker_, nullptr, this, nullptr);
  worker_ = worker;
  model_ = worker_ != nullptr && worker_->hasModel();
  busy_ = worker_ != nullptr && worker_->isBusy();
  if (worker_) {
    using W = app::EngineWorker;
    connect(worker_, &W::modelLoaded, this, &ChatPanel::onModelLoaded);
    connect(worker_, &W::modelFailed, this, &ChatPanel::onModelFailed);
    connect(worker_, &W::planReady, this, &ChatPanel::onPlanReady);
    connect(worker_, &W::questionStored, this, &ChatPanel::onQuestionStored);
    connect(worker_, &W::answerStarted, this, &ChatPanel::onAnswerStarted);
    connect(worker_, &W::piece, this, &ChatPanel::onPiece);
    connect(worker_, &W::answerFinished, this, &ChatPanel::onAnswerFinished);
    connect(worker_, &W::answerFailed, this, &ChatPanel::onAnswerFailed);
    connect(worker_, &W::note, this, &ChatPanel::onNote);
    connect(worker_, &W::progress, this, &ChatPanel::onProgress);
    connect(worker_, &W::busyChanged, this, &ChatPanel::onBusyChanged);
    connect(worker_, &QObject::destroyed, this, [this] {
      worker_ = nullptr;
      model_ = busy_ = false;
      updateControls();
    });
  }
  render();
  updateControls();
}

bool ChatPanel::setLibraryFile(const QString& db_file, QString* error) {
  lib_.reset();
  lib_error_.clear();
  auto l = app::Library::open(db_file.toStdString());
  if (!l) {
    lib_error_ = qs(l.error().message);
    if (error) *error = lib_error_;
    render();
    return false;
  }
  lib_ = std::move(*l);
  setDocuments(doc_ids_);
  return true;
}

void ChatPanel::setDocuments(const QList<qint64>& doc_ids) {
  doc_ids_ = doc_ids;
  updateTitles();
  plan_box_->hide();
  reload();
  updateControls();
}

void ChatPanel::refreshTitles() {
  updateTitles();
  render();  // the help line names the document
}

void ChatPanel::updateTitles() {
  doc_titles_.clear();
  for (qint64 id : doc_ids_) {
    QString title = tr("document %1").arg(id);
    if (lib_) {
      if (auto d = lib_->document(id)) title = qs(d->shown_title());
    }
    doc_titles_ << title;
  }
  if (doc_ids_.isEmpty()) {
    scope_->setFullText(tr("No document selected."));
  } else if (doc_ids_.size() == 1) {
    scope_->setFullText(tr("Asking “%1”").arg(doc_titles_[0]));
  } else {
    scope_->setFullText(tr("Asking %1 documents one after another (one answer each): %2")
                            .arg(doc_ids_.size())
                            .arg(doc_titles_.join(QStringLiteral(", "))));
  }
}

void ChatPanel::reload() {
  entries_.clear();
  unfolded_.clear();
  streaming_ = -1;
  chat_id_ = 0;
  if (lib_ && !doc_ids_.isEmpty()) {
    const std::vector<int64_t> ids(doc_ids_.begin(), doc_ids_.end());
    chat_id_ = app::find_chat_for(*lib_, ids);
    if (chat_id_ > 0) {
      auto msgs = lib_->messages(chat_id_);
      if (!msgs) {
        entries_.push_back(Entry::of(
            Entry::Error, tr("The chat could not be read: %1").arg(qs(msgs.error().message))));
      } else {
        for (const app::MessageRecord& m : *msgs) {
          Entry e;
          e.text = qs(m.content);
          if (m.role == "user") {
            e.kind = Entry::User;
          } else if (m.role == "assistant") {
            e.kind = Entry::Assistant;
            const QString marker = QStringLiteral("\n\n") + QLatin1String(app::kStoppedMarker);
            if (e.text.endsWith(marker)) {
              e.stopped = true;
              e.text.chop(marker.size());
            }
            e.doc_id = doc_ids_[0];
            e.doc_title = doc_titles_[0];
            // A selection's answers start with the document's title (EngineWorker).
            for (int i = 0; i < doc_ids_.size() && doc_ids_.size() > 1; ++i) {
              const QString prefix = QStringLiteral("From \"%1\":\n").arg(doc_titles_[i]);
              if (e.text.startsWith(prefix)) {
                e.text.remove(0, prefix.size());
                e.doc_id = doc_ids_[i];
                e.doc_title = doc_titles_[i];
              }
            }
            e.citations = checkStored(e.doc_id, e.text);
            app::AnswerResult meta;
            if (app::answer_from_meta(m.meta, meta)) {
              e.header = answer_header(meta);
              e.stopped = e.stopped || meta.stopped;
              e.early_stop = meta.early_stop;
              e.map_reduce = meta.map_reduce;
              e.question = lastQuestionBefore(static_cast<int>(entries_.size()));
            } else {
              e.header = tr("from the library");
            }
          } else {
            e.kind = Entry::Note;
          }
          entries_.push_back(e);
        }
      }
    }
  }
  render();
}

QList<app::CitationInfo> ChatPanel::checkStored(qint64 doc_id, const QString& answer) const {
  QList<app::CitationInfo> out;
  if (!lib_) return out;
  auto rec = lib_->document(doc_id);
  auto pages = lib_->pages(doc_id);
  if (!rec || !pages) return out;
  app::DocumentText doc;
  doc.id = rec->id;
  doc.title = rec->title;
  for (const app::PageRecord& p : *pages) {
    app::PageText t;
    t.page_no = p.page_no;
    t.text = p.text;
    t.scanned = p.scanned;
    t.ocr = p.ocr;
    t.undecodable = p.undecodable;
    t.boilerplate = p.boilerplate;
    doc.pages.push_back(std::move(t));
  }
  const std::string text = answer.toStdString();
  for (const app::CitationCheck& c : app::check_citations(text, doc)) {
    app::CitationInfo i;
    i.page = c.citation.page;
    i.quote = qs(c.citation.quote);
    i.verified = c.verified;
    i.reason = qs(c.reason);
    i.found_on_page = c.found_on_page;
    i.answer_begin = utf16_offset(text, c.citation.answer_begin);
    i.answer_end = utf16_offset(text, c.citation.answer_end);
    out.push_back(i);
  }
  return out;
}

// ---- asking -----------------------------------------------------------------------------

void ChatPanel::onAskClicked() { askQuestion(input_->toPlainText()); }

void ChatPanel::askQuestion(const QString& question) {
  const QString q = question.trimmed();
  if (q.isEmpty()) return;
  if (!worker_ || !model_) {
    entries_.push_back(
        Entry::of(Entry::Error, tr("No model is loaded: pick a GGUF file in Settings > Model.")));
    render();
    return;
  }
  if (doc_ids_.isEmpty()) {
    entries_.push_back(Entry::of(Entry::Error, tr("Select a document in the library first.")));
    render();
    return;
  }
  app::AskRequest req;
  req.chat_id = chat_id_;
  req.doc_ids = doc_ids_;
  req.question = q;
  req.n_predict = n_predict_;
  req.snapshot_budget = snapshot_budget_;
  // Documents the user chose to always answer over parts skip the verdict's question.
  req.map_reduce = std::all_of(doc_ids_.begin(), doc_ids_.end(),
                               [this](qint64 id) { return answersOverParts(id); });
  parts_by_choice_ = req.map_reduce;
  running_docs_ = doc_ids_;
  plan_box_->hide();
  entries_.push_back(Entry::of(Entry::User, q));
  render();
  input_->clear();
  worker_->ask(req);
}

QPushButton* ChatPanel::runAnywayButton() const { return plan_box_->runAnywayButton(); }
QPushButton* ChatPanel::mapReduceButton() const { return plan_box_->mapReduceButton(); }

void ChatPanel::stop() {
  if (worker_) worker_->stop();
}

void ChatPanel::choosePlan(bool map_reduce) {
  plan_box_->hide();
  parts_by_choice_ = false;
  if (map_reduce && plan_box_->alwaysOverParts()) rememberOverParts(pending_doc_, pending_title_);
  if (!worker_) return;
  app::AskRequest req = pending_plan_;
  if (map_reduce)
    req.map_reduce = true;
  else
    req.skip_plan = true;
  running_docs_ = req.doc_ids;
  worker_->ask(req);
}

bool ChatPanel::showsRunningRequest() const { return running_docs_ == doc_ids_; }

// ---- the worker's signals ------------------------------------------------------------------

void ChatPanel::onModelLoaded(const app::ModelLoadedInfo& info) {
  model_ = true;
  model_name_ = info.name;
  model_error_.clear();
  render();
  updateControls();
}

void ChatPanel::onModelFailed(const QString& message) {
  model_ = false;
  model_error_ = message;
  render();
  updateControls();
}

void ChatPanel::onPlanReady(const app::PlanSummary& plan, const app::AskRequest& request) {
  if (request.doc_ids != doc_ids_) return;
  const QString text = qs(app::plan_summary_text(plan));
  if (plan.needs_choice() && !request.skip_plan && !request.map_reduce) {
    pending_plan_ = request;
    pending_doc_ = plan.doc_id;
    pending_title_ = qs(plan.doc_title);
    // The headline first; the numbers (the summary after it) behind Details.
    const QString headline = qs(plan.headline);
    QString details = text;
    if (!headline.isEmpty() && details.startsWith(headline))
      details = details.mid(headline.size()).trimmed();
    plan_box_->showVerdict(qs(plan.doc_title), headline.isEmpty() ? text : headline,
                           headline.isEmpty() ? QString() : details, plan.n_parts > 0,
                           plan.can_run_anyway);
    return;
  }
  if (parts_by_choice_ && request.map_reduce && plan.needs_choice())
    addPartsNote(plan.doc_id, tr("Answering over parts without asking first: you chose to "
                                 "always answer “%1” over parts.")
                                  .arg(qs(plan.doc_title)));
  onNote(tr("Memory plan for “%1”: %2").arg(qs(plan.doc_title), qs(app::plan_summary_line(plan))));
}

void ChatPanel::onQuestionStored(qint64 chat_id, qint64) {
  if (showsRunningRequest()) chat_id_ = chat_id;
}

void ChatPanel::onAnswerStarted(qint64 chat_id, qint64 doc_id, const QString& title) {
  if (!showsRunningRequest()) return;
  chat_id_ = chat_id;
  Entry e;
  e.kind = Entry::Assistant;
  e.doc_id = doc_id;
  e.doc_title = title;
  e.header = tr("generating…");
  e.streaming = true;
  entries_.push_back(e);
  streaming_ = static_cast<int>(entries_.size()) - 1;
  render();
}

void ChatPanel::onPiece(const QString& text) {
  if (streaming_ < 0 || !showsRunningRequest()) return;
  entries_[static_cast<size_t>(streaming_)].text += text;
  if (streaming_ != static_cast<int>(entries_.size()) - 1) {
    render();
    return;
  }
  // The streamed answer is the document's last block: append there, no re-layout of the rest.
  QTextCursor c(view_->document());
  c.movePosition(QTextCursor::End);
  c.insertText(text);
  view_->verticalScrollBar()->setValue(view_->verticalScrollBar()->maximum());
}

void ChatPanel::onAnswerFinished(const app::AnswerResult& r) {
  if (!showsRunningRequest()) return;
  Entry* e = streaming_ >= 0 ? &entries_[static_cast<size_t>(streaming_)] : nullptr;
  if (e == nullptr) {
    entries_.push_back(Entry::of(Entry::Assistant, QString()));
    e = &entries_.back();
  }
  e->text = r.answer;
  e->doc_id = r.doc_id;
  e->doc_title = r.doc_title;
  e->citations = r.citations;
  e->header = answer_header(r);
  e->stopped = r.stopped;
  e->early_stop = r.early_stop;
  e->map_reduce = r.map_reduce;
  e->question = lastQuestionBefore(static_cast<int>(e - entries_.data()));
  e->streaming = false;
  streaming_ = -1;
  render();
}

QString ChatPanel::lastQuestionBefore(int entry) const {
  for (int i = std::min(entry, static_cast<int>(entries_.size())) - 1; i >= 0; --i)
    if (entries_[static_cast<size_t>(i)].kind == Entry::User)
      return entries_[static_cast<size_t>(i)].text;
  return {};
}

bool ChatPanel::continueRequest(int entry, app::AskRequest* out) const {
  if (entry < 0 || entry >= static_cast<int>(entries_.size())) return false;
  const Entry& e = entries_[static_cast<size_t>(entry)];
  if (e.kind != Entry::Assistant || e.streaming || e.question.isEmpty() || e.doc_id <= 0)
    return false;
  app::AskRequest req;
  req.chat_id = chat_id_;
  req.doc_ids = {e.doc_id};
  req.question = e.question;
  req.n_predict = n_predict_;
  req.snapshot_budget = snapshot_budget_;
  static const QRegularExpression parts(QStringLiteral("^stopped after part (\\d+) of (\\d+)$"));
  static const QRegularExpression length(QStringLiteral("^length limit (\\d+) tokens$"));
  if (const auto m = parts.match(e.early_stop);
      m.hasMatch() && e.map_reduce && m.captured(1).toInt() < m.captured(2).toInt()) {
    req.map_reduce = true;
    req.continue_parts = true;
  } else if (const auto l = length.match(e.early_stop); l.hasMatch() && !e.map_reduce) {
    req.continue_answer = true;  // the cut answer's tokens are kept: up to n_predict more
  } else if (l.hasMatch()) {
    // A combined map-reduce answer is not continued from its tokens: asked again with twice the
    // room (the parts' answers are stored: only the combining runs again).
    req.n_predict = std::max(n_predict_, 2 * l.captured(1).toInt());
    req.map_reduce = true;
    req.continue_parts = true;
  } else {
    return false;
  }
  if (out) *out = req;
  return true;
}

bool ChatPanel::continueAnswer(int entry) {
  app::AskRequest req;
  if (!worker_ || !model_ || busy_ || !continueRequest(entry, &req)) return false;
  const QString stopped = entries_[static_cast<size_t>(entry)].early_stop;
  running_docs_ = req.doc_ids;
  parts_by_choice_ = false;
  plan_box_->hide();
  entries_.push_back(Entry::of(Entry::User, req.question));
  entries_.push_back(Entry::of(
      Entry::Note, req.continue_parts && stopped.startsWith(QLatin1String("stopped after"))
                       ? tr("Continuing (%1): the finished parts are kept.").arg(stopped)
                   : req.continue_answer
                       ? tr("Continuing the answer for up to %1 more tokens.").arg(req.n_predict)
                       : tr("Continuing with room for %1 answer tokens.").arg(req.n_predict)));
  render();
  worker_->ask(req);
  return true;
}

void ChatPanel::onAnswerFailed(const QString& message) {
  if (streaming_ >= 0) {
    Entry& e = entries_[static_cast<size_t>(streaming_)];
    e.streaming = false;
    e.header = tr("failed");
    streaming_ = -1;
  }
  entries_.push_back(Entry::of(Entry::Error, appWording(message)));
  render();
}

void ChatPanel::addNotice(const QString& text, bool error) {
  entries_.push_back(Entry::of(error ? Entry::Error : Entry::Note, appWording(text)));
  render();
}

QString ChatPanel::appWording(QString message) {
  // The ask pipeline's messages are the CLI's too; in the app, say what to click instead.
  message.replace(QLatin1String("(ingest with --ocr)"),
                  tr("(right-click the document in the library and choose “Read scanned pages "
                     "with OCR”)"));
  return message;
}

void ChatPanel::onNote(const QString& text) {
  if (!showsRunningRequest()) return;
  if (busy_) {  // the run's log, under its progress bar
    progress_->addLogLine(text);
    return;
  }
  Entry n = Entry::of(Entry::Note, text);
  if (streaming_ >= 0) {
    // Before the answer being streamed, which stays last.
    entries_.insert(entries_.begin() + streaming_, n);
    ++streaming_;
  } else {
    entries_.push_back(n);
  }
  render();
}

void ChatPanel::onProgress(const app::ProgressEvent& e) {
  if (showsRunningRequest()) progress_->setProgress(e);
}

void ChatPanel::onBusyChanged(bool busy) {
  if (busy && !busy_) progress_->reset();
  if (!busy && busy_) progress_->finish();
  busy_ = busy;
  updateControls();
  emit activityChanged(busy ? tr("Generating an answer…") : tr("Ready"));
}

void ChatPanel::onAnchorClicked(const QUrl& url) {
  if (url.scheme() == QLatin1String("copy")) {
    copyAnswer(url.path().toInt());
    return;
  }
  if (url.scheme() == QLatin1String("notices")) {
    unfolded_.insert(url.path().toInt());
    render();
    return;
  }
  if (url.scheme() == QLatin1String("continue")) {
    continueAnswer(url.path().toInt());
    return;
  }
  if (url.scheme() == QLatin1String("parts-ask")) {  // a parts note's Undo
    undoAnswerOverParts(url.path().toLongLong());
    return;
  }
  if (url.scheme() != QLatin1String("cite")) return;
  const QStringList parts = url.path().split(QLatin1Char('-'));
  if (parts.size() != 2) return;
  const int entry = parts[0].toInt(), index = parts[1].toInt();
  if (entry < 0 || entry >= static_cast<int>(entries_.size())) return;
  const Entry& e = entries_[static_cast<size_t>(entry)];
  if (index < 0 || index >= e.citations.size()) return;
  const app::CitationInfo& c = e.citations[index];
  emit citationActivated(e.doc_id, c.page, c.quote);
}

// ---- rendering -------------------------------------------------------------------------------

void ChatPanel::updateControls() {
  const bool can_ask = worker_ != nullptr && model_ && !doc_ids_.isEmpty() && !busy_;
  ask_->setEnabled(can_ask);
  input_->setEnabled(lib_ != nullptr || worker_ != nullptr);
  stop_->setEnabled(busy_);
  esc_->setEnabled(busy_);
  const QString hint = !model_              ? tr("No model: Settings › Model")
                       : doc_ids_.isEmpty() ? tr("Select a document in the library")
                                            : tr("Ask about the document…");
  if (hint != input_->placeholderText()) {
    input_->setPlaceholderText(hint);
    // Qt repaints a shown placeholder only when it appears or goes, not when its text changes.
    input_->viewport()->update();
  }
}

QString ChatPanel::helpHtml() const {
  QString h;
  if (!lib_error_.isEmpty())
    h += QStringLiteral("<p style=\"color:%1\">%2</p>")
             .arg(QLatin1String(kWarnColor),
                  tr("The library could not be opened: %1").arg(lib_error_.toHtmlEscaped()));
  if (!model_) {
    h +=
        tr("<h3>No model loaded</h3>"
           "<p>Spillway answers with a local language model in a <b>GGUF</b> file (for example "
           "a Q4_K_M file of Llama 3.2 3B Instruct or Qwen2.5 3B Instruct from Hugging Face, or "
           "one pulled with <code>ollama pull</code>). Nothing is downloaded for you.</p>"
           "<p>Spillway looks for GGUF files in the folders of:</p><ul>"
           "<li>llama.cpp: <code>~/.cache/llama.cpp</code></li>"
           "<li>LM Studio: <code>~/.lmstudio/models</code>, "
           "<code>~/.cache/lm-studio/models</code></li>"
           "<li>Ollama: <code>~/.ollama/models/blobs</code> (its blobs are GGUF files)</li>"
           "<li>GPT4All: <code>~/.local/share/nomic.ai/GPT4All</code></li>"
           "<li>Hugging Face: <code>~/.cache/huggingface/hub</code></li></ul>"
           "<p><b>Settings &gt; Model</b> lists the files found there and picks one (or "
           "<i>Choose file…</i> for any other). Documents can be added, searched and read "
           "without a model.</p>");
    if (!model_error_.isEmpty())
      h += QStringLiteral("<p style=\"color:%1\">%2</p>")
               .arg(QLatin1String(kWarnColor),
                    tr("The model could not be loaded: %1").arg(model_error_.toHtmlEscaped()));
    return h;
  }
  if (doc_ids_.isEmpty())
    return h + tr("<p>Select a document in the library (or several) to ask about it.</p>");
  if (entries_.empty()) {
    h += tr("<p>Ask a question about “%1”. Answers cite pages as <b>[p. N]</b>: click one to "
            "open that page with the quote highlighted; unverified citations are marked "
            "<span style=\"color:%2\">⚠</span>.</p>")
             .arg(doc_titles_.join(QStringLiteral("”, “")).toHtmlEscaped(),
                  QLatin1String(kWarnColor));
    if (doc_ids_.size() > 1)
      h +=
          tr("<p>With several documents selected, each is asked in turn and answers "
             "separately (they are not combined into one prompt).</p>");
  }
  return h;
}

QString ChatPanel::answerHtml(int index, const Entry& e) const {
  std::vector<int> order(static_cast<size_t>(e.citations.size()));
  for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int>(j);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return e.citations[a].answer_begin < e.citations[b].answer_begin;
  });
  QString out;
  int pos = 0;
  for (int j : order) {
    const app::CitationInfo& c = e.citations[j];
    if (c.answer_begin < pos || c.answer_end > e.text.size()) continue;
    out += html_text(e.text.mid(pos, c.answer_begin - pos));
    const QString href = QStringLiteral("cite:%1-%2").arg(index).arg(j);
    const QString marker = html_text(e.text.mid(c.answer_begin, c.answer_end - c.answer_begin));
    if (c.verified) {
      out += QStringLiteral("<a href=\"%1\">%2</a>").arg(href, marker);
    } else {
      QString why = c.reason;
      if (c.found_on_page > 0) why += tr("; the quote is on page %1").arg(c.found_on_page);
      out += QStringLiteral(
                 "<a href=\"%1\" style=\"color:%2\">⚠ %3</a>"
                 "<span style=\"color:%2; font-size:small\"> (%4)</span>")
                 .arg(href, QLatin1String(kWarnColor), marker,
                      tr("unverified: %1").arg(why).toHtmlEscaped());
    }
    pos = c.answer_end;
  }
  out += html_text(e.text.mid(pos));
  return out;
}

QString ChatPanel::entryHtml(int index, const Entry& e) const {
  switch (e.kind) {
    case Entry::User:
      return QStringLiteral(
                 "<p style=\"margin-top:12px; white-space:pre-wrap\"><b>%1</b><br>%2</p>")
          .arg(tr("You"), html_text(e.text));
    case Entry::Assistant: {
      QString header = QStringLiteral("<b>%1</b>").arg(e.doc_title.toHtmlEscaped());
      if (!e.header.isEmpty()) header += QStringLiteral(" · ") + e.header.toHtmlEscaped();
      if (e.stopped)
        header += QStringLiteral(" · <span style=\"color:%1\"><b>%2</b></span>")
                      .arg(QLatin1String(kWarnColor), tr("stopped"));
      if (!e.streaming)
        header += QStringLiteral(" · <a href=\"copy:%1\">%2</a>").arg(index).arg(tr("Copy"));
      if (continueRequest(index, nullptr))
        header += QStringLiteral(" · <a href=\"continue:%1\"><b>%2</b></a>")
                      .arg(index)
                      .arg(tr("Continue"));
      // A streamed answer's paragraph must exist even while empty (pieces are appended to the
      // document's last block): a zero-width space holds it.
      const QString body =
          e.streaming ? QStringLiteral("&#8203;") + html_text(e.text) : answerHtml(index, e);
      return QStringLiteral(
                 "<p style=\"color:gray; font-size:small; margin-top:6px\">%1</p>"
                 "<p style=\"white-space:pre-wrap\">%2</p>")
          .arg(header, body);
    }
    case Entry::Note:
      return QStringLiteral("<p style=\"color:gray; font-size:small\">%1%2</p>")
          .arg(html_text(e.text), e.parts_doc > 0 ? partsNoteLink(e.parts_doc) : QString());
    case Entry::Error:
      return QStringLiteral("<p style=\"color:%1\">⚠ %2</p>")
          .arg(QLatin1String(kWarnColor), html_text(e.text));
  }
  return {};
}

void ChatPanel::render() {
  QString html = helpHtml();
  if (model_ || !entries_.empty()) {
    const int n = static_cast<int>(entries_.size());
    const auto is_notice = [this](int i) {
      const Entry::Kind k = entries_[static_cast<size_t>(i)].kind;
      return k == Entry::Note || k == Entry::Error;
    };
    for (int i = 0; i < n;) {
      if (!is_notice(i)) {
        html += entryHtml(i, entries_[static_cast<size_t>(i)]);
        ++i;
        continue;
      }
      // A run of notices between questions and answers: repeats counted ("×3"), and all but
      // the last kShownNotices folded behind a link until it is clicked.
      struct Group {
        int first, count;
      };
      std::vector<Group> groups;
      const int run_start = i;
      for (; i < n && is_notice(i); ++i) {
        const Entry& e = entries_[static_cast<size_t>(i)];
        if (!groups.empty()) {
          const Entry& last = entries_[static_cast<size_t>(groups.back().first)];
          if (last.kind == e.kind && last.text == e.text) {
            ++groups.back().count;
            continue;
          }
        }
        groups.push_back({i, 1});
      }
      const int n_groups = static_cast<int>(groups.size());
      const int folded = unfolded_.contains(run_start) ? 0 : std::max(0, n_groups - kShownNotices);
      if (folded > 0)
        html +=
            QStringLiteral(
                "<p style=\"color:gray; font-size:small\"><a href=\"notices:%1\">%2</a></p>")
                .arg(run_start)
                .arg(folded == 1 ? tr("1 earlier notice") : tr("%1 earlier notices").arg(folded));
      for (int g = folded; g < n_groups; ++g) {
        Entry e = entries_[static_cast<size_t>(groups[g].first)];
        if (groups[g].count > 1) e.text += QStringLiteral(" ×%1").arg(groups[g].count);
        html += entryHtml(groups[g].first, e);
      }
    }
  }
  view_->setHtml(html);
  export_->setEnabled(!entries_.empty());
  view_->verticalScrollBar()->setValue(view_->verticalScrollBar()->maximum());
}

}  // namespace spw::ui
