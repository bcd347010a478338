// The Settings dialog (see settings_dialog.h).
#include "ui/settings_dialog.h"

#include <atomic>
#include <climits>
#include <filesystem>
#include <utility>
#include <vector>

#include <QApplication>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QList>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include "app/runtime/snapshot_budget.h"
#include "app/settings/app_settings.h"
#include "ui/theme.h"

namespace spw::ui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
std::string ss(const QString& s) { return s.toStdString(); }

// validate()'s messages name CLI options; the dialog names its own fields.
QString friendly_message(QString msg) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"--cache-type-k", "K precision"}, {"--cache-type-v", "V precision"},
      {"--kv-window", "KV window"},      {"--kv-sinks", "Attention sinks"},
      {"--kv-block", "KV block size"},   {"--host-budget", "Host RAM budget"},
      {"--disk-budget", "Disk budget"},  {"--spill-dir", "Spill folder"},
      {"--attention", "Attention"},      {"--device", "Device"},
      {"--ubatch", "Batch size"},        {"--template", "Chat template"},
  };
  for (const auto& [opt, name] : kNames) msg.replace(QLatin1String(opt), QLatin1String(name));
  if (msg.startsWith(QLatin1String("-c "))) msg = QStringLiteral("Context length ") + msg.mid(3);
  if (msg.startsWith(QLatin1String("-t "))) msg = QStringLiteral("Threads ") + msg.mid(3);
  return msg;
}

QString data_size(int64_t bytes) {
  return bytes > 0 ? QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeIecFormat) : QString();
}

QString join(const std::vector<std::string>& v) {
  QStringList l;
  for (const auto& s : v) l << qs(s);
  return l.join(QStringLiteral(", "));
}

QSpinBox* spin(const char* name, int min, int max, const QString& suffix = {}) {
  auto* s = new QSpinBox;
  s->setObjectName(QLatin1String(name));
  s->setRange(min, max);
  s->setSuffix(suffix);
  s->setAccelerated(true);
  return s;
}

QComboBox* combo(const char* name, std::initializer_list<std::pair<QString, QString>> items) {
  auto* c = new QComboBox;
  c->setObjectName(QLatin1String(name));
  for (const auto& [text, data] : items) c->addItem(text, data);
  return c;
}

void select_data(QComboBox* c, const QString& data) {
  const int i = c->findData(data);
  c->setCurrentIndex(i >= 0 ? i : 0);
}

QLineEdit* line(const char* name, const QString& placeholder) {
  auto* e = new QLineEdit;
  e->setObjectName(QLatin1String(name));
  e->setPlaceholderText(placeholder);
  e->setClearButtonEnabled(true);
  return e;
}

// The loader's message without the file path it starts with (the path is in the tooltip).
QString short_reason(const app::DiscoveredModel& m) {
  const QString msg = qs(m.error), prefix = qs(m.path) + QStringLiteral(": ");
  return msg.startsWith(prefix) ? msg.mid(prefix.size()) : msg;
}

int clamp_int(int64_t v) { return static_cast<int>(std::min<int64_t>(v, INT_MAX)); }

// A saved-KV budget smaller than this would remove every document's snapshot at each ask.
constexpr int64_t kMinSnapshotBudget = int64_t{16} << 20;

}  // namespace

struct SettingsDialog::Impl {
  SettingsDialogParams params;
  app::AppSettings settings;  // as loaded; fields the dialog does not show are kept
  std::vector<app::DiscoveredModel> models;

  // Model page
  QLabel* model_label = nullptr;
  QTableWidget* table = nullptr;
  QLabel* discovery_status = nullptr;
  QLabel* model_error = nullptr;
  QPushButton* rescan = nullptr;
  // Engine page
  QSpinBox* n_ctx = nullptr;
  QSpinBox* kv_window = nullptr;
  QSpinBox* kv_sinks = nullptr;
  QComboBox* kv_k = nullptr;
  QComboBox* kv_v = nullptr;
  QLineEdit* host_budget = nullptr;
  QLineEdit* disk_budget = nullptr;
  QLineEdit* spill_dir = nullptr;
  QSpinBox* threads = nullptr;
  QComboBox* device = nullptr;
  QComboBox* attention = nullptr;
  QSpinBox* topk = nullptr;
  // Folders & look
  QLineEdit* data_dir = nullptr;
  QLineEdit* cache_dir = nullptr;
  QLineEdit* snapshot_budget = nullptr;
  QLabel* snapshot_usage = nullptr;
  QComboBox* theme = nullptr;
  // Bottom
  QLabel* load_note = nullptr;
  QLabel* validation = nullptr;
  QDialogButtonBox* buttons = nullptr;

