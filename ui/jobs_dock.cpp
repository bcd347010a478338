// The Jobs dock (see jobs_dock.h).
#include "ui/jobs_dock.h"

#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QThread>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include "app/store/library.h"
#include "ui/job_documents.h"
#include "ui/new_batch_dialog.h"
#include "ui/result_links.h"

namespace spw::ui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString duration_text(double s) {
  if (s < 0) return {};
  const auto secs = static_cast<int64_t>(s + 0.5);
  if (secs < 60) return QObject::tr("%1 s").arg(secs);
  if (secs < 3600) return QObject::tr("%1 min").arg((secs + 30) / 60);
  return QObject::tr("%1 h %2 min").arg(secs / 3600).arg((secs % 3600) / 60);
}

QString time_text(int64_t unix_s) {
  return QDateTime::fromSecsSinceEpoch(unix_s).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
}

QString schedule_text(const app::JobRecord& j) {
  const app::Schedule& s = j.spec.schedule;
  switch (s.kind) {
    case app::ScheduleKind::Now:
      return QObject::tr("now");
    case app::ScheduleKind::At:
      return QObject::tr("at %1").arg(time_text(j.due));
    case app::ScheduleKind::Nightly:
      return QObject::tr("nightly %1:%2 (next %3)")
          .arg(s.nightly_minute / 60, 2, 10, QLatin1Char('0'))
          .arg(s.nightly_minute % 60, 2, 10, QLatin1Char('0'))
          .arg(time_text(j.due));
    case app::ScheduleKind::WhenIdle:
      return QObject::tr("when idle %1 min").arg(s.idle_minutes);
  }
  return {};
}

QString title_of(const app::JobRecord& j) {
  if (!j.spec.title.empty()) return qs(j.spec.title);
  return (j.n_docs == 1 ? QObject::tr("%1 of 1 document")
                        : QObject::tr("%1 of %2 documents").arg(j.n_docs))
      .arg(app::job_task_name(j.spec.task));
}

}  // namespace

struct JobsDock::Impl {
  JobsDockParams params;
  std::unique_ptr<app::JobStore> store;
  std::vector<app::JobRecord> jobs;          // as last read
  std::map<int64_t, app::JobProgress> live;  // the runner's latest progress per running job
  QString model_path, engine_json;

  QTableWidget* table = nullptr;
  JobDocumentsTable* docs_table = nullptr;
  QLabel* docs_caption = nullptr;
  QLabel* error = nullptr;
  QLabel* info = nullptr;
  QPushButton* new_batch = nullptr;
  QPushButton* run_now = nullptr;
  QPushButton* pause = nullptr;
  QPushButton* cancel = nullptr;
  QPushButton* retry = nullptr;
  QPushButton* export_btn = nullptr;
  QPushButton* open_result = nullptr;
  QTimer* timer = nullptr;

  QThread* runner_thread = nullptr;
  std::atomic<bool> stop{false};
  std::atomic<bool> runner_active{false};

  const app::JobRecord* find(int64_t id) const {
    for (const auto& j : jobs)
      if (j.id == id) return &j;
    return nullptr;
  }
};

