#include "ui/main_window.h"

#include <algorithm>

#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QIcon>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QResizeEvent>
#include <QScreen>
#include <QStatusBar>
#include <QStyle>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include "app/store/library.h"
#include "app/worker/ingest_worker.h"
#include "ui/activity_label.h"
#include "ui/icons.h"
#include "ui/ingest_progress.h"
#include "ui/library_panel.h"
#include "ui/page_viewer.h"
#include "ui/password_dialog.h"

namespace spw::ui {

namespace {
// Widest text of a status-bar field (pixels), so the window never grows past the screen.
constexpr int kStatusTextWidth = 340;
}  // namespace

namespace {

constexpr const char* kSampleFileName = "spillway-sample-contract.pdf";

QString fromStd(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// What a dock shows until its real widget is handed in: an icon, a title and a line of text, so
// the dock never sits there as an empty grey slab.
QWidget* makePlaceholder(const QIcon& icon, const QString& title, const QString& text,
                         QWidget* parent) {
  auto* w = new QWidget(parent);
  auto* l = new QVBoxLayout(w);
  l->addStretch(1);
  auto* pic = new QLabel(w);
  pic->setPixmap(icon.pixmap(32, 32));
  pic->setAlignment(Qt::AlignHCenter);
  pic->setEnabled(false);
  l->addWidget(pic);
  auto* head = new QLabel(title, w);
  QFont f = head->font();
  f.setBold(true);
  head->setFont(f);
  head->setAlignment(Qt::AlignHCenter);
  l->addWidget(head);
  auto* body = new QLabel(text, w);
  body->setWordWrap(true);
  body->setAlignment(Qt::AlignHCenter);
  body->setEnabled(false);
  l->addWidget(body);
  l->addStretch(2);
  l->setContentsMargins(24, 12, 24, 12);
  return w;
}

QDockWidget* makeDock(const QString& title, const QString& name, QWidget* content,
                      QMainWindow* window) {
  auto* dock = new QDockWidget(title, window);
  dock->setObjectName(name);  // saveState()/restoreState() key
  dock->setFeatures(QDockWidget::DockWidgetClosable | QDockWidget::DockWidgetMovable |
                    QDockWidget::DockWidgetFloatable);
  dock->setWidget(content);
  return dock;
}

void replaceDockWidget(QDockWidget* dock, QWidget* widget) {
  QWidget* old = dock->widget();
  dock->setWidget(widget);
  if (old && old != widget) old->deleteLater();
}

bool looksLikePdf(const QString& path) {
  return path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive);
}

}  // namespace

MainWindow::MainWindow(const MainWindowParams& params, QWidget* parent)
    : QMainWindow(parent), params_(params) {
  setWindowTitle(QStringLiteral("Spillway"));
  setObjectName(QStringLiteral("mainWindow"));
  setAcceptDrops(true);
  setDockNestingEnabled(true);
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
  setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);

  // Opening SQLite is a few milliseconds (migrations only on the very first start); every
  // heavier step (ingest, the sample, rendering the first page) runs after show().
  if (params_.data_dir.isEmpty()) {
    lib_error_ = tr("no data folder given");
  } else {
    auto lib = app::Library::open(app::library_db_file(params_.data_dir.toStdString()));
    if (lib) {
      lib_ = std::move(*lib);
    } else {
      lib_error_ = fromStd(lib.error().message);
    }
  }
  ingest_ = new app::IngestQueue(params_.data_dir, this);
  connect(ingest_, &app::IngestQueue::progress, this,
          [this](qint64 id, int done, int total, qint64 eta_ms) {
            library_panel_->ingestPanel()->setProgress(id, done, total, eta_ms);
          });
  connect(ingest_, &app::IngestQueue::finished, this, &MainWindow::onIngestFinished);

