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

TEST(IngestNormalize, HyphenationAsksTheWordListWhereTheDocumentDoesNotDecide) {
  const WordList dict = {"climate", "price", "determining", "factors", "copy", "right"};
  const auto out = normalize_document(
      {page_of({"the cli-", "mate and price-", "determining factors, pp. 10-", "12."})}, &dict);
  EXPECT_EQ(out[0].text, "the climate\nand price-determining\nfactors, pp. 10-12.");
  // Without a word list a lower-case continuation is joined.
  const auto bare = normalize_document({page_of({"and price-", "determining factors"})}, nullptr);
  EXPECT_EQ(bare[0].text, "and pricedetermining\nfactors");
}

TEST(IngestNormalize, HyphenationFollowsTheDocumentsMoreFrequentSpelling) {
  const WordList dict = {"copy", "right"};
  // The text spells copy-right elsewhere: the break keeps the hyphen.
  const auto keep = normalize_document(
      {page_of({"All copy-", "right is reserved."}), page_of({"See the copy-right notice."})},
      &dict);
  EXPECT_EQ(keep[0].text, "All copy-right\nis reserved.");
  // It writes copyright twice and copy-right once: joined.
  const auto join = normalize_document({page_of({"All copy-", "right is reserved."}),
                                        page_of({"copyright and copyright, once copy-right."})},
                                       &dict);
  EXPECT_EQ(join[0].text, "All copyright\nis reserved.");
}

TEST(IngestNormalize, DebiansWordListDecidesCompounds) {
  if (system_word_list().empty()) {
    GTEST_SKIP() << "no /usr/share/dict/american-english (Debian package wamerican)";
  }
  const auto out =
      normalize_document({page_of({"the cli-", "mate and price-", "determining factors"})});
  EXPECT_EQ(out[0].text, "the climate\nand price-determining\nfactors");
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

TEST(IngestNormalize, SymbolSoupIsUnreliableAndProseWithSymbolsIsNot) {
  // A CID font's digits read as WinAnsi: "™— › ™œ" (5 characters, 4 of them odd glyphs).
  const std::string soup = "\xE2\x84\xA2\xE2\x80\x94 \xE2\x80\xBA \xE2\x84\xA2\xC5\x93";
  const TextQuality q = assess_text(soup);
  EXPECT_EQ(q.n_chars, 5);
  EXPECT_EQ(q.n_symbols, 4);
  EXPECT_TRUE(q.unreliable());
  // Half symbols is the line: 2 of 4 flags, 1 of 4 does not.
  EXPECT_TRUE(
      looks_undecodable("\xE2\x84\xA2\xE2\x84\xA2"
                        "ab"));
  EXPECT_FALSE(
      looks_undecodable("\xE2\x84\xA2"
                        "abc"));
  // Prose with prices, a trademark, maths and French ligatures is text.
  EXPECT_FALSE(looks_undecodable(
      "The price is $120 + 5% tax \xE2\x80\x94 Acme\xE2\x84\xA2 \xC5\x93uvre, "
      "\xE2\x88\x91 x = 3 \xC2\xB1 1 \xE2\x80\x9Cquoted\xE2\x80\x9D \xE2\x80\xA2 item."));
}

TEST(IngestNormalize, LetterSoupIsUnreliableAndShortWordsOrNumberTablesAreNot) {
  // Per-glyph placement read back as one-letter words (13 words, 10 of one letter).
  const TextQuality soup = assess_text("T h e c o m m i t t ee re vi");
  EXPECT_EQ(soup.n_words, 13);
  EXPECT_EQ(soup.n_one_char_words, 10);
  EXPECT_TRUE(soup.unreliable());
  // 60% is the line: 12 words, 7 single letters passes, 8 does not.
  EXPECT_FALSE(looks_undecodable("a b c d e f g hh ii jj kk ll"));
  EXPECT_TRUE(looks_undecodable("a b c d e f g h ii jj kk ll"));
  // Fewer than 12 words are never letter soup; a table of digits is not letters.
  EXPECT_FALSE(looks_undecodable("a b c d e f g h i j k"));
  EXPECT_FALSE(looks_undecodable("1 2 3 4 5 6 7 8 9 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5"));
  EXPECT_FALSE(looks_undecodable(
      "I saw a cat and a dog in a park; a man gave me a map of the city, a pen and a cup."));
}

TEST(IngestNormalize, DisplayFormsFoldAndBidiControlsGo) {
  // Arabic presentation forms (ﻫﺬﺍ: initial heh, medial thal, final alef) -> هذا; the lam-alef
  // ligature ﻻ -> لا.
  EXPECT_EQ(normalize_line("\xEF\xBB\xAB\xEF\xBA\xAC\xEF\xBA\x8E \xEF\xBB\xBB"),
            "\xD9\x87\xD8\xB0\xD8\xA7 \xD9\x84\xD8\xA7");
  // Vertical brackets ︵︶ -> （）, the vertical ideographic comma ︑ -> 、.
  EXPECT_EQ(normalize_line("\xEF\xB8\xB5\xE4\xB8\xBB\xEF\xB8\xB6\xEF\xB8\x91"),
            "\xEF\xBC\x88\xE4\xB8\xBB\xEF\xBC\x89\xE3\x80\x81");
  // RLM, RLE ... PDF, LRI ... PDI and a BOM are dropped; the letters stay as they are.
  EXPECT_EQ(normalize_line("\xE2\x80\x8F\xE2\x80\xAB\xD7\xA9\xE2\x80\xAC \xE2\x81\xA6"
                           "120\xE2\x81\xA9\xEF\xBB\xBF"),
            "\xD7\xA9 120");
}

}  // namespace
}  // namespace spw::app
