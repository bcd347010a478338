// The Jobs dock: the batch-job queue of the library database (app/jobs/jobs.h) as a table —
// state, documents done/total, tokens/s, ETA, schedule, reason — with New batch…, Run now,
// Pause/Resume, Cancel, Retry failed, Export… and Open result; under it (a splitter) the
// documents of the selected job, or of the running one, with where each run is, a progress bar
// and its ETA, read from the progress rows runners write (ui/job_documents.h).
//
// Threading: the dock reads and changes the queue through a JobStore of its own on the GUI
// thread (small transactions); the table is re-read every `refresh_ms` and after each change.
// When `run_jobs` is set, a Runner works through due jobs on a worker QThread (run_watch) while
// the dock lives; its callbacks come back with queued calls (live tokens/s and ETA), and the
// destructor stops it (the current prompt is cancelled, its document returns to pending) and
// waits for the thread. Other runners (spillway-cli jobs run-due) may work on the same database
// at the same time; the leases keep each document processed once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include <QDockWidget>
#include <QString>

#include "app/jobs/jobs.h"
#include "app/worker/telemetry.h"

class QLabel;
class QTableWidget;

namespace spw::ui {

class JobDocumentsTable;
class NewBatchDialog;

struct JobsDockParams {
  std::filesystem::path db_file;    // the library database (required)
  std::filesystem::path cache_dir;  // the runner's snapshots (<cache_dir>/snapshots); may be empty
  bool run_jobs = true;             // run due jobs on a worker thread while the dock lives
  int refresh_ms = 1000;            // table refresh period; 0: only after changes
  int64_t watch_poll_ms = 1000;     // how often the runner looks for due jobs
  app::GeneratorFactory generator;  // empty: the local engine, or the job's endpoint
  std::function<int64_t()> now_ms;  // unix milliseconds (tests); empty: the system clock
};

class JobsDock final : public QDockWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(JobsDock)

 public:
  /// Table columns.
  enum Column {
    kColId,
    kColTitle,
    kColTask,
    kColState,
    kColDocs,
    kColSpeed,
    kColEta,
    kColWhen,
    kColReason,
    kColCount
  };

  explicit JobsDock(const JobsDockParams& params, QWidget* parent = nullptr);
  ~JobsDock() override;

  /// The model and engine settings (JSON) new batches start from (the lead wires Settings here).
  void setCurrentModel(const QString& model_path, const QString& engine_json);

  QTableWidget* table() const;
  /// The documents of the selected job (or, with none selected, of the first running one),
  /// each with its progress row (ui/job_documents.h).
  JobDocumentsTable* documentsTable() const;
  /// The line above the documents table ("Documents of job 3: …").
  QString documentsCaption() const;
  /// The table row of job `id`, or -1.
  int rowOf(int64_t job_id) const;
  /// The last error shown in the dock ("" when none).
  QString errorText() const;
  /// Whether the worker runner is running.
  bool runnerActive() const;

 public slots:
  /// Re-reads the queue into the table.
  void refresh();
  /// Opens "New batch…" (window-modal, not blocking) preselecting `doc_ids`; returns it.
  NewBatchDialog* newBatch(const std::vector<int64_t>& doc_ids = {});
  // Actions on a job; false (with the error shown in the dock) when the store refuses.
  bool runNow(qint64 job_id);
  bool setPaused(qint64 job_id, bool paused);
  bool cancelJob(qint64 job_id);
  bool retryFailed(qint64 job_id);
  /// Writes the job's Markdown report (".md", or any other suffix) or CSV (".csv") to `path`.
  bool exportJob(qint64 job_id, const QString& path);
  /// Shows the job's results (the Markdown report, rendered) in a window; returns it.
  QDialog* openResult(qint64 job_id);

 signals:
  /// After the table changed (refresh, a runner state change).
  void jobsChanged();
  /// A job changed state (from this dock or its runner).
  void jobStateChanged(qint64 job_id, const QString& state);
  /// A run sample of the running job's session (at most ~3 per second, the last one when the
  /// job ends): the app controller hands it to the engine worker's telemetry stream, which
  /// feeds the dashboard as chat runs do.
  void runSample(const spw::app::TelemetrySample& sample);
  /// A citation in a job's result window was clicked: show page `page_no` of `doc_id` with
  /// `quote` highlighted.
  void citationActivated(qint64 doc_id, int page_no, const QString& quote);

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;

  void startRunner();
  void updateButtons();
  qint64 selectedJob() const;
  void refreshDocuments();
  bool check(const Status& st);
  void showError(const QString& message);
};

}  // namespace spw::ui
