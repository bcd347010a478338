// The main window: first-run size and docks, layout round trip through the library's settings,
// dropping PDFs (plain, encrypted with the password path, broken), showPage with highlights, the
// stored-text fallback, closing during an ingest, and a non-blank rendering of the window.
#include <gtest/gtest.h>
#include <QApplication>
#include <QDockWidget>
#include <QDropEvent>
#include <QFile>
#include <QGuiApplication>
#include <QLabel>
#include <QMimeData>
#include <QProcess>
#include <QPushButton>
#include <QScreen>
#include <QSet>
#include <QSignalSpy>
#include <QTest>
#include <QToolButton>
#include <QUrl>

#include <filesystem>
#include <string>
#include <vector>

#include "app/store/library.h"
#include "app/store/test_temp_dir.h"
#include "tests/support/pdf_builder.h"
#include "ui/activity_label.h"
#include "ui/ingest_progress.h"
#include "ui/library_panel.h"
#include "ui/main_window.h"
#include "ui/page_canvas.h"
#include "ui/page_viewer.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;
using app::testing::TempDir;

constexpr int kIngestTimeoutMs = 60'000;

// The bundled sample contract, from the source tree (the tests do not link the app's resources).
QString samplePdf() {
  return QString::fromStdString(
      (fs::path(SPILLWAY_SOURCE_DIR) / "resources" / "sample" / "spillway-sample-contract.pdf")
          .string());
}

// A PDF of `n_pages` pages; page i holds "page <i> <word_i>" and a line of filler.
fs::path writePdf(const fs::path& file, int n_pages, const std::string& title = "Test doc") {
  test::PdfDoc doc;
  doc.title = title;
  const std::vector<std::string> words = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"};
  for (int i = 0; i < n_pages; ++i) {
    test::PdfPage page;
    page.runs = test::column(
        {"Page " + std::to_string(i + 1) + " marker " + words[size_t(i) % words.size()] + "word",
         "The quick brown fox jumps over the lazy dog."},
        72, 720, 12, 16);
    doc.pages.push_back(std::move(page));
  }
  test::write_file(file, test::build_pdf(doc));
  return file;
}

MainWindowParams paramsFor(const TempDir& dir) {
  MainWindowParams p;
  p.version = QStringLiteral("test");
  p.data_dir = QString::fromStdString(dir.path().string());
  p.add_sample = false;
  return p;
}

bool waitIdle(MainWindow& w) {
  return QTest::qWaitFor([&w] { return w.pendingIngests() == 0; }, kIngestTimeoutMs);
}

