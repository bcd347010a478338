// Tests of the reading-order layout on made-up word boxes.
#include "app/ingest/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

namespace spw::app {
namespace {

// Words of a line, 5 points per character, one space (3 points) apart, starting at x.
void line(std::vector<WordBox>& out, const std::string& text, double x, double y, double h = 10) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    const double width = 5.0 * static_cast<double>(w.size());
    out.push_back(WordBox{w, x, y, x + width, y + h, true});
    x += width + 3;
  }
}

std::string joined(const std::vector<LayoutLine>& lines) {
  std::string s;
  for (const LayoutLine& l : lines) s += l.text + "\n";
  return s;
}

TEST(IngestLayout, TwoColumnsAreReadColumnByColumnAfterAFullWidthTitle) {
  std::vector<WordBox> w;
  line(w, "A Title That Spans Both Columns Of The Page Here", 150, 50, 14);
  for (int i = 0; i < 6; ++i) {
    line(w, "left" + std::to_string(i) + " alpha beta gamma delta", 50, 100 + 12.0 * i);
    line(w, "right" + std::to_string(i) + " one two three four", 320, 100 + 12.0 * i);
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 13u) << joined(lines);
  EXPECT_EQ(lines[0].text, "A Title That Spans Both Columns Of The Page Here");
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(lines[1 + i].text, "left" + std::to_string(i) + " alpha beta gamma delta");
    EXPECT_EQ(lines[7 + i].text, "right" + std::to_string(i) + " one two three four");
  }
  EXPECT_TRUE(lines[1].block_start);
  EXPECT_TRUE(lines[7].block_start);
  EXPECT_FALSE(lines[8].block_start);
}

TEST(IngestLayout, ColumnsWithDifferentLeadingAndAHeadingStillReadColumnByColumn) {
  std::vector<WordBox> w;
  line(w, "Heading in the left column", 50, 88, 14);
  for (int i = 0; i < 9; ++i)
    line(w, "left" + std::to_string(i) + " alpha beta gamma delta", 50, 106 + 12.0 * i);
  for (int i = 0; i < 8; ++i)
    line(w, "right" + std::to_string(i) + " one two three four", 320, 95 + 13.5 * i);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 18u) << joined(lines);
  EXPECT_EQ(lines[0].text, "Heading in the left column");
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(lines[1 + i].text, "left" + std::to_string(i) + " alpha beta gamma delta");
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(lines[10 + i].text, "right" + std::to_string(i) + " one two three four");
}

TEST(IngestLayout, ThreeColumns) {
  std::vector<WordBox> w;
  for (int i = 0; i < 5; ++i) {
    line(w, "a" + std::to_string(i) + " xxxx yyyy zzzz", 40, 100 + 12.0 * i);
    line(w, "b" + std::to_string(i) + " xxxx yyyy zzzz", 230, 100 + 12.0 * i);
    line(w, "c" + std::to_string(i) + " xxxx yyyy zzzz", 420, 100 + 12.0 * i);
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 15u) << joined(lines);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(lines[i].text.substr(0, 2), "a" + std::to_string(i));
    EXPECT_EQ(lines[5 + i].text.substr(0, 2), "b" + std::to_string(i));
    EXPECT_EQ(lines[10 + i].text.substr(0, 2), "c" + std::to_string(i));
  }
}