  viewer_ = new PageViewer(this);
  viewer_->setTextProvider([this](qint64 doc_id, int page_no) {
    if (!lib_) return QString();
    auto page = lib_->page(doc_id, page_no);
    return page ? fromStd(page->original_text) : QString();
  });
  // Each document opens at the zoom it was last read at (fit width until changed).
  viewer_->setZoomLookup([this](qint64 doc_id) {
    if (!lib_) return 0.0;
    auto v = lib_->setting(kZoomKeyPrefix + std::to_string(doc_id));
    if (!v || !*v) return 0.0;
    bool ok = false;
    const double z = fromStd(**v).toDouble(&ok);
    return ok ? z : 0.0;
  });
  connect(viewer_, &PageViewer::documentZoomChanged, this, [this](qint64 doc_id, double zoom) {
    if (lib_) {
      (void)lib_->set_setting(kZoomKeyPrefix + std::to_string(doc_id),
                              zoom > 0 ? QString::number(zoom, 'g', 4).toStdString() : "fit");
    }
  });
  setCentralWidget(viewer_);
  connect(viewer_, &PageViewer::pageShown, this, [this](qint64 doc_id, int page_no) {
    setWindowTitle(QStringLiteral("%1 — Spillway").arg(viewer_->documentTitle()));
    last_doc_ = doc_id;
    last_page_ = page_no;
    if (!screenshot_signalled_) {
      screenshot_signalled_ = true;
      // Let the layout settle (docks, scroll area) before anyone grabs the window.
      QTimer::singleShot(0, this, [this] { emit readyForScreenshot(true); });
    }
  });

  library_panel_ = new LibraryPanel(lib_.get(), this);
  connect(library_panel_, &LibraryPanel::selectionChanged, this,
          &MainWindow::documentSelectionChanged);
  connect(library_panel_, &LibraryPanel::documentActivated, this, [this](qint64 id) {
    if (viewer_->documentId() != id) showPage(id, 1);
  });
  connect(library_panel_, &LibraryPanel::hitActivated, this, &MainWindow::showPage);
  connect(library_panel_, &LibraryPanel::addRequested, this, &MainWindow::openFiles);
  connect(library_panel_, &LibraryPanel::removeRequested, this,
          [this](qint64 id) { removeDocument(id, true); });
  connect(library_panel_, &LibraryPanel::ocrRequested, this, &MainWindow::ocrDocument);
  connect(library_panel_, &LibraryPanel::renameRequested, this, &MainWindow::renameDocument);
  connect(library_panel_->ingestPanel(), &IngestProgressPanel::cancelRequested, ingest_,
          &app::IngestQueue::cancel);

  buildDocks();
  buildMenus();

  activity_label_ = new ActivityLabel(this);
  model_label_ = new QLabel(this);
  model_label_->setObjectName(QStringLiteral("modelStatus"));
  backend_label_ = new QLabel(this);
  backend_label_->setObjectName(QStringLiteral("backendStatus"));
  statusBar()->addWidget(activity_label_, 1);
  const auto separator = [this] {
    auto* line = new QFrame(this);
    line->setFrameShape(QFrame::VLine);
    line->setFrameShadow(QFrame::Sunken);
    return line;
  };
  for (QLabel* l : {static_cast<QLabel*>(activity_label_), model_label_, backend_label_})
    l->setContentsMargins(6, 0, 6, 0);
  statusBar()->addPermanentWidget(separator());
  statusBar()->addPermanentWidget(model_label_);
  statusBar()->addPermanentWidget(separator());
  statusBar()->addPermanentWidget(backend_label_);
  setModelStatus(params_.model_path.isEmpty()
                     ? tr("No model — choose one in Settings › Model")
                     : tr("Model: %1").arg(QFileInfo(params_.model_path).fileName()));
  setBackendStatus(tr("Engine not started"));
  setActivity(lib_ ? tr("Ready") : tr("The library could not be opened: %1").arg(lib_error_));

  restoreLayout();
  qApp->installEventFilter(this);  // drops on any child widget (see eventFilter)
  QTimer::singleShot(0, this, &MainWindow::startup);
}

MainWindow::~MainWindow() {
  qApp->removeEventFilter(this);
  ingest_->shutdown();
}

