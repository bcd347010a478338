#include "app/worker/ingest_worker.h"

#include <QElapsedTimer>
#include <QThread>

#include <poppler-qt6.h>

#include "app/ingest/ingest.h"
#include "app/ingest/ocr.h"
#include "app/store/library.h"

namespace spw::app {

namespace {

QString fromStd(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// After a failed ingest: whether the file is a PDF that `password` does not unlock (poppler's
// own answer, rather than matching the error's wording).
bool lockedWith(const QString& path, const QString& password) {
  const QByteArray pw = password.toUtf8();
  std::unique_ptr<Poppler::Document> doc = Poppler::Document::load(path, pw, pw);
  return doc && doc->isLocked();
}

void fillFromResult(IngestOutcome& out, const IngestResult& r) {
  out.ok = true;
  out.doc_id = r.doc_id;
  out.already_present = r.already_present;
  out.title = fromStd(r.document.shown_title());
  out.n_pages = r.document.n_pages;
  out.n_scanned = r.document.n_scanned;
  out.n_ocr = r.document.n_ocr;
  out.no_text = r.document.no_text;
  for (const PageWarning& w : r.warnings) {
    out.warnings << (w.page_no > 0
                         ? QStringLiteral("p. %1: %2").arg(w.page_no).arg(fromStd(w.message))
                         : fromStd(w.message));
  }
}

}  // namespace

IngestWorker::IngestWorker(QString data_dir) : data_dir_(std::move(data_dir)) {}
IngestWorker::~IngestWorker() = default;

void IngestWorker::run(IngestRequest req) {
  IngestOutcome out;
  out.id = req.id;
  out.path = req.path;
  const auto cancelled = [&req] { return req.cancel && req.cancel->load(); };
  if (cancelled()) {
    out.cancelled = true;
    out.error = QStringLiteral("cancelled");
    emit finished(out);
    return;
  }
  emit started(req.id, req.path);

  if (!lib_) {
    auto lib = Library::open(library_db_file(data_dir_.toStdString()));
    if (!lib) {
      out.error = fromStd(lib.error().message);
      emit finished(out);
      return;
    }
    lib_ = std::move(*lib);
  }

  QElapsedTimer clock;
  clock.start();
  const IngestProgressFn on_page = [&](int done, int total) {
    qint64 eta = -1;
    if (done > 0) eta = clock.elapsed() * (total - done) / done;
    emit progress(req.id, done, total, eta);
    return !cancelled();
  };

  IngestOptions opts;
  opts.password = req.password.toStdString();
  opts.ocr = req.ocr;
  opts.reread_doc_id = req.replace_doc_id;
  const std::filesystem::path file = req.path.toStdString();
  auto r = ingest_file(*lib_, file, opts, on_page);
  if (r) {
    fillFromResult(out, *r);
  } else {
    out.cancelled = cancelled();
    out.error = fromStd(r.error().message);
    if (!out.cancelled && lockedWith(req.path, req.password)) {
      out.needs_password = true;
      out.wrong_password = !req.password.isEmpty();
    }
  }
  emit finished(out);
}

IngestQueue::IngestQueue(const QString& data_dir, QObject* parent) : QObject(parent) {
  qRegisterMetaType<spw::app::IngestRequest>();
  qRegisterMetaType<spw::app::IngestOutcome>();
  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("spillway-ingest"));
  worker_ = new IngestWorker(data_dir);
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &IngestQueue::requestQueued, worker_, &IngestWorker::run, Qt::QueuedConnection);
  connect(worker_, &IngestWorker::started, this, &IngestQueue::started, Qt::QueuedConnection);
  connect(worker_, &IngestWorker::progress, this, &IngestQueue::progress, Qt::QueuedConnection);
  connect(
      worker_, &IngestWorker::finished, this,
      [this](const IngestOutcome& o) {
        flags_.remove(o.id);
        emit finished(o);
      },
      Qt::QueuedConnection);
  thread_->start();
}

IngestQueue::~IngestQueue() { shutdown(); }

qint64 IngestQueue::enqueue(IngestRequest request) {
  request.id = next_id_++;
  request.cancel = std::make_shared<std::atomic<bool>>(stopped_);
  flags_.insert(request.id, request.cancel);
  if (stopped_) {
    IngestOutcome o;
    o.id = request.id;
    o.path = request.path;
    o.cancelled = true;
    o.error = QStringLiteral("cancelled: the window is closing");
    flags_.remove(request.id);
    QMetaObject::invokeMethod(
        this, [this, o] { emit finished(o); }, Qt::QueuedConnection);
    return request.id;
  }
  emit requestQueued(request);
  return request.id;
}

void IngestQueue::cancel(qint64 id) {
  if (auto it = flags_.find(id); it != flags_.end()) it.value()->store(true);
}

void IngestQueue::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  for (const auto& flag : std::as_const(flags_)) flag->store(true);
  // Queued requests still run, but see their flag at once and return; the running one stops
  // after its current page.
  thread_->quit();
  thread_->wait();
  flags_.clear();
}

bool IngestQueue::ocrAvailable() { return OcrEngine::available(); }

}  // namespace spw::app