// Lines of `text` wrapped greedily to `width` points (5 points per character) and justified:
// the slack of each line but the last is spread over its word gaps.
std::vector<std::string> justify(const std::string& text, double width, double y0,
                                 std::vector<WordBox>& out, double* widest_gap) {
  std::istringstream in(text);
  std::vector<std::string> words;
  std::string wd;
  while (in >> wd) words.push_back(wd);
  std::vector<std::string> lines;
  size_t i = 0;
  double y = y0;
  *widest_gap = 0;
  while (i < words.size()) {
    size_t j = i;
    double used = 0;
    while (j < words.size() &&
           used + 5.0 * static_cast<double>(words[j].size()) + 3 * (j - i) <= width) {
      used += 5.0 * static_cast<double>(words[j].size());
      ++j;
    }
    const bool last = j == words.size();
    const double gap = (last || j - i < 2) ? 3 : (width - used) / static_cast<double>(j - i - 1);
    double x = 50;
    std::string line;
    for (size_t k = i; k < j; ++k) {
      const double wdth = 5.0 * static_cast<double>(words[k].size());
      out.push_back(WordBox{words[k], x, y, x + wdth, y + 10, true});
      x += wdth + gap;
      line += (line.empty() ? "" : " ") + words[k];
    }
    if (!last) *widest_gap = std::max(*widest_gap, gap);
    lines.push_back(line);
    i = j;
    y += 12;
  }
  return lines;
}

TEST(IngestLayout, JustifiedSingleColumnWithWideGapsIsNotSplit) {
  // A narrow measure with long words: gaps up to several character widths.
  const std::string text =
      "Notwithstanding anything contained herein, the Licensee shall indemnify, defend and hold "
      "harmless the Licensor, its affiliates, successors and assigns, from and against any and "
      "all claims, liabilities, damages, judgments, settlements, costs and expenses, including "
      "reasonable attorneys' fees, arising out of or relating to the Licensee's performance "
      "hereunder, provided that the Licensor gives prompt written notice of any such claim and "
      "reasonably cooperates, at the Licensee's expense, in the defense and settlement thereof. "
      "Termination of this Agreement shall not relieve either party of obligations incurred "
      "prior to the effective date of termination, including confidentiality undertakings.";
  std::vector<WordBox> w;
  double widest = 0;
  const auto expect = justify(text, 200, 100, w, &widest);
  EXPECT_GT(widest, 15) << "the test wants wide gaps";
  ASSERT_GE(expect.size(), 10u);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), expect.size()) << joined(lines);
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(lines[i].text, expect[i]);
}

TEST(IngestLayout, BulletsAndSparseMarginTextAreNotColumns) {
  std::vector<WordBox> w;
  line(w, "Printed by", 700, 20);
  for (int i = 0; i < 6; ++i) {
    w.push_back(WordBox{"\xE2\x80\xA2", 60, 60 + 12.0 * i, 64, 70 + 12.0 * i, false});
    line(w, "item " + std::to_string(i) + " of the list", 80, 60 + 12.0 * i);
  }
  line(w, "footer 1/1", 700, 400);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 8u) << joined(lines);
  EXPECT_EQ(lines[0].text, "Printed by");
  EXPECT_EQ(lines[1].text, "\xE2\x80\xA2 item 0 of the list");
  EXPECT_EQ(lines[6].text, "\xE2\x80\xA2 item 5 of the list");
  EXPECT_EQ(lines[7].text, "footer 1/1");
}

TEST(IngestLayout, SuperscriptsStayOnTheirLineAndSplitWordsJoin) {
  std::vector<WordBox> w;
  w.push_back(WordBox{"Gal", 100, 100, 115, 110, false});
  w.push_back(WordBox{"*+", 115, 97, 122, 104, true});  // raised, smaller
  w.push_back(WordBox{"Eich", 128, 100, 148, 110, true});
  w.push_back(WordBox{"next", 100, 113, 120, 123, true});
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 2u) << joined(lines);
  EXPECT_EQ(lines[0].text, "Gal*+ Eich");
  EXPECT_EQ(lines[1].text, "next");
}

TEST(IngestLayout, RightToLeftLinesAreInLogicalOrder) {
  // Hebrew words: the first word (logically) is the rightmost.
  std::vector<WordBox> w;
  w.push_back(WordBox{"\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D", 200, 100, 230, 110, true});  // first
  w.push_back(WordBox{"\xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D", 160, 100, 190, 110, true});  // second
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D");
}

