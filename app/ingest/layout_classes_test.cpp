// Reading-order classes on PDFs built here and read by poppler: letter-spaced words, a vertical
// caption of upright letters, a court caption's ':' column beside margin line numbers, a
// running head and foot over three columns, a form's title block of small boxes, and an
// upside-down page. Plus the cases on made-up boxes that must stay as they are.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/ingest/ingest_test_util.h"
#include "app/ingest/layout.h"
#include "app/ingest/pdf_reader.h"

namespace spw::app {
namespace {

using test::PdfDoc;
using test::PdfPage;
using test::PdfTextRun;

class IngestLayoutPdf : public testing::IngestFixture {
 protected:
  std::string page_text(const std::string& name, const PdfPage& page) {
    const auto r = ingest_ok(write_pdf(name, PdfDoc{{page}, "", {}}));
    const auto pages = pages_of(r.doc_id);
    EXPECT_EQ(pages.size(), 1u);
    return pages.empty() ? std::string() : pages[0].text;
  }

  std::vector<LayoutLine> page_lines(const std::string& name, const PdfPage& page) {
    auto reader = PdfReader::open(write_pdf(name, PdfDoc{{page}, "", {}}), "");
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
    if (!reader.ok()) return {};
    auto p = (*reader)->page(0);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return p.ok() ? p->lines : std::vector<LayoutLine>{};
  }
};

// Helvetica advance widths (per 1000 em) of the characters these tests use.
double helvetica_width(const std::string& s, double size) {
  double w = 0;
  for (const char c : s) {
    switch (c) {
      case ' ':
      case 't':
      case 'f':
      case 'I':
        w += 278;
        break;
      case 'i':
      case 'l':
        w += 222;
        break;
      case '(':
      case ')':
      case 'r':
        w += 333;
        break;
      case 'S':
      case 'E':
        w += 667;
        break;
      default:
        w += 556;
    }
  }
  return w * size / 1000;
}

TEST_F(IngestLayoutPdf, LetterSpacedWordsAreJoinedWhereTheGlyphGapsSaySo) {
  PdfPage page;
  // "(the" set with 2.5 pt character spacing, then ordinary text one space further on.
  PdfTextRun spaced{72, 700, 10, "(the", 0, 0, 2.5};
  page.runs.push_back(spaced);
  const double next = 72 + helvetica_width("(the", 10) + 4 * 2.5 + helvetica_width(" ", 10);
  page.runs.push_back(PdfTextRun{next, 700, 10, "\"Effective Date\") applies.", 0, 0});
  // A heading spaced out by 5 pt: the word spaces are wider than the letter gaps.
  page.runs.push_back(PdfTextRun{72, 686, 10, "NOTICE OF TERMS", 0, 0, 5});
  // Two spaced words, then ordinary ones.
  page.runs.push_back(PdfTextRun{72, 672, 10, "See the", 0, 0, 1.5});
  const double after = 72 + helvetica_width("See the", 10) + 7 * 1.5 + helvetica_width(" ", 10);
  page.runs.push_back(PdfTextRun{after, 672, 10, "following words in text.", 0, 0});
  // One-letter words an ordinary space apart stay words.
  page.runs.push_back(PdfTextRun{72, 658, 10, "Normal text a b c here.", 0, 0});
  EXPECT_EQ(page_text("spaced.pdf", page),
            "(the \"Effective Date\") applies.\nNOTICE OF TERMS\nSee the following words in "
            "text.\nNormal text a b c here.");
}

TEST_F(IngestLayoutPdf, UprightLettersOfAVerticalCaptionBecomeAWord) {
  PdfPage page;
  const std::vector<std::string> body = {"Name of the applicant", "Address of the applicant",
                                         "Date of birth", "Signature of the applicant"};
  for (auto& run : test::column(body, 100, 700, 10, 14)) page.runs.push_back(run);
  // P R I N T, an empty slot, C L E A R L Y: one letter under the other, a font size apart.
  const std::string caption = "PRINT CLEARLY";
  for (size_t k = 0; k < caption.size(); ++k) {
    if (caption[k] == ' ') continue;
    const std::string letter(1, caption[k]);
    page.runs.push_back(PdfTextRun{44 - helvetica_width(letter, 10) / 2,
                                   720 - 10.0 * static_cast<double>(k), 10, letter, 0, 0});
  }
  EXPECT_EQ(page_text("caption.pdf", page),
            "Name of the applicant\nAddress of the applicant\nDate of birth\nSignature of the "
            "applicant\n\nPRINT CLEARLY");
}

TEST_F(IngestLayoutPdf, TranscriptColonColumnAndLineNumbersAreLineMetadata) {
  // A court caption: line numbers 1-6 down the left margin, a ':' column between the parties
  // and the case details.
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"UNITED STATES OF AMERICA,", ""},
      {"Plaintiff,", "Case No. 23-cr-456"},
      {"v.", ""},
      {"JOHN EXAMPLE,", "Judge Jane Roe"},
      {"Defendant.", ""},
      {"TRANSCRIPT OF PROCEEDINGS", ""}};
  PdfPage page;
  for (size_t k = 0; k < rows.size(); ++k) {
    const double y = 700 - 14.0 * static_cast<double>(k);
    const std::string n = std::to_string(k + 1);
    page.runs.push_back(PdfTextRun{40 - helvetica_width(n, 10), y, 10, n, 0, 0});
    page.runs.push_back(PdfTextRun{72, y, 10, rows[k].first, 0, 0});
    if (k < 5) page.runs.push_back(PdfTextRun{300, y, 10, ":", 0, 0});
    if (!rows[k].second.empty()) page.runs.push_back(PdfTextRun{320, y, 10, rows[k].second, 0, 0});
  }
  const auto lines = page_lines("transcript.pdf", page);
  ASSERT_EQ(lines.size(), 6u);
  const char* expected[] = {"UNITED STATES OF AMERICA,",
                            "Plaintiff, Case No. 23-cr-456",
                            "v.",
                            "JOHN EXAMPLE, Judge Jane Roe",
                            "Defendant.",
                            "TRANSCRIPT OF PROCEEDINGS"};
  for (size_t k = 0; k < lines.size(); ++k) {
    EXPECT_EQ(lines[k].text, expected[k]);
    EXPECT_EQ(lines[k].margin_number, std::to_string(k + 1));
    EXPECT_EQ(lines[k].margin_mark, k < 5 ? ":" : "");
  }
  EXPECT_EQ(page_text("transcript.pdf", page),
            "UNITED STATES OF AMERICA,\nPlaintiff, Case No. 23-cr-456\nv.\nJOHN EXAMPLE, Judge "
            "Jane Roe\nDefendant.\nTRANSCRIPT OF PROCEEDINGS");
}

