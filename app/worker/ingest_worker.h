// Background PDF ingest for the desktop app: an IngestWorker (a QObject living on its own
// QThread, with its own Library connection) runs app/ingest's ingest_file() one request at a
// time; an IngestQueue (GUI thread) owns the thread, hands requests over by queued connection and
// cancels them through per-request atomic flags checked after every page.
//
// Engine-free header (the UI includes it): no app/ingest or engine types cross it.
#pragma once

#include <atomic>
#include <memory>

#include <QHash>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

class QThread;

namespace spw::app {

class Library;

/// One file to ingest. `id` is assigned by IngestQueue::enqueue.
struct IngestRequest {
  qint64 id = 0;
  QString path;      // the PDF file
  QString password;  // user/owner password of an encrypted PDF ("" : none); never stored
  bool ocr = false;  // read pages without a text layer with tesseract
  /// Re-read in place: the document with this id (the same file) is read again with `ocr`
  /// and its pages replaced (IngestOptions::reread_doc_id): the same id, its name, chats and
  /// jobs stay; when that fails it stays as it was. 0: a plain ingest.
  qint64 replace_doc_id = 0;
  std::shared_ptr<std::atomic<bool>> cancel;  // set by IngestQueue::cancel
};

/// How one request ended.
struct IngestOutcome {
  qint64 id = 0;
  QString path;
  bool ok = false;
  bool cancelled = false;
  bool needs_password = false;   // encrypted and the password given (or none) does not open it
  bool wrong_password = false;   // ... and a password was given
  QString error;                 // the user-facing message when !ok
  qint64 doc_id = 0;             // when ok (a re-read: the document read again, same id)
  bool already_present = false;  // the same bytes were already in the library (nothing stored)
  QString title;
  int n_pages = 0;
  int n_scanned = 0;  // pages without a text layer
  int n_ocr = 0;      // of those, read by OCR
  bool no_text = false;
  QStringList warnings;  // "p. 3: no text layer (scanned) ..." / whole-document notes
};

/// Runs requests on the thread it lives on. Use through IngestQueue.
class IngestWorker final : public QObject {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(IngestWorker)

 public:
  /// `data_dir`: the folder holding library.sqlite3 (opened lazily on the worker's thread).
  explicit IngestWorker(QString data_dir);
  ~IngestWorker() override;

 public slots:
  /// Ingests one file; emits started, progress (0..n pages) and finished. Never throws.
  void run(spw::app::IngestRequest request);

 signals:
  void started(qint64 id, QString path);
  /// `done` of `total` pages read; `eta_ms` estimated time left (-1: not known yet).
  void progress(qint64 id, int done, int total, qint64 eta_ms);
  void finished(spw::app::IngestOutcome outcome);

 private:
  QString data_dir_;
  std::unique_ptr<Library> lib_;  // this thread's connection
};

/// GUI-thread front of the ingest thread. Requests run in order, one at a time.
class IngestQueue final : public QObject {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(IngestQueue)

 public:
  explicit IngestQueue(const QString& data_dir, QObject* parent = nullptr);
  /// Cancels everything and joins the thread (shutdown()).
  ~IngestQueue() override;

  /// Queues `request` (its id and cancel flag are assigned here) and returns its id.
  qint64 enqueue(IngestRequest request);
  /// Sets the cancel flag of a queued or running request (it ends with outcome.cancelled).
  void cancel(qint64 id);
  /// Cancels every request, stops the thread and waits for it (at most one page's work).
  /// Idempotent; later enqueue() calls are refused (they finish at once as cancelled).
  void shutdown();
  /// Requests queued or running.
  int pending() const { return int(flags_.size()); }
  /// Whether this build can OCR scanned pages (links tesseract).
  static bool ocrAvailable();

 signals:
  void started(qint64 id, QString path);
  void progress(qint64 id, int done, int total, qint64 eta_ms);
  void finished(spw::app::IngestOutcome outcome);
  /// Emitted to the worker (queued); internal.
  void requestQueued(spw::app::IngestRequest request);

 private:
  QThread* thread_ = nullptr;
  IngestWorker* worker_ = nullptr;  // lives on thread_; deleted there when it finishes
  QHash<qint64, std::shared_ptr<std::atomic<bool>>> flags_;
  qint64 next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace spw::app

Q_DECLARE_METATYPE(spw::app::IngestRequest)
Q_DECLARE_METATYPE(spw::app::IngestOutcome)
