// The library side: the document list with its badges and token column, search hits that open
// the page with the words highlighted, the bundled sample on first start (and never again once
// removed), scanned pages offering OCR, and the ingest rows.
#include <gtest/gtest.h>
#include <QFrame>
#include <QLabel>
#include <QLineEdit>
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

// Rename as a person does it: select the document, F2, type, Enter. The name is stored in
// SQLite (the PDF's title kept and said in the tooltip), the list, the viewer's title and the
// window title show it; an empty name goes back to the cleaned title; a name the library
// refuses is said in the status bar. The context menu's Rename… opens the same editor.
TEST(LibraryPanel, F2RenamesADocumentAndThePdfTitleIsKept) {
  TempDir dir("spillway-ui-rename");
  TempDir files("spillway-ui-rename-files");
  test::PdfDoc doc;
  doc.title = "Microsoft Word - contract_final_v2.docx";
  test::PdfPage p1;
  p1.runs = test::column({"The parties agree."}, 72, 720);
  doc.pages.push_back(p1);
  const fs::path pdf = files / "contract_final_v2.pdf";
  test::write_file(pdf, test::build_pdf(doc));
  MainWindow w(paramsFor(dir, false));
  w.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
  w.addFiles({QString::fromStdString(pdf.string())});
  ASSERT_TRUE(waitIdle(w));
  LibraryPanel* panel = w.libraryPanel();
  const qint64 id = panel->listedDocuments().value(0);
  ASSERT_GT(id, 0);
  EXPECT_EQ(panel->documentTitle(id), QStringLiteral("contract final v2"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return w.pageViewer()->documentId() == id; }, 10000));

  auto* list = panel->findChild<QTreeWidget*>(QStringLiteral("documentList"));
  ASSERT_NE(list, nullptr);
  list->setFocus();
  panel->selectDocument(id);
  list->setCurrentItem(list->topLevelItem(0));
  QSignalSpy renamed(&w, &MainWindow::documentRenamed);
  QTest::keyClick(list, Qt::Key_F2);
  auto* editor = list->findChild<QLineEdit*>(QStringLiteral("renameEditor"));
  ASSERT_NE(editor, nullptr) << "F2 opens the name editor";
  EXPECT_EQ(editor->text(), QStringLiteral("contract final v2"));
  editor->selectAll();
  QTest::keyClicks(editor, QStringLiteral("Supply contract with Acme"));
  QTest::keyClick(editor, Qt::Key_Return);  // the view commits it from the event loop
  ASSERT_TRUE(QTest::qWaitFor([&] { return renamed.count() == 1; }, 5000));

  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok());
  auto stored = (*lib)->document(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->custom_title, "Supply contract with Acme");
  EXPECT_EQ(stored->title, "Microsoft Word - contract_final_v2.docx");
  EXPECT_EQ(panel->documentTitle(id), QStringLiteral("Supply contract with Acme"));
  const QString tip = panel->documentToolTip(id);
  EXPECT_TRUE(tip.contains(QStringLiteral("PDF title: Microsoft Word - contract_final_v2.docx")))
      << tip.toStdString();
  EXPECT_TRUE(tip.contains(QStringLiteral("Title before renaming: contract final v2")))
      << tip.toStdString();
  EXPECT_EQ(w.pageViewer()->documentTitle(), QStringLiteral("Supply contract with Acme"));
  EXPECT_EQ(w.windowTitle(), QStringLiteral("Supply contract with Acme — Spillway"));

  // Rename… from the context menu opens the same editor; an empty name is the PDF's title.
  ASSERT_TRUE(panel->startRename(id));
  editor = list->findChild<QLineEdit*>(QStringLiteral("renameEditor"));
  ASSERT_NE(editor, nullptr);
  editor->clear();
  QTest::keyClick(editor, Qt::Key_Return);
  ASSERT_TRUE(QTest::qWaitFor([&] { return renamed.count() == 2; }, 5000));
  EXPECT_EQ(panel->documentTitle(id), QStringLiteral("contract final v2"));
  EXPECT_EQ((*lib)->document(id)->custom_title, "");

  // Too long for the library: nothing changes, the status bar says why.
  w.renameDocument(id, QString(301, QLatin1Char('x')));
  EXPECT_EQ(panel->documentTitle(id), QStringLiteral("contract final v2"));
  EXPECT_EQ(w.activity(), QStringLiteral("Not renamed: a document name is at most 300 "
                                         "characters; this one has 301"));
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

