// The library side: the document list with its badges and token column, search hits that open
// the page with the words highlighted, the bundled sample on first start (and never again once
// removed), scanned pages offering OCR, and the ingest rows.
#include <gtest/gtest.h>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QToolButton>
#include <QTreeWidget>

#include <filesystem>
#include <string>
#include <vector>

#include "app/store/library.h"
#include "app/store/test_temp_dir.h"
#include "app/worker/ingest_worker.h"
#include "tests/support/pdf_builder.h"
#include "ui/ingest_progress.h"
#include "ui/library_panel.h"
#include "ui/main_window.h"
#include "ui/page_viewer.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;
using app::testing::TempDir;

constexpr int kIngestTimeoutMs = 60'000;

QString samplePdf() {
  return QString::fromStdString(
      (fs::path(SPILLWAY_SOURCE_DIR) / "resources" / "sample" / "spillway-sample-contract.pdf")
          .string());
}

MainWindowParams paramsFor(const TempDir& dir, bool add_sample) {
  MainWindowParams p;
  p.version = QStringLiteral("test");
  p.data_dir = QString::fromStdString(dir.path().string());
  p.add_sample = add_sample;
  p.sample_pdf = samplePdf();
  return p;
}

bool waitIdle(MainWindow& w) {
  return QTest::qWaitFor([&w] { return w.pendingIngests() == 0; }, kIngestTimeoutMs);
}

app::PageRecord page(int no, const std::string& text, bool scanned = false) {
  app::PageRecord p;
  p.page_no = no;
  p.original_text = text;
  p.text = text;
  p.scanned = scanned;
  return p;
}

TEST(LibraryPanel, ListsDocumentsWithPagesBadgesAndTokens) {
  TempDir dir("spillway-ui-lib");
  auto lib = app::Library::open(dir / "library.sqlite3");
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  app::DocumentRecord plain;
  plain.title = "Plain";
  plain.sha256 = std::string(64, 'a');
  auto plain_id = (*lib)->add_document(plain, {page(1, "one"), page(2, "two")});
  ASSERT_TRUE(plain_id.ok());
  app::DocumentRecord odd;
  odd.title = "Odd one";
  odd.sha256 = std::string(64, 'b');
  odd.repaired = true;
  odd.encrypted = true;
  auto odd_id = (*lib)->add_document(odd, {page(1, "text"), page(2, "", true), page(3, "", true)});
  ASSERT_TRUE(odd_id.ok());

  LibraryPanel panel(lib->get());
  EXPECT_EQ(panel.listedDocuments(), (QList<qint64>{*plain_id, *odd_id}));
  EXPECT_EQ(panel.documentTitle(*plain_id), QStringLiteral("Plain"));
  EXPECT_TRUE(panel.documentBadges(*plain_id).isEmpty());
  EXPECT_EQ(panel.documentBadges(*odd_id),
            (QStringList{QStringLiteral("2 scanned"), QStringLiteral("repaired"),
                         QStringLiteral("encrypted")}));
  EXPECT_EQ(panel.summaryText(), QStringLiteral("2 documents · 5 pages"));

  EXPECT_EQ(panel.documentSubtitle(*odd_id), QStringLiteral("3 pages"));
  EXPECT_EQ(panel.documentTokens(*plain_id), QStringLiteral("—"));
  panel.setTokenCounts({{*plain_id, 1234}});
  EXPECT_EQ(panel.documentTokens(*plain_id), QLocale().toString(1234));
  EXPECT_EQ(panel.documentTokens(*odd_id), QStringLiteral("—"));

  QSignalSpy selection(&panel, &LibraryPanel::selectionChanged);
  panel.selectDocument(*odd_id);
  ASSERT_EQ(selection.count(), 1);
  EXPECT_EQ(selection[0][0].value<QList<qint64>>(), QList<qint64>{*odd_id});
  // A reload keeps the selection and the token counts.
  panel.reload();
  EXPECT_EQ(panel.selectedDocuments(), QList<qint64>{*odd_id});
  EXPECT_EQ(panel.documentTokens(*plain_id), QLocale().toString(1234));
}

