// Wires the desktop app together: the engine worker (app/worker/engine_worker.h), the chat,
// the memory dashboard, the jobs dock and Settings, into the main window. main.cpp makes one
// after the window; tests make one the same way.
//
// Settings live in the library (app/settings/app_settings.h); --model replaces the stored
// model and is stored as the model in use once it loads. The saved-KV budget goes with every
// question the chat asks (AskRequest::snapshot_budget); the jobs runner reads it from the
// library at each prompt. The backend line of the status bar
// says where the engine runs ("CUDA: ..." or "CPU — <why not CUDA>").
#pragma once

#include <QObject>
#include <QString>

namespace spw::app {
class EngineWorker;
}

namespace spw::ui {

class MainWindow;
class ChatPanel;
class DashboardDock;
class JobsDock;

struct AppControllerParams {
  QString data_dir;      // holds library.sqlite3
  QString cache_dir;     // saved document KV (<cache_dir>/snapshots), the default spill folder
  QString model_path;    // --model: used instead of the stored model; empty: the stored one
  bool run_jobs = true;  // the jobs dock runs due jobs while the window is open
};

class AppController final : public QObject {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(AppController)

 public:
  AppController(MainWindow& window, const AppControllerParams& params);
  /// Stops a running answer and the jobs runner (joins their threads).
  ~AppController() override;

  app::EngineWorker* worker() const { return worker_; }
  ChatPanel* chat() const { return chat_; }
  DashboardDock* dashboard() const { return dashboard_; }
  JobsDock* jobs() const { return jobs_; }
  /// Whether the settings name a model (a load was started: modelLoaded or modelFailed follows).
  bool modelRequested() const { return model_requested_; }
  /// The settings in use (app_settings_to_json).
  QString settingsJson() const { return settings_json_; }

 public slots:
  /// Opens Settings (window-modal); on OK the settings are stored and applied.
  void openSettings();
  /// Stores and applies settings given as JSON (what Settings' OK does): theme, and the model
  /// reloaded when an engine setting changed.
  void applySettings(const QString& settings_json);

 private:
  void loadModel();

  MainWindow& window_;
  AppControllerParams params_;
  QString settings_json_;
  QString loaded_engine_json_;
  bool model_requested_ = false;
  app::EngineWorker* worker_ = nullptr;
  ChatPanel* chat_ = nullptr;
  DashboardDock* dashboard_ = nullptr;
  JobsDock* jobs_ = nullptr;
};

}  // namespace spw::ui