// "Read scanned pages with OCR" reads the document again in place: the same id, its name and
// its chat stay, its scanned page is now OCR'd.
TEST(LibraryPanel, OcrReadsTheDocumentAgainInPlace) {
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
  ASSERT_TRUE(w.library()->rename_document(before[0], "Scanned letter"));
  auto chat = w.library()->create_chat(before[0], "Scanned letter");
  ASSERT_TRUE(chat.ok());
  ASSERT_TRUE(w.library()->add_message(*chat, "user", "Who signed it?").ok());
  w.ocrDocument(before[0]);
  ASSERT_TRUE(waitIdle(w));
  const QList<qint64> after = w.libraryPanel()->listedDocuments();
  EXPECT_EQ(after, before) << "the same document, read again in place";
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok());
  auto d = (*lib)->document(before[0]);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->n_scanned, 1);
  EXPECT_EQ(d->n_ocr, 1);
  EXPECT_EQ(d->title, "To be read");
  EXPECT_EQ(d->custom_title, "Scanned letter");
  auto pages = (*lib)->pages(before[0]);
  ASSERT_TRUE(pages.ok());
  ASSERT_EQ(pages->size(), 2u);
  EXPECT_TRUE((*pages)[1].ocr);
  auto chats = (*lib)->chats(before[0]);
  ASSERT_TRUE(chats.ok());
  ASSERT_EQ(chats->size(), 1u);
  EXPECT_EQ((*chats)[0].id, *chat);
  EXPECT_EQ((*lib)->messages(*chat)->size(), 1u);
  EXPECT_TRUE(w.libraryPanel()->documentBadges(before[0]).contains(QStringLiteral("OCR 1")));
  EXPECT_EQ(w.libraryPanel()->documentTitle(before[0]), QStringLiteral("Scanned letter"));
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

// Notices do not pile up over the library: with five files finished with notes, the newest
// two rows are in view and the other three fold behind "3 earlier notices"; Show unfolds them,
// Dismiss all removes the finished rows and leaves the running one.
TEST(IngestProgressPanel, OlderNoticesFoldAndDismissAllClearsThem) {
  IngestProgressPanel panel;
  panel.resize(300, 600);
  panel.show();
  for (qint64 id = 1; id <= 6; ++id) panel.addJob(id, QStringLiteral("/tmp/scan-%1.pdf").arg(id));
  for (qint64 id = 1; id <= 5; ++id) {
    panel.finishJob(id, IngestProgressPanel::Outcome::Warning,
                    QStringLiteral("%1 page(s) are scanned images without text.").arg(id));
  }
  EXPECT_EQ(panel.rowCount(), 6);
  EXPECT_EQ(panel.foldedNotices(), 3);
  EXPECT_TRUE(panel.rowShown(6)) << "a running row is always in view";
  EXPECT_TRUE(panel.rowShown(5));
  EXPECT_TRUE(panel.rowShown(4));
  for (qint64 id : {1, 2, 3}) EXPECT_FALSE(panel.rowShown(id)) << id;
  auto* fold = panel.findChild<QFrame*>(QStringLiteral("noticeFold"));
  ASSERT_NE(fold, nullptr);
  EXPECT_TRUE(fold->isVisible());
  EXPECT_TRUE(fold->findChild<QLabel*>()->text() == QStringLiteral("3 earlier notices"));

  auto* toggle = panel.findChild<QToolButton*>(QStringLiteral("noticeFoldToggle"));
  ASSERT_NE(toggle, nullptr);
  toggle->click();
  EXPECT_EQ(panel.foldedNotices(), 0);
  for (qint64 id = 1; id <= 6; ++id) EXPECT_TRUE(panel.rowShown(id)) << id;
  toggle->click();
  EXPECT_EQ(panel.foldedNotices(), 3);

  // A newer notice pushes one more behind the fold.
  panel.finishJob(6, IngestProgressPanel::Outcome::Failed, QStringLiteral("cannot open PDF"));
  EXPECT_EQ(panel.foldedNotices(), 4);
  EXPECT_TRUE(panel.rowShown(6));
  EXPECT_FALSE(panel.rowShown(4));

  panel.addJob(7, QStringLiteral("/tmp/running.pdf"));
  panel.findChild<QToolButton*>(QStringLiteral("dismissAllButton"))->click();
  EXPECT_EQ(panel.rowCount(), 1);
  EXPECT_TRUE(panel.hasRow(7));
  EXPECT_FALSE(fold->isVisible());
  EXPECT_FALSE(panel.isHidden());
}

}  // namespace
// A library that could not be opened: the empty page says why nothing can be added and hides
// Add PDF files… (it invited a drop that could only fail).
TEST(LibraryPanelTest, WithoutALibraryTheEmptyPageSaysWhyAndOffersNoAdd) {
  LibraryPanel panel(nullptr);
  auto* text = panel.findChild<QLabel*>(QStringLiteral("emptyText"));
  auto* add = panel.findChild<QPushButton*>(QStringLiteral("emptyAdd"));
  ASSERT_NE(text, nullptr);
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(text->text().startsWith(QStringLiteral("The library could not be opened")))
      << text->text().toStdString();
  EXPECT_TRUE(add->isHidden());

  TempDir dir("spillway-library-ui-open");
  auto lib = app::Library::open(app::library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  LibraryPanel open(lib->get());
  auto* open_text = open.findChild<QLabel*>(QStringLiteral("emptyText"));
  ASSERT_NE(open_text, nullptr);
  EXPECT_TRUE(open_text->text().startsWith(QStringLiteral("No documents yet.")));
  EXPECT_FALSE(open.findChild<QPushButton*>(QStringLiteral("emptyAdd"))->isHidden());
}

}  // namespace spw::ui