TEST(IngestLayout, TwoColumnsOfTwoLinesAreReadColumnByColumn) {
  std::vector<WordBox> w;
  line(w, "The committee reviewed the annual", 50, 100);
  line(w, "approved the budget for the", 320, 100);
  line(w, "report and", 50, 112);
  line(w, "coming fiscal year.", 320, 112);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 4u) << joined(lines);
  EXPECT_EQ(joined(lines),
            "The committee reviewed the annual\nreport and\n"
            "approved the budget for the\ncoming fiscal year.\n");
  EXPECT_TRUE(lines[2].block_start);
}

TEST(IngestLayout, TwoRowsWithARaggedRightSideStayRows) {
  // A label and a value per row whose values do not start at one x: not columns.
  std::vector<WordBox> w;
  line(w, "Name of the tenant and others", 50, 100);
  line(w, "John Example of the city", 320, 100);
  line(w, "Address of the property here", 50, 112);
  line(w, "12 Main Street in Springfield", 360, 112);
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 2u) << joined(lines);
  EXPECT_EQ(lines[0].text, "Name of the tenant and others John Example of the city");
}

// A right-to-left word as a PDF gives it: code points in `text` order, each with its box centre.
WordBox rtl_word(const std::string& text, const std::vector<double>& xs, double y = 100) {
  WordBox b{text,   *std::min_element(xs.begin(), xs.end()) - 2,
            y,      *std::max_element(xs.begin(), xs.end()) + 2,
            y + 10, false,
            xs};
  return b;
}

TEST(IngestLayout, RightToLeftGlyphsInVisualOrderBecomeLogical) {
  // שלום עולם drawn glyph by glyph from the left (visual order: ם ו ל ע, then ם ו ל ש), the
  // way HarfBuzz output reaches poppler; one mixed line below: מחיר 120 ל-Jane.
  std::vector<WordBox> w;
  const char* shin = "\xD7\xA9";
  const char* lamed = "\xD7\x9C";
  const char* vav = "\xD7\x95";
  const char* mem_final = "\xD7\x9D";
  const char* ayin = "\xD7\xA2";
  double x = 100;
  for (const char* c : {mem_final, lamed, vav, ayin}) {
    w.push_back(rtl_word(c, {x}));
    x += 4;
  }
  x += 6;  // the space
  for (const char* c : {mem_final, vav, lamed, shin}) {
    w.push_back(rtl_word(c, {x}));
    x += 4;
  }
  // One box for a whole word in logical order (מחיר), its glyphs right to left.
  w.push_back(rtl_word("\xD7\x9E\xD7\x97\xD7\x99\xD7\xA8", {180, 176, 172, 168}, 112));
  w.push_back(WordBox{"120", 148, 112, 162, 122, true, {}});
  w.push_back(WordBox{"Jane", 100, 112, 120, 122, false, {}});
  w.push_back(rtl_word("-\xD7\x9C", {122, 128}, 112));  // "-" left of lamed, touching Jane
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 2u) << joined(lines);
  EXPECT_EQ(lines[0].text, "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D");
  EXPECT_EQ(lines[1].text, "\xD7\x9E\xD7\x97\xD7\x99\xD7\xA8 120 \xD7\x9C-Jane");
}

TEST(IngestLayout, VisualToLogicalKeepsDigitsAndLatinRuns) {
  // محمد21 habibi as displayed: "habibi 21" then دمحم at the right.
  EXPECT_EQ(visual_to_logical("habibi 21\xD8\xAF\xD9\x85\xD8\xAD\xD9\x85", true),
            "\xD9\x85\xD8\xAD\xD9\x85\xD8\xAF"
            "21 habibi");
  // Brackets displayed mirrored come back as written; left-to-right text is untouched.
  EXPECT_EQ(visual_to_logical("(abc) \xD7\x9D\xD7\x95\xD7\x9C\xD7\xA9", true),
            "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D (abc)");
  EXPECT_EQ(visual_to_logical("plain text 42", false), "plain text 42");
}

