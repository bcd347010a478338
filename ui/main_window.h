// The main window (docs/DESIGN.md §6): the library (left dock), the PDF page viewer (centre), chat
// (right dock), the memory dashboard and job queue (bottom docks, side by side). The chat,
// dashboard and jobs widgets are made elsewhere and handed in with the setters; until then the
// docks hold placeholders that say what will be there.
//
// Documents come in by drag and drop anywhere on the window, File > Open or the command line;
// they are ingested in the background (app/worker/ingest_worker.h) with a progress row each.
// The window's geometry and dock layout are kept in the library's settings table (per data
// folder), as are "the sample was added" and the last page read.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <QHash>
#include <QList>
#include <QMainWindow>
#include <QSize>
#include <QString>
#include <QStringList>

#include "app/worker/ingest_worker.h"

class QDockWidget;
class QMimeData;
class QLabel;

namespace spw::app {
class Library;
}  // namespace spw::app

namespace spw::ui {

class ActivityLabel;
class LibraryPanel;
class PageViewer;

/// What the window gets from outside the UI (no engine types here: the UI talks to app/ only).
struct MainWindowParams {
  QString version;     // "0.1.0"
  QString data_dir;    // holds library.sqlite3 (must exist and be writable)
  QString model_path;  // --model: for the engine worker (the window only shows its name)
  QStringList files;   // PDFs to ingest after show(); the first one is opened
  /// First start: when the library is empty and the sample was never added, ingest this PDF
  /// (a Qt resource path or a file; copied to <data_dir>/sample/ first) and open it.
  bool add_sample = true;
  QString sample_pdf = QStringLiteral(":/spillway/sample/spillway-sample-contract.pdf");
  bool restore_layout = true;  // restore the saved geometry and docks (else 1280x800 default)
};

class MainWindow final : public QMainWindow {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(MainWindow)

 public:
  static constexpr int kDefaultWidth = 1280;
  static constexpr int kDefaultHeight = 800;
  /// Pixels of the screen's free area left around a window made to fit it (the frame's).
  static constexpr int kScreenMargin = 40;
  /// The docks' starting sizes for a window of `size`: the library and chat widths (320 and 380
  /// in the 1280-px layout, each 2 px narrower per 5 px of a narrower window, at least 150 and
  /// 190, so the page keeps about half the width) and the bottom docks' height (a quarter).
  struct DockSizes {
    int library = 0, chat = 0, bottom = 0;
  };
  static DockSizes dockSizesFor(QSize size);
  /// Whether the docks still follow the window's size (no saved layout was restored and no dock
  /// separator has been dragged).
  bool docksFollowWindowSize() const { return docks_follow_size_; }
  /// Library settings keys.
  static constexpr const char* kGeometryKey = "ui.geometry";         // base64 saveGeometry()
  static constexpr const char* kStateKey = "ui.window_state";        // base64 saveState()
  static constexpr const char* kSampleAddedKey = "ui.sample_added";  // "1" once ingested
  static constexpr const char* kLastDocKey = "ui.last_document";     // "id:page"
  /// A document's zoom: "ui.zoom.<id>" -> "1.44" (1.0 = 100%) or "fit" (fit width).
  static constexpr const char* kZoomKeyPrefix = "ui.zoom.";

  /// Asks for an encrypted file's password (`wrong`: the last one failed); nullopt skips the
  /// file. The default shows PasswordDialog; tests inject their own.
  using PasswordProvider = std::function<std::optional<QString>(const QString& file, bool wrong)>;

  explicit MainWindow(const MainWindowParams& params, QWidget* parent = nullptr);
  /// Stops a running ingest (cancel flag, then joins its thread).
  ~MainWindow() override;

  const MainWindowParams& params() const { return params_; }

  // --- widgets made elsewhere (the window takes ownership) ------------------------------
  void setChatWidget(QWidget* widget);
  void setDashboardWidget(QWidget* widget);
  void setJobsWidget(QWidget* widget);
  QDockWidget* libraryDock() const { return library_dock_; }
  QDockWidget* chatDock() const { return chat_dock_; }
  QDockWidget* dashboardDock() const { return memory_dock_; }
  QDockWidget* jobsDock() const { return jobs_dock_; }

  // --- status bar -------------------------------------------------------------------------
  /// "CUDA: RTX 4090, 20.1 GiB free" / "CPU — no CUDA driver found (...)".
  void setBackendStatus(const QString& text);
  /// The model's name, or how to choose one.
  void setModelStatus(const QString& text);
  /// What is happening now ("Adding 2 files…", "Ready").
  void setActivity(const QString& text);
  /// A notice over the activity for a while (ActivityLabel): a document that could not be
  /// opened, a name refused. It clears itself; the same one again is counted.
  void showNotice(const QString& text);
  ActivityLabel* activityLabel() const { return activity_label_; }
  QString backendStatus() const;
  QString modelStatus() const;
  /// The status bar's first field as shown: a notice, else the activity.
  QString activity() const;