TEST(LibraryPanel, CleanTitlesAndAnOverContextBadge) {
  TempDir dir("spillway-ui-lib-titles");
  auto lib = app::Library::open(dir / "library.sqlite3");
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  app::DocumentRecord word;
  word.title = "Microsoft Word - Lease_Agreement_2024.docx";
  word.path = "/srv/docs/lease.pdf";
  word.sha256 = std::string(64, 'c');
  auto word_id = (*lib)->add_document(word, {page(1, "one")});
  ASSERT_TRUE(word_id.ok());
  app::DocumentRecord untitled;
  untitled.title = "Document1";
  untitled.path = "/srv/docs/q3_board_report.pdf";
  untitled.sha256 = std::string(64, 'd');
  untitled.repaired = true;
  auto untitled_id = (*lib)->add_document(untitled, {page(1, "two")});
  ASSERT_TRUE(untitled_id.ok());

  LibraryPanel panel(lib->get());
  EXPECT_EQ(panel.documentTitle(*word_id), QStringLiteral("Lease Agreement 2024"));
  EXPECT_EQ(panel.documentTitle(*untitled_id), QStringLiteral("q3 board report"));
  // The library keeps what the PDF says.
  EXPECT_EQ((*lib)->document(*word_id)->title, word.title);

  // No model yet: no badge; a 4,096-token context: the 5,000-token document is over it.
  panel.setTokenCounts({{*word_id, 5000}, {*untitled_id, 4096}});
  EXPECT_TRUE(panel.documentBadges(*word_id).isEmpty());
  panel.setModelContext(4096);
  EXPECT_EQ(panel.documentBadges(*word_id), QStringList{QStringLiteral("over context")});
  EXPECT_EQ(panel.documentBadges(*untitled_id), QStringList{QStringLiteral("repaired")});
  // A longer context (another model) takes it away; the document's own badges stay.
  panel.setModelContext(8192);
  EXPECT_TRUE(panel.documentBadges(*word_id).isEmpty());
  EXPECT_EQ(panel.documentBadges(*untitled_id), QStringList{QStringLiteral("repaired")});
  panel.setModelContext(2048);
  EXPECT_EQ(panel.documentBadges(*untitled_id),
            (QStringList{QStringLiteral("repaired"), QStringLiteral("over context")}));
  panel.reload();  // kept over a reload
  EXPECT_EQ(panel.documentBadges(*word_id), QStringList{QStringLiteral("over context")});
}

TEST(LibraryPanel, SearchListsHitsAndAHitOpensThePageHighlighted) {
  TempDir dir("spillway-ui-lib");
  MainWindow w(paramsFor(dir, false));
  w.show();
  w.addFiles({samplePdf()});
  ASSERT_TRUE(waitIdle(w));
  const QList<qint64> docs = w.libraryPanel()->listedDocuments();
  ASSERT_EQ(docs.size(), 1);

  QSignalSpy selection(&w, &MainWindow::documentSelectionChanged);
  EXPECT_EQ(w.libraryPanel()->search(QStringLiteral("nothing-like-this-anywhere")), 0);
  const int n = w.libraryPanel()->search(QStringLiteral("insolvent"));
  ASSERT_GE(n, 1);
  const auto hits = w.libraryPanel()->listedHits();
  EXPECT_EQ(hits[0].first, docs[0]);
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok());
  auto expected = (*lib)->search("insolvent");
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(int(expected->size()), n);
  EXPECT_EQ(hits[0].second, (*expected)[0].page_no);

  w.pageViewer()->closeDocument();
  QSignalSpy shown(w.pageViewer(), &PageViewer::pageShown);
  w.libraryPanel()->activateHit(0);
  ASSERT_TRUE(shown.count() > 0 || shown.wait(kIngestTimeoutMs));
  EXPECT_EQ(w.pageViewer()->documentId(), docs[0]);
  EXPECT_EQ(w.pageViewer()->currentPage(), hits[0].second);
  EXPECT_EQ(w.pageViewer()->highlight(), QStringLiteral("insolvent"));
  EXPECT_GE(w.pageViewer()->highlightCount(), 1);
}