JobsDock::JobsDock(const JobsDockParams& params, QWidget* parent)
    : QDockWidget(tr("Jobs"), parent), d_(std::make_unique<Impl>()) {
  Impl& d = *d_;
  d.params = params;
  setObjectName(QStringLiteral("jobsDock"));

  auto* t = new QTableWidget(0, kColCount);
  d.table = t;
  t->setObjectName(QStringLiteral("jobsTable"));
  t->setHorizontalHeaderLabels({tr("Job"), tr("Title"), tr("Task"), tr("State"), tr("Documents"),
                                tr("Tokens/s"), tr("ETA"), tr("When"), tr("Reason")});
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->verticalHeader()->hide();
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setSectionResizeMode(kColTitle, QHeaderView::Stretch);
  t->horizontalHeader()->setStretchLastSection(true);
  connect(t, &QTableWidget::itemSelectionChanged, this, [this] {
    updateButtons();
    refreshDocuments();
  });
  connect(t, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    openResult(d_->table->item(row, kColId)->data(Qt::UserRole).toLongLong());
  });

  auto button = [this](const QString& text, const char* name) {
    auto* b = new QPushButton(text);
    b->setObjectName(QLatin1String(name));
    return b;
  };
  d.new_batch = button(tr("New batch…"), "newBatch");
  d.run_now = button(tr("Run now"), "runNow");
  d.pause = button(tr("Pause"), "pause");
  d.cancel = button(tr("Cancel"), "cancel");
  d.retry = button(tr("Retry failed"), "retryFailed");
  d.export_btn = button(tr("Export…"), "export");
  d.open_result = button(tr("Open result"), "openResult");
  connect(d.new_batch, &QPushButton::clicked, this, [this] { newBatch(); });
  connect(d.run_now, &QPushButton::clicked, this, [this] { runNow(selectedJob()); });
  connect(d.pause, &QPushButton::clicked, this, [this] {
    const app::JobRecord* j = d_->find(selectedJob());
    if (j) setPaused(j->id, !j->paused);
  });
  connect(d.cancel, &QPushButton::clicked, this, [this] { cancelJob(selectedJob()); });
  connect(d.retry, &QPushButton::clicked, this, [this] { retryFailed(selectedJob()); });
  connect(d.open_result, &QPushButton::clicked, this, [this] { openResult(selectedJob()); });
  connect(d.export_btn, &QPushButton::clicked, this, [this] {
    const qint64 id = selectedJob();
    if (id <= 0) return;
    const app::JobRecord* j = d_->find(id);
    const bool clauses = j && j->spec.task == app::JobTask::Clauses;
    QString filter;
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export job %1").arg(id), QStringLiteral("job-%1.md").arg(id),
        clauses ? tr("Markdown report (*.md);;CSV (*.csv)") : tr("Markdown report (*.md)"),
        &filter);
    if (path.isEmpty()) return;
    QString out = path;
    if (QFileInfo(out).suffix().isEmpty())
      out += filter.contains(QLatin1String("csv")) ? QStringLiteral(".csv") : QStringLiteral(".md");
    if (exportJob(id, out)) d_->info->setText(tr("Job %1 exported to %2").arg(id).arg(out));
  });

  // A tool bar, not a row of buttons: in a narrow dock the buttons that do not fit go behind
  // its » menu instead of widening the window (seven buttons are ~600 px).
  auto* buttons = new QToolBar;
  buttons->setObjectName(QStringLiteral("jobsButtons"));
  buttons->setFloatable(false);
  buttons->setMovable(false);
  for (QPushButton* b :
       {d.new_batch, d.run_now, d.pause, d.cancel, d.retry, d.export_btn, d.open_result})
    buttons->addWidget(b);

  d.error = new QLabel;
  d.error->setObjectName(QStringLiteral("jobsError"));
  d.error->setWordWrap(true);
  d.error->setStyleSheet(QStringLiteral("color: #d13438;"));
  d.error->hide();
  d.info = new QLabel;
  d.info->setObjectName(QStringLiteral("jobsInfo"));
  d.info->setWordWrap(true);

  // The documents of the job shown, under the jobs (the splitter lets either take the room).
  d.docs_caption = new QLabel;
  d.docs_caption->setObjectName(QStringLiteral("jobDocumentsCaption"));
  d.docs_table = new JobDocumentsTable;
  auto* docs = new QWidget;
  auto* docs_layout = new QVBoxLayout(docs);
  docs_layout->setContentsMargins(0, 0, 0, 0);
  docs_layout->setSpacing(2);
  docs_layout->addWidget(d.docs_caption);
  docs_layout->addWidget(d.docs_table, 1);
  auto* split = new QSplitter(Qt::Vertical);
  split->setObjectName(QStringLiteral("jobsSplit"));
  split->setChildrenCollapsible(false);
  // A header and a row each at least: the dock fits the bottom of a 500-px-high window.
  for (QTableWidget* table : {t, static_cast<QTableWidget*>(d.docs_table)})
    table->setMinimumHeight(table->horizontalHeader()->sizeHint().height() + 12);
  split->addWidget(t);
  split->addWidget(docs);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);

  auto* body = new QWidget;
  auto* layout = new QVBoxLayout(body);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(buttons);
  layout->addWidget(split, 1);
  layout->addWidget(d.error);
  layout->addWidget(d.info);
  setWidget(body);

  auto store = app::JobStore::open(params.db_file);
  if (store.ok()) {
    d.store = std::move(*store);
  } else {
    showError(tr("The job queue could not be opened: %1").arg(qs(store.error().message)));
    d.new_batch->setEnabled(false);
    updateButtons();  // no job to run, pause, cancel or retry
  }
  refresh();
  if (d.store && params.run_jobs) startRunner();
  if (params.refresh_ms > 0) {
    d.timer = new QTimer(this);
    connect(d.timer, &QTimer::timeout, this, &JobsDock::refresh);
    d.timer->start(params.refresh_ms);
  }
}

