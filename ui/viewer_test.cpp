// Reading in the page viewer as a person does it: the wheel goes on to the next page at the
// bottom of one (and back at the top), Home/End, each document's zoom remembered (in the
// library, across restarts), text selected by dragging over the page and copied with Ctrl+C.
#include <gtest/gtest.h>
#include <QApplication>
#include <QClipboard>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>

#include <filesystem>
#include <string>
#include <vector>

#include "app/store/library.h"
#include "app/store/test_temp_dir.h"
#include "tests/support/pdf_builder.h"
#include "ui/library_panel.h"
#include "ui/main_window.h"
#include "ui/page_canvas.h"
#include "ui/page_viewer.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;
using app::testing::TempDir;

// `n_pages` pages, each with two lines: "Page <i> alpha bravo charlie" / "delta echo foxtrot";
// page 2 has a third, "Signed at the oﬃce." (the ligature character U+FB03, as text layers have).
fs::path writePdf(const fs::path& file, int n_pages, const std::string& title) {
  test::PdfDoc doc;
  doc.title = title;
  doc.custom_map = {{'#', U'\uFB03'}};
  for (int i = 0; i < n_pages; ++i) {
    test::PdfPage page;
    page.runs = test::column(
        {"Page " + std::to_string(i + 1) + " alpha bravo charlie", "delta echo foxtrot"}, 72, 720,
        12, 16);
    if (i == 1) page.runs.push_back(test::PdfTextRun{72, 688, 12, "Signed at the o#ce.", 1, 0});
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
  p.restore_layout = false;
  return p;
}

// Adds the files and waits for them; returns their ids in the order given.
QList<qint64> addAndWait(MainWindow& w, const QStringList& files) {
  w.addFiles(files, false);
  EXPECT_TRUE(QTest::qWaitFor([&w] { return w.pendingIngests() == 0; }, 60'000));
  return w.libraryPanel()->listedDocuments();
}

// Waits until page `page_no` is on screen (rendered, not just asked for).
bool waitForPage(PageViewer* v, int page_no) {
  return QTest::qWaitFor(
      [&] { return v->currentPage() == page_no && !v->isRendering() && v->canvas()->hasPage(); },
      10'000);
}

void wheel(QWidget* target, int dy) {
  const QPointF pos(target->width() / 2.0, target->height() / 2.0);
  QWheelEvent e(pos, target->mapToGlobal(pos), QPoint(), QPoint(0, dy), Qt::NoButton,
                Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(target, &e);
}

TEST(PageViewerReading, TheWheelGoesOnToTheNextPageAndHomeEndGoToTheEnds) {
  TempDir dir("spillway-viewer");
  TempDir files("spillway-viewer-files");
  MainWindow w(paramsFor(dir));
  w.resize(1280, 800);
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  const QList<qint64> ids =
      addAndWait(w, {QString::fromStdString(writePdf(files / "five.pdf", 5, "Five").string())});
  ASSERT_EQ(ids.size(), 1);
  PageViewer* v = w.pageViewer();
  w.showPage(ids[0], 1);
  v->setZoom(2.0);  // taller than the view: the page scrolls
  ASSERT_TRUE(waitForPage(v, 1));
  auto* scroll = v->findChild<QScrollArea*>(QStringLiteral("pageScroll"));
  ASSERT_NE(scroll, nullptr);
  QScrollBar* bar = scroll->verticalScrollBar();
  ASSERT_GT(bar->maximum(), 0) << "the page at 200% is taller than the view";

  // Inside the page the wheel scrolls it.
  wheel(scroll->viewport(), -120);
  EXPECT_EQ(v->currentPage(), 1);
  EXPECT_GT(bar->value(), 0);
  // At its bottom, the next notch shows the next page from its top.
  bar->setValue(bar->maximum());
  wheel(scroll->viewport(), -120);
  ASSERT_TRUE(waitForPage(v, 2));
  EXPECT_EQ(bar->value(), 0);
  // At the top, a notch up goes back to the previous page, at its bottom.
  wheel(scroll->viewport(), 120);
  ASSERT_TRUE(waitForPage(v, 1));
  EXPECT_EQ(bar->value(), bar->maximum());
  EXPECT_GT(bar->maximum(), 0);
  // Half a notch (a touchpad) past the edge is not yet a page.
  bar->setValue(bar->maximum());
  wheel(scroll->viewport(), -60);
  EXPECT_EQ(v->currentPage(), 1);
  wheel(scroll->viewport(), -60);
  ASSERT_TRUE(waitForPage(v, 2));

  // Home and End, with the focus on the page.
  v->canvas()->setFocus();
  QTest::keyClick(v->canvas(), Qt::Key_End);
  ASSERT_TRUE(waitForPage(v, 5));
  // The last page: the wheel stops there.
  bar->setValue(bar->maximum());
  wheel(scroll->viewport(), -120);
  QApplication::processEvents();
  EXPECT_EQ(v->currentPage(), 5);
  QTest::keyClick(v->canvas(), Qt::Key_Home);
  ASSERT_TRUE(waitForPage(v, 1));
}

TEST(PageViewerReading, EachDocumentKeepsItsZoomAcrossRestarts) {
  TempDir dir("spillway-viewer-zoom");
  TempDir files("spillway-viewer-zoom-files");
  const QStringList pdfs = {QString::fromStdString(writePdf(files / "a.pdf", 2, "A").string()),
                            QString::fromStdString(writePdf(files / "b.pdf", 2, "B").string())};
  qint64 a = 0, b = 0;
  {
    MainWindow w(paramsFor(dir));
    w.resize(1280, 800);
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    const QList<qint64> ids = addAndWait(w, pdfs);
    ASSERT_EQ(ids.size(), 2);
    a = ids[0];
    b = ids[1];
    PageViewer* v = w.pageViewer();
    w.showPage(a, 1);
    ASSERT_TRUE(waitForPage(v, 1));
    EXPECT_TRUE(v->fitWidth()) << "fit width until the user zooms";
    v->setZoom(1.5);
    auto stored = w.library()->setting(MainWindow::kZoomKeyPrefix + std::to_string(a));
    ASSERT_TRUE(stored.ok() && stored->has_value());
    EXPECT_EQ(**stored, "1.5");
    // Another document opens at fit width; the first one at its 150% again.
    w.showPage(b, 1);
    EXPECT_TRUE(v->fitWidth());
    w.showPage(a, 2);
    EXPECT_FALSE(v->fitWidth());
    EXPECT_DOUBLE_EQ(v->zoom(), 1.5);
    ASSERT_TRUE(waitForPage(v, 2));
    EXPECT_DOUBLE_EQ(v->zoom(), 1.5);
    // Fit width chosen for B is remembered as such.
    w.showPage(b, 1);
    v->setZoom(0.8);
    v->setFitWidth(true);
    auto fit = w.library()->setting(MainWindow::kZoomKeyPrefix + std::to_string(b));
    ASSERT_TRUE(fit.ok() && fit->has_value());
    EXPECT_EQ(**fit, "fit");
  }
  MainWindow again(paramsFor(dir));
  again.resize(1280, 800);
  again.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&again));
  again.showPage(a, 1);
  EXPECT_FALSE(again.pageViewer()->fitWidth());
  EXPECT_DOUBLE_EQ(again.pageViewer()->zoom(), 1.5);
  again.showPage(b, 1);
  EXPECT_TRUE(again.pageViewer()->fitWidth());
}

TEST(PageViewerReading, DraggingOverThePageSelectsItsTextAndCtrlCCopiesIt) {
  TempDir dir("spillway-viewer-select");
  TempDir files("spillway-viewer-select-files");
  MainWindow w(paramsFor(dir));
  w.resize(1280, 800);
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  const QList<qint64> ids =
      addAndWait(w, {QString::fromStdString(writePdf(files / "two.pdf", 2, "Two").string())});
  ASSERT_EQ(ids.size(), 1);
  PageViewer* v = w.pageViewer();
  w.showPage(ids[0], 1);
  ASSERT_TRUE(waitForPage(v, 1));
  PageCanvas* canvas = v->canvas();
  const QList<PageCanvas::Word>& words = canvas->words();
  ASSERT_EQ(words.size(), 8) << "Page 1 alpha bravo charlie / delta echo foxtrot";
  EXPECT_EQ(words[2].text, QStringLiteral("alpha"));
  EXPECT_TRUE(words[4].line_end);

  // Press on "alpha", drag to "echo", release: the words between, in reading order.
  QSignalSpy changed(canvas, &PageCanvas::selectionChanged);
  const QPoint from = canvas->wordRect(2).center(), to = canvas->wordRect(6).center();
  QTest::mousePress(canvas, Qt::LeftButton, Qt::NoModifier, from);
  QTest::mouseMove(canvas, (from + to) / 2);
  QTest::mouseMove(canvas, to);
  QTest::mouseRelease(canvas, Qt::LeftButton, Qt::NoModifier, to);
  EXPECT_GE(changed.count(), 1);
  EXPECT_EQ(v->selectedText(), QStringLiteral("alpha bravo charlie\ndelta echo"));

  QGuiApplication::clipboard()->clear();
  canvas->setFocus();
  QTest::keyClick(canvas, Qt::Key_C, Qt::ControlModifier);
  EXPECT_EQ(QGuiApplication::clipboard()->text(),
            QStringLiteral("alpha bravo charlie\ndelta echo"));

  // Dragging backwards selects the same way; a double click selects one word; Ctrl+A the page.
  QTest::mousePress(canvas, Qt::LeftButton, Qt::NoModifier, canvas->wordRect(7).center());
  QTest::mouseMove(canvas, canvas->wordRect(3).center());
  QTest::mouseRelease(canvas, Qt::LeftButton, Qt::NoModifier, canvas->wordRect(3).center());
  EXPECT_EQ(v->selectedText(), QStringLiteral("bravo charlie\ndelta echo foxtrot"));
  QTest::mouseDClick(canvas, Qt::LeftButton, Qt::NoModifier, canvas->wordRect(5).center());
  EXPECT_EQ(v->selectedText(), QStringLiteral("delta"));
  QTest::keyClick(canvas, Qt::Key_A, Qt::ControlModifier);
  EXPECT_EQ(v->selectedText(), QStringLiteral("Page 1 alpha bravo charlie\ndelta echo foxtrot"));
  // A click clears it; another page starts with none.
  QTest::mouseClick(canvas, Qt::LeftButton, Qt::NoModifier, canvas->wordRect(0).center());
  EXPECT_TRUE(v->selectedText().isEmpty());
  EXPECT_FALSE(v->copySelection());
  canvas->selectAll();
  w.showPage(ids[0], 2);
  ASSERT_TRUE(waitForPage(v, 2));
  EXPECT_TRUE(v->selectedText().isEmpty());
  canvas->selectAll();
  EXPECT_EQ(
      v->selectedText(),
      QStringLiteral("Page 2 alpha bravo charlie\ndelta echo foxtrot\nSigned at the office."));
}

}  // namespace
}  // namespace spw::ui