  // --- documents --------------------------------------------------------------------------
  /// Tokens of each document for the current model (the library's Tokens column).
  void setTokenCounts(const QHash<qint64, qint64>& counts);
  /// The loaded model's context (0: none): documents longer than it get a badge.
  void setModelContext(qint64 n_ctx);
  /// Queues PDFs for ingest (what a drop does). `open_first`: open the first file's document
  /// when it is in. Returns the ingest request ids.
  QList<qint64> addFiles(const QStringList& paths, bool open_first = true);
  /// Gives a document a new name ("" : back to the title from the PDF), stored in the library;
  /// the list, the viewer's title and documentRenamed follow. A name the library refuses (too
  /// long) is said in the status bar.
  void renameDocument(qint64 doc_id, const QString& name);
  /// Removes a document from the library (asks first when `confirm`).
  void removeDocument(qint64 doc_id, bool confirm = true);
  /// Reads a document's scanned pages again with OCR, in place: the same id, its name, chats
  /// and jobs stay (when the build has tesseract; says so when not).
  void ocrDocument(qint64 doc_id);
  void setPasswordProvider(PasswordProvider provider) { password_provider_ = std::move(provider); }
  /// Ingest requests queued or running.
  int pendingIngests() const;
  /// Writes the geometry and dock layout to the library's settings (also done on close).
  void saveLayout();

  LibraryPanel* libraryPanel() const { return library_panel_; }
  PageViewer* pageViewer() const { return viewer_; }
  /// The GUI thread's library connection (null when it failed to open; the window says why).
  app::Library* library() const { return lib_.get(); }

 public slots:
  /// Opens page `page_no` of `doc_id` in the viewer with `highlight` (a quote or search words)
  /// marked, selecting the document in the library. Unknown documents: a note in the status bar.
  void showPage(qint64 doc_id, int page_no, const QString& highlight = {});
  /// File > Open: a multi-select file dialog.
  void openFiles();

 signals:
  void documentSelectionChanged(QList<qint64> doc_ids);
  void settingsRequested();
  /// Documents were added or removed (token counts, chat document lists may need refreshing).
  void libraryChanged();
  /// A document got a new name (titles shown elsewhere may need refreshing).
  void documentRenamed(qint64 doc_id);
  /// One ingest request ended (after the window handled it: password retry, rows, reload).
  void ingestFinished(spw::app::IngestOutcome outcome);
  /// Once per window: the first page is on screen, or start-up ended with nothing to show.
  void readyForScreenshot(bool page_shown);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct PendingIngest {
    QString path;
    bool open_when_done = false;
    bool is_sample = false;
    bool ocr = false;  // set by enqueue: what a password retry asks again
    qint64 replace_doc_id = 0;
    QString password{};  // the viewer shows the document with it (memory only, never stored)
  };
  void buildMenus();
  void buildDocks();
  void restoreLayout();
  /// Makes the window fit the screen's available area (smaller and moved in when it does not).
  void fitToScreen();
  void startup();
  void addSample();
  qint64 enqueue(const QString& path, const QString& password, bool ocr, qint64 replace_doc_id,
                 PendingIngest pending);
  void onIngestFinished(const app::IngestOutcome& outcome);
  void updateIngestActivity();
  void checkScreenshotReady();
  QStringList pdfsIn(const QMimeData* mime) const;

  MainWindowParams params_;
  std::unique_ptr<app::Library> lib_;
  QString lib_error_;
  app::IngestQueue* ingest_ = nullptr;
  LibraryPanel* library_panel_ = nullptr;
  PageViewer* viewer_ = nullptr;
  QDockWidget* library_dock_ = nullptr;
  QDockWidget* chat_dock_ = nullptr;
  QDockWidget* memory_dock_ = nullptr;
  QDockWidget* jobs_dock_ = nullptr;
  ActivityLabel* activity_label_ = nullptr;
  QLabel* model_label_ = nullptr;
  QLabel* backend_label_ = nullptr;
  PasswordProvider password_provider_;
  QHash<qint64, PendingIngest> pending_;
  qint64 last_doc_ = 0;  // the page on screen, saved with the layout
  int last_page_ = 0;
  bool screenshot_signalled_ = false;
  bool startup_done_ = false;
  bool closing_ = false;
  bool docks_follow_size_ = true;
};

}  // namespace spw::ui
