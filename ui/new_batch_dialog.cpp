// The "New batch…" dialog (see new_batch_dialog.h).
#include "ui/new_batch_dialog.h"

#include <algorithm>

#include <QButtonGroup>
#include <QComboBox>
#include <QDateTime>
#include <QDateTimeEdit>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QTimeEdit>
#include <QVBoxLayout>

namespace spw::ui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
std::string ss(const QString& s) { return s.trimmed().toStdString(); }

template <typename W>
W* named(W* w, const char* name) {
  w->setObjectName(QLatin1String(name));
  return w;
}

constexpr int kDocIdRole = Qt::UserRole + 1;

}  // namespace

struct NewBatchDialog::Impl {
  NewBatchDialogParams params;
  int64_t added_id = 0;

  QListWidget* documents = nullptr;
  QLineEdit* title = nullptr;
  QComboBox* task = nullptr;
  QFormLayout* form = nullptr;  // the task's option rows are shown one at a time
  QComboBox* summary_length = nullptr;
  QLineEdit* clauses = nullptr;
  QPlainTextEdit* prompt = nullptr;
  QLineEdit* model = nullptr;
  QLineEdit* endpoint = nullptr;
  QSpinBox* max_tokens = nullptr;
  QDoubleSpinBox* temperature = nullptr;
  QRadioButton* when_now = nullptr;
  QRadioButton* when_at = nullptr;
  QRadioButton* when_nightly = nullptr;
  QRadioButton* when_idle = nullptr;
  QDateTimeEdit* at = nullptr;
  QTimeEdit* nightly = nullptr;
  QSpinBox* idle_minutes = nullptr;
  QSpinBox* priority = nullptr;
  QLabel* error = nullptr;
};

