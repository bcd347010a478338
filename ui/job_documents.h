// The Jobs dock's documents table: one row per document of the job shown, from the progress
// rows its runner writes (migration 009, app/jobs/jobs.h JobDocumentProgress) — state, where the
// run is ("part 3 of 6 (2 done), prefill 1,024/1,730 tokens"), a progress bar, the ETA and when
// the runner last reported. A running document whose runner has reported neither progress nor a
// lease heartbeat for longer than the lease says so: "its runner has not reported for 42 s" (the
// runner died or hangs; the next runner takes the document over when the lease has expired).
//
// GUI thread; filled by JobsDock::refresh() from its JobStore.
#pragma once

#include <cstdint>
#include <vector>

#include <QString>
#include <QTableWidget>

#include "app/jobs/jobs.h"

class QProgressBar;

namespace spw::ui {

/// Where a document's run is, from its progress row: "prompt 2 of 3, part 3 of 6 (2 done),
/// prefill 1,024/1,730 tokens"; "combining 6 parts"; "" before the first event.
QString document_where_text(const app::JobDocumentProgress& p);
/// The document's progress in [0, 1]: map-reduce by parts (the part in progress counted by its
/// tokens), otherwise by the phase's tokens; prompts of several (clauses) share the bar.
double document_progress_fraction(const app::JobDocumentProgress& p);
/// Milliseconds since the runner of `job` last reported on `doc` (its progress row, its claim's
/// start or the lease's heartbeat, the latest of them), or -1 when the document is not running.
int64_t document_silence_ms(const app::JobRecord& job, const app::JobDocument& doc, int64_t now_ms);
/// The lease length of `job` (expiry minus heartbeat), or RunnerOptions' default when the job
/// holds no lease.
int64_t job_lease_ms(const app::JobRecord& job);

class JobDocumentsTable final : public QTableWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(JobDocumentsTable)

 public:
  enum Column { kColTitle, kColState, kColWhere, kColProgress, kColEta, kColUpdated, kColCount };

  explicit JobDocumentsTable(QWidget* parent = nullptr);
  ~JobDocumentsTable() override;

  /// Shows the documents of `job` as they are at `now_ms` (unix milliseconds).
  void showDocuments(const app::JobRecord& job, const std::vector<app::JobDocument>& docs,
                     int64_t now_ms);
  /// No job shown.
  void clearDocuments();
  /// The progress bar of row `row` (nullptr when out of range).
  QProgressBar* progressBar(int row) const;
  /// The job shown (0: none).
  int64_t jobId() const { return job_id_; }

 private:
  int64_t job_id_ = 0;
};

}  // namespace spw::ui
