// The real PDFs of ../shared/pdfs (its README lists what a correct extraction contains). Each
// test skips when the folder is absent.
#include "app/ingest/ingest.h"

#include <gtest/gtest.h>

#include "app/ingest/ingest_test_util.h"
#include "app/ingest/ocr.h"

namespace spw::app {
namespace {

using testing::expect_in_order;
using testing::squash;

std::filesystem::path shared_pdf(const std::string& name) {
  return std::filesystem::path(SPILLWAY_SHARED_DIR) / "pdfs" / name;
}

class IngestSharedPdfs : public testing::IngestFixture {
 protected:
  // Ingests a shared PDF (skipping the test when it is absent) and returns its pages.
  std::vector<PageRecord> pages(const std::string& name, const IngestOptions& opts = {}) {
    const auto file = shared_pdf(name);
    if (!std::filesystem::exists(file)) return {};
    result_ = ingest_ok(file, opts);
    return pages_of(result_.doc_id);
  }
  IngestResult result_;
};

#define SKIP_IF_ABSENT(name)                      \
  if (!std::filesystem::exists(shared_pdf(name))) \
  GTEST_SKIP() << "shared test PDFs not found at " << shared_pdf(name)

TEST_F(IngestSharedPdfs, TracemonkeyTwoColumnsInOrderWithHyphenationJoined) {
  SKIP_IF_ABSENT("tracemonkey.pdf");
  const auto p = pages("tracemonkey.pdf");
  ASSERT_EQ(p.size(), 14u);
  const std::string p1 = squash(p[0].text);
  expect_in_order(
      p1, {"Trace-based Just-in-Time Type Specialization for Dynamic Languages",
           "We present an alternative compilation technique for dynamically-typed languages "
           "that identifies frequently executed loop traces at run-time",
           // The whole left column (abstract, introduction, the copyright box) ...
           "1. Introduction", "PLDI’09, June 15–20, 2009, Dublin, Ireland.",
           // ... before the right column.
           "and is used for the application logic of browser-based productivity"});
  // In the file the word is broken across lines; the original keeps the break.
  EXPECT_NE(p[0].original_text.find("an al-\nternative"), std::string::npos);
  EXPECT_FALSE(result_.document.repaired);
  EXPECT_FALSE(result_.document.encrypted);
}

TEST_F(IngestSharedPdfs, AffiliateAgreementKeepsTheQuestionMarksOfTheFiling) {
  SKIP_IF_ABSENT("affiliate-agreement.pdf");
  const auto p = pages("affiliate-agreement.pdf");
  ASSERT_EQ(p.size(), 12u);
  expect_in_order(squash(p[0].text),
                  {"CHASE AFFILIATE AGREEMENT",
                   "THIS AGREEMENT sets forth the terms and conditions agreed to between Chase "
                   "Bank USA, N.A. (?Chase?) and you as an “Affiliate”"});
}

TEST_F(IngestSharedPdfs, LigaturesExpanded) {
  SKIP_IF_ABSENT("copy_paste_ligatures.pdf");
  const auto p = pages("copy_paste_ligatures.pdf");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].text, "abcdeffffiflffifflststghijklmno");
  for (const char* lig : {"\xEF\xAC\x80", "\xEF\xAC\x81", "\xEF\xAC\x82", "\xEF\xAC\x83",
                          "\xEF\xAC\x84", "\xEF\xAC\x85", "\xEF\xAC\x86"}) {
    EXPECT_NE(p[0].original_text.find(lig), std::string::npos) << lig;
  }
}

TEST_F(IngestSharedPdfs, RotationLandscapePageUpright) {
  SKIP_IF_ABSENT("rotation.pdf");
  const auto p = pages("rotation.pdf");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].text,
            "This is my first page with normal layout.\nThis is the second line on the page.");
  EXPECT_EQ(p[1].text,
            "This is my second page. It will have a landscape layout.\nSecond line here.");
}

TEST_F(IngestSharedPdfs, PasswordExampleNeedsItsPassword) {
  SKIP_IF_ABSENT("password-example.pdf");
  const auto file = shared_pdf("password-example.pdf");
  auto none = ingest_file(*lib_, file, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            "'" + file.string() + "' is encrypted: a password is needed (--password)");
  IngestOptions wrong;
  wrong.password = "nope";
  auto bad = ingest_file(*lib_, file, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "'" + file.string() + "': wrong password");
  EXPECT_EQ(n_documents(), 0u);
  IngestOptions right;
  right.password = "test";
  const auto p = pages("password-example.pdf", right);
  ASSERT_FALSE(p.empty());
  EXPECT_TRUE(result_.document.encrypted);
  expect_in_order(p[0].text, {"Backup4all –backup solution for network environments\n"
                              "Starting from version 2 it is easier to install Backup4all in a "
                              "network environment."});
}

TEST_F(IngestSharedPdfs, Jbig2ScanIsFlaggedNotIndexedAsEmpty) {
  SKIP_IF_ABSENT("pdf-with-jbig2.pdf");
  const auto p = pages("pdf-with-jbig2.pdf");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0].scanned);
  EXPECT_FALSE(p[0].ocr);
  EXPECT_EQ(p[0].text, "");
  EXPECT_TRUE(result_.document.no_text);
  EXPECT_EQ(result_.document.n_scanned, 1);
  ASSERT_FALSE(result_.warnings.empty());
  EXPECT_NE(result_.warnings[0].message.find("--ocr"), std::string::npos);
}

TEST_F(IngestSharedPdfs, Jbig2ScanReadByOcr) {
  SKIP_IF_ABSENT("pdf-with-jbig2.pdf");
  if (!OcrEngine::available() || !OcrEngine::create("eng").ok())
    GTEST_SKIP() << "tesseract (with English data) not available";
  IngestOptions opts;
  opts.ocr = true;
  const auto p = pages("pdf-with-jbig2.pdf", opts);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0].ocr);
  EXPECT_EQ(squash(p[0].text), "It Doesn't");
  EXPECT_FALSE(result_.document.no_text);
}

TEST_F(IngestSharedPdfs, ZenOfPythonRotatedPageWithItsLines) {
  SKIP_IF_ABSENT("zen_of_python_corrupted.pdf");
  const auto p = pages("zen_of_python_corrupted.pdf");
  ASSERT_EQ(p.size(), 1u);
  expect_in_order(p[0].text, {"zen_of_python.txt",
                              "\nBeautiful is better than ugly.\n"
                              "Explicit is better than implicit.\n"
                              "Simple is better than complex.\n"});
  EXPECT_EQ(result_.document.title, "zen_of_python.txt");
  // This copy's cross-reference table is intact (every offset points at its object; poppler
  // reports nothing), so it is not marked repaired; damaged files are built by
  // IngestFiles.*Repaired*.
}

TEST_F(IngestSharedPdfs, EveryFileIngestsWithTextOrAFlag) {
  SKIP_IF_ABSENT("tracemonkey.pdf");
  for (const auto& e : std::filesystem::directory_iterator(shared_pdf("").parent_path())) {
    if (e.path().extension() != ".pdf") continue;
    IngestOptions opts;
    if (e.path().filename() == "password-example.pdf") opts.password = "test";
    auto r = ingest_file(*lib_, e.path(), opts);
    ASSERT_TRUE(r.ok()) << e.path() << ": " << r.error().message;
    EXPECT_TRUE(r->document.n_chars > 0 || (r->document.no_text && r->document.n_scanned > 0))
        << e.path();
  }
}

}  // namespace
}  // namespace spw::app