NewBatchDialog::NewBatchDialog(const NewBatchDialogParams& params, QWidget* parent)
    : QDialog(parent), d_(std::make_unique<Impl>()) {
  Impl& d = *d_;
  d.params = params;
  setWindowTitle(tr("New batch"));
  setObjectName(QStringLiteral("newBatchDialog"));
  resize(720, 640);

  // Documents, checkable, with a select-all toggle.
  d.documents = named(new QListWidget, "documents");
  for (const BatchDocument& doc : params.documents) {
    auto* item = new QListWidgetItem(
        doc.n_pages > 0 ? (doc.n_pages == 1 ? tr("%1  (1 page)").arg(doc.title)
                                            : tr("%1  (%2 pages)").arg(doc.title).arg(doc.n_pages))
                        : doc.title);
    item->setData(kDocIdRole, QVariant::fromValue<qlonglong>(doc.id));
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    const bool pre = std::find(params.preselected.begin(), params.preselected.end(), doc.id) !=
                     params.preselected.end();
    item->setCheckState(pre ? Qt::Checked : Qt::Unchecked);
    d.documents->addItem(item);
  }
  auto* all = named(new QPushButton(tr("Select all")), "selectAll");
  auto* none = named(new QPushButton(tr("Select none")), "selectNone");
  auto set_all = [this](Qt::CheckState s) {
    for (int i = 0; i < d_->documents->count(); ++i) d_->documents->item(i)->setCheckState(s);
  };
  connect(all, &QPushButton::clicked, this, [set_all] { set_all(Qt::Checked); });
  connect(none, &QPushButton::clicked, this, [set_all] { set_all(Qt::Unchecked); });
  auto* doc_buttons = new QHBoxLayout;
  doc_buttons->addWidget(all);
  doc_buttons->addWidget(none);
  doc_buttons->addStretch(1);
  auto* docs_box = new QGroupBox(tr("Documents"));
  auto* docs_layout = new QVBoxLayout(docs_box);
  if (params.documents.empty())
    docs_layout->addWidget(new QLabel(tr("The library is empty: add PDFs first.")));
  docs_layout->addWidget(d.documents, 1);
  docs_layout->addLayout(doc_buttons);

  // Task and its options.
  d.task = named(new QComboBox, "task");
  d.task->addItem(tr("Summary"), QStringLiteral("summary"));
  d.task->addItem(tr("Clauses"), QStringLiteral("clauses"));
  d.task->addItem(tr("Custom prompt"), QStringLiteral("prompt"));
  d.summary_length = named(new QComboBox, "summaryLength");
  d.summary_length->addItem(tr("Short"), QStringLiteral("short"));
  d.summary_length->addItem(tr("Medium"), QStringLiteral("medium"));
  d.summary_length->addItem(tr("Long"), QStringLiteral("long"));
  d.summary_length->setCurrentIndex(1);
  QStringList defaults;
  for (const auto& c : app::default_clause_types()) defaults << qs(c);
  d.clauses = named(new QLineEdit(defaults.join(QStringLiteral(", "))), "clauses");
  d.clauses->setToolTip(tr("Clause types, separated by commas"));
  d.prompt = named(new QPlainTextEdit, "prompt");
  d.prompt->setPlaceholderText(tr("What to ask of every document"));
  d.prompt->setMaximumHeight(120);
  connect(d.task, &QComboBox::currentIndexChanged, this, &NewBatchDialog::updateTaskOptions);

  // Model and generation.
  d.model = named(new QLineEdit(params.model_path), "model");
  d.model->setPlaceholderText(tr("a GGUF file (or the model name with an endpoint)"));
  auto* choose = new QPushButton(tr("Choose…"));
  connect(choose, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Choose a GGUF model"), d_->model->text(),
                                     tr("GGUF models (*.gguf);;All files (*)"));
    if (!path.isEmpty()) d_->model->setText(path);
  });
  auto* model_row = new QHBoxLayout;
  model_row->addWidget(d.model, 1);
  model_row->addWidget(choose);
  d.endpoint = named(new QLineEdit, "endpoint");
  d.endpoint->setPlaceholderText(
      tr("optional: an OpenAI-compatible server, e.g. http://host:8000/v1"));
  d.endpoint->setToolTip(
      tr("The API key is read from SPILLWAY_API_KEY when the job runs; it is "
         "never stored."));
  d.max_tokens = named(new QSpinBox, "maxTokens");
  d.max_tokens->setRange(1, 1 << 20);
  d.max_tokens->setValue(256);
  d.max_tokens->setSuffix(tr(" tokens"));
  d.temperature = named(new QDoubleSpinBox, "temperature");
  d.temperature->setRange(0.0, 5.0);
  d.temperature->setSingleStep(0.1);
  d.temperature->setDecimals(2);
  d.temperature->setSpecialValueText(tr("0 (greedy)"));

  // Schedule.
  d.when_now = named(new QRadioButton(tr("Now")), "scheduleNow");
  d.when_at = named(new QRadioButton(tr("At")), "scheduleAt");
  d.when_nightly = named(new QRadioButton(tr("Nightly at")), "scheduleNightly");
  d.when_idle = named(new QRadioButton(tr("When Spillway has been idle for")), "scheduleIdle");
  d.when_now->setChecked(true);
  auto* group = new QButtonGroup(this);
  for (QRadioButton* b : {d.when_now, d.when_at, d.when_nightly, d.when_idle}) group->addButton(b);
  d.at = named(new QDateTimeEdit(QDateTime::currentDateTime().addSecs(3600)), "at");
  d.at->setCalendarPopup(true);
  d.at->setDisplayFormat(QStringLiteral("yyyy-MM-dd HH:mm"));
  d.nightly = named(new QTimeEdit(QTime(2, 0)), "nightly");
  d.nightly->setDisplayFormat(QStringLiteral("HH:mm"));
  d.idle_minutes = named(new QSpinBox, "idleMinutes");
  d.idle_minutes->setRange(0, 24 * 60);
  d.idle_minutes->setValue(15);
  d.idle_minutes->setSuffix(tr(" minutes"));
  auto* sched = new QGroupBox(tr("When"));
  auto* sched_layout = new QFormLayout(sched);
  sched_layout->addRow(d.when_now);
  sched_layout->addRow(d.when_at, d.at);
  sched_layout->addRow(d.when_nightly, d.nightly);
  sched_layout->addRow(d.when_idle, d.idle_minutes);
  auto enable_schedule = [this] {
    d_->at->setEnabled(d_->when_at->isChecked());
    d_->nightly->setEnabled(d_->when_nightly->isChecked());
    d_->idle_minutes->setEnabled(d_->when_idle->isChecked());
  };
  for (QRadioButton* b : {d.when_now, d.when_at, d.when_nightly, d.when_idle})
    connect(b, &QRadioButton::toggled, this, enable_schedule);
  enable_schedule();

  d.title = named(new QLineEdit, "title");
  d.title->setPlaceholderText(tr("optional"));
  d.priority = named(new QSpinBox, "priority");
  d.priority->setRange(-100, 100);
  d.priority->setToolTip(tr("Higher runs first"));

  auto* form = new QFormLayout;
  form->addRow(tr("Title"), d.title);
  form->addRow(tr("Task"), d.task);
  form->addRow(tr("Length"), d.summary_length);
  form->addRow(tr("Clause types"), d.clauses);
  form->addRow(tr("Prompt"), d.prompt);
  d.form = form;
  form->addRow(tr("Model"), model_row);
  form->addRow(tr("Endpoint"), d.endpoint);
  form->addRow(tr("Answer length"), d.max_tokens);
  form->addRow(tr("Temperature"), d.temperature);
  form->addRow(tr("Priority"), d.priority);

  d.error = named(new QLabel, "error");
  d.error->setWordWrap(true);
  d.error->setStyleSheet(QStringLiteral("color: #d13438;"));
  d.error->hide();
  auto* buttons =
      named(new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel), "buttons");
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Add to queue"));
  connect(buttons, &QDialogButtonBox::accepted, this, &NewBatchDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &NewBatchDialog::reject);

  auto* right = new QVBoxLayout;
  right->addLayout(form);
  right->addWidget(sched);
  right->addStretch(1);
  auto* columns = new QHBoxLayout;
  columns->addWidget(docs_box, 1);
  columns->addLayout(right, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(columns, 1);
  layout->addWidget(d.error);
  layout->addWidget(buttons);
  updateTaskOptions();
}

