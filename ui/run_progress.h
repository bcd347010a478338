// The progress of the answer being generated, under the chat: a bar with what is done of what
// ("Reading the document: 12,288/73,167 tokens (16%) · 48 t/s · ETA 21m07s", "Part 3 of 12
// (16%) · ETA 1h02m"), and the run's log (part lines, saved KV reused, fallbacks) collapsed under
// it behind a "Log" toggle, so the chat itself holds questions and answers only.
//
// Fed with app::ProgressEvent (EngineWorker::progress) and note lines; reset() when a run
// starts, finish() when it ends (the bar hides, the log stays until the next run). GUI thread.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include "app/runtime/progress.h"

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QToolButton;

namespace spw::ui {

class RunProgress final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(RunProgress)

 public:
  explicit RunProgress(QWidget* parent = nullptr);
  ~RunProgress() override;

  /// A run starts: the bar shows (busy until the first event), the log is cleared.
  void reset();
  /// Shows `e`: the bar's value is done/total in percent (busy when total is unknown), the
  /// label names the phase, counts, rate and ETA.
  void setProgress(const app::ProgressEvent& e);
  /// A line for the run's log (shown when the log is expanded).
  void addLogLine(const QString& line);
  /// The run ended: the bar hides; the log (and its toggle, when it has lines) stays.
  void finish();

  /// "Reading the document: 12,288/73,167 tokens (16%) · 48 t/s · ETA 21m07s" for `e`.
  static QString describe(const app::ProgressEvent& e);

  // Parts, for tests.
  QProgressBar* bar() const { return bar_; }
  QLabel* label() const { return label_; }
  QToolButton* logToggle() const { return log_toggle_; }
  QPlainTextEdit* log() const { return log_; }
  QStringList logLines() const { return lines_; }

 private:
  void updateToggle();

  QProgressBar* bar_ = nullptr;
  QLabel* label_ = nullptr;
  QToolButton* log_toggle_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  QStringList lines_;
};

}  // namespace spw::ui