// Drops `files` on `target` (a widget inside the window) as a file manager would.
void dropFiles(QWidget* target, const QStringList& files) {
  QMimeData mime;
  QList<QUrl> urls;
  for (const QString& f : files) urls << QUrl::fromLocalFile(f);
  mime.setUrls(urls);
  const QPointF pos(target->width() / 2.0, target->height() / 2.0);
  QDragEnterEvent enter(pos.toPoint(), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  ASSERT_TRUE(enter.isAccepted()) << "the window refused to take the dragged PDFs";
  QDropEvent drop(pos, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &drop);
}

// showPage and wait until the page is on screen (pages render on the viewer's thread).
void showPageAndWait(MainWindow& w, qint64 doc, int page, const QString& highlight = {}) {
  QSignalSpy shown(w.pageViewer(), &PageViewer::pageShown);
  w.showPage(doc, page, highlight);
  ASSERT_TRUE(shown.count() > 0 || shown.wait(kIngestTimeoutMs))
      << "page " << page << " never shown";
  // A resize while the page opens (the layout settling) renders it once more at the new
  // fit-width zoom, 80 ms later: that one finishes too.
  EXPECT_TRUE(QTest::qWaitFor([&w] { return !w.pageViewer()->isRendering(); }, kIngestTimeoutMs));
}

std::unique_ptr<app::Library> openLibrary(const TempDir& dir) {
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  EXPECT_TRUE(lib.ok()) << (lib.ok() ? "" : lib.error().message);
  return lib.ok() ? std::move(*lib) : nullptr;
}

TEST(MainWindowShell, FirstRunSizeDocksAndStatusBar) {
  TempDir dir("spillway-ui");
  MainWindow w(paramsFor(dir));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  EXPECT_EQ(w.size(), QSize(MainWindow::kDefaultWidth, MainWindow::kDefaultHeight));
  ASSERT_NE(w.chatDock(), nullptr);
  EXPECT_EQ(w.dockWidgetArea(w.chatDock()), Qt::RightDockWidgetArea);
  EXPECT_EQ(w.dockWidgetArea(w.dashboardDock()), Qt::BottomDockWidgetArea);
  EXPECT_EQ(w.dockWidgetArea(w.jobsDock()), Qt::BottomDockWidgetArea);
  EXPECT_EQ(w.dashboardDock()->objectName(), QStringLiteral("memoryDock"));
  EXPECT_EQ(w.jobsDock()->windowTitle(), QStringLiteral("Jobs"));

  auto* chat = new QLabel(QStringLiteral("chat widget"));
  w.setChatWidget(chat);
  EXPECT_EQ(w.chatDock()->widget(), chat);
  auto* dash = new QLabel(QStringLiteral("dashboard"));
  w.setDashboardWidget(dash);
  EXPECT_EQ(w.dashboardDock()->widget(), dash);
  auto* jobs = new QLabel(QStringLiteral("jobs"));
  w.setJobsWidget(jobs);
  EXPECT_EQ(w.jobsDock()->widget(), jobs);

  w.setBackendStatus(QStringLiteral("CPU — no CUDA driver found"));
  w.setModelStatus(QStringLiteral("stories260K"));
  w.setActivity(QStringLiteral("Idle"));
  EXPECT_EQ(w.backendStatus(), QStringLiteral("CPU — no CUDA driver found"));
  EXPECT_EQ(w.modelStatus(), QStringLiteral("stories260K"));
  EXPECT_EQ(w.activity(), QStringLiteral("Idle"));

  QSignalSpy settings(&w, &MainWindow::settingsRequested);
  auto* action = w.findChild<QAction*>(QStringLiteral("settingsAction"));
  ASSERT_NE(action, nullptr);
  action->trigger();
  EXPECT_EQ(settings.count(), 1);
  // Ctrl+, opens Settings too.
  EXPECT_TRUE(action->shortcuts().contains(QKeySequence(Qt::CTRL | Qt::Key_Comma)));
  w.activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&w));
  QTest::keyClick(&w, Qt::Key_Comma, Qt::ControlModifier);
  EXPECT_EQ(settings.count(), 2);
}

TEST(MainWindowShell, MemoryAndJobsSideBySideAndThePageGetsMostOfTheHeight) {
  TempDir dir("spillway-ui");
  MainWindow w(paramsFor(dir));
  w.setDashboardWidget(new QLabel(QStringLiteral("dashboard")));
  w.setJobsWidget(new QLabel(QStringLiteral("jobs")));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  QApplication::processEvents();
  // Both bottom docks on screen at once, not tabs of one place.
  EXPECT_TRUE(w.dashboardDock()->isVisible());
  EXPECT_TRUE(w.jobsDock()->isVisible());
  EXPECT_TRUE(w.tabifiedDockWidgets(w.dashboardDock()).isEmpty());
  const QRect mem = w.dashboardDock()->geometry(), jobs = w.jobsDock()->geometry();
  EXPECT_FALSE(mem.intersects(jobs));
  EXPECT_EQ(mem.top(), jobs.top());  // side by side
  EXPECT_GT(mem.width(), 300);
  EXPECT_GT(jobs.width(), 300);
  // At 1280x800 the page viewer has most of the height; the bottom docks start small.
  const int viewer_h = w.pageViewer()->height();
  EXPECT_GE(viewer_h, w.height() / 2) << "viewer " << viewer_h << " of " << w.height();
  EXPECT_LE(mem.height(), w.height() / 3) << "bottom docks " << mem.height();
}