  // Worker threads (discovery, probes): cancelled and joined by the destructor.
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  QList<QThread*> workers;
  int discovery_seq = 0, probe_seq = 0;
  bool discovering = false, probing = false;
  bool filling_table = false;

  // The widgets' settings; `error` gets a budget parse error (the settings then keep the old
  // value for that field).
  app::AppSettings from_widgets(QString* error) const {
    app::AppSettings s = settings;
    app::EngineSettings& e = s.engine;
    e.n_ctx = n_ctx->value();
    // 0 is the spin box's "auto" (its special value text).
    (void)app::set_kv_window(
        e, kv_window->value() == 0 ? std::string("auto") : std::to_string(kv_window->value()));
    e.kv.n_sinks = kv_sinks->value();
    e.kv_type_k = ss(kv_k->currentData().toString());
    e.kv_type_v = ss(kv_v->currentData().toString());
    e.n_threads = threads->value();
    e.device = ss(device->currentData().toString());
    const QString att = attention->currentData().toString();
    (void)app::set_attention(
        e, att == QLatin1String("topk") ? "topk:" + std::to_string(topk->value()) : ss(att));
    if (auto b = app::parse_budget(ss(host_budget->text()), -1); b.ok())
      e.kv.host_budget = *b;
    else if (error && error->isEmpty())
      *error = QStringLiteral("Host RAM budget: ") + qs(b.error().message);
    if (auto b = app::parse_budget(ss(disk_budget->text()), 0); b.ok())
      e.kv.disk_budget = *b;
    else if (error && error->isEmpty())
      *error = QStringLiteral("Disk budget: ") + qs(b.error().message);
    s.data_dir = ss(data_dir->text().trimmed());
    s.cache_dir = ss(cache_dir->text().trimmed());
    e.kv.spill_dir = ss(spill_dir->text().trimmed());
    // The spill file goes to the cache folder unless a spill folder is set; the engine wants it
    // spelled out when there is a disk tier.
    if (e.kv.spill_dir.empty() && e.kv.disk_budget > 0)
      e.kv.spill_dir = !s.cache_dir.empty() ? s.cache_dir : ss(params.default_cache_dir);
    s.theme = ss(theme->currentData().toString());
    if (auto b = app::parse_budget(ss(snapshot_budget->text()), 0); !b.ok()) {
      if (error && error->isEmpty())
        *error = QStringLiteral("Saved KV budget: ") + qs(b.error().message);
    } else if (*b > 0 && *b < kMinSnapshotBudget) {
      if (error && error->isEmpty())
        *error = QStringLiteral(
                     "Saved KV budget: %1 is less than the smallest budget, %2 (leave "
                     "it empty for the default)")
                     .arg(qs(app::format_budget(*b, "", true)),
                          qs(app::format_budget(kMinSnapshotBudget, "", true)));
    } else {
      s.snapshot_budget = *b;
    }
    return s;
  }

  // The snapshot folder of the cache folder the widgets show (or its default).
  std::filesystem::path snapshot_dir() const {
    const QString cache = cache_dir->text().trimmed().isEmpty() ? params.default_cache_dir
                                                                : cache_dir->text().trimmed();
    return std::filesystem::path(ss(cache)) / "snapshots";
  }

  // Runs `work` on a new QThread and `done(result)` back on the GUI thread (if the dialog
  // still exists).
  template <typename R, typename Work, typename Done>
  void run_off_thread(SettingsDialog* self, Work work, Done done) {
    auto result = std::make_shared<R>();
    QThread* t = QThread::create([result, work = std::move(work)]() mutable { *result = work(); });
    workers.append(t);
    QObject::connect(
        t, &QThread::finished, self,
        [this, t, result, done = std::move(done)]() mutable {
          workers.removeOne(t);
          t->deleteLater();
          done(std::move(*result));
        },
        Qt::QueuedConnection);
    t->start();
  }
};