void MainWindow::buildDocks() {
  library_dock_ = makeDock(tr("Library"), QStringLiteral("libraryDock"), library_panel_, this);
  addDockWidget(Qt::LeftDockWidgetArea, library_dock_);

  chat_dock_ = makeDock(
      tr("Chat"), QStringLiteral("chatDock"),
      makePlaceholder(themed("mail-message-new", QStyle::SP_MessageBoxQuestion, style()),
                      tr("Ask your documents"),
                      tr("Questions about the selected documents and their cited answers appear "
                         "here."),
                      this),
      this);
  addDockWidget(Qt::RightDockWidgetArea, chat_dock_);

  memory_dock_ = makeDock(
      tr("Memory"), QStringLiteral("memoryDock"),
      makePlaceholder(themed("utilities-system-monitor", QStyle::SP_ComputerIcon, style()),
                      tr("Memory dashboard"),
                      tr("GPU, RAM and disk use of the KV cache while a model runs."), this),
      this);
  jobs_dock_ =
      makeDock(tr("Jobs"), QStringLiteral("jobsDock"),
               makePlaceholder(
                   themed("view-list-details", QStyle::SP_FileDialogDetailedView, style()),
                   tr("Job queue"), tr("Batch jobs over many documents, now or overnight."), this),
               this);
  // The bottom docks (memory, jobs) span the whole width, side by side: the memory a batch job
  // uses can be watched beside the job's progress.
  setCorner(Qt::BottomLeftCorner, Qt::BottomDockWidgetArea);
  setCorner(Qt::BottomRightCorner, Qt::BottomDockWidgetArea);
  addDockWidget(Qt::BottomDockWidgetArea, memory_dock_);
  splitDockWidget(memory_dock_, jobs_dock_, Qt::Horizontal);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(themed("document-open", QStyle::SP_DialogOpenButton, style()),
                                  tr("&Open PDF files…"), this, &MainWindow::openFiles);
  open->setShortcut(QKeySequence::Open);
  file->addSeparator();
  QAction* quit = file->addAction(QIcon::fromTheme(QStringLiteral("application-exit")), tr("&Quit"),
                                  this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(library_dock_->toggleViewAction());
  view->addAction(chat_dock_->toggleViewAction());
  view->addAction(memory_dock_->toggleViewAction());
  view->addAction(jobs_dock_->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("Find in library"), QKeySequence::Find, this, [this] {
    library_dock_->show();
    if (auto* search = library_panel_->findChild<QWidget*>(QStringLiteral("librarySearch")))
      search->setFocus();
  });

  QMenu* settings = menuBar()->addMenu(tr("&Settings"));
  QAction* prefs =
      settings->addAction(themed("preferences-system", QStyle::SP_FileDialogInfoView, style()),
                          tr("&Settings…"), this, &MainWindow::settingsRequested);
  prefs->setObjectName(QStringLiteral("settingsAction"));
  // Ctrl+, everywhere (the platform's Preferences key is empty on most Linux desktops).
  QList<QKeySequence> prefs_keys = QKeySequence::keyBindings(QKeySequence::Preferences);
  const QKeySequence ctrl_comma(Qt::CTRL | Qt::Key_Comma);
  if (!prefs_keys.contains(ctrl_comma)) prefs_keys.prepend(ctrl_comma);
  prefs->setShortcuts(prefs_keys);
  prefs->setMenuRole(QAction::PreferencesRole);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(QIcon::fromTheme(QStringLiteral("help-about")), tr("&About Spillway"), this,
                  [this] {
                    QMessageBox::about(
                        this, tr("About Spillway"),
                        tr("<b>Spillway %1</b><p>Ask whole documents on your own machine: answers "
                           "cite pages, long documents spill their KV cache from GPU to RAM to "
                           "disk.</p><p>Data folder: %2</p>")
                            .arg(params_.version, params_.data_dir.toHtmlEscaped()));
                  });
}

MainWindow::DockSizes MainWindow::dockSizesFor(QSize size) {
  DockSizes d;
  // 2 px of each side dock per 5 px the window is narrower than 1280.
  const int narrower = std::max(0, kDefaultWidth - size.width());
  d.library = std::clamp(320 - narrower * 2 / 5, 150, 320);
  d.chat = std::clamp(380 - narrower * 2 / 5, 190, 380);
  d.bottom = std::max(120, size.height() / 4);
  return d;
}

void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  if (!docks_follow_size_) return;
  // Until the user lays the docks out, they keep their share of a smaller or larger window
  // (a 1024-px window keeps the page readable at fit width instead of squeezing it).
  const QSize size = event->size();
  const DockSizes d = dockSizesFor(size);
  resizeDocks({library_dock_, chat_dock_}, {d.library, d.chat}, Qt::Horizontal);
  resizeDocks({memory_dock_, jobs_dock_}, {size.width() * 3 / 5, size.width() * 2 / 5},
              Qt::Horizontal);
  // The page gets most of the height: the bottom docks start at a quarter of it (their size
  // is kept with the layout once changed); the dashboard scrolls its charts.
  resizeDocks({memory_dock_}, {d.bottom}, Qt::Vertical);
}

