#include "ui/app_controller.h"

#include <ctime>
#include <filesystem>

#include <QApplication>
#include <QDockWidget>
#include <QFileInfo>
#include <QLocale>
#include <QMessageBox>
#include <QSettings>

#include "app/jobs/jobs.h"
#include "app/runtime/backend_status.h"
#include "app/settings/app_settings.h"
#include "app/store/library.h"
#include "app/worker/engine_worker.h"
#include "ui/chat_panel.h"
#include "ui/dashboard_dock.h"
#include "ui/jobs_dock.h"
#include "ui/main_window.h"
#include "ui/settings_dialog.h"
#include "ui/theme.h"

namespace spw::ui {

namespace {

QString fromStd(const std::string& s) { return QString::fromStdString(s); }

// The engine part of the settings as JSON, with the defaults a desktop run needs filled in:
// the spill folder in the cache folder.
QString engineJson(const app::AppSettings& s, const QString& cache_dir) {
  app::EngineSettings e = s.engine;
  if (e.kv.spill_dir.empty())
    e.kv.spill_dir = (std::filesystem::path(cache_dir.toStdString()) / "spill").string();
  return fromStd(app::engine_settings_to_json(e));
}

}  // namespace

AppController::AppController(MainWindow& window, const AppControllerParams& params)
    : QObject(&window), window_(window), params_(params) {
  // Settings: stored in the library; --model replaces the stored model for this run.
  app::AppSettings settings;
  if (app::Library* lib = window_.library()) {
    auto loaded = app::load_app_settings(*lib);
    if (loaded) {
      settings = *loaded;
    } else {
      window_.showNotice(tr("Settings could not be read (%1); using the defaults")
                             .arg(fromStd(loaded.error().message)));
    }
  }
  if (!params_.model_path.isEmpty()) settings.engine.model_path = params_.model_path.toStdString();
  settings_json_ = fromStd(app::app_settings_to_json(settings));
  if (settings.theme != "system") apply_theme(*qApp, fromStd(settings.theme));

  const QString db_file =
      fromStd(app::library_db_file(std::filesystem::path(params_.data_dir.toStdString())).string());
  app::EngineWorker::Params wp;
  wp.library_file = db_file;
  wp.snapshot_dir =
      params_.cache_dir.isEmpty()
          ? QString()
          : fromStd(
                (std::filesystem::path(params_.cache_dir.toStdString()) / "snapshots").string());
  worker_ = new app::EngineWorker(wp, this);

  chat_ = new ChatPanel();
  chat_->setWorker(worker_);
  QString error;
  if (!chat_->setLibraryFile(db_file, &error))
    window_.setActivity(tr("The chat cannot read the library: %1").arg(error));
  chat_->setSnapshotBudget(settings.snapshot_budget);
  window_.setChatWidget(chat_);

  dashboard_ = new DashboardDock();
  window_.setDashboardWidget(dashboard_);
  connect(worker_, &app::EngineWorker::telemetry, dashboard_, &DashboardDock::addSample);

  JobsDockParams jp;
  jp.db_file = std::filesystem::path(db_file.toStdString());
  jp.cache_dir = std::filesystem::path(params_.cache_dir.toStdString());
  jp.run_jobs = params_.run_jobs;
  jobs_ = new JobsDock(jp, &window_);
  // Batch jobs feed the dashboard's telemetry stream too.
  connect(jobs_, &JobsDock::runSample, worker_, &app::EngineWorker::addRunSample);
  // The window's Jobs dock holds the dock's contents; the JobsDock object keeps the logic.
  QWidget* jobs_contents = jobs_->widget();
  jobs_->setWidget(nullptr);
  jobs_->hide();
  window_.setJobsWidget(jobs_contents);

  connect(&window_, &MainWindow::documentSelectionChanged, chat_, &ChatPanel::setDocuments);
  connect(chat_, &ChatPanel::citationActivated, &window_, &MainWindow::showPage);
  connect(jobs_, &JobsDock::citationActivated, &window_, &MainWindow::showPage);
  connect(chat_, &ChatPanel::activityChanged, &window_, &MainWindow::setActivity);
  connect(&window_, &MainWindow::settingsRequested, this, &AppController::openSettings);
  connect(worker_, &app::EngineWorker::modelLoaded, this, [this](const app::ModelLoadedInfo& i) {
    // A model given with --model stays the model in use.
    if (!params_.model_path.isEmpty() && window_.library() != nullptr) {
      if (auto s = app::app_settings_from_json(settings_json_.toStdString()); s)
        (void)app::save_app_settings(*window_.library(), *s);
    }
    window_.setModelStatus(
        tr("%1 — %2 (%3, %4, context %5)")
            .arg(i.name, QFileInfo(i.path).fileName(), i.architecture,
                 QLocale().formattedDataSize(i.file_bytes, 1, QLocale::DataSizeTraditionalFormat),
                 QLocale().toString(i.n_ctx)));
    window_.setModelContext(i.n_ctx);
  });
  connect(worker_, &app::EngineWorker::modelFailed, this, [this](const QString& message) {
    window_.setModelStatus(tr("No model: %1").arg(message));
    window_.setModelContext(0);
  });

  // Interactive use (a question, documents added) keeps --when-idle jobs waiting.
  const auto interactive = [this] {
    if (app::Library* lib = window_.library())
      (void)app::mark_interactive(*lib, static_cast<int64_t>(std::time(nullptr)));
  };
  connect(worker_, &app::EngineWorker::questionStored, this, interactive);
  connect(&window_, &MainWindow::libraryChanged, this, interactive);
  // The library's Tokens column: counted for the model after each load and library change.
  connect(worker_, &app::EngineWorker::tokenCounts, &window_, &MainWindow::setTokenCounts);
  connect(&window_, &MainWindow::libraryChanged, worker_, &app::EngineWorker::countTokens);
  connect(&window_, &MainWindow::documentRenamed, chat_, &ChatPanel::refreshTitles);

  window_.setBackendStatus(fromStd(app::backend_status_line()));
  loadModel();
}

AppController::~AppController() {
  // The worker and jobs dock are children of this object / the window: their destructors stop
  // their threads. Stop the answer first so the chat's last partial answer is stored.
  if (worker_ != nullptr) worker_->stop();
}

void AppController::loadModel() {
  auto s = app::app_settings_from_json(settings_json_.toStdString());
  if (!s) return;
  model_requested_ = !s->engine.model_path.empty();
  if (s->engine.model_path.empty()) {
    window_.setModelStatus(tr("No model — Settings › Model picks a GGUF file"));
    jobs_->setCurrentModel(QString(), engineJson(*s, params_.cache_dir));
    return;
  }
  const QString json = engineJson(*s, params_.cache_dir);
  jobs_->setCurrentModel(fromStd(s->engine.model_path), json);
  if (json == loaded_engine_json_ && worker_->hasModel()) return;
  loaded_engine_json_ = json;
  window_.setModelStatus(tr("Loading %1…").arg(fromStd(s->engine.model_path)));
  worker_->loadModel(json);
}

void AppController::openSettings() {
  SettingsDialogParams p;
  p.settings_json = settings_json_;
  p.default_data_dir = params_.data_dir;
  p.default_cache_dir = params_.cache_dir;
  auto* dialog = new SettingsDialog(p, &window_);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &SettingsDialog::settingsChanged, this, &AppController::applySettings);
  dialog->open();
}