SettingsDialog::SettingsDialog(const SettingsDialogParams& params, QWidget* parent)
    : QDialog(parent), d_(std::make_unique<Impl>()) {
  d_->params = params;
  setWindowTitle(tr("Settings"));
  setObjectName(QStringLiteral("settingsDialog"));
  resize(960, 620);

  if (!params.settings_json.isEmpty()) {
    auto s = app::app_settings_from_json(ss(params.settings_json));
    if (s.ok()) d_->settings = std::move(*s);
    d_->load_note = new QLabel(
        s.ok() ? QString()
               : tr("The stored settings could not be read (%1); the defaults are shown.")
                     .arg(qs(s.error().message)));
  } else {
    d_->load_note = new QLabel;
  }
  d_->load_note->setObjectName(QStringLiteral("loadNote"));
  d_->load_note->setWordWrap(true);
  d_->load_note->setVisible(!d_->load_note->text().isEmpty());

  auto* tabs = new QTabWidget;
  auto* model_page = new QWidget;
  auto* engine_page = new QWidget;
  auto* folders_page = new QWidget;
  buildModelPage(model_page);
  buildEnginePage(engine_page);
  buildFoldersPage(folders_page);
  tabs->addTab(model_page, tr("Model"));
  tabs->addTab(engine_page, tr("Memory and speed"));
  tabs->addTab(folders_page, tr("Folders and look"));

  d_->validation = new QLabel;
  d_->validation->setObjectName(QStringLiteral("validationMessage"));
  d_->validation->setWordWrap(true);
  d_->validation->setStyleSheet(QStringLiteral("color: #d13438;"));
  d_->buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  d_->buttons->setObjectName(QStringLiteral("buttons"));
  connect(d_->buttons, &QDialogButtonBox::accepted, this, &SettingsDialog::accept);
  connect(d_->buttons, &QDialogButtonBox::rejected, this, &SettingsDialog::reject);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(d_->load_note);
  layout->addWidget(tabs, 1);
  layout->addWidget(d_->validation);
  layout->addWidget(d_->buttons);

  loadIntoWidgets();
  revalidate();
  if (params.discover_on_open) startDiscovery();
}

SettingsDialog::~SettingsDialog() {
  // Workers poll the flag per folder entry (discovery) or finish one probe; then they end.
  d_->cancel->store(true);
  for (QThread* t : d_->workers) {
    t->wait();
    delete t;
  }
}

void SettingsDialog::buildModelPage(QWidget* page) {
  d_->model_label = new QLabel;
  d_->model_label->setObjectName(QStringLiteral("modelInUse"));
  d_->model_label->setWordWrap(true);
  d_->model_label->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* t = new QTableWidget(0, kColCount);
  d_->table = t;
  t->setObjectName(QStringLiteral("modelTable"));
  t->setHorizontalHeaderLabels({tr("Model"), tr("Found in"), tr("Architecture"), tr("Size"),
                                tr("Quant types"), tr("Context"), tr("KV / token"), tr("Status")});
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->verticalHeader()->hide();
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setSectionResizeMode(kColName, QHeaderView::Stretch);
  t->horizontalHeader()->setSectionResizeMode(kColStatus, QHeaderView::Stretch);
  t->setAlternatingRowColors(true);
  connect(t, &QTableWidget::itemSelectionChanged, this, [this] {
    if (d_->filling_table) return;
    const auto rows = d_->table->selectionModel()->selectedRows();
    if (!rows.isEmpty()) selectModelRow(rows.first().row());
  });

  d_->discovery_status = new QLabel;
  d_->discovery_status->setObjectName(QStringLiteral("discoveryStatus"));
  d_->discovery_status->setWordWrap(true);
  d_->model_error = new QLabel;
  d_->model_error->setObjectName(QStringLiteral("modelError"));
  d_->model_error->setWordWrap(true);
  d_->model_error->setStyleSheet(QStringLiteral("color: #d13438;"));
  d_->model_error->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* choose = new QPushButton(tr("Choose file…"));
  choose->setObjectName(QStringLiteral("chooseModelFile"));
  connect(choose, &QPushButton::clicked, this, [this] {
    const QString start = modelPath().isEmpty() ? qs(d_->params.discovery_env.home) : modelPath();
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Choose a GGUF model"), start,
        tr("GGUF models (*.gguf);;All files (*)"));  // Ollama's blobs have no extension
    if (!path.isEmpty()) chooseModelFile(path);
  });
  d_->rescan = new QPushButton(tr("Search again"));
  d_->rescan->setObjectName(QStringLiteral("rescanModels"));
  connect(d_->rescan, &QPushButton::clicked, this, &SettingsDialog::startDiscovery);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(choose);
  buttons->addWidget(d_->rescan);
  buttons->addStretch(1);

  auto* layout = new QVBoxLayout(page);
  layout->addWidget(d_->model_label);
  layout->addWidget(t, 1);
  layout->addWidget(d_->discovery_status);
  layout->addWidget(d_->model_error);
  layout->addLayout(buttons);
}