// Notices in the status bar (a document that cannot be opened, a refused name) show over the
// activity for a while and clear by themselves; the same one again is counted, not stacked.
TEST(MainWindowShell, StatusBarNoticesAreCountedAndClear) {
  TempDir dir("spillway-ui");
  MainWindow w(paramsFor(dir));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  ASSERT_TRUE(QTest::qWaitFor([&] { return w.activity() == QStringLiteral("Ready"); }, 10000));
  w.showPage(999, 1);  // no such document
  EXPECT_EQ(w.activity(), QStringLiteral("no document with id 999"));
  w.showPage(999, 1);
  w.showPage(999, 2);
  EXPECT_EQ(w.activity(), QStringLiteral("no document with id 999 (×3)"));
  // The activity goes on underneath and shows again when the notice clears.
  w.setActivity(QStringLiteral("Adding 1 document…"));
  EXPECT_EQ(w.activity(), QStringLiteral("no document with id 999 (×3)"));
  w.showNotice(QStringLiteral("Not renamed: too long"));
  EXPECT_EQ(w.activity(), QStringLiteral("Not renamed: too long"));
  w.activityLabel()->setNoticeTimeout(30);
  w.showNotice(QStringLiteral("Not renamed: too long"));
  ASSERT_TRUE(
      QTest::qWaitFor([&] { return w.activity() == QStringLiteral("Adding 1 document…"); }, 5000));
  EXPECT_TRUE(w.activityLabel()->notice().isEmpty());
}

// With 2x scaling a full-HD screen is 960x540 logical: the window (1280x800 by default, or a
// bigger saved layout) is made to fit it. QT_SCALE_FACTOR must be set before the application
// starts, so the checks run in a child process of this test binary on an offscreen 1920x1080
// screen.
TEST(MainWindowShell, At2xScalingTheWindowFitsAFullHdScreen) {
  if (qEnvironmentVariableIsSet("SPILLWAY_TEST_SCALED_CHILD")) {
    const QScreen* screen = QGuiApplication::primaryScreen();
    ASSERT_NE(screen, nullptr);
    ASSERT_EQ(screen->devicePixelRatio(), 2.0);
    const QRect avail = screen->availableGeometry();
    ASSERT_EQ(avail.size(), QSize(960, 540));
    TempDir dir("spillway-ui-2x");
    {
      MainWindowParams p = paramsFor(dir);
      MainWindow w(p);
      w.show();
      ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
      EXPECT_TRUE(avail.contains(w.frameGeometry()))
          << w.frameGeometry().width() << "x" << w.frameGeometry().height() << "+"
          << w.frameGeometry().x() << "+" << w.frameGeometry().y();
      EXPECT_LE(w.minimumSizeHint().width(), avail.width());
      EXPECT_LE(w.minimumSizeHint().height(), avail.height());
      // A layout saved on a bigger monitor.
      w.resize(1600, 1000);
      w.move(300, 200);
      w.saveLayout();
    }
    MainWindow again(paramsFor(dir));
    again.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&again));
    EXPECT_TRUE(avail.contains(again.frameGeometry()))
        << again.frameGeometry().width() << "x" << again.frameGeometry().height() << "+"
        << again.frameGeometry().x() << "+" << again.frameGeometry().y();
    return;
  }
  TempDir tmp("spillway-ui-2x-screen");
  const fs::path config = tmp / "screen.json";
  test::write_file(config,
                   R"({"screens": [{"name": "FullHD", "x": 0, "y": 0, "width": 1920, )"
                   R"("height": 1080, "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})");
  QProcess child;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("SPILLWAY_TEST_SCALED_CHILD"), QStringLiteral("1"));
  env.insert(QStringLiteral("QT_SCALE_FACTOR"), QStringLiteral("2"));
  env.insert(QStringLiteral("QT_QPA_PLATFORM"),
             QStringLiteral("offscreen:configfile=") + QString::fromStdString(config.string()));
  child.setProcessEnvironment(env);
  child.setProcessChannelMode(QProcess::MergedChannels);
  child.start(
      QCoreApplication::applicationFilePath(),
      {QStringLiteral("--gtest_filter=MainWindowShell.At2xScalingTheWindowFitsAFullHdScreen")});
  ASSERT_TRUE(child.waitForFinished(120'000));
  const QString out = QString::fromUtf8(child.readAll());
  EXPECT_EQ(child.exitCode(), 0) << out.toStdString();
  EXPECT_TRUE(out.contains(QStringLiteral("[  PASSED  ] 1 test"))) << out.toStdString();
}

TEST(MainWindowShell, GeometryAndDocksRoundTripThroughTheLibrary) {
  TempDir dir("spillway-ui");
  {
    MainWindow w(paramsFor(dir));
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    w.resize(1000, 700);
    w.jobsDock()->hide();
    QTest::qWait(20);
    w.close();  // saves the layout
  }
  {
    auto lib = openLibrary(dir);
    ASSERT_TRUE(lib);
    auto geometry = lib->setting(MainWindow::kGeometryKey);
    ASSERT_TRUE(geometry.ok() && geometry->has_value()) << "no geometry row in the settings table";
    EXPECT_FALSE((*geometry)->empty());
    auto state = lib->setting(MainWindow::kStateKey);
    ASSERT_TRUE(state.ok() && state->has_value());
  }
  MainWindow again(paramsFor(dir));
  again.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&again));
  EXPECT_EQ(again.size(), QSize(1000, 700));
  EXPECT_TRUE(again.jobsDock()->isHidden());
  EXPECT_FALSE(again.chatDock()->isHidden());
}