TEST(IngestLayout, VerticalGlyphColumnsReadRightToLeftUnderAHeader) {
  // Two columns of upright glyphs 14 points apart, boxes taller than the advance (they
  // overlap vertically), a horizontal Latin header above them.
  std::vector<WordBox> w;
  line(w, "Header line", 20, 5);
  const char* right_col[] = {"\xE6\x9D\xB1", "\xE4\xBA\xAC", "\xE9\x83\xBD"};  // 東京都
  const char* left_col[] = {"\xE5\x8C\x97", "\xE6\xB5\xB7", "\xE9\x81\x93"};   // 北海道
  for (int k = 0; k < 3; ++k) {
    const double y = 30 + 13.0 * k;
    w.push_back(WordBox{right_col[k], 38, y, 52, y + 16.4, false, {}});
    w.push_back(WordBox{left_col[k], 21, y, 35, y + 16.4, false, {}});
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 3u) << joined(lines);
  EXPECT_EQ(
      joined(lines),
      "Header line\n\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\n\xE5\x8C\x97\xE6\xB5\xB7\xE9\x81\x93\n");
}

TEST(IngestLayout, HorizontalGlyphByGlyphCjkStaysInRows) {
  // The same glyphs placed as two rows (touching sideways, a line gap between rows).
  std::vector<WordBox> w;
  const char* row0[] = {"\xE6\x9D\xB1", "\xE4\xBA\xAC", "\xE9\x83\xBD"};
  const char* row1[] = {"\xE5\x8C\x97", "\xE6\xB5\xB7", "\xE9\x81\x93"};
  for (int k = 0; k < 3; ++k) {
    w.push_back(WordBox{row0[k], 20 + 14.0 * k, 30, 34 + 14.0 * k, 44, false, {}});
    w.push_back(WordBox{row1[k], 20 + 14.0 * k, 50, 34 + 14.0 * k, 64, false, {}});
  }
  const auto lines = layout_page(w);
  EXPECT_EQ(joined(lines),
            "\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\n\xE5\x8C\x97\xE6\xB5\xB7\xE9\x81\x93\n");
}

TEST(IngestLayout, MarginLineNumbersBecomeLineMetadata) {
  // A transcript: 1-6 right-aligned down the left margin, the testimony beside them.
  std::vector<WordBox> w;
  const char* text[] = {"Q. Where were you on", "the night of March 3?", "A. At home with my",
                        "sister, all evening.", "Q. Did anyone call",    "you that night?"};
  for (int k = 0; k < 6; ++k) {
    const std::string n = std::to_string(k + 1);
    const double y = 100 + 24.0 * k;
    w.push_back(WordBox{n, 40 - 5.0 * static_cast<double>(n.size()), y, 40, y + 10, true, {}});
    line(w, text[k], 72, y);
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 6u) << joined(lines);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(lines[k].text, text[k]);
    EXPECT_EQ(lines[k].margin_number, std::to_string(k + 1));
  }
}

TEST(IngestLayout, NumbersThatDoNotCountUpStayInTheText) {
  std::vector<WordBox> w;
  const int values[] = {12, 7, 30, 4, 18, 9};
  for (int k = 0; k < 6; ++k) {
    const double y = 100 + 24.0 * k;
    w.push_back(WordBox{std::to_string(values[k]), 30, y, 40, y + 10, true, {}});
    line(w, "units shipped", 72, y);
  }
  const auto lines = layout_page(w);
  ASSERT_EQ(lines.size(), 6u) << joined(lines);
  EXPECT_EQ(lines[0].text, "12 units shipped");
  EXPECT_EQ(lines[0].margin_number, "");
}

TEST(IngestLayout, EmptyPage) { EXPECT_TRUE(layout_page({}).empty()); }

}  // namespace
}  // namespace spw::app