void SettingsDialog::buildEnginePage(QWidget* page) {
  Impl& d = *d_;
  d.n_ctx = spin("contextLength", 0, INT_MAX, tr(" tokens"));
  d.n_ctx->setSingleStep(1024);
  d.n_ctx->setSpecialValueText(tr("the model's trained context"));
  d.kv_window = spin("kvWindow", 0, INT_MAX, tr(" tokens"));
  d.kv_window->setSingleStep(256);
  d.kv_window->setSpecialValueText(tr("auto"));  // 0: 4096 tokens in RAM, on a GPU what fits
  d.kv_window->setToolTip(
      tr("Recent tokens kept in the KV window; auto: 4096 in RAM, on a GPU the whole context "
         "or as much as fits"));
  d.kv_sinks = spin("kvSinks", 0, INT_MAX, tr(" tokens"));
  const std::initializer_list<std::pair<QString, QString>> kv_types = {
      {tr("f32 (exact, 4 bytes)"), QStringLiteral("f32")},
      {tr("f16 (default, 2 bytes)"), QStringLiteral("f16")},
      {tr("q8_0 (about 1 byte; head size a multiple of 32)"), QStringLiteral("q8_0")}};
  d.kv_k = combo("kvTypeK", kv_types);
  d.kv_v = combo("kvTypeV", kv_types);
  d.host_budget = line("hostBudget", tr("no limit"));
  d.host_budget->setToolTip(tr("RAM for KV blocks spilled from the window, e.g. 8G or 512M"));
  d.disk_budget = line("diskBudget", tr("none (no disk tier)"));
  d.disk_budget->setToolTip(tr("Disk space for KV blocks spilled past the RAM budget, e.g. 64G"));
  d.spill_dir = line("spillDir", tr("the cache folder"));
  d.threads = spin("threads", 0, 1024);
  d.threads->setSpecialValueText(tr("all (%1)").arg(QThread::idealThreadCount()));
  d.device =
      combo("device", {{tr("Automatic: the GPU when usable, else the CPU"), QStringLiteral("auto")},
                       {tr("CPU"), QStringLiteral("cpu")},
                       {tr("CUDA GPU"), QStringLiteral("cuda")}});
  d.attention = combo(
      "attention",
      {{tr("Exact (default)"), QStringLiteral("exact")},
       {tr("Streaming: sinks and window only (approximate)"), QStringLiteral("streaming")},
       {tr("Top-k: the most relevant spilled blocks (approximate)"), QStringLiteral("topk")}});
  d.topk = spin("topkBlocks", 1, 1 << 20, tr(" blocks"));
  d.topk->setValue(8);

  auto* attention_row = new QHBoxLayout;
  attention_row->addWidget(d.attention, 1);
  attention_row->addWidget(d.topk);

  auto* form = new QFormLayout(page);
  form->addRow(tr("Context length"), d.n_ctx);
  form->addRow(tr("KV window"), d.kv_window);
  form->addRow(tr("Attention sinks"), d.kv_sinks);
  form->addRow(tr("K precision"), d.kv_k);
  form->addRow(tr("V precision"), d.kv_v);
  form->addRow(tr("Host RAM budget"), d.host_budget);
  form->addRow(tr("Disk budget"), d.disk_budget);
  form->addRow(tr("Spill folder"), d.spill_dir);
  form->addRow(tr("Threads"), d.threads);
  form->addRow(tr("Device"), d.device);
  form->addRow(tr("Attention"), attention_row);
  auto* note = new QLabel(
      tr("The window keeps the first sink tokens and the most recent tokens on the device; older "
         "KV blocks spill to RAM up to its budget, then to disk. Exact attention reads every "
         "block; the approximate modes are faster on very long documents."));
  note->setWordWrap(true);
  form->addRow(note);

  for (QSpinBox* s : {d.n_ctx, d.kv_window, d.kv_sinks, d.threads, d.topk})
    connect(s, &QSpinBox::valueChanged, this, &SettingsDialog::revalidate);
  for (QComboBox* c : {d.kv_k, d.kv_v, d.device, d.attention})
    connect(c, &QComboBox::currentIndexChanged, this, &SettingsDialog::revalidate);
  for (QLineEdit* e : {d.host_budget, d.disk_budget, d.spill_dir})
    connect(e, &QLineEdit::textChanged, this, &SettingsDialog::revalidate);
}