void MainWindow::restoreLayout() {
  resize(kDefaultWidth, kDefaultHeight);
  if (lib_ && params_.restore_layout) {
    auto geometry = lib_->setting(kGeometryKey);
    auto state = lib_->setting(kStateKey);
    if (geometry && *geometry) {
      restoreGeometry(QByteArray::fromBase64(QByteArray::fromStdString(**geometry)));
    }
    if (state && *state) {
      docks_follow_size_ =
          !restoreState(QByteArray::fromBase64(QByteArray::fromStdString(**state)));
    }
  }
  fitToScreen();
}

void MainWindow::fitToScreen() {
  // A screen smaller than the window (a laptop at 2x scaling: 1920x1080 is 960x540 logical, or
  // a layout saved on a bigger monitor): the window takes the screen's free area less a margin
  // for the window frame, and is placed inside it.
  const QScreen* s = screen();
  if (!s || isMaximized() || isFullScreen()) return;
  const QRect avail = s->availableGeometry();
  const QSize room(std::max(1, avail.width() - kScreenMargin),
                   std::max(1, avail.height() - kScreenMargin));
  if (width() <= room.width() && height() <= room.height() && avail.contains(frameGeometry()))
    return;
  resize(size().boundedTo(room).expandedTo(minimumSizeHint().boundedTo(room)));
  QRect frame = frameGeometry();
  frame.moveCenter(avail.center());
  move(std::max(avail.left(), frame.left()), std::max(avail.top(), frame.top()));
}

void MainWindow::saveLayout() {
  if (!lib_) return;
  (void)lib_->set_setting(kGeometryKey, saveGeometry().toBase64().toStdString());
  (void)lib_->set_setting(kStateKey, saveState().toBase64().toStdString());
  if (last_doc_ > 0) {
    (void)lib_->set_setting(kLastDocKey,
                            QStringLiteral("%1:%2").arg(last_doc_).arg(last_page_).toStdString());
  }
}

void MainWindow::setChatWidget(QWidget* widget) { replaceDockWidget(chat_dock_, widget); }
void MainWindow::setDashboardWidget(QWidget* widget) { replaceDockWidget(memory_dock_, widget); }
void MainWindow::setJobsWidget(QWidget* widget) { replaceDockWidget(jobs_dock_, widget); }

void MainWindow::setBackendStatus(const QString& text) {
  // Long reasons ("CPU — no CUDA driver found: ...") are elided; the tooltip has all of it.
  backend_label_->setText(
      backend_label_->fontMetrics().elidedText(text, Qt::ElideRight, kStatusTextWidth));
  backend_label_->setToolTip(text);
  backend_label_->setProperty("fullText", text);
}
void MainWindow::setModelStatus(const QString& text) {
  model_label_->setText(
      model_label_->fontMetrics().elidedText(text, Qt::ElideMiddle, kStatusTextWidth));
  model_label_->setToolTip(params_.model_path.isEmpty() ? text : params_.model_path);
  model_label_->setProperty("fullText", text);
}
void MainWindow::setActivity(const QString& text) { activity_label_->setState(text); }
void MainWindow::showNotice(const QString& text) { activity_label_->showNotice(text); }
QString MainWindow::backendStatus() const {
  return backend_label_->property("fullText").toString();
}
QString MainWindow::modelStatus() const { return model_label_->property("fullText").toString(); }
QString MainWindow::activity() const { return activity_label_->shownText(); }

void MainWindow::setTokenCounts(const QHash<qint64, qint64>& counts) {
  library_panel_->setTokenCounts(counts);
}

void MainWindow::setModelContext(qint64 n_ctx) { library_panel_->setModelContext(n_ctx); }

int MainWindow::pendingIngests() const { return int(pending_.size()); }