TEST(MainWindowShell, DroppingPdfsAddsDocumentsAndPages) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path a = writePdf(files / "three.pdf", 3, "Three pages");
  const fs::path b = writePdf(files / "two.pdf", 2, "Two pages");
  MainWindow w(paramsFor(dir));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  QSignalSpy finished(&w, &MainWindow::ingestFinished);
  // Dropped on the page viewer, not the window itself: anywhere in the window counts.
  dropFiles(w.pageViewer(),
            {QString::fromStdString(a.string()), QString::fromStdString(b.string())});
  EXPECT_EQ(w.pendingIngests(), 2);
  ASSERT_TRUE(waitIdle(w));
  EXPECT_EQ(finished.count(), 2);

  auto lib = openLibrary(dir);  // a second connection sees what the worker committed
  ASSERT_TRUE(lib);
  auto docs = lib->documents();
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].title, "Three pages");
  EXPECT_EQ((*docs)[0].n_pages, 3);
  EXPECT_EQ((*docs)[1].n_pages, 2);
  auto page2 = lib->page((*docs)[0].id, 2);
  ASSERT_TRUE(page2.ok());
  EXPECT_NE(page2->text.find("bravoword"), std::string::npos) << page2->text;

  const QList<qint64> listed = w.libraryPanel()->listedDocuments();
  EXPECT_EQ(listed, (QList<qint64>{(*docs)[0].id, (*docs)[1].id}));
  EXPECT_EQ(w.libraryPanel()->documentTitle((*docs)[0].id), QStringLiteral("Three pages"));
  // The first dropped file is opened.
  EXPECT_EQ(w.pageViewer()->documentId(), (*docs)[0].id);
  EXPECT_EQ(w.pageViewer()->currentPage(), 1);
  EXPECT_FALSE(w.pageViewer()->showingStoredText());
}

TEST(MainWindowShell, DroppingAFolderAddsThePdfsInIt) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  writePdf(files / "a.pdf", 1, "A");
  writePdf(files / "b.pdf", 2, "B");
  test::write_file(files / "notes.txt", "not a PDF");
  MainWindow w(paramsFor(dir));
  w.show();
  dropFiles(w.libraryPanel(), {QString::fromStdString(files.path().string())});
  EXPECT_EQ(w.pendingIngests(), 2) << "the two PDFs, not the text file";
  ASSERT_TRUE(waitIdle(w));
  EXPECT_EQ(w.libraryPanel()->listedDocuments().size(), 2);
}

TEST(MainWindowShell, ReopensThePageLastShown) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path pdf = writePdf(files / "five.pdf", 5);
  qint64 doc = 0;
  {
    MainWindow w(paramsFor(dir));
    w.show();
    w.addFiles({QString::fromStdString(pdf.string())});
    ASSERT_TRUE(waitIdle(w));
    doc = w.pageViewer()->documentId();
    ASSERT_GT(doc, 0);
    w.showPage(doc, 4);
    w.close();
  }
  MainWindow again(paramsFor(dir));
  QSignalSpy ready(&again, &MainWindow::readyForScreenshot);
  again.show();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, kIngestTimeoutMs));
  EXPECT_EQ(again.pageViewer()->documentId(), doc);
  EXPECT_EQ(again.pageViewer()->currentPage(), 4);
}