void SettingsDialog::buildFoldersPage(QWidget* page) {
  Impl& d = *d_;
  d.data_dir = line("dataDir", d.params.default_data_dir);
  d.cache_dir = line("cacheDir", d.params.default_cache_dir);
  d.theme = combo("theme", {{tr("System"), QStringLiteral("system")},
                            {tr("Light"), QStringLiteral("light")},
                            {tr("Dark"), QStringLiteral("dark")}});
  auto folder_row = [this](QLineEdit* e, const QString& title) {
    auto* row = new QHBoxLayout;
    auto* browse = new QPushButton(tr("Browse…"));
    connect(browse, &QPushButton::clicked, this, [this, e, title] {
      const QString start = e->text().isEmpty() ? e->placeholderText() : e->text();
      const QString dir = QFileDialog::getExistingDirectory(this, title, start);
      if (!dir.isEmpty()) e->setText(dir);
    });
    row->addWidget(e, 1);
    row->addWidget(browse);
    return row;
  };
  auto* form = new QFormLayout(page);
  form->addRow(tr("Data folder"), folder_row(d.data_dir, tr("Data folder")));
  form->addRow(tr("Cache folder"), folder_row(d.cache_dir, tr("Cache folder")));
  // The saved KV of documents (app/runtime/snapshot_budget.h): its budget and what it takes.
  d.snapshot_budget = line(
      "snapshotBudget",
      tr("default: %1")
          .arg(qs(app::format_budget(app::default_snapshot_budget(d.snapshot_dir()), "", true))));
  d.snapshot_budget->setToolTip(
      tr("Disk space for the saved KV of documents (a second question on a document starts "
         "from it), e.g. 8G or 512M; the least recently used files are removed first. Empty: "
         "4 GiB, at most a tenth of the free space."));
  d.snapshot_usage = new QLabel;
  d.snapshot_usage->setObjectName(QStringLiteral("snapshotUsage"));
  auto* budget_box = new QVBoxLayout;
  budget_box->setSpacing(2);
  budget_box->addWidget(d.snapshot_budget);
  budget_box->addWidget(d.snapshot_usage);
  form->addRow(tr("Saved KV budget"), budget_box);
  auto* note = new QLabel(
      tr("The data folder holds the library and job results; the cache folder holds saved KV "
         "and spill files. Empty fields use the defaults shown. Folder changes take effect the "
         "next time Spillway starts."));
  note->setWordWrap(true);
  form->addRow(note);
  form->addRow(tr("Theme"), d.theme);
  for (QLineEdit* e : {d.data_dir, d.cache_dir, d.snapshot_budget})
    connect(e, &QLineEdit::textChanged, this, &SettingsDialog::revalidate);
  connect(d.theme, &QComboBox::currentIndexChanged, this, &SettingsDialog::revalidate);
}

void SettingsDialog::loadIntoWidgets() {
  Impl& d = *d_;
  const app::AppSettings& s = d.settings;
  const app::EngineSettings& e = s.engine;
  d.n_ctx->setValue(clamp_int(e.n_ctx));
  d.kv_window->setValue(e.kv.window_tokens ? clamp_int(*e.kv.window_tokens) : 0);
  d.kv_sinks->setValue(clamp_int(e.kv.n_sinks));
  select_data(d.kv_k, qs(e.kv_type_k));
  select_data(d.kv_v, qs(e.kv_type_v));
  d.host_budget->setText(qs(app::format_budget(e.kv.host_budget, "", false)));
  d.disk_budget->setText(qs(app::format_budget(e.kv.disk_budget, "", true)));
  d.spill_dir->setText(qs(e.kv.spill_dir));
  d.threads->setValue(e.n_threads);
  select_data(d.device, qs(e.device));
  const QString att = qs(app::attention_text(e));
  if (att.startsWith(QLatin1String("topk:"))) {
    select_data(d.attention, QStringLiteral("topk"));
    d.topk->setValue(att.mid(5).toInt());
  } else {
    select_data(d.attention, att);
  }
  d.data_dir->setText(qs(s.data_dir));
  d.cache_dir->setText(qs(s.cache_dir));
  d.snapshot_budget->setText(qs(app::format_budget(s.snapshot_budget, "", true)));
  select_data(d.theme, qs(s.theme));
  setModel(qs(e.model_path), QString());
}

