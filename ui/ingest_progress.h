// The ingest list under the library: one row per file being added (name, a progress bar of pages
// done / total, the time left, Cancel). A finished row either goes away by itself (added without
// notes) or stays with its message (an error, scanned pages with a "Read with OCR" action) until
// dismissed. Notices do not pile up over the library: the newest kShownNotices stay in view, the
// older fold behind "N earlier notices" (Show / Dismiss all). The panel hides itself when it has
// no rows.
#pragma once

#include <QFrame>
#include <QHash>
#include <QString>

class QLabel;
class QProgressBar;
class QToolButton;
class QPushButton;
class QVBoxLayout;

namespace spw::ui {

class IngestProgressPanel final : public QFrame {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(IngestProgressPanel)

 public:
  enum class Outcome { Added, Warning, Failed, Cancelled };
  /// Finished rows with a message kept in view; older ones fold.
  static constexpr int kShownNotices = 2;

  explicit IngestProgressPanel(QWidget* parent = nullptr);

  /// A new row for request `id` ("Waiting…" until the first progress).
  void addJob(qint64 id, const QString& path);
  /// Pages done of total; `eta_ms` < 0: not known yet.
  void setProgress(qint64 id, int done, int total, qint64 eta_ms);
  /// Ends a row. Added rows without `message` vanish after a few seconds; others stay with the
  /// message (tooltip holds the full text). `action` non-empty adds a button that emits
  /// actionTriggered(id).
  void finishJob(qint64 id, Outcome outcome, const QString& message, const QString& action = {});
  /// Removes a row now.
  void removeJob(qint64 id);

  int rowCount() const { return int(rows_.size()); }
  bool hasRow(qint64 id) const { return rows_.contains(id); }
  /// The row's status text (tests).
  QString statusText(qint64 id) const;
  /// The row's bar value and maximum (tests); {-1,-1} when there is no row.
  std::pair<int, int> barValue(qint64 id) const;
  /// Whether a row is on screen (not folded away).
  bool rowShown(qint64 id) const;
  /// Finished rows folded behind "N earlier notices" (0 when unfolded or none).
  int foldedNotices() const;
  /// Shows (or folds again) the older notices.
  void setNoticesUnfolded(bool on);
  /// Dismisses every finished row (running ones stay).
  void dismissAllNotices();

  /// "1 min 20 s", "8 s".
  static QString formatEta(qint64 ms);

 signals:
  void cancelRequested(qint64 id);
  void actionTriggered(qint64 id);

 private:
  struct Row {
    QFrame* frame = nullptr;
    QLabel* icon = nullptr;
    QLabel* status = nullptr;
    QProgressBar* bar = nullptr;
    QToolButton* close = nullptr;
    QPushButton* action = nullptr;
    bool running = true;
    int finished = 0;  // the order rows finished in (0: running)
  };
  void updateVisibility();
  /// Finished rows, newest first.
  QList<qint64> finishedRows() const;

  QVBoxLayout* rows_layout_ = nullptr;
  QHash<qint64, Row> rows_;
  int next_finished_ = 1;
  bool unfolded_ = false;
  QFrame* fold_ = nullptr;
  QLabel* fold_label_ = nullptr;
  QToolButton* fold_toggle_ = nullptr;
};

}  // namespace spw::ui