TEST(MainWindowShell, BrokenFileFailsInlineAndTheNextOneStillWorks) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path bad = files / "broken.pdf";
  test::write_file(bad, "%PDF-1.4\nthis is not really a PDF\n");
  const fs::path good = writePdf(files / "good.pdf", 1, "Good");
  MainWindow w(paramsFor(dir));
  w.show();
  const QList<qint64> ids = w.addFiles({QString::fromStdString(bad.string())});
  ASSERT_TRUE(waitIdle(w));
  IngestProgressPanel* panel = w.libraryPanel()->ingestPanel();
  ASSERT_TRUE(panel->hasRow(ids[0])) << "a failed ingest keeps its row with the message";
  EXPECT_TRUE(panel->statusText(ids[0]).contains(QStringLiteral("broken.pdf")))
      << panel->statusText(ids[0]).toStdString();
  EXPECT_TRUE(w.libraryPanel()->listedDocuments().isEmpty());

  w.addFiles({QString::fromStdString(good.string())});
  ASSERT_TRUE(waitIdle(w));
  EXPECT_EQ(w.libraryPanel()->listedDocuments().size(), 1);
}

TEST(MainWindowShell, EncryptedPdfGoesThroughThePasswordPath) {
  if (!test::on_path("qpdf")) GTEST_SKIP() << "qpdf not installed (needed to encrypt the PDF)";
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path plain = writePdf(files / "plain.pdf", 2, "Secret terms");
  const fs::path locked = files / "locked.pdf";
  const std::string cmd = "qpdf --encrypt 'open sesame' owner-pw 256 -- '" + plain.string() +
                          "' '" + locked.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  MainWindow w(paramsFor(dir));
  w.show();
  QList<bool> asked;  // `wrong` of each prompt
  w.setPasswordProvider([&asked](const QString& file, bool wrong) -> std::optional<QString> {
    EXPECT_TRUE(file.endsWith(QStringLiteral("locked.pdf")));
    asked << wrong;
    return asked.size() == 1 ? QStringLiteral("not it") : QStringLiteral("open sesame");
  });
  w.addFiles({QString::fromStdString(locked.string())});
  ASSERT_TRUE(waitIdle(w));
  EXPECT_EQ(asked, (QList<bool>{false, true})) << "asked once, then again after a wrong password";

  auto lib = openLibrary(dir);
  ASSERT_TRUE(lib);
  auto docs = lib->documents();
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_TRUE((*docs)[0].encrypted);
  EXPECT_EQ((*docs)[0].n_pages, 2);
  EXPECT_TRUE(
      w.libraryPanel()->documentBadges((*docs)[0].id).contains(QStringLiteral("encrypted")));
  // The password it was added with shows its pages for the rest of this session.
  const qint64 id = (*docs)[0].id;
  QSignalSpy shown(w.pageViewer(), &PageViewer::pageShown);
  w.showPage(id, 2);
  ASSERT_TRUE(shown.count() > 0 || shown.wait(10000));
  EXPECT_FALSE(w.pageViewer()->showingStoredText());
  EXPECT_FALSE(w.pageViewer()->isLocked());
  w.close();

  // The next session has no password: the stored text and an Unlock… button; a wrong password
  // is asked again, the right one shows the page.
  MainWindow again(paramsFor(dir));
  again.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&again));
  PageViewer* viewer = again.pageViewer();
  QList<bool> prompts;
  viewer->setPasswordPrompt([&prompts](const QString& file, bool wrong) -> std::optional<QString> {
    EXPECT_TRUE(file.endsWith(QStringLiteral("locked.pdf")));
    prompts << wrong;
    return prompts.size() == 1 ? QStringLiteral("still not it") : QStringLiteral("open sesame");
  });
  again.showPage(id, 2);
  EXPECT_TRUE(viewer->showingStoredText());
  EXPECT_TRUE(viewer->isLocked());
  auto* unlock = viewer->findChild<QPushButton*>(QStringLiteral("unlockButton"));
  ASSERT_NE(unlock, nullptr);
  EXPECT_TRUE(unlock->isVisible());
  QSignalSpy again_shown(viewer, &PageViewer::pageShown);
  QTest::mouseClick(unlock, Qt::LeftButton);
  EXPECT_EQ(prompts, (QList<bool>{false, true}));
  ASSERT_TRUE(QTest::qWaitFor(
      [&] { return !viewer->showingStoredText() && !viewer->isRendering(); }, 10000));
  EXPECT_FALSE(viewer->isLocked());
  EXPECT_EQ(viewer->currentPage(), 2);
  EXPECT_TRUE(viewer->canvas()->hasPage());
  again.close();

  // Never stored: not in any file of the data folder (database, its journal, settings).
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    if (!entry.is_regular_file()) continue;
    EXPECT_EQ(test::read_file(entry.path()).find("open sesame"), std::string::npos) << entry.path();
  }
}