TEST(LibraryPanel, SampleIsAddedOnFirstStartAndNotAgainAfterRemoval) {
  TempDir dir("spillway-ui-lib");
  qint64 sample_id = 0;
  {
    MainWindow w(paramsFor(dir, true));
    w.show();
    QSignalSpy ready(&w, &MainWindow::readyForScreenshot);
    ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, kIngestTimeoutMs));
    EXPECT_TRUE(ready[0][0].toBool()) << "the sample is opened";
    const QList<qint64> docs = w.libraryPanel()->listedDocuments();
    ASSERT_EQ(docs.size(), 1);
    sample_id = docs[0];
    EXPECT_EQ(w.pageViewer()->documentId(), sample_id);
    EXPECT_EQ(w.pageViewer()->pageCount(), 4);
    EXPECT_TRUE(fs::is_regular_file(dir / "sample" / "spillway-sample-contract.pdf"));
    w.removeDocument(sample_id, false);
    EXPECT_TRUE(w.libraryPanel()->listedDocuments().isEmpty());
    EXPECT_EQ(w.pageViewer()->documentId(), 0);
  }
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok());
  auto flag = (*lib)->setting(MainWindow::kSampleAddedKey);
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->value_or(""), "1");
  auto doc = (*lib)->document(sample_id);
  EXPECT_FALSE(doc.ok());
  lib->reset();

  MainWindow again(paramsFor(dir, true));
  again.show();
  QSignalSpy ready(&again, &MainWindow::readyForScreenshot);
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, kIngestTimeoutMs));
  EXPECT_FALSE(ready[0][0].toBool()) << "nothing to show";
  EXPECT_EQ(again.pendingIngests(), 0);
  EXPECT_TRUE(again.libraryPanel()->listedDocuments().isEmpty());
}

TEST(LibraryPanel, SampleIsNotAddedToALibraryThatHasDocuments) {
  TempDir dir("spillway-ui-lib");
  {
    auto lib = app::Library::open(app::library_db_file(dir.path()));
    ASSERT_TRUE(lib.ok());
    app::DocumentRecord d;
    d.title = "Mine";
    d.sha256 = std::string(64, 'c');
    ASSERT_TRUE((*lib)->add_document(d, {page(1, "my own text")}).ok());
  }
  MainWindow w(paramsFor(dir, true));
  w.show();
  QTest::qWait(50);
  EXPECT_EQ(w.pendingIngests(), 0);
  EXPECT_EQ(w.libraryPanel()->listedDocuments().size(), 1);
  // Its PDF path is empty: the viewer shows the stored text.
  EXPECT_TRUE(w.pageViewer()->showingStoredText());
}

TEST(LibraryPanel, ScannedPagesOfferOcrOrSayWhyNot) {
  TempDir dir("spillway-ui-lib");
  TempDir files("spillway-ui-lib-files");
  test::PdfDoc doc;
  doc.title = "Half scanned";
  test::PdfPage text_page;
  text_page.runs = test::column({"A page with a text layer."}, 72, 720);
  doc.pages.push_back(text_page);
  test::PdfPage scan;
  test::PdfImage img;
  img.width = img.height = 32;
  img.gray.assign(32 * 32, char(0x40));
  img.x = 72;
  img.y = 300;
  img.w = img.h = 400;
  scan.images.push_back(img);
  doc.pages.push_back(scan);
  const fs::path pdf = files / "scan.pdf";
  test::write_file(pdf, test::build_pdf(doc));

  MainWindow w(paramsFor(dir, false));
  w.show();
  const QList<qint64> ids = w.addFiles({QString::fromStdString(pdf.string())});
  ASSERT_TRUE(waitIdle(w));
  IngestProgressPanel* panel = w.libraryPanel()->ingestPanel();
  ASSERT_TRUE(panel->hasRow(ids[0])) << "a document with scanned pages keeps its row";
  const QString status = panel->statusText(ids[0]);
  EXPECT_TRUE(status.contains(QStringLiteral("1 page(s) are scanned"))) << status.toStdString();
  auto* action = panel->findChild<QPushButton*>(QStringLiteral("actionButton"));
  if (app::IngestQueue::ocrAvailable()) {
    ASSERT_NE(action, nullptr) << "OCR is offered";
    EXPECT_EQ(action->text(), QStringLiteral("Read with OCR"));
  } else {
    EXPECT_EQ(action, nullptr);
    EXPECT_TRUE(status.contains(QStringLiteral("no tesseract")));
  }
  const qint64 doc_id = w.libraryPanel()->listedDocuments().value(0);
  EXPECT_TRUE(w.libraryPanel()->documentBadges(doc_id).contains(QStringLiteral("1 scanned")));
}