JobsDock::~JobsDock() {
  // The runner cancels its current prompt at the next token and returns; its queued callbacks
  // to this dock are dropped with it.
  d_->stop.store(true);
  if (d_->runner_thread != nullptr) {
    d_->runner_thread->wait();
    delete d_->runner_thread;
  }
}

void JobsDock::setCurrentModel(const QString& model_path, const QString& engine_json) {
  d_->model_path = model_path;
  d_->engine_json = engine_json;
}

QTableWidget* JobsDock::table() const { return d_->table; }
JobDocumentsTable* JobsDock::documentsTable() const { return d_->docs_table; }
QString JobsDock::documentsCaption() const { return d_->docs_caption->text(); }
QString JobsDock::errorText() const { return d_->error->text(); }
bool JobsDock::runnerActive() const { return d_->runner_active.load(); }

int JobsDock::rowOf(int64_t job_id) const {
  for (int r = 0; r < d_->table->rowCount(); ++r)
    if (d_->table->item(r, kColId)->data(Qt::UserRole).toLongLong() == job_id) return r;
  return -1;
}

qint64 JobsDock::selectedJob() const {
  const auto rows = d_->table->selectionModel()->selectedRows();
  if (rows.isEmpty()) return 0;
  return d_->table->item(rows.first().row(), kColId)->data(Qt::UserRole).toLongLong();
}

void JobsDock::showError(const QString& message) {
  d_->error->setText(message);
  d_->error->setVisible(!message.isEmpty());
}

bool JobsDock::check(const Status& st) {
  showError(st.ok() ? QString() : qs(st.error().message));
  refresh();
  return st.ok();
}

void JobsDock::refresh() {
  Impl& d = *d_;
  if (!d.store) return;
  auto jobs = d.store->jobs();
  if (!jobs.ok()) {
    showError(tr("The job queue could not be read: %1").arg(qs(jobs.error().message)));
    return;
  }
  d.jobs = std::move(*jobs);
  const qint64 selected = selectedJob();
  QTableWidget* t = d.table;
  const QSignalBlocker block(t);
  t->setRowCount(static_cast<int>(d.jobs.size()));
  int selected_row = -1;
  for (int row = 0; row < static_cast<int>(d.jobs.size()); ++row) {
    const app::JobRecord& j = d.jobs[row];
    if (j.id == selected) selected_row = row;
    double speed = j.tokens_per_s, eta = j.eta_s;
    if (j.state == app::JobState::Running) {
      if (auto p = d.live.find(j.id); p != d.live.end()) {
        if (p->second.tokens_per_s > 0) speed = p->second.tokens_per_s;
        if (p->second.eta_s >= 0) eta = p->second.eta_s;
      }
    } else {
      d.live.erase(j.id);
      if (j.state != app::JobState::Queued) eta = -1;
    }
    QString state = QString::fromLatin1(app::job_state_name(j.state));
    if (j.paused) state += tr(", paused");
    QString docs = QStringLiteral("%1/%2").arg(j.n_done).arg(j.n_docs);
    if (j.n_failed > 0) docs += tr(" (%1 failed)").arg(j.n_failed);
    QString when = schedule_text(j);
    if (j.finished > 0)
      when = tr("finished %1").arg(time_text(j.finished));
    else if (j.started > 0)
      when = tr("started %1").arg(time_text(j.started));
    const QStringList cells = {QString::number(j.id),
                               title_of(j),
                               QString::fromLatin1(app::job_task_name(j.spec.task)),
                               state,
                               docs,
                               speed > 0 ? QString::number(speed, 'f', 1) : QString(),
                               duration_text(eta),
                               when,
                               qs(j.reason)};
    for (int col = 0; col < kColCount; ++col) {
      QTableWidgetItem* item = t->item(row, col);
      if (item == nullptr) {
        item = new QTableWidgetItem;
        t->setItem(row, col, item);
      }
      item->setText(cells[col]);
      if (col == kColId) item->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(j.id));
      if (col == kColReason) item->setToolTip(qs(j.reason));
      if (col == kColTitle)
        item->setToolTip(
            tr("Model: %1%2")
                .arg(qs(j.spec.model_path),
                     j.spec.endpoint.empty() ? QString() : tr(" at %1").arg(qs(j.spec.endpoint))));
    }
  }
  if (selected_row >= 0) t->selectRow(selected_row);
  updateButtons();
  refreshDocuments();
  emit jobsChanged();
}