TEST(MainWindowShell, SkippingThePasswordLeavesNothingStored) {
  if (!test::on_path("qpdf")) GTEST_SKIP() << "qpdf not installed (needed to encrypt the PDF)";
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path plain = writePdf(files / "plain.pdf", 1);
  const fs::path locked = files / "locked.pdf";
  const std::string cmd =
      "qpdf --encrypt pw owner-pw 256 -- '" + plain.string() + "' '" + locked.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  MainWindow w(paramsFor(dir));
  w.setPasswordProvider([](const QString&, bool) { return std::optional<QString>(); });
  const QList<qint64> ids = w.addFiles({QString::fromStdString(locked.string())});
  ASSERT_TRUE(waitIdle(w));
  EXPECT_TRUE(w.libraryPanel()->listedDocuments().isEmpty());
  EXPECT_TRUE(
      w.libraryPanel()->ingestPanel()->statusText(ids[0]).contains(QStringLiteral("encrypted")));
}

TEST(MainWindowShell, ShowPageMovesTheViewerAndHighlightsTheQuote) {
  TempDir dir("spillway-ui");
  MainWindow w(paramsFor(dir));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  w.addFiles({samplePdf()});
  ASSERT_TRUE(waitIdle(w));
  auto lib = openLibrary(dir);
  ASSERT_TRUE(lib);
  auto hits = lib->search("governing law england", 5);
  ASSERT_TRUE(hits.ok());
  ASSERT_FALSE(hits->empty()) << "the sample contract has a Governing Law clause";
  const qint64 doc = (*hits)[0].doc_id;
  const int page = (*hits)[0].page_no;
  ASSERT_GT(page, 1);

  QSignalSpy shown(w.pageViewer(), &PageViewer::pageShown);
  showPageAndWait(w, doc, page, QStringLiteral("laws of England and Wales"));
  ASSERT_GE(shown.count(), 1);
  EXPECT_EQ(shown.last()[0].toLongLong(), doc);
  EXPECT_EQ(shown.last()[1].toInt(), page);
  EXPECT_EQ(w.pageViewer()->currentPage(), page);
  EXPECT_EQ(w.pageViewer()->highlight(), QStringLiteral("laws of England and Wales"));
  EXPECT_GT(w.pageViewer()->highlightCount(), 0) << "the quote is on that page";
  EXPECT_EQ(w.libraryPanel()->selectedDocuments(), QList<qint64>{doc});

  // A quote that is not on the page highlights nothing; a page past the end is clamped.
  showPageAndWait(w, doc, 1, QStringLiteral("laws of England and Wales"));
  EXPECT_EQ(w.pageViewer()->highlightCount(), 0);
  showPageAndWait(w, doc, 99);
  EXPECT_EQ(w.pageViewer()->currentPage(), w.pageViewer()->pageCount());

  // Zoom: explicit steps leave fit-width mode.
  PageViewer* v = w.pageViewer();
  EXPECT_TRUE(v->fitWidth());
  v->setZoom(1.5);
  EXPECT_FALSE(v->fitWidth());
  EXPECT_DOUBLE_EQ(v->zoom(), 1.5);
  v->setZoom(100);
  EXPECT_DOUBLE_EQ(v->zoom(), PageViewer::kMaxZoom);
}