TEST_F(IngestLayoutPdf, RunningHeadAndFootOfThreeColumnsGoBeforeAndAfterThem) {
  PdfPage page;
  // The head's and the foot's pieces sit over the three columns.
  for (auto& run : test::words_at(
           {{50, "THE VALLEY GAZETTE"}, {230, "Tuesday, March 3"}, {410, "Page 4"}}, 740))
    page.runs.push_back(run);
  const std::vector<std::vector<std::string>> cols = {
      {"The council met on Monday to", "discuss the new bridge over the",
       "river, and after a long debate", "the members voted to approve"},
      {"the plan. Work will begin in", "the spring and should be done",
       "by the end of next year, the", "mayor told reporters later."},
      {"Residents have asked for a", "safer crossing for many years,",
       "and most of them welcomed the", "decision of the council."}};
  for (size_t c = 0; c < cols.size(); ++c) {
    for (auto& run : test::column(cols[c], 50 + 180.0 * static_cast<double>(c), 710, 10, 12))
      page.runs.push_back(run);
  }
  for (auto& run : test::words_at({{50, "Printed by Valley Press"},
                                   {230, "Subscriptions 555-0100"},
                                   {410, "valley.example"}},
                                  640))
    page.runs.push_back(run);
  EXPECT_EQ(
      page_text("gazette.pdf", page),
      "THE VALLEY GAZETTE Tuesday, March 3 Page 4\n\n"
      "The council met on Monday to\ndiscuss the new bridge over the\nriver, and after a long "
      "debate\nthe members voted to approve\n\n"
      "the plan. Work will begin in\nthe spring and should be done\nby the end of next year, "
      "the\nmayor told reporters later.\n\n"
      "Residents have asked for a\nsafer crossing for many years,\nand most of them welcomed "
      "the\ndecision of the council.\n\n"
      "Printed by Valley Press Subscriptions 555-0100 valley.example");
}