void SettingsDialog::revalidate() {
  Impl& d = *d_;
  if (d.validation == nullptr) return;  // still building
  d.topk->setEnabled(d.attention->currentData().toString() == QLatin1String("topk"));
  QString error;
  const app::AppSettings s = d.from_widgets(&error);
  if (error.isEmpty()) {
    if (const Status st = app::validate(s); !st.ok())
      error = friendly_message(qs(st.error().message));
  }
  d.validation->setText(error);
  d.validation->setVisible(!error.isEmpty());
  d.buttons->button(QDialogButtonBox::Ok)->setEnabled(error.isEmpty());
  // What the saved KV takes now, against the budget typed (or the default).
  const std::filesystem::path dir = d.snapshot_dir();
  d.snapshot_usage->setText(qs(app::snapshot_usage_text(
      app::snapshot_usage(dir), app::effective_snapshot_budget(s.snapshot_budget, dir))));
}

QString SettingsDialog::currentJson() const {
  return qs(app::app_settings_to_json(d_->from_widgets(nullptr)));
}

QString SettingsDialog::modelPath() const { return qs(d_->settings.engine.model_path); }
QString SettingsDialog::validationMessage() const { return d_->validation->text(); }
QString SettingsDialog::modelError() const { return d_->model_error->text(); }
QTableWidget* SettingsDialog::modelTable() const { return d_->table; }
bool SettingsDialog::busy() const { return d_->discovering || d_->probing; }

void SettingsDialog::startDiscovery() {
  Impl& d = *d_;
  if (d.discovering) return;
  d.discovering = true;
  d.rescan->setEnabled(false);
  d.discovery_status->setText(
      tr("Searching the folders of llama.cpp, LM Studio, Ollama, GPT4All "
         "and the Hugging Face cache…"));
  const int seq = ++d.discovery_seq;
  const app::DiscoveryEnv env = d.params.discovery_env;
  const app::DiscoveryLimits limits = d.params.discovery_limits;
  auto cancel = d.cancel;
  d.run_off_thread<app::DiscoveryResult>(
      this,
      [env, limits, cancel] {
        return app::discover_models(env, limits, [cancel] { return cancel->load(); });
      },
      [this, seq](app::DiscoveryResult r) {
        if (seq != d_->discovery_seq) return;
        d_->discovering = false;
        d_->rescan->setEnabled(true);
        d_->models = std::move(r.models);
        QStringList where;
        for (const auto& root : r.searched) where << qs(root.dir);
        int n_ok = 0;
        for (const auto& m : d_->models) n_ok += m.supported ? 1 : 0;
        QString status =
            d_->models.empty()
                ? tr("No GGUF files found. Spillway looks in ~/.cache/llama.cpp, "
                     "~/.lmstudio/models, "
                     "~/.ollama/models, ~/.local/share/nomic.ai/GPT4All and the Hugging Face "
                     "cache; use “Choose file…” for a model elsewhere.")
            : d_->models.size() == 1
                ? tr("1 GGUF file found, %1 usable.").arg(n_ok)
                : tr("%1 GGUF files found, %2 usable.").arg(d_->models.size()).arg(n_ok);
        if (!where.isEmpty())
          status += QLatin1Char(' ') + tr("Searched: %1.").arg(where.join(", "));
        for (const auto& n : r.notes) status += QLatin1Char('\n') + qs(n);
        d_->discovery_status->setText(status);
        showDiscovery();
        emit discoveryFinished(static_cast<int>(d_->models.size()));
      });
}