TEST(MainWindowShell, MissingPdfShowsTheStoredTextWithANote) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path pdf = writePdf(files / "moving.pdf", 3);
  MainWindow w(paramsFor(dir));
  w.show();
  w.addFiles({QString::fromStdString(pdf.string())}, false);
  ASSERT_TRUE(waitIdle(w));
  const QList<qint64> docs = w.libraryPanel()->listedDocuments();
  ASSERT_EQ(docs.size(), 1);
  fs::remove(pdf);
  w.pageViewer()->closeDocument();
  w.showPage(docs[0], 3, QStringLiteral("charlieword"));
  EXPECT_TRUE(w.pageViewer()->showingStoredText());
  EXPECT_EQ(w.pageViewer()->currentPage(), 3);
  EXPECT_EQ(w.pageViewer()->highlightCount(), 1);
  auto* note = w.pageViewer()->findChild<QLabel*>(QStringLiteral("storedTextNote"));
  ASSERT_NE(note, nullptr);
  EXPECT_TRUE(note->text().contains(QStringLiteral("no longer at"))) << note->text().toStdString();
}

TEST(MainWindowShell, CancelFromTheRowStoresNothing) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  const fs::path big = writePdf(files / "big.pdf", 300, "Big");
  MainWindow w(paramsFor(dir));
  w.show();
  const QList<qint64> ids = w.addFiles({QString::fromStdString(big.string())});
  // The flag is set long before 300 pages are read; the worker stops at the next page.
  auto* cancel =
      w.libraryPanel()->ingestPanel()->findChild<QToolButton*>(QStringLiteral("cancelButton"));
  ASSERT_NE(cancel, nullptr);
  cancel->click();
  ASSERT_TRUE(waitIdle(w));
  EXPECT_EQ(w.libraryPanel()->ingestPanel()->statusText(ids[0]), QStringLiteral("Cancelled"));
  auto lib = openLibrary(dir);
  ASSERT_TRUE(lib);
  auto docs = lib->documents();
  ASSERT_TRUE(docs.ok());
  EXPECT_TRUE(docs->empty()) << "a cancelled ingest stores nothing";
}

TEST(MainWindowShell, ClosingDuringAnIngestStopsCleanly) {
  TempDir dir("spillway-ui");
  TempDir files("spillway-ui-files");
  QStringList paths;
  for (int i = 0; i < 4; ++i) {
    paths << QString::fromStdString(
        writePdf(files / ("big" + std::to_string(i) + ".pdf"), 120, "Big " + std::to_string(i))
            .string());
  }
  {
    MainWindow w(paramsFor(dir));
    w.show();
    w.addFiles(paths);
    w.close();  // cancels and joins the ingest thread; must not hang
  }
  // Whatever got in is whole: every stored document has all its pages.
  auto lib = openLibrary(dir);
  ASSERT_TRUE(lib);
  auto docs = lib->documents();
  ASSERT_TRUE(docs.ok());
  EXPECT_LT(docs->size(), 4u) << "closing should have cancelled at least the queued files";
  for (const auto& d : *docs) {
    auto pages = lib->pages(d.id);
    ASSERT_TRUE(pages.ok());
    EXPECT_EQ(int(pages->size()), 120);
  }
}

TEST(MainWindowShell, RenderedWindowIsNotBlank) {
  TempDir dir("spillway-ui");
  MainWindowParams params = paramsFor(dir);
  params.files = {samplePdf()};  // as on the command line
  MainWindow w(params);
  QSignalSpy ready(&w, &MainWindow::readyForScreenshot);
  w.show();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, kIngestTimeoutMs));
  EXPECT_TRUE(ready[0][0].toBool()) << "a page was shown";
  const QImage shot = w.grab().toImage();
  ASSERT_EQ(shot.size(), QSize(MainWindow::kDefaultWidth, MainWindow::kDefaultHeight));
  QSet<QRgb> colours;
  const QRgb background = shot.pixel(shot.width() / 2, shot.height() - 40);
  int64_t differing = 0;
  for (int y = 0; y < shot.height(); y += 2) {
    for (int x = 0; x < shot.width(); x += 2) {
      const QRgb c = shot.pixel(x, y);
      colours.insert(c);
      if (c != background) ++differing;
    }
  }
  EXPECT_GT(colours.size(), 64) << "a rendered page and widgets have many colours";
  EXPECT_GT(differing, int64_t(shot.width() / 2) * (shot.height() / 2) / 10);
}

}  // namespace
}  // namespace spw::ui