void JobsDock::refreshDocuments() {
  Impl& d = *d_;
  // The selected job, else the first running one (running jobs are listed first).
  const app::JobRecord* j = d.find(selectedJob());
  if (j == nullptr && !d.jobs.empty() && d.jobs.front().state == app::JobState::Running)
    j = &d.jobs.front();
  if (j == nullptr || !d.store) {
    d.docs_table->clearDocuments();
    d.docs_caption->setText(d.jobs.empty() ? tr("No jobs yet: New batch… adds one.")
                                           : tr("Select a job to see its documents."));
    return;
  }
  auto docs = d.store->documents(j->id);
  if (!docs.ok()) {
    showError(tr("The job's documents could not be read: %1").arg(qs(docs.error().message)));
    return;
  }
  const int64_t now_ms = d.params.now_ms ? d.params.now_ms() : QDateTime::currentMSecsSinceEpoch();
  d.docs_table->showDocuments(*j, *docs, now_ms);
  d.docs_caption->setText(tr("Documents of job %1: %2").arg(j->id).arg(title_of(*j)));
}

void JobsDock::updateButtons() {
  Impl& d = *d_;
  const app::JobRecord* j = d.find(selectedJob());
  const bool queued = j && j->state == app::JobState::Queued;
  const bool running = j && j->state == app::JobState::Running;
  const bool finished = j && !queued && !running;
  d.run_now->setEnabled(queued);
  d.pause->setEnabled(queued || running);
  d.pause->setText(j && j->paused ? tr("Resume") : tr("Pause"));
  d.cancel->setEnabled(queued || running);
  d.retry->setEnabled(j && !running &&
                      (j->n_failed > 0 || j->state == app::JobState::Failed ||
                       j->state == app::JobState::Cancelled));
  d.export_btn->setEnabled(j && (finished || j->n_done > 0));
  d.open_result->setEnabled(j && (finished || j->n_done > 0));
}