void SettingsDialog::showDiscovery() {
  Impl& d = *d_;
  d.filling_table = true;
  QTableWidget* t = d.table;
  t->clearContents();
  t->setRowCount(static_cast<int>(d.models.size()));
  const QColor greyed = palette().color(QPalette::Disabled, QPalette::Text);
  int current_row = -1;
  for (int row = 0; row < static_cast<int>(d.models.size()); ++row) {
    const app::DiscoveredModel& m = d.models[row];
    const bool in_use = !modelPath().isEmpty() && qs(m.path) == modelPath();
    if (in_use) current_row = row;
    const QString status = !m.supported ? tr("unsupported: %1").arg(short_reason(m))
                                        : (in_use ? tr("in use") : tr("usable"));
    const QStringList cells = {
        qs(m.display_name),
        qs(std::string(app::model_source_name(m.source))),
        qs(m.architecture),
        data_size(m.file_bytes),
        join(m.tensor_types),
        m.n_ctx_train > 0 ? QLocale().toString(qlonglong(m.n_ctx_train)) : QString(),
        data_size(m.kv_bytes_per_token_f16),
        status};
    for (int col = 0; col < kColCount; ++col) {
      auto* item = new QTableWidgetItem(cells[col]);
      item->setToolTip(m.supported ? qs(m.path) : qs(m.path) + QLatin1Char('\n') + qs(m.error));
      if (!m.supported) item->setForeground(greyed);
      if (col == kColSize || col == kColContext || col == kColKv)
        item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      t->setItem(row, col, item);
    }
  }
  if (current_row >= 0) t->selectRow(current_row);
  d.filling_table = false;
}

void SettingsDialog::selectModelRow(int row) {
  Impl& d = *d_;
  if (row < 0 || row >= static_cast<int>(d.models.size())) return;
  const app::DiscoveredModel& m = d.models[row];
  if (!m.supported) {
    d.model_error->setText(tr("Cannot use %1: %2").arg(qs(m.display_name), qs(m.error)));
    showDiscovery();  // the selection goes back to the model in use
    return;
  }
  d.model_error->clear();
  setModel(qs(m.path), qs(m.display_name));
  showDiscovery();
}

void SettingsDialog::chooseModelFile(const QString& path) {
  Impl& d = *d_;
  d.probing = true;
  d.model_error->setText(tr("Reading %1…").arg(path));
  const int seq = ++d.probe_seq;
  const std::string p = ss(path);
  d.run_off_thread<app::DiscoveredModel>(
      this, [p] { return app::describe_model_file(p); },
      [this, seq](app::DiscoveredModel m) {
        if (seq != d_->probe_seq) return;
        d_->probing = false;
        onProbed(m);
      });
}

void SettingsDialog::onProbed(const app::DiscoveredModel& m) {
  Impl& d = *d_;
  if (!m.supported) {
    d.model_error->setText(tr("Cannot use %1: %2").arg(qs(m.path), qs(m.error)));
    emit modelProbed(qs(m.path), false);
    return;
  }
  d.model_error->clear();
  // A chosen file joins the list (once) so its details are shown.
  bool listed = false;
  for (const auto& x : d.models) listed = listed || x.path == m.path;
  if (!listed) d.models.push_back(m);
  setModel(qs(m.path), qs(m.display_name));
  showDiscovery();
  emit modelProbed(qs(m.path), true);
}

void SettingsDialog::setModel(const QString& path, const QString& label) {
  d_->settings.engine.model_path = ss(path);
  if (path.isEmpty()) {
    d_->model_label->setText(
        tr("No model chosen. Pick one of the GGUF files below, or “Choose file…”. Documents can "
           "be added and read without a model."));
  } else {
    d_->model_label->setText(
        tr("Model in use: %1").arg(label.isEmpty() ? path : label + " — " + path));
  }
  revalidate();
}

void SettingsDialog::accept() {
  QString error;
  const app::AppSettings s = d_->from_widgets(&error);
  if (error.isEmpty()) {
    if (const Status st = app::validate(s); !st.ok())
      error = friendly_message(qs(st.error().message));
  }
  if (!error.isEmpty()) {
    d_->validation->setText(error);
    d_->validation->setVisible(true);
    return;
  }
  if (d_->params.apply_theme_on_ok) {
    if (auto* app = qobject_cast<QApplication*>(QCoreApplication::instance()))
      apply_theme(*app, qs(s.theme));
  }
  emit settingsChanged(qs(app::app_settings_to_json(s)));
  QDialog::accept();
}

}  // namespace spw::ui
