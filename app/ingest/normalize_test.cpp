// Tests of text normalisation: ligatures, soft hyphens, hyphenation, padding, boilerplate.
#include "app/ingest/normalize.h"

#include <gtest/gtest.h>

namespace spw::app {
namespace {

PageLines page_of(const std::vector<std::string>& lines, double height = 0) {
  PageLines p;
  double y = 100;
  for (const std::string& s : lines) {
    LayoutLine l;
    l.text = s;
    l.y0 = y;
    l.y1 = y + 10;
    y += 12;
    p.lines.push_back(l);
  }
  p.height = height;
  return p;
}

TEST(IngestNormalize, LigaturesExpandedSoftHyphensGonePaddingCollapsed) {
  EXPECT_EQ(normalize_line("\xEF\xAC\x80\xEF\xAC\x81\xEF\xAC\x82\xEF\xAC\x83\xEF\xAC\x84\xEF\xAC"
                           "\x85\xEF\xAC\x86"),
            "fffiflffifflstst");
  EXPECT_EQ(normalize_line("  de\xC2\xAD"
                           "fine   the\t\xC2\xA0 word  "),
            "define the word");
  EXPECT_EQ(normalize_line("a ? stays (?Chase?)"), "a ? stays (?Chase?)");
  EXPECT_EQ(normalize_line("\xE2\x80\x83\xE2\x80\x83indent"), "indent");
}

TEST(IngestNormalize, HyphenatedLineBreaksJoinUnlessTheDocumentWritesTheCompound) {
  const auto out = normalize_document({page_of({
      "the parties began to negoti-",
      "ation of a price-",
      "determining clause, an al-",
      "ternative to the usual price-determining terms. See Just-",
      "In-Time and 1990-",
      "1995 and a dash -",
      "here.",
  })});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text,
            "the parties began to negotiation\n"
            "of a price-determining\n"
            "clause, an alternative\n"
            "to the usual price-determining terms. See Just-In-Time\n"
            "and 1990-1995\n"
            "and a dash -\n"
            "here.");
  // The original text keeps the lines as extracted.
  EXPECT_EQ(out[0].original_text.substr(0, 39), "the parties began to negoti-\nation of a");
}

TEST(IngestNormalize, ACapitalContinuationJoinsWhenTheDocumentWritesTheWordWhole) {
  const auto out = normalize_document(
      {page_of({"We call it Trace-", "Monkey here, and Just-", "In-Time there."}),
       page_of({"TraceMonkey is fast."})});
  EXPECT_EQ(out[0].text, "We call it TraceMonkey\nhere, and Just-In-Time\nthere.");
}

TEST(IngestNormalize, SoftHyphenAtALineEndJoinsWithoutHyphen) {
  const auto out = normalize_document({page_of({"a long nego\xC2\xAD", "tiation here"})});
  EXPECT_EQ(out[0].text, "a long negotiation\nhere");
}

TEST(IngestNormalize, BlocksGetABlankLineAndEmptyLinesDisappear) {
  PageLines p = page_of({"first", "   ", "second", "third"});
  p.lines[2].block_start = true;
  const auto out = normalize_document({p});
  EXPECT_EQ(out[0].text, "first\n\nsecond\nthird");
  EXPECT_EQ(out[0].original_text, "first\n   \n\nsecond\nthird");
}

TEST(IngestNormalize, RunningHeadersAndFootersAreMarked) {
  std::vector<PageLines> pages;
  for (int i = 1; i <= 4; ++i) {
    PageLines p;
    auto add = [&](std::string text, double y) {
      LayoutLine l;
      l.text = std::move(text);
      l.y0 = y;
      l.y1 = y + 10;
      p.lines.push_back(std::move(l));
    };
    add("ACME Corp  Annual Report", 20);
    add("Body text of page " + std::to_string(i) + " begins here", 300);
    add("Page " + std::to_string(i) + " of 4", 770);
    p.height = 792;
    pages.push_back(std::move(p));
  }
  const auto out = normalize_document(pages);
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const std::string& t = out[static_cast<size_t>(i)].text;
    EXPECT_EQ(t, "ACME Corp Annual Report\nBody text of page " + std::to_string(i + 1) +
                     " begins here\nPage " + std::to_string(i + 1) + " of 4");
    const auto& bp = out[static_cast<size_t>(i)].boilerplate;
    ASSERT_EQ(bp.size(), 2u) << i;
    EXPECT_EQ(
        t.substr(static_cast<size_t>(bp[0].first), static_cast<size_t>(bp[0].second - bp[0].first)),
        "ACME Corp Annual Report");
    EXPECT_EQ(t.substr(static_cast<size_t>(bp[1].first)),
              "Page " + std::to_string(i + 1) + " of 4");
    EXPECT_EQ(static_cast<size_t>(bp[1].second), t.size());
  }
}

TEST(IngestNormalize, TwoPagesOrALineOnFewPagesAreNotBoilerplate) {
  std::vector<PageLines> pages;
  for (int i = 0; i < 5; ++i) {
    PageLines p;
    LayoutLine l;
    l.text = i < 2 ? "Only twice at the top" : "Different " + std::string(1, char('a' + i));
    l.y0 = 20;
    l.y1 = 30;
    p.lines.push_back(l);
    p.height = 792;
    pages.push_back(p);
  }
  for (const auto& np : normalize_document(pages)) EXPECT_TRUE(np.boilerplate.empty());
}

TEST(IngestNormalize, UndecodableText) {
  EXPECT_TRUE(looks_undecodable("(cid:12)(cid:34)(cid:56) (cid:7)"));
  EXPECT_TRUE(looks_undecodable("\xEE\x80\x81\xEE\x80\x82\xEE\x80\x83 ab"));  // private use
  EXPECT_TRUE(looks_undecodable("\xEF\xBF\xBD\xEF\xBF\xBD x"));
  EXPECT_FALSE(looks_undecodable("Ordinary text with one \xEE\x80\x81 bullet in it."));
  EXPECT_FALSE(looks_undecodable("(cid:1) is how pdfminer writes glyphs, said the manual text"));
  EXPECT_FALSE(looks_undecodable(""));
  EXPECT_FALSE(looks_undecodable("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"));  // CJK is text
}

}  // namespace
}  // namespace spw::app