TEST_F(IngestLayoutPdf, TitleBlockOfSmallBoxesReadsAsOneLineLeftToRight) {
  // A form's header: two lines of small print, the form's name large, two lines of small print.
  PdfPage page;
  page.runs.push_back(PdfTextRun{50, 750, 7, "Department of the Treasury", 0, 0});
  page.runs.push_back(PdfTextRun{50, 741, 7, "Internal Revenue Service", 0, 0});
  page.runs.push_back(PdfTextRun{200, 742, 16, "Form 1040", 0, 0});
  page.runs.push_back(PdfTextRun{400, 750, 7, "OMB No. 1545-0074", 0, 0});
  page.runs.push_back(PdfTextRun{400, 741, 7, "IRS Use Only", 0, 0});
  page.runs.push_back(PdfTextRun{50, 700, 10, "Filing status: check only one box below.", 0, 0});
  EXPECT_EQ(page_text("form.pdf", page),
            "Department of the Treasury Internal Revenue Service Form 1040 OMB No. 1545-0074 IRS "
            "Use Only\n\nFiling status: check only one box below.");
}

TEST_F(IngestLayoutPdf, UpsideDownPagesReadInOrder) {
  // Page 1: text drawn turned by 180 degrees on an unrotated page, one run per word as a
  // per-word layout gives them. Page 2: upright text on a page with /Rotate 180 (a page turned
  // by qpdf --rotate=180). Both are upside down on screen. The stamp read last word first
  // ("2024 Scanned").
  const std::vector<std::string> words = {"Upside", "down", "words", "stay", "in", "order."};
  PdfPage turned;
  double x = 540;
  for (const std::string& word : words) {
    turned.runs.push_back(PdfTextRun{x, 100, 12, word, 0, 180});
    x -= helvetica_width(word + " ", 12);
  }
  turned.runs.push_back(PdfTextRun{540, 116, 12, "The second line follows.", 0, 180});
  // A scanner's stamp, upright on paper: upside down against the page's text.
  turned.runs.push_back(PdfTextRun{72, 30, 9, "Scanned 2024", 0, 0});
  PdfPage rotated;
  rotated.rotate = 180;
  x = 72;
  for (const std::string& word : words) {
    rotated.runs.push_back(PdfTextRun{x, 700, 12, word, 0, 0});
    x += helvetica_width(word + " ", 12);
  }
  rotated.runs.push_back(PdfTextRun{72, 684, 12, "The second line follows.", 0, 0});
  const auto r = ingest_ok(write_pdf("upside.pdf", PdfDoc{{turned, rotated}, "", {}}));
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[0].text,
            "Upside down words stay in order.\nThe second line follows.\n\nScanned 2024");
  EXPECT_EQ(pages[1].text, "Upside down words stay in order.\nThe second line follows.");
}

// Made-up boxes: 5 points per character, one space (3 points) apart.
void boxes(std::vector<WordBox>& out, const std::string& text, double x, double y) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string w = text.substr(pos, end - pos);
    const double width = 5.0 * static_cast<double>(w.size());
    out.push_back(WordBox{w, x, y, x + width, y + 10, true, {}});
    x += width + 3;
    pos = end + 1;
  }
}

TEST(IngestLayout, SingleLettersAsWideApartAsTheWordsStayWords) {
  std::vector<WordBox> w;
  boxes(w, "x = y + z and a b c d", 50, 100);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "x = y + z and a b c d");
}

TEST(IngestLayout, GradesInATableColumnAreNotACaption) {
  // One-letter cells a line apart, each in a row with its label.
  std::vector<WordBox> w;
  const char* grades[] = {"A", "B", "A", "C", "B"};
  for (int k = 0; k < 5; ++k) {
    const double y = 100 + 12.0 * k;
    boxes(w, "Student " + std::to_string(k + 1), 50, y);
    w.push_back(WordBox{grades[k], 200, y, 205, y + 10, true, {}});
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].text, "Student 1 A");
  EXPECT_EQ(lines[4].text, "Student 5 B");
}

TEST(IngestLayout, ATableOfEqualBoxesIsNotATitleBlock) {
  std::vector<WordBox> w;
  boxes(w, "Name", 50, 100);
  boxes(w, "Age", 200, 100);
  boxes(w, "City", 350, 100);
  boxes(w, "Alice", 50, 112);
  boxes(w, "30", 200, 112);
  boxes(w, "Paris", 350, 112);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "Name Age City");
  EXPECT_EQ(lines[1].text, "Alice 30 Paris");
}

}  // namespace
}  // namespace spw::app
