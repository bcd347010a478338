// "New batch…": a job over documents of the library (app/jobs/jobs.h): which documents, the task
// (a summary of a chosen length, clauses of listed types, or a custom prompt), the model (a GGUF
// file, or a model name with an OpenAI-compatible endpoint), the answer length and temperature,
// and when it runs (now, at a date and time, nightly at a time, or when Spillway has been idle).
//
// OK adds the job through the given JobStore (the GUI thread's connection); the store's checks
// are the dialog's: an error (no documents, an empty prompt, no model...) is shown inline and
// nothing is stored. On success jobAdded(id) is emitted and the dialog closes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <QDialog>
#include <QString>

#include "app/jobs/jobs.h"

namespace spw::ui {

/// A library document offered for the batch.
struct BatchDocument {
  int64_t id = 0;
  QString title;
  int n_pages = 0;
};

struct NewBatchDialogParams {
  app::JobStore* store = nullptr;        // required; outlives the dialog
  std::vector<BatchDocument> documents;  // in display order
  std::vector<int64_t> preselected;      // checked when the dialog opens
  QString model_path;                    // the model in use (Settings)
  QString engine_json;                   // the engine settings in use, stored with the job
};

class NewBatchDialog final : public QDialog {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(NewBatchDialog)

 public:
  explicit NewBatchDialog(const NewBatchDialogParams& params, QWidget* parent = nullptr);
  ~NewBatchDialog() override;

  /// The job as the widgets describe it. `error`: what the dialog itself refuses (a clause list
  /// with nothing in it); the store checks the rest on OK.
  app::JobSpec spec(QString* error = nullptr) const;
  /// Checks or unchecks a document by library id; false when it is not listed.
  bool setDocumentChecked(int64_t doc_id, bool checked);
  /// The message shown under the form ("" when none).
  QString errorText() const;
  /// The id of the job OK added (0 before).
  int64_t addedJobId() const;

 public slots:
  void accept() override;

 signals:
  void jobAdded(qint64 job_id);

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;
  void updateTaskOptions();
};

}  // namespace spw::ui