// --- start-up ---------------------------------------------------------------------------------

void MainWindow::startup() {
  if (lib_ && params_.add_sample) addSample();
  addFiles(params_.files, true);
  const bool opening = std::any_of(pending_.begin(), pending_.end(),
                                   [](const PendingIngest& p) { return p.open_when_done; });
  if (!opening && lib_) {
    // Back where the user left off, else the first document.
    qint64 doc = 0;
    int page = 1;
    if (auto last = lib_->setting(kLastDocKey); last && *last) {
      const QStringList parts = fromStd(**last).split(QLatin1Char(':'));
      if (parts.size() == 2) {
        doc = parts[0].toLongLong();
        page = parts[1].toInt();
      }
    }
    const QList<qint64> listed = library_panel_->listedDocuments();
    if (!listed.contains(doc)) {
      doc = listed.isEmpty() ? 0 : listed.front();
      page = 1;
    }
    if (doc > 0) showPage(doc, page);
  }
  startup_done_ = true;
  checkScreenshotReady();
}

void MainWindow::addSample() {
  auto added = lib_->setting(kSampleAddedKey);
  if (!added || (*added && **added == "1")) return;
  auto docs = lib_->documents();
  if (!docs || !docs->empty()) return;  // only into an empty library
  QFile source(params_.sample_pdf);
  if (params_.sample_pdf.isEmpty() || !source.exists()) {
    showNotice(tr("The sample document is not built into this copy of Spillway."));
    return;
  }
  const QString dir = QDir(params_.data_dir).filePath(QStringLiteral("sample"));
  const QString target = QDir(dir).filePath(QString::fromLatin1(kSampleFileName));
  if (!QFileInfo::exists(target)) {
    QDir().mkpath(dir);
    if (!source.copy(target)) {
      showNotice(tr("Could not write the sample document to %1").arg(target));
      return;
    }
    QFile::setPermissions(
        target, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup | QFile::ReadOther);
  }
  // Files from the command line are opened instead of the sample.
  enqueue(
      target, {}, false, 0,
      PendingIngest{.path = target, .open_when_done = params_.files.isEmpty(), .is_sample = true});
}

// --- ingest -----------------------------------------------------------------------------------

QList<qint64> MainWindow::addFiles(const QStringList& paths, bool open_first) {
  QList<qint64> ids;
  bool first = open_first;
  for (const QString& p : paths) {
    const QString abs = QFileInfo(p).absoluteFilePath();
    ids << enqueue(abs, {}, false, 0, PendingIngest{.path = abs, .open_when_done = first});
    first = false;
  }
  return ids;
}

qint64 MainWindow::enqueue(const QString& path, const QString& password, bool ocr,
                           qint64 replace_doc_id, PendingIngest pending) {
  app::IngestRequest req;
  req.path = path;
  req.password = password;
  req.ocr = ocr;
  req.replace_doc_id = replace_doc_id;
  pending.ocr = ocr;
  pending.replace_doc_id = replace_doc_id;
  pending.password = password;
  const qint64 id = ingest_->enqueue(std::move(req));
  pending_.insert(id, std::move(pending));
  library_panel_->ingestPanel()->addJob(id, path);
  updateIngestActivity();
  return id;
}

