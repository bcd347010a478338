// Ingest of hand-written PDFs: reading order (columns, justified text, rotation), ligatures via
// ToUnicode, undecodable text, form fields, scanned pages and OCR, search of what was stored.
#include "app/ingest/ingest.h"

#include <gtest/gtest.h>

#include <QImage>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "app/ingest/ingest_test_util.h"
#include "app/ingest/ocr.h"
#include "app/ingest/pdf_reader.h"

// LeakSanitizer (the CI's ASan build): fontconfig, which poppler asks for a substitute when it
// renders Helvetica for the OCR test, keeps a small cache for the life of the process.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig.so\n"; }

namespace spw::app {
namespace {

using test::PdfDoc;
using test::PdfPage;
using test::PdfTextRun;
using testing::expect_in_order;
using testing::squash;

class IngestPdf : public testing::IngestFixture {
 protected:
  // A PDF whose only page is an image of typed text ("INVOICE NUMBER 48213" / "Total due
  // tomorrow", rendered by poppler); empty when poppler has no font to render the text with.
  std::filesystem::path typed_scan_pdf() {
    PdfPage text;
    text.width = 500;
    text.height = 200;
    text.runs.push_back(PdfTextRun{30, 120, 28, "INVOICE NUMBER 48213", 0, 0});
    text.runs.push_back(PdfTextRun{30, 70, 28, "Total due tomorrow", 0, 0});
    const auto text_pdf = write_pdf("typed.pdf", PdfDoc{{text}, "", {}});
    auto reader = PdfReader::open(text_pdf, "");
    EXPECT_TRUE(reader.ok()) << reader.error().message;
    if (!reader.ok() || !(*reader)->has_ink(0)) return {};
    const QImage img = (*reader)->render(0, 150).convertToFormat(QImage::Format_Grayscale8);
    EXPECT_FALSE(img.isNull());
    test::PdfImage im;
    im.width = img.width();
    im.height = img.height();
    for (int y = 0; y < img.height(); ++y)
      im.gray.append(reinterpret_cast<const char*>(img.constScanLine(y)),
                     static_cast<size_t>(img.width()));
    im.x = 0;
    im.y = 0;
    im.w = 500;
    im.h = 200;
    PdfPage scan;
    scan.width = 500;
    scan.height = 200;
    scan.images.push_back(im);
    return write_pdf("scanned.pdf", PdfDoc{{scan}, "", {}});
  }
};

const std::vector<std::string> kLeft = {
    "left one: the parties agree to the terms",   "left two: payment is due within thirty",
    "left three: days of the invoice date and",   "left four: late payments bear interest",
    "left five: at the statutory rate until the", "left six: amount has been paid in full.",
    "left seven: either party may terminate",     "left eight: with ninety days of notice."};
const std::vector<std::string> kRight = {
    "right one: confidential information is",  "right two: kept secret by the receiving",
    "right three: party and used only for",    "right four: the purposes of this deal",
    "right five: unless the disclosing party", "right six: agrees in writing beforehand.",
    "right seven: this clause survives the",   "right eight: end of the agreement."};

std::string lines_joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += (s.empty() ? "" : "\n") + l;
  return s;
}

TEST_F(IngestPdf, TwoColumnPageIsReadColumnByColumn) {
  PdfPage page;
  page.runs.push_back(PdfTextRun{150, 740, 16, "A Two Column Agreement Between Parties", 0, 0});
  for (auto& r : test::column(kLeft, 56, 700)) page.runs.push_back(r);
  for (auto& r : test::column(kRight, 316, 700)) page.runs.push_back(r);
  const auto r = ingest_ok(write_pdf("two.pdf", PdfDoc{{page}, "Two columns", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].text, "A Two Column Agreement Between Parties\n\n" + lines_joined(kLeft) +
                               "\n\n" + lines_joined(kRight));
  EXPECT_EQ(r.document.title, "Two columns");
  EXPECT_EQ(r.document.n_pages, 1);
}

TEST_F(IngestPdf, ThreeColumnPageIsReadColumnByColumn) {
  const std::vector<std::string> a = {"Article 1 scope of this", "regulation applies to all",
                                      "operators in the union", "who place products on",
                                      "the market after today."};
  const std::vector<std::string> b = {"Article 2 definitions for", "the purposes hereof the",
                                      "following terms shall be", "understood as set out",
                                      "in the annex to this act."};
  const std::vector<std::string> c = {"Article 3 obligations of", "operators include the",
                                      "duty to keep records for", "at least five years from",
                                      "the date of each sale."};
  PdfPage page;
  for (auto& r : test::column(a, 40, 700)) page.runs.push_back(r);
  for (auto& r : test::column(b, 230, 700)) page.runs.push_back(r);
  for (auto& r : test::column(c, 420, 700)) page.runs.push_back(r);
  const auto r = ingest_ok(write_pdf("three.pdf", PdfDoc{{page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].text, lines_joined(a) + "\n\n" + lines_joined(b) + "\n\n" + lines_joined(c));
  EXPECT_EQ(r.document.title, "three");  // no /Title: the file name
}

TEST_F(IngestPdf, JustifiedSingleColumnWithWideGapsIsNotSplit) {
  const std::string text =
      "Notwithstanding anything contained herein, the Licensee shall indemnify, defend and hold "
      "harmless the Licensor, its affiliates, successors and assigns, from and against any and "
      "all claims, liabilities, damages, judgments, settlements, costs and expenses, including "
      "reasonable attorneys' fees, arising out of or relating to the Licensee's performance "
      "hereunder, provided that the Licensor gives prompt written notice of any such claim.";
  // Greedy wrap to 230 points at about 5.6 points per character (Helvetica 10), then justify:
  // each word placed by hand, the slack spread over the gaps.
  std::istringstream in(text);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) words.push_back(w);
  PdfPage page;
  std::vector<std::string> expect;
  double y = 700, widest_gap = 0;
  for (size_t i = 0; i < words.size();) {
    size_t j = i;
    double used = 0;
    while (j < words.size() &&
           used + 5.6 * static_cast<double>(words[j].size()) + 4.0 * static_cast<double>(j - i) <=
               230) {
      used += 5.6 * static_cast<double>(words[j].size());
      ++j;
    }
    const double gap =
        j == words.size() || j - i < 2 ? 4 : (230 - used) / static_cast<double>(j - i - 1);
    if (j < words.size()) widest_gap = std::max(widest_gap, gap);
    double x = 72;
    std::string line;
    for (size_t k = i; k < j; ++k) {
      page.runs.push_back(PdfTextRun{x, y, 10, words[k], 0, 0});
      x += 5.6 * static_cast<double>(words[k].size()) + gap;
      line += (line.empty() ? "" : " ") + words[k];
    }
    expect.push_back(line);
    y -= 12;
    i = j;
  }
  ASSERT_GE(expect.size(), 8u);
  EXPECT_GT(widest_gap, 15) << "the test wants gaps of one and a half ems and more";
  const auto r = ingest_ok(write_pdf("justified.pdf", PdfDoc{{page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].text, lines_joined(expect));
}

TEST_F(IngestPdf, RotatedPagesAndRotatedTextComeOutUpright) {
  // Page 1: /Rotate 90 with its text drawn turned so that it reads upright on screen (as a
  // landscape page saved portrait). Page 2: no /Rotate, text running up the page. Page 3:
  // /Rotate 90 with ordinary text, which is sideways on screen.
  PdfPage p1;
  p1.rotate = 90;
  p1.runs.push_back(PdfTextRun{100, 100, 12, "First line of the landscape page.", 0, 90});
  p1.runs.push_back(PdfTextRun{116, 100, 12, "Second line follows below it.", 0, 90});
  PdfPage p2;
  p2.runs.push_back(PdfTextRun{100, 100, 12, "Text running up the page here.", 0, 90});
  p2.runs.push_back(PdfTextRun{116, 100, 12, "And its second line next to it.", 0, 90});
  PdfPage p3;
  p3.rotate = 90;
  p3.runs.push_back(PdfTextRun{72, 700, 12, "Ordinary text on a rotated page.", 0, 0});
  p3.runs.push_back(PdfTextRun{72, 684, 12, "Its second line is here.", 0, 0});
  // Pages 4 and 5: /Rotate 180 and 270, each with text drawn to read upright on screen.
  PdfPage p4;
  p4.rotate = 180;
  p4.runs.push_back(PdfTextRun{500, 100, 12, "Upside down on paper.", 0, 180});
  p4.runs.push_back(PdfTextRun{500, 116, 12, "Upright on screen.", 0, 180});
  PdfPage p5;
  p5.rotate = 270;
  p5.runs.push_back(PdfTextRun{500, 700, 12, "Turned the other way.", 0, 270});
  p5.runs.push_back(PdfTextRun{484, 700, 12, "Still reads in order.", 0, 270});
  const auto r = ingest_ok(write_pdf("rotated.pdf", PdfDoc{{p1, p2, p3, p4, p5}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 5u);
  EXPECT_EQ(pages[3].text, "Upside down on paper.\nUpright on screen.");
  EXPECT_EQ(pages[4].text, "Turned the other way.\nStill reads in order.");
  EXPECT_EQ(pages[0].text, "First line of the landscape page.\nSecond line follows below it.");
  EXPECT_EQ(pages[1].text, "Text running up the page here.\nAnd its second line next to it.");
  EXPECT_EQ(pages[2].text, "Ordinary text on a rotated page.\nIts second line is here.");
}

TEST_F(IngestPdf, TurnedMarginStampDoesNotCutAcrossTheLines) {
  PdfPage page;
  page.runs.push_back(PdfTextRun{30, 300, 12, "arXiv:2401.00001v1 [cs.CL] 1 Jan 2024", 0, 90});
  for (auto& run : test::column({"First body line of the paper.", "Second body line follows.",
                                 "Third body line ends it."},
                                72, 500, 12, 14))
    page.runs.push_back(run);
  const auto r = ingest_ok(write_pdf("stamp.pdf", PdfDoc{{page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].text,
            "First body line of the paper.\nSecond body line follows.\nThird body line ends "
            "it.\n\narXiv:2401.00001v1 [cs.CL] 1 Jan 2024");
}

TEST_F(IngestPdf, ToUnicodeLigatureIsKeptInTheOriginalAndExpandedInTheText) {
  PdfDoc doc;
  doc.custom_map = {{0x01, 0xFB01}, {0x02, 0xFB02}};
  PdfPage page;
  page.runs.push_back(PdfTextRun{72, 700, 12, "We \x01nd the \x01rst \x02ow.", 1, 0});
  doc.pages = {page};
  const auto r = ingest_ok(write_pdf("lig.pdf", doc));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].original_text, "We \xEF\xAC\x81nd the \xEF\xAC\x81rst \xEF\xAC\x82ow.");
  EXPECT_EQ(pages[0].text, "We find the first flow.");
  EXPECT_EQ(r.document.n_chars, 23);
}

TEST_F(IngestPdf, UndecodablePageIsFlaggedAndNotFed) {
  PdfDoc doc;
  for (unsigned char c = 'A'; c <= 'Z'; ++c) doc.custom_map.emplace_back(c, 0xE000 + (c - 'A'));
  PdfPage garbage;
  garbage.runs.push_back(PdfTextRun{72, 700, 12, "ABCDEFG HIJKLM NOPQRS TUVWXYZ", 1, 0});
  PdfPage fine;
  fine.runs.push_back(PdfTextRun{72, 700, 12, "Readable text on page two.", 0, 0});
  doc.pages = {garbage, fine};
  const auto r = ingest_ok(write_pdf("cid.pdf", doc));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_TRUE(pages[0].undecodable);
  EXPECT_EQ(pages[0].text, "");
  EXPECT_NE(pages[0].original_text.find("\xEE\x80\x80"), std::string::npos);  // kept to inspect
  EXPECT_FALSE(pages[1].undecodable);
  EXPECT_EQ(pages[1].text, "Readable text on page two.");
  EXPECT_EQ(r.document.n_undecodable, 1);
  EXPECT_FALSE(r.document.no_text);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_EQ(r.warnings[0].page_no, 1);
  EXPECT_NE(r.warnings[0].message.find("text layer unreliable"), std::string::npos);
}

TEST_F(IngestPdf, FormFieldsAreIncludedWithTheirPage) {
  PdfPage p1;
  p1.runs.push_back(PdfTextRun{72, 700, 12, "Application form", 0, 0});
  PdfPage p2;
  p2.runs.push_back(PdfTextRun{72, 700, 12, "Signature page", 0, 0});
  p2.fields.push_back(test::PdfTextField{"ApplicantName", "Alice Example", 72, 600, 300, 620});
  p2.fields.push_back(test::PdfTextField{"Amount", "1200 EUR", 72, 560, 300, 580});
  const auto r = ingest_ok(write_pdf("form.pdf", PdfDoc{{p1, p2}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[0].text.find("ApplicantName"), std::string::npos);
  EXPECT_NE(pages[1].text.find("ApplicantName: Alice Example"), std::string::npos) << pages[1].text;
  EXPECT_NE(pages[1].text.find("Amount: 1200 EUR"), std::string::npos) << pages[1].text;
  expect_in_order(pages[1].text, {"Signature page", "ApplicantName: Alice Example"});
}

test::PdfImage gray_box(int w, int h, double x, double y, double pw, double ph) {
  test::PdfImage im;
  im.width = w;
  im.height = h;
  im.gray.assign(static_cast<size_t>(w * h), '\xff');
  for (int r = h / 4; r < 3 * h / 4; ++r) {
    for (int c = w / 4; c < 3 * w / 4; ++c) im.gray[static_cast<size_t>(r * w + c)] = '\x20';
  }
  im.x = x;
  im.y = y;
  im.w = pw;
  im.h = ph;
  return im;
}

TEST_F(IngestPdf, ScannedPageWithoutOcrIsFlaggedAndStored) {
  PdfPage scan;
  scan.images.push_back(gray_box(64, 64, 72, 400, 400, 300));
  PdfPage text;
  text.runs.push_back(PdfTextRun{72, 700, 12, "Typed page two.", 0, 0});
  PdfPage blank;  // no text, no ink: blank, not scanned
  const auto r = ingest_ok(write_pdf("scan.pdf", PdfDoc{{scan, text, blank}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_TRUE(pages[0].scanned);
  EXPECT_FALSE(pages[0].ocr);
  EXPECT_EQ(pages[0].text, "");
  EXPECT_FALSE(pages[1].scanned);
  EXPECT_FALSE(pages[2].scanned);
  EXPECT_EQ(r.document.n_scanned, 1);
  EXPECT_FALSE(r.document.no_text);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].page_no, 1);
  EXPECT_NE(r.warnings[0].message.find("--ocr"), std::string::npos);
}

TEST_F(IngestPdf, AFullPageImageWithAStampIsScannedAndALogoPageIsNot) {
  // The image of a page (dark lines all over it) with "Scan 0042" in the text layer.
  test::PdfImage page_image;
  page_image.width = 96;
  page_image.height = 128;
  page_image.gray.assign(96 * 128, '\xff');
  for (int r = 4; r < 124; r += 4) {
    for (int c = 6; c < 90; ++c) page_image.gray[static_cast<size_t>(r * 96 + c)] = '\x10';
  }
  page_image.x = 0;
  page_image.y = 0;
  page_image.w = 612;
  page_image.h = 792;
  PdfPage scan;
  scan.images.push_back(page_image);
  scan.runs.push_back(PdfTextRun{500, 770, 8, "Scan 0042", 0, 0});
  // A cover with a small logo and a title, and a short text page: not scans.
  PdfPage cover;
  cover.images.push_back(gray_box(64, 64, 72, 600, 80, 80));
  cover.runs.push_back(PdfTextRun{72, 500, 24, "Annual Report 2023", 0, 0});
  PdfPage short_page;
  short_page.runs.push_back(PdfTextRun{72, 700, 12, "Notes", 0, 0});
  const auto r = ingest_ok(write_pdf("stamp.pdf", PdfDoc{{scan, cover, short_page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_TRUE(pages[0].scanned);
  EXPECT_FALSE(pages[0].ocr);
  EXPECT_EQ(pages[0].text, "Scan 0042");  // kept for search, never given to the model
  EXPECT_FALSE(pages[1].scanned);
  EXPECT_EQ(pages[1].text, "Annual Report 2023");
  EXPECT_FALSE(pages[2].scanned);
  EXPECT_EQ(r.document.n_scanned, 1);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].page_no, 1);
  EXPECT_NE(r.warnings[0].message.find("--ocr"), std::string::npos);
}

TEST_F(IngestPdf, AllScannedDocumentIsStoredButMarkedNoText) {
  PdfPage scan;
  scan.images.push_back(gray_box(32, 32, 72, 400, 300, 300));
  const auto r = ingest_ok(write_pdf("allscan.pdf", PdfDoc{{scan, scan}, "", {}}));
  EXPECT_GT(r.doc_id, 0);
  EXPECT_TRUE(r.document.no_text);
  EXPECT_EQ(r.document.n_scanned, 2);
  EXPECT_EQ(r.document.n_chars, 0);
  ASSERT_EQ(r.warnings.size(), 3u);
  EXPECT_EQ(r.warnings[2].page_no, 0);
  EXPECT_NE(r.warnings[2].message.find("will not be answered from"), std::string::npos);
}

TEST_F(IngestPdf, OcrReadsTheWordsOfAnImageOnlyPage) {
  if (!OcrEngine::available()) GTEST_SKIP() << "this build has no tesseract";
  if (!OcrEngine::create("eng").ok()) GTEST_SKIP() << "tesseract's English data is not installed";
  const auto scan_pdf = typed_scan_pdf();
  if (scan_pdf.empty()) GTEST_SKIP() << "no font to render the test text with";
  IngestOptions opts;
  opts.ocr = true;
  const auto r = ingest_ok(scan_pdf, opts);
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_TRUE(pages[0].scanned);
  EXPECT_TRUE(pages[0].ocr);
  EXPECT_EQ(squash(pages[0].text), "INVOICE NUMBER 48213 Total due tomorrow");
  EXPECT_EQ(r.document.n_ocr, 1);
  EXPECT_FALSE(r.document.no_text);
  auto hits = lib_->search("invoice 48213");
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].doc_id, r.doc_id);
}

// OCR of a stored scan reads it again in place: the same id, its name, chats and page count
// kept, the pages replaced (search finds the OCR'd words, not the old empty page), the old
// part answers gone. A file whose bytes differ from the stored ones is refused.
TEST_F(IngestPdf, OcrOfAStoredScanReplacesItsPagesInPlace) {
  if (!OcrEngine::available()) GTEST_SKIP() << "this build has no tesseract";
  if (!OcrEngine::create("eng").ok()) GTEST_SKIP() << "tesseract's English data is not installed";
  const auto scan_pdf = typed_scan_pdf();
  if (scan_pdf.empty()) GTEST_SKIP() << "no font to render the test text with";
  const auto first = ingest_ok(scan_pdf);
  ASSERT_TRUE(first.document.no_text);
  const int64_t id = first.doc_id;
  ASSERT_TRUE(lib_->rename_document(id, "March invoice").ok());
  auto chat = lib_->create_chat(id, "March invoice");
  ASSERT_TRUE(chat.ok());
  ASSERT_TRUE(lib_->add_message(*chat, "user", "What is due?").ok());
  PartAnswerRecord part;
  part.model_fingerprint = 7;
  part.answer_key = 9;
  part.doc_id = id;
  part.part = part.n_parts = 1;
  part.answer = "nothing readable";
  ASSERT_TRUE(lib_->put_part_answer(part).ok());

  IngestOptions opts;
  opts.ocr = true;
  opts.reread_doc_id = id;
  const auto again = ingest_ok(scan_pdf, opts);
  EXPECT_EQ(again.doc_id, id);
  EXPECT_FALSE(again.already_present);
  EXPECT_EQ(again.document.id, id);
  EXPECT_EQ(again.document.n_ocr, 1);
  EXPECT_FALSE(again.document.no_text);
  EXPECT_EQ(again.document.custom_title, "March invoice");
  EXPECT_EQ(n_documents(), 1u);
  const auto pages = pages_of(id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_TRUE(pages[0].ocr);
  EXPECT_EQ(squash(pages[0].text), "INVOICE NUMBER 48213 Total due tomorrow");
  auto hits = lib_->search("invoice 48213");
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].doc_id, id);
  EXPECT_EQ((*hits)[0].title, "March invoice");
  auto chats = lib_->chats(id);
  ASSERT_TRUE(chats.ok());
  ASSERT_EQ(chats->size(), 1u);
  EXPECT_EQ((*lib_->messages(*chat))[0].content, "What is due?");
  EXPECT_TRUE(lib_->part_answers(id)->empty());

  // Another file (other bytes) is not the stored document: refused, the document unchanged.
  PdfPage other;
  other.runs.push_back(PdfTextRun{72, 700, 12, "A different file.", 0, 0});
  const auto other_pdf = write_pdf("other.pdf", PdfDoc{{other}, "", {}});
  auto wrong = ingest_file(*lib_, other_pdf, opts);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("cannot read document " + std::to_string(id) +
                                       " again from '" + other_pdf.string() +
                                       "': the file's bytes are not the ones it was read from"),
            std::string::npos)
      << wrong.error().message;
  EXPECT_EQ(n_documents(), 1u);
  opts.reread_doc_id = id + 40;
  auto missing = ingest_file(*lib_, scan_pdf, opts);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no document with id " + std::to_string(id + 40)),
            std::string::npos)
      << missing.error().message;
}

TEST_F(IngestPdf, HyphenationIsDecidedByTheDocumentsOwnWords) {
  PdfPage page;
  for (auto& run : test::column({"The parties began to negoti-", "ation of a price-",
                                 "determining clause. Each price-determining", "factor is listed."},
                                72, 700))
    page.runs.push_back(run);
  const auto r = ingest_ok(write_pdf("hyph.pdf", PdfDoc{{page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].text,
            "The parties began to negotiation\nof a price-determining\nclause. Each "
            "price-determining\nfactor is listed.");
  EXPECT_EQ(pages[0].original_text,
            "The parties began to negoti-\nation of a price-\ndetermining clause. Each "
            "price-determining\nfactor is listed.");
}

TEST_F(IngestPdf, RunningHeadersAndFootersAreMarkedOnEveryPage) {
  PdfDoc doc;
  for (int i = 1; i <= 4; ++i) {
    PdfPage p;
    p.runs.push_back(PdfTextRun{72, 760, 9, "ACME Corporation Annual Report 2024", 0, 0});
    p.runs.push_back(PdfTextRun{72, 600, 12, "Body of page " + std::to_string(i) + ".", 0, 0});
    p.runs.push_back(PdfTextRun{280, 30, 9, "Page " + std::to_string(i), 0, 0});
    doc.pages.push_back(p);
  }
  const auto r = ingest_ok(write_pdf("hdr.pdf", doc));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 4u);
  for (const PageRecord& p : pages) {
    ASSERT_EQ(p.boilerplate.size(), 2u) << p.page_no << ": " << p.text;
    const auto [b0, e0] = p.boilerplate[0];
    const auto [b1, e1] = p.boilerplate[1];
    EXPECT_EQ(p.text.substr(static_cast<size_t>(b0), static_cast<size_t>(e0 - b0)),
              "ACME Corporation Annual Report 2024");
    EXPECT_EQ(p.text.substr(static_cast<size_t>(b1), static_cast<size_t>(e1 - b1)),
              "Page " + std::to_string(p.page_no));
    EXPECT_NE(p.text.find("Body of page " + std::to_string(p.page_no)), std::string::npos);
  }
}

TEST_F(IngestPdf, SearchFindsTheRightPage) {
  PdfDoc doc;
  for (const char* body : {"Introduction and background.", "The indemnification clause applies.",
                           "Signatures of both parties."}) {
    PdfPage p;
    p.runs.push_back(PdfTextRun{72, 700, 12, body, 0, 0});
    doc.pages.push_back(p);
  }
  const auto r = ingest_ok(write_pdf("search.pdf", doc));
  auto hits = lib_->search("indemnification");
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].doc_id, r.doc_id);
  EXPECT_EQ((*hits)[0].page_no, 2);
  EXPECT_EQ((*hits)[0].snippet, "The **indemnification** clause applies.");
}

}  // namespace
}  // namespace spw::app
