// Settings: the model (GGUF files discovered in the usual folders, or one chosen by hand), the
// engine's memory and speed settings, the data and cache folders, the saved-KV budget (a size
// such as 8G; empty: the default; with what the saved KV takes now) and the theme.
//
// The dialog edits a copy of the settings given as JSON (app/settings/app_settings.h) and, on
// OK, emits settingsChanged() with the new JSON and applies the theme; the window that opened it
// stores and uses them. Every change is checked with app::validate(); the message is shown
// under the pages (with the dialog's field names) and OK stays disabled until it is fixed.
//
// Model discovery and probing a chosen file run on a worker QThread (nothing blocks the
// window); closing the dialog cancels a discovery in progress and waits for it (it polls the
// cancel flag per folder entry). Unsupported files stay listed, greyed, with the loader's
// message; choosing one is refused with that message and the model in use is kept.
#pragma once

#include <memory>

#include <QDialog>
#include <QString>

#include "app/models/discovery.h"

class QTableWidget;

namespace spw::ui {

struct SettingsDialogParams {
  QString settings_json;      // the current settings; empty: the defaults
  QString default_data_dir;   // shown when the data folder is left empty
  QString default_cache_dir;  // shown when the cache folder is left empty (and the spill
                              // folder's default when a disk budget is set)
  app::DiscoveryEnv discovery_env = app::DiscoveryEnv::from_process();
  app::DiscoveryLimits discovery_limits{};
  bool discover_on_open = true;   // start discovery in the constructor
  bool apply_theme_on_ok = true;  // tests turn it off to keep the application's palette
};

class SettingsDialog final : public QDialog {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(SettingsDialog)

 public:
  /// Table columns of the Model page.
  enum Column {
    kColName,
    kColSource,
    kColArch,
    kColSize,
    kColQuant,
    kColContext,
    kColKv,
    kColStatus,
    kColCount
  };

  explicit SettingsDialog(const SettingsDialogParams& params, QWidget* parent = nullptr);
  ~SettingsDialog() override;

  /// The settings as the widgets show them (JSON), valid or not.
  QString currentJson() const;
  /// The model file in use ("" when none).
  QString modelPath() const;
  /// The validation message shown ("" when the settings are valid).
  QString validationMessage() const;
  /// The Model page's message about the last refused file ("" when none).
  QString modelError() const;
  /// The discovered-models table (one row per file).
  QTableWidget* modelTable() const;
  /// Whether a discovery or a probe is running.
  bool busy() const;

 public slots:
  /// Searches the usual folders again (off the GUI thread); discoveryFinished() when done.
  void startDiscovery();
  /// Probes `path` off the GUI thread and uses it when the loader accepts it; otherwise shows
  /// the loader's message and keeps the model in use. modelProbed() when done.
  void chooseModelFile(const QString& path);
  /// Uses the model of table row `row` (refused with its message when unsupported).
  void selectModelRow(int row);
  void accept() override;

 signals:
  /// On OK: the new settings (app_settings_to_json).
  void settingsChanged(const QString& settings_json);
  void discoveryFinished(int n_models);
  void modelProbed(const QString& path, bool accepted);

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;

  void buildModelPage(QWidget* page);
  void buildEnginePage(QWidget* page);
  void buildFoldersPage(QWidget* page);
  void loadIntoWidgets();
  void revalidate();
  void showDiscovery();
  void setModel(const QString& path, const QString& label);
  void onProbed(const app::DiscoveredModel& m);
};

}  // namespace spw::ui