NewBatchDialog* JobsDock::newBatch(const std::vector<int64_t>& doc_ids) {
  Impl& d = *d_;
  if (!d.store) return nullptr;
  NewBatchDialogParams p;
  p.store = d.store.get();
  p.preselected = doc_ids;
  p.model_path = d.model_path;
  p.engine_json = d.engine_json;
  auto lib = app::Library::open(d.params.db_file);
  if (!lib.ok()) {
    showError(tr("The library could not be read: %1").arg(qs(lib.error().message)));
    return nullptr;
  }
  auto docs = (*lib)->documents();
  if (!docs.ok()) {
    showError(tr("The library could not be read: %1").arg(qs(docs.error().message)));
    return nullptr;
  }
  for (const auto& doc : *docs) p.documents.push_back({doc.id, qs(doc.shown_title()), doc.n_pages});
  auto* dlg = new NewBatchDialog(p, this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  connect(dlg, &NewBatchDialog::jobAdded, this, [this](qint64 id) {
    showError({});
    refresh();
    if (const int row = rowOf(id); row >= 0) d_->table->selectRow(row);
    emit jobStateChanged(id, QStringLiteral("queued"));
  });
  dlg->open();
  return dlg;
}

bool JobsDock::runNow(qint64 job_id) {
  if (!d_->store || job_id <= 0) return false;
  return check(d_->store->run_now(job_id));
}

bool JobsDock::setPaused(qint64 job_id, bool paused) {
  if (!d_->store || job_id <= 0) return false;
  return check(d_->store->set_paused(job_id, paused));
}

bool JobsDock::cancelJob(qint64 job_id) {
  if (!d_->store || job_id <= 0) return false;
  const bool ok = check(d_->store->cancel(job_id));
  if (ok) emit jobStateChanged(job_id, QStringLiteral("cancelled"));
  return ok;
}

bool JobsDock::retryFailed(qint64 job_id) {
  if (!d_->store || job_id <= 0) return false;
  auto n = d_->store->retry_failed(job_id);
  if (n.ok())
    d_->info->setText(tr("Job %1: %2 queued again.")
                          .arg(job_id)
                          .arg(*n == 1 ? tr("1 document") : tr("%1 documents").arg(*n)));
  return check(n.ok() ? Status::Ok() : Status(n.error()));
}

bool JobsDock::exportJob(qint64 job_id, const QString& path) {
  if (!d_->store || job_id <= 0) return false;
  const auto format = path.endsWith(QLatin1String(".csv"), Qt::CaseInsensitive)
                          ? app::ExportFormat::Csv
                          : app::ExportFormat::Markdown;
  return check(app::export_job(*d_->store, job_id, format, path.toStdString()));
}

QDialog* JobsDock::openResult(qint64 job_id) {
  Impl& d = *d_;
  if (!d.store || job_id <= 0) return nullptr;
  auto job = d.store->job(job_id);
  auto docs = d.store->documents(job_id);
  auto results = d.store->results(job_id);
  for (const Error* e : {job.ok() ? nullptr : &job.error(), docs.ok() ? nullptr : &docs.error(),
                         results.ok() ? nullptr : &results.error()}) {
    if (e != nullptr) {
      check(*e);
      return nullptr;
    }
  }

  auto* dlg = new QDialog(this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  dlg->setObjectName(QStringLiteral("jobResult"));
  dlg->setWindowTitle(tr("Job %1: %2").arg(job_id).arg(title_of(*job)));
  dlg->resize(820, 640);
  auto* view = new QTextBrowser;
  view->setObjectName(QStringLiteral("jobResultText"));
  view->setOpenExternalLinks(false);
  view->setOpenLinks(false);
  // Each citation opens its page with the quote highlighted, as in the chat.
  view->setMarkdown(linkCitations(app::export_markdown(*job, *docs, *results)));
  connect(view, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    qint64 doc = 0;
    int page = 0;
    QString quote;
    if (parsePageLink(url, &doc, &page, &quote)) emit citationActivated(doc, page, quote);
  });
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
  connect(buttons, &QDialogButtonBox::rejected, dlg, &QDialog::close);
  auto* layout = new QVBoxLayout(dlg);
  layout->addWidget(view, 1);
  layout->addWidget(buttons);
  dlg->show();
  return dlg;
}

void JobsDock::startRunner() {
  Impl& d = *d_;
  app::RunnerOptions o;
  o.db_file = d.params.db_file;
  o.cache_dir = d.params.cache_dir;
  o.watch_poll_ms = d.params.watch_poll_ms;
  o.generator = d.params.generator;
  o.stop = &d.stop;
  // Callbacks run on the runner's thread: each posts a call to the dock (dropped if the dock
  // is gone; the destructor joins the thread before the dock's QObject part dies).
  app::RunnerCallbacks cb;
  // The running job's session counters as the dashboard's run samples, as a chat run's are.
  auto sampler = std::make_shared<app::UsageSampler>(300, [this](const app::TelemetrySample& s) {
    QMetaObject::invokeMethod(
        this, [this, s] { emit runSample(s); }, Qt::QueuedConnection);
  });
  cb.usage = [sampler](const auto& usage) { sampler->add(usage); };
  cb.job_state = [this, sampler](int64_t id, app::JobState state, const std::string&) {
    if (state != app::JobState::Running) sampler->finish();  // the job's last state
    const QString name = QString::fromLatin1(app::job_state_name(state));
    QMetaObject::invokeMethod(
        this,
        [this, id, name] {
          refresh();
          emit jobStateChanged(id, name);
        },
        Qt::QueuedConnection);
  };
  cb.document = [this](int64_t, int64_t, app::DocState, const std::string&) {
    QMetaObject::invokeMethod(
        this, [this] { refresh(); }, Qt::QueuedConnection);
  };
  cb.progress = [this](const app::JobProgress& p) {
    QMetaObject::invokeMethod(
        this,
        [this, p] {
          d_->live[p.job_id] = p;
          const int row = rowOf(p.job_id);
          if (row < 0) return;
          if (p.tokens_per_s > 0)
            d_->table->item(row, kColSpeed)->setText(QString::number(p.tokens_per_s, 'f', 1));
          if (p.eta_s >= 0) d_->table->item(row, kColEta)->setText(duration_text(p.eta_s));
        },
        Qt::QueuedConnection);
  };
  cb.note = [this](const std::string& line) {
    const QString text = qs(line);
    QMetaObject::invokeMethod(
        this, [this, text] { d_->info->setText(text); }, Qt::QueuedConnection);
  };
  d.runner_thread = QThread::create([this, o = std::move(o), cb = std::move(cb)]() mutable {
    auto runner = app::Runner::create(std::move(o), std::move(cb));
    if (!runner.ok()) {
      const QString msg = qs(runner.error().message);
      QMetaObject::invokeMethod(
          this, [this, msg] { showError(tr("The job runner did not start: %1").arg(msg)); },
          Qt::QueuedConnection);
      return;
    }
    d_->runner_active.store(true);
    auto summary = (*runner)->run_watch();
    d_->runner_active.store(false);
    if (!summary.ok()) {
      const QString msg = qs(summary.error().message);
      QMetaObject::invokeMethod(
          this, [this, msg] { showError(tr("The job runner stopped: %1").arg(msg)); },
          Qt::QueuedConnection);
    }
  });
  d.runner_thread->setObjectName(QStringLiteral("jobs-runner"));
  d.runner_thread->start(QThread::LowPriority);
}

}  // namespace spw::ui