NewBatchDialog::~NewBatchDialog() = default;

void NewBatchDialog::updateTaskOptions() {
  const QString task = d_->task->currentData().toString();
  d_->form->setRowVisible(d_->summary_length, task == QLatin1String("summary"));
  d_->form->setRowVisible(d_->clauses, task == QLatin1String("clauses"));
  d_->form->setRowVisible(d_->prompt, task == QLatin1String("prompt"));
}

app::JobSpec NewBatchDialog::spec(QString* error) const {
  const Impl& d = *d_;
  app::JobSpec s;
  s.title = ss(d.title->text());
  const QString task = d.task->currentData().toString();
  s.task = task == QLatin1String("clauses")  ? app::JobTask::Clauses
           : task == QLatin1String("prompt") ? app::JobTask::Prompt
                                             : app::JobTask::Summary;
  if (s.task == app::JobTask::Summary)
    s.summary_length = ss(d.summary_length->currentData().toString());
  if (s.task == app::JobTask::Prompt) s.prompt = ss(d.prompt->toPlainText());
  if (s.task == app::JobTask::Clauses) {
    auto list = app::parse_clause_list(ss(d.clauses->text()));
    if (list.ok())
      s.clauses = std::move(*list);
    else if (error)
      *error = tr("Clause types: %1").arg(qs(list.error().message));
  }
  for (int i = 0; i < d.documents->count(); ++i) {
    const QListWidgetItem* item = d.documents->item(i);
    if (item->checkState() == Qt::Checked) s.doc_ids.push_back(item->data(kDocIdRole).toLongLong());
  }
  s.model_path = ss(d.model->text());
  s.engine_json = d.params.engine_json.toStdString();
  s.endpoint = ss(d.endpoint->text());
  s.n_predict = d.max_tokens->value();
  s.temp = static_cast<float>(d.temperature->value());
  s.priority = d.priority->value();
  if (d.when_at->isChecked()) {
    s.schedule.kind = app::ScheduleKind::At;
    s.schedule.at = d.at->dateTime().toSecsSinceEpoch();
  } else if (d.when_nightly->isChecked()) {
    s.schedule.kind = app::ScheduleKind::Nightly;
    s.schedule.nightly_minute = d.nightly->time().hour() * 60 + d.nightly->time().minute();
  } else if (d.when_idle->isChecked()) {
    s.schedule.kind = app::ScheduleKind::WhenIdle;
    s.schedule.idle_minutes = d.idle_minutes->value();
  }
  return s;
}

bool NewBatchDialog::setDocumentChecked(int64_t doc_id, bool checked) {
  for (int i = 0; i < d_->documents->count(); ++i) {
    QListWidgetItem* item = d_->documents->item(i);
    if (item->data(kDocIdRole).toLongLong() == doc_id) {
      item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
      return true;
    }
  }
  return false;
}

QString NewBatchDialog::errorText() const { return d_->error->text(); }
int64_t NewBatchDialog::addedJobId() const { return d_->added_id; }

void NewBatchDialog::accept() {
  Impl& d = *d_;
  QString error;
  const app::JobSpec s = spec(&error);
  if (error.isEmpty() && s.doc_ids.empty()) error = tr("Choose at least one document.");
  if (error.isEmpty() && d.params.store == nullptr) error = tr("The job queue is not open.");
  if (error.isEmpty()) {
    auto id = d.params.store->add(s);
    if (id.ok())
      d.added_id = *id;
    else
      error = qs(id.error().message);
  }
  d.error->setText(error);
  d.error->setVisible(!error.isEmpty());
  if (!error.isEmpty()) return;
  emit jobAdded(static_cast<qint64>(d.added_id));
  QDialog::accept();
}

}  // namespace spw::ui
