// The main window. For now a placeholder centre that says what Spillway is; the library (left),
// page viewer (centre), chat (right) and the dashboard/jobs docks of DESIGN.md §6 come later.
#pragma once

#include <QMainWindow>
#include <QString>

class QLabel;

namespace spw::ui {

/// What the window shows that comes from outside the UI (no engine types here: the UI talks to
/// app/ only).
struct MainWindowParams {
  QString version;   // "0.1.0"
  QString data_dir;  // shown in the status bar
};

class MainWindow final : public QMainWindow {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(MainWindow)

 public:
  static constexpr int kDefaultWidth = 1280;
  static constexpr int kDefaultHeight = 800;

  explicit MainWindow(const MainWindowParams& params, QWidget* parent = nullptr);
  ~MainWindow() override = default;

  /// Replaces the status bar's permanent line (model, backend, data folder).
  void setStatusLine(const QString& text);

 private:
  QLabel* status_label_ = nullptr;
};

}  // namespace spw::ui
