// Ingest in every script: right-to-left lines in logical order (Hebrew, Arabic, mixed with
// digits and Latin), Arabic presentation forms folded, Chinese and Japanese searchable by
// sub-phrase, pages of symbol or letter soup flagged. The pango-made fixtures live in
// tests/data/pdfs (made by its make.sh); the others are built here.
#include <gtest/gtest.h>

#include <string>

#include "app/ingest/ingest.h"
#include "app/ingest/ingest_test_util.h"

namespace spw::app {
namespace {

using test::PdfDoc;
using test::PdfPage;
using test::PdfTextRun;

class IngestScripts : public testing::IngestFixture {
 protected:
  // The fixture's pages (one expected); skips when the fixture is missing.
  std::vector<PageRecord> fixture_pages(const std::string& name) {
    const std::filesystem::path file =
        std::filesystem::path(SPILLWAY_TEST_DATA_DIR) / "pdfs" / name;
    if (!std::filesystem::exists(file)) return {};
    const auto r = ingest_ok(file);
    return pages_of(r.doc_id);
  }

  std::vector<std::pair<int64_t, int>> hits(const std::string& q) {
    auto h = lib_->search(q);
    EXPECT_TRUE(h.ok()) << (h.ok() ? "" : h.error().message);
    std::vector<std::pair<int64_t, int>> out;
    if (h.ok()) {
      for (const SearchHit& x : *h) out.emplace_back(x.doc_id, x.page_no);
    }
    return out;
  }
};

TEST_F(IngestScripts, RightToLeftLinesAreStoredInLogicalOrder) {
  // pango (HarfBuzz) draws each glyph on its own, right to left; poppler gives them by x.
  const auto pages = fixture_pages("rtl.pdf");
  ASSERT_EQ(pages.size(), 1u) << "tests/data/pdfs/rtl.pdf missing or unreadable";
  EXPECT_EQ(pages[0].text,
            // שלום עולם
            "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D\n\n"
            // מחיר 120 שקלים ל-Jane Example
            "\xD7\x9E\xD7\x97\xD7\x99\xD7\xA8 120 \xD7\xA9\xD7\xA7\xD7\x9C\xD7\x99\xD7\x9D "
            "\xD7\x9C-Jane Example\n\n"
            // محمد21 habibi
            "\xD9\x85\xD8\xAD\xD9\x85\xD8\xAF"
            "21 habibi\n\n"
            // هذا مثال على النص العربي
            "\xD9\x87\xD8\xB0\xD8\xA7 \xD9\x85\xD8\xAB\xD8\xA7\xD9\x84 \xD8\xB9\xD9\x84\xD9\x89 "
            "\xD8\xA7\xD9\x84\xD9\x86\xD8\xB5 \xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A");
  EXPECT_FALSE(pages[0].undecodable);
  // Words of both scripts are found.
  EXPECT_EQ(hits("\xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D").size(), 1u);                  // עולם
  EXPECT_EQ(hits("\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A").size(), 1u);  // العربي
  EXPECT_EQ(hits("\xD9\x85\xD8\xAB\xD8\xA7\xD9\x84").size(), 1u);                  // مثال
  EXPECT_EQ(hits("Jane").size(), 1u);
}

TEST_F(IngestScripts, ChineseAndJapaneseSubPhrasesAreFound) {
  const auto pages = fixture_pages("cjk.pdf");
  ASSERT_EQ(pages.size(), 1u) << "tests/data/pdfs/cjk.pdf missing or unreadable";
  EXPECT_EQ(pages[0].text,
            // 东北电气发展股份有限公司2023年主要财务指标
            "\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94\xE5\x8F\x91\xE5\xB1\x95\xE8\x82\xA1"
            "\xE4\xBB\xBD\xE6\x9C\x89\xE9\x99\x90\xE5\x85\xAC\xE5\x8F\xB8"
            "2023\xE5\xB9\xB4\xE4\xB8\xBB\xE8\xA6\x81\xE8\xB4\xA2\xE5\x8A\xA1\xE6\x8C\x87\xE6\xA0"
            "\x87\n\n"
            // 東京都の人口は増えている。
            "\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\xE3\x81\xAE\xE4\xBA\xBA\xE5\x8F\xA3\xE3\x81\xAF"
            "\xE5\xA2\x97\xE3\x81\x88\xE3\x81\xA6\xE3\x81\x84\xE3\x82\x8B\xE3\x80\x82");
  EXPECT_EQ(hits("\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94").size(), 1u);  // 东北电气
  EXPECT_EQ(hits("\xE8\xB4\xA2\xE5\x8A\xA1\xE6\x8C\x87\xE6\xA0\x87").size(), 1u);  // 财务指标
  EXPECT_EQ(hits("\xE4\xBA\xBA\xE5\x8F\xA3").size(), 1u);                          // 人口
  EXPECT_EQ(hits("\xE5\xA2\x97\xE3\x81\x88\xE3\x81\xA6").size(), 1u);              // 増えて
  EXPECT_TRUE(hits("\xE8\xB4\xA2\xE6\x8C\x87").empty());  // 财指: not adjacent
}

TEST_F(IngestScripts, VerticalTextIsReadInColumnsRightToLeft) {
  // Tategaki: upright glyphs, the first column at the right; vertical brackets ︵︶ fold.
  const auto pages = fixture_pages("vertical.pdf");
  ASSERT_EQ(pages.size(), 1u) << "tests/data/pdfs/vertical.pdf missing or unreadable";
  EXPECT_EQ(pages[0].text,
            // 東京都の人口は増えている。
            "\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\xE3\x81\xAE\xE4\xBA\xBA\xE5\x8F\xA3\xE3\x81\xAF"
            "\xE5\xA2\x97\xE3\x81\x88\xE3\x81\xA6\xE3\x81\x84\xE3\x82\x8B\xE3\x80\x82\n"
            // 東北電気発展（主要）指標
            "\xE6\x9D\xB1\xE5\x8C\x97\xE9\x9B\xBB\xE6\xB0\x97\xE7\x99\xBA\xE5\xB1\x95\xEF\xBC\x88"
            "\xE4\xB8\xBB\xE8\xA6\x81\xEF\xBC\x89\xE6\x8C\x87\xE6\xA8\x99");
  EXPECT_EQ(hits("\xE4\xBA\xBA\xE5\x8F\xA3").size(), 1u);  // 人口
}

TEST_F(IngestScripts, ArabicPresentationFormsAndBidiMarksAreFolded) {
  // A font whose ToUnicode gives presentation forms, drawn left to right as displayed:
  // final alef, medial thal, initial heh = هذا; then an RLM and the lam-alef ligature.
  PdfDoc doc;
  doc.custom_map = {{0x01, 0xFE8E}, {0x02, 0xFEAC}, {0x03, 0xFEEB}, {0x04, 0x200F}, {0x05, 0xFEFB}};
  PdfPage page;
  page.runs.push_back(PdfTextRun{300, 700, 14, "\x05\x04", 1, 0});
  page.runs.push_back(PdfTextRun{340, 700, 14, "\x01\x02\x03", 1, 0});
  page.runs.push_back(PdfTextRun{72, 660, 12, "An English line under it.", 0, 0});
  doc.pages = {page};
  const auto r = ingest_ok(write_pdf("forms.pdf", doc));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  // هذا لا
  EXPECT_EQ(pages[0].text,
            "\xD9\x87\xD8\xB0\xD8\xA7 \xD9\x84\xD8\xA7\n\nAn English line under it.");
  EXPECT_EQ(hits("\xD9\x87\xD8\xB0\xD8\xA7").size(), 1u);
}

TEST_F(IngestScripts, SymbolSoupPageIsFlaggedUnreliableAndProseIsNot) {
  // A CID font without a usable map: its digits come out as ™ — › œ.
  PdfDoc doc;
  doc.custom_map = {{'1', 0x2122}, {'2', 0x2014}, {'3', 0x203A}, {'4', 0x0153}};
  PdfPage soup;
  soup.runs.push_back(PdfTextRun{72, 700, 12, "12 3 14", 1, 0});
  soup.runs.push_back(PdfTextRun{72, 680, 12, "4431 2 1413", 1, 0});
  PdfPage prose;
  prose.runs.push_back(
      PdfTextRun{72, 700, 12, "Invoice total: 1,234.50 USD, due in 30 days.", 0, 0});
  doc.pages = {soup, prose};
  const auto r = ingest_ok(write_pdf("soup.pdf", doc));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_TRUE(pages[0].undecodable);
  EXPECT_EQ(pages[0].text, "");
  // Kept as extracted for inspection (the font's zero-width glyphs overlap, so poppler drops
  // repeated ones on the second line).
  EXPECT_EQ(pages[0].original_text.substr(0, pages[0].original_text.find('\n')),
            "\xE2\x84\xA2\xE2\x80\x94 \xE2\x80\xBA \xE2\x84\xA2\xC5\x93");
  EXPECT_FALSE(pages[1].undecodable);
  EXPECT_EQ(pages[1].text, "Invoice total: 1,234.50 USD, due in 30 days.");
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_EQ(r.warnings[0].page_no, 1);
  EXPECT_NE(r.warnings[0].message.find("unreliable"), std::string::npos);
  EXPECT_EQ(r.document.n_undecodable, 1);
}

TEST_F(IngestScripts, LetterSoupPageIsFlaggedUnreliable) {
  // Glyphs placed one by one far apart (a mirrored or per-glyph page): one-letter words.
  PdfPage page;
  const std::string letters = "Thecommitteereviewedtheannualreport";
  for (size_t i = 0; i < letters.size(); ++i) {
    const double x = 72 + 14.0 * static_cast<double>(i % 30);
    const double y = 700 - 14.0 * static_cast<double>(i / 30);
    page.runs.push_back(PdfTextRun{x, y, 10, std::string(1, letters[i]), 0, 0});
  }
  const auto r = ingest_ok(write_pdf("letters.pdf", PdfDoc{{page}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_TRUE(pages[0].undecodable) << pages[0].original_text;
  EXPECT_EQ(pages[0].text, "");
  EXPECT_TRUE(r.document.no_text);
}

}  // namespace
}  // namespace spw::app