void MainWindow::onIngestFinished(const app::IngestOutcome& o) {
  const PendingIngest pending = pending_.take(o.id);
  IngestProgressPanel* panel = library_panel_->ingestPanel();
  if (closing_) return;

  if (o.needs_password) {
    const PasswordProvider ask =
        password_provider_ ? password_provider_ : [this](const QString& file, bool wrong) {
          return PasswordDialog::ask(this, file, wrong);
        };
    const std::optional<QString> pw = ask(o.path, o.wrong_password);
    if (pw && !pw->isEmpty()) {
      panel->removeJob(o.id);
      enqueue(o.path, *pw, pending.ocr, pending.replace_doc_id, pending);
    } else {
      panel->finishJob(o.id, IngestProgressPanel::Outcome::Failed,
                       tr("Not added: the file is encrypted and no password was given."));
    }
  } else if (!o.ok) {
    if (o.cancelled) {
      panel->finishJob(o.id, IngestProgressPanel::Outcome::Cancelled, {});
    } else {
      panel->finishJob(o.id, IngestProgressPanel::Outcome::Failed, o.error);
    }
    // A failed re-read (OCR) leaves the document as it was.
  } else {
    if (pending.is_sample && lib_) (void)lib_->set_setting(kSampleAddedKey, "1");
    library_panel_->reload();
    QString message;
    QString action;
    auto outcome = IngestProgressPanel::Outcome::Added;
    const int unread = o.n_scanned - o.n_ocr;
    if (o.already_present) {
      message = tr("Already in the library.");
    } else if (unread > 0) {
      outcome = IngestProgressPanel::Outcome::Warning;
      message = o.no_text ? tr("No page has a text layer: this document cannot be searched or "
                               "asked until its pages are read with OCR.")
                          : tr("%n page(s) are scanned images without text.", "", unread);
      if (app::IngestQueue::ocrAvailable()) {
        action = tr("Read with OCR");
      } else {
        message += tr(" OCR is not available: this build of Spillway has no tesseract.");
      }
    } else if (o.no_text) {
      outcome = IngestProgressPanel::Outcome::Warning;
      message = tr("No usable text on any page; it will not be used for answers.");
    } else if (o.n_ocr > 0) {
      message = tr("%n page(s) read with OCR.", "", o.n_ocr);
    }
    panel->finishJob(o.id, outcome, message, action);
    if (!action.isEmpty()) {
      const qint64 doc_id = o.doc_id;
      connect(panel, &IngestProgressPanel::actionTriggered, this,
              [this, job = o.id, doc_id](qint64 id) {
                if (id == job) ocrDocument(doc_id);
              });
    }
    // The password the file was added with shows its pages for the rest of the session.
    if (!pending.password.isEmpty()) viewer_->rememberPassword(o.doc_id, pending.password);
    if (pending.replace_doc_id > 0) {
      // Read again in place: the page on screen stays where it is.
      if (viewer_->documentId() == o.doc_id) showPage(o.doc_id, viewer_->currentPage());
    } else if (pending.open_when_done || viewer_->documentId() == 0) {
      showPage(o.doc_id, 1);
    }
    if (!o.already_present) emit libraryChanged();
  }
  updateIngestActivity();
  emit ingestFinished(o);
  checkScreenshotReady();
}

void MainWindow::updateIngestActivity() {
  const int n = int(pending_.size());
  if (n > 0) {
    setActivity(n == 1 ? tr("Adding 1 document…") : tr("Adding %1 documents…").arg(n));
  } else if (lib_) {
    setActivity(tr("Ready"));
  }
}

void MainWindow::checkScreenshotReady() {
  if (screenshot_signalled_ || !startup_done_ || !pending_.isEmpty()) return;
  if (viewer_->documentId() != 0) return;  // pageShown signals it
  screenshot_signalled_ = true;
  QTimer::singleShot(0, this, [this] { emit readyForScreenshot(false); });
}

void MainWindow::openFiles() {
  const QStringList files = QFileDialog::getOpenFileNames(
      this, tr("Add PDF files to the library"), QDir::homePath(), tr("PDF documents (*.pdf)"));
  if (!files.isEmpty()) addFiles(files, true);
}

void MainWindow::ocrDocument(qint64 doc_id) {
  if (!lib_) return;
  auto doc = lib_->document(doc_id);
  if (!doc) {
    showNotice(fromStd(doc.error().message));
    return;
  }
  if (!app::IngestQueue::ocrAvailable()) {
    QMessageBox::information(this, tr("OCR not available"),
                             tr("This build of Spillway has no OCR (it was built without "
                                "tesseract), so scanned pages cannot be read. Install "
                                "libtesseract-dev and rebuild to enable it."));
    return;
  }
  const QString path = fromStd(doc->path);
  if (!QFileInfo::exists(path)) {
    QMessageBox::warning(this, tr("File not found"),
                         tr("%1 is no longer there, so its pages cannot be read again.").arg(path));
    return;
  }
  enqueue(path, {}, true, doc_id,
          PendingIngest{.path = path, .open_when_done = viewer_->documentId() == doc_id});
}