TEST(LibraryPanel, OcrReingestReplacesTheDocument) {
  if (!app::IngestQueue::ocrAvailable()) GTEST_SKIP() << "this build has no tesseract";
  TempDir dir("spillway-ui-lib");
  TempDir files("spillway-ui-lib-files");
  test::PdfDoc doc;
  doc.title = "To be read";
  test::PdfPage text_page;
  text_page.runs = test::column({"Cover page with text."}, 72, 720);
  doc.pages.push_back(text_page);
  test::PdfPage scan;
  test::PdfImage img;
  img.width = img.height = 16;
  img.gray.assign(16 * 16, char(0x20));
  img.x = 100;
  img.y = 400;
  img.w = img.h = 200;
  scan.images.push_back(img);
  doc.pages.push_back(scan);
  const fs::path pdf = files / "scan.pdf";
  test::write_file(pdf, test::build_pdf(doc));

  MainWindow w(paramsFor(dir, false));
  w.show();
  w.addFiles({QString::fromStdString(pdf.string())});
  ASSERT_TRUE(waitIdle(w));
  const QList<qint64> before = w.libraryPanel()->listedDocuments();
  ASSERT_EQ(before.size(), 1);
  w.ocrDocument(before[0]);
  ASSERT_TRUE(waitIdle(w));
  const QList<qint64> after = w.libraryPanel()->listedDocuments();
  ASSERT_EQ(after.size(), 1) << "the document is replaced, not duplicated";
  EXPECT_NE(after[0], before[0]);
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok());
  auto d = (*lib)->document(after[0]);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->n_scanned, 1);
  EXPECT_EQ(d->n_ocr, 1);
  EXPECT_EQ(d->title, "To be read");
  EXPECT_FALSE((*lib)->document(before[0]).ok());
  EXPECT_TRUE(w.libraryPanel()->documentBadges(after[0]).contains(QStringLiteral("OCR 1")));
}

TEST(IngestProgressPanel, RowsShowPagesAndTimeLeftAndCancel) {
  IngestProgressPanel panel;
  EXPECT_TRUE(panel.isHidden());
  panel.addJob(7, QStringLiteral("/tmp/x/report.pdf"));
  EXPECT_FALSE(panel.isHidden());
  panel.setProgress(7, 3, 12, 65'000);
  EXPECT_EQ(panel.barValue(7), std::make_pair(3, 12));
  EXPECT_EQ(panel.statusText(7), QStringLiteral("3 of 12 pages · 1 min 5 s left"));
  QSignalSpy cancel(&panel, &IngestProgressPanel::cancelRequested);
  auto* button = panel.findChild<QToolButton*>(QStringLiteral("cancelButton"));
  ASSERT_NE(button, nullptr);
  button->click();
  ASSERT_EQ(cancel.count(), 1);
  EXPECT_EQ(cancel[0][0].toLongLong(), 7);
  panel.finishJob(7, IngestProgressPanel::Outcome::Failed, QStringLiteral("cannot open PDF"));
  EXPECT_EQ(panel.statusText(7), QStringLiteral("cannot open PDF"));
  panel.removeJob(7);
  EXPECT_EQ(panel.rowCount(), 0);
  EXPECT_TRUE(panel.isHidden());
  EXPECT_EQ(IngestProgressPanel::formatEta(400), QStringLiteral("1 s"));
  EXPECT_EQ(IngestProgressPanel::formatEta(125'000), QStringLiteral("2 min 5 s"));
}

}  // namespace
}  // namespace spw::ui