void AppController::applySettings(const QString& settings_json) {
  auto s = app::app_settings_from_json(settings_json.toStdString());
  if (!s) {
    QMessageBox::warning(&window_, tr("Settings"), fromStd(s.error().message));
    return;
  }
  if (app::Library* lib = window_.library()) {
    if (auto st = app::save_app_settings(*lib, *s); !st) {
      QMessageBox::warning(
          &window_, tr("Settings"),
          tr("The settings could not be stored: %1").arg(fromStd(st.error().message)));
    }
  }
  // The folders are read before the library opens (it lives in the data folder), so they are
  // kept outside it, in the user's Qt settings; they apply at the next start.
  const auto old = app::app_settings_from_json(settings_json_.toStdString());
  if (old && (old->data_dir != s->data_dir || old->cache_dir != s->cache_dir)) {
    QSettings folders;
    folders.setValue(QStringLiteral("data_dir"), fromStd(s->data_dir));
    folders.setValue(QStringLiteral("cache_dir"), fromStd(s->cache_dir));
    window_.showNotice(tr("The new folders apply at the next start"));
  }
  settings_json_ = fromStd(app::app_settings_to_json(*s));
  chat_->setSnapshotBudget(s->snapshot_budget);
  apply_theme(*qApp, fromStd(s->theme));
  loadModel();
}

}  // namespace spw::ui