void MainWindow::renameDocument(qint64 doc_id, const QString& name) {
  if (!lib_) return;
  if (Status st = lib_->rename_document(doc_id, name.toStdString()); !st) {
    showNotice(tr("Not renamed: %1").arg(fromStd(st.error().message)));
    return;
  }
  library_panel_->reload();
  if (viewer_->documentId() == doc_id) {
    if (auto doc = lib_->document(doc_id)) {
      viewer_->setDocumentTitle(fromStd(doc->shown_title()));
      setWindowTitle(QStringLiteral("%1 — Spillway").arg(viewer_->documentTitle()));
    }
  }
  emit documentRenamed(doc_id);
}

void MainWindow::removeDocument(qint64 doc_id, bool confirm) {
  if (!lib_) return;
  auto doc = lib_->document(doc_id);
  if (!doc) return;
  if (confirm &&
      QMessageBox::question(this, tr("Remove document"),
                            tr("Remove “%1” and its chats from the library? The PDF file itself is "
                               "not touched.")
                                .arg(fromStd(doc->shown_title()))) != QMessageBox::Yes) {
    return;
  }
  if (Status st = lib_->remove_document(doc_id); !st) {
    QMessageBox::warning(this, tr("Remove document"), fromStd(st.error().message));
    return;
  }
  if (viewer_->documentId() == doc_id) {
    viewer_->closeDocument();
    setWindowTitle(QStringLiteral("Spillway"));
  }
  library_panel_->reload();
  emit libraryChanged();
}

void MainWindow::showPage(qint64 doc_id, int page_no, const QString& highlight) {
  if (!lib_) return;
  auto doc = lib_->document(doc_id);
  if (!doc) {
    showNotice(fromStd(doc.error().message));
    return;
  }
  PageViewer::DocumentInfo info;
  info.id = doc->id;
  info.path = fromStd(doc->path);
  info.title = fromStd(doc->shown_title());
  info.n_pages = doc->n_pages;
  library_panel_->selectDocument(doc_id);
  last_doc_ = doc_id;
  last_page_ = page_no;
  viewer_->openDocument(info, page_no, highlight);
}

// --- window events ----------------------------------------------------------------------------

void MainWindow::closeEvent(QCloseEvent* event) {
  saveLayout();
  closing_ = true;
  ingest_->shutdown();  // a running ingest stops after its current page
  QMainWindow::closeEvent(event);
}

QStringList MainWindow::pdfsIn(const QMimeData* mime) const {
  QStringList out;
  if (!mime || !mime->hasUrls()) return out;
  for (const QUrl& url : mime->urls()) {
    if (!url.isLocalFile()) continue;
    const QString path = url.toLocalFile();
    const QFileInfo info(path);
    if (info.isDir()) {
      // A dropped folder: the PDFs directly inside it.
      for (const QFileInfo& f : QDir(path).entryInfoList(
               {QStringLiteral("*.pdf"), QStringLiteral("*.PDF")}, QDir::Files, QDir::Name)) {
        out << f.absoluteFilePath();
      }
    } else if (looksLikePdf(path) || info.isFile()) {
      out << path;  // anything else gets ingest's own message ("not a PDF ...")
    }
  }
  return out;
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!pdfsIn(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QStringList files = pdfsIn(event->mimeData());
  if (files.isEmpty()) return;
  event->acceptProposedAction();
  addFiles(files, true);
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  // Children that accept drops themselves (the search box, the chat's text box) would swallow a
  // dropped file; files go to the library from anywhere in this window.
  const auto type = event->type();
  // A press on the window itself (not on a child) is on a dock separator: the user lays the
  // docks out from now on.
  if (type == QEvent::MouseButtonPress && watched == this) docks_follow_size_ = false;
  if (type == QEvent::DragEnter || type == QEvent::DragMove || type == QEvent::Drop) {
    auto* w = qobject_cast<QWidget*>(watched);
    if (w && w != this && w->window() == this) {
      auto* drop = static_cast<QDropEvent*>(event);
      if (!pdfsIn(drop->mimeData()).isEmpty()) {
        if (type == QEvent::Drop) {
          dropEvent(drop);
        } else {
          drop->acceptProposedAction();
        }
        return true;
      }
    }
  }
  return QMainWindow::eventFilter(watched, event);
}

}  // namespace spw::ui
