// Citation parsing and verification on known text (app/ask/citations.h).
#include "app/ask/citations.h"

#include <gtest/gtest.h>

#include <string>

namespace spw::app {
namespace {

DocumentText contract() {
  DocumentText d;
  d.id = 7;
  d.title = "Agreement";
  d.pages.push_back({1,
                     "CHASE AFFILIATE AGREEMENT\nTHIS AGREEMENT sets forth the terms and\n"
                     "conditions agreed to between Chase Bank USA, N.A. (?Chase?) and you.",
                     false,
                     false,
                     false,
                     {}});
  d.pages.push_back({2,
                     "7. Termination. Either party may terminate this Agreement at any time,\n"
                     "with or without cause, by giving    the other party written notice.",
                     false,
                     false,
                     false,
                     {}});
  d.pages.push_back({3, "", true, false, false, {}});  // a scanned page
  d.pages.push_back({4,
                     "Caf\xC3\xA9 r\xC3\xA9sum\xC3\xA9: the \xE2\x80\x9C"
                     "effective "
                     "date\xE2\x80\x9D is the day you sign \xE2\x80\x94 not before.",
                     false,
                     false,
                     false,
                     {}});
  return d;
}

TEST(CitationParse, TheRequestedFormAndItsVariants) {
  const std::string answer =
      "Either party can end it [p. 2] \"Either party may terminate this Agreement\". "
      "It binds Chase [p.1]: \"Chase Bank USA\" and [P. 4] \xE2\x80\x9C"
      "effective date"
      "\xE2\x80\x9D. Also \"written notice\" [p. 2], see [page 1] and [pg. 2] - \"at any time\".";
  const auto c = parse_citations(answer);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c[0].page, 2);
  EXPECT_EQ(c[0].quote, "Either party may terminate this Agreement");
  EXPECT_EQ(answer.substr(c[0].answer_begin, c[0].answer_end - c[0].answer_begin),
            "[p. 2] \"Either party may terminate this Agreement\"");
  EXPECT_EQ(c[1].page, 1);
  EXPECT_EQ(c[1].quote, "Chase Bank USA");
  EXPECT_EQ(c[2].page, 4);
  EXPECT_EQ(c[2].quote, "effective date");
  EXPECT_EQ(c[3].page, 2);
  EXPECT_EQ(c[3].quote, "written notice");  // the quote before the marker
  EXPECT_EQ(answer.substr(c[3].answer_begin, 4), "\"wri");
  EXPECT_EQ(c[4].page, 1);
  EXPECT_EQ(c[4].quote, "");  // no quote: the next quote belongs to the next marker
  EXPECT_EQ(c[5].page, 2);
  EXPECT_EQ(c[5].quote, "at any time");
}

TEST(CitationParse, NotMarkers) {
  for (const std::string s :
       {"[1]", "[p. ]", "[p. 0]", "[p. x]", "[q. 3]", "[p. 3", "[p. 12345678]", "[pp 3]", ""}) {
    EXPECT_TRUE(parse_citations(s).empty()) << s;
  }
  // An unclosed quote, or one that runs past a blank line, is no quote.
  auto c = parse_citations("[p. 2] \"never closed");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].quote, "");
  c = parse_citations("[p. 2] \"runs on\n\nand on\"");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].quote, "");
}

TEST(CitationParse, AQuoteIsTakenOnce) {
  // "q" [p. 1] [p. 2]: the second marker must not take the first's quote again.
  const auto c = parse_citations("\"written notice\" [p. 2] [p. 1]");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].quote, "written notice");
  EXPECT_EQ(c[1].quote, "");
}

TEST(CitationVerify, FoundWithCharacterAndByteOffsets) {
  const DocumentText d = contract();
  const Citation c{2, "Either party may terminate this Agreement", 0, 0};
  const CitationCheck r = verify_citation(c, d);
  ASSERT_TRUE(r.verified) << r.reason;
  const std::string& page = d.pages[1].text;
  EXPECT_EQ(r.begin, static_cast<int64_t>(page.find("Either")));
  EXPECT_EQ(page.substr(r.byte_begin, r.byte_end - r.byte_begin),
            "Either party may terminate this Agreement");
  EXPECT_EQ(r.end - r.begin, 41);
  EXPECT_TRUE(r.reason.empty());
}

TEST(CitationVerify, WhitespaceCaseAndPunctuationInsensitive) {
  const DocumentText d = contract();
  // Line break and a run of spaces in the page; other case; a period the page does not have.
  const CitationCheck r =
      verify_citation({2, "WITH OR WITHOUT CAUSE, by giving the other party.", 0, 0}, d);
  ASSERT_TRUE(r.verified) << r.reason;
  EXPECT_EQ(d.pages[1].text.substr(r.byte_begin, r.byte_end - r.byte_begin),
            "with or without cause, by giving    the other party");
  // Across the page's line break.
  EXPECT_TRUE(verify_citation({1, "the terms and conditions agreed", 0, 0}, d).verified);
  // Whitespace removed entirely: stray spaces in extracted text still match.
  EXPECT_TRUE(verify_citation({1, "Chase Bank USA, N. A.", 0, 0}, d).verified);
}

TEST(CitationVerify, TypographicQuotesDashesAndNonAscii) {
  const DocumentText d = contract();
  // ASCII quotes and a hyphen stand for the page's curly quotes and em dash.
  const CitationCheck r =
      verify_citation({4, "the \"effective date\" is the day you sign - not before", 0, 0}, d);
  ASSERT_TRUE(r.verified) << r.reason;
  const std::string& page = d.pages[3].text;
  EXPECT_EQ(r.byte_begin, static_cast<int64_t>(page.find("the \xE2\x80\x9C")));
  EXPECT_EQ(r.byte_end, static_cast<int64_t>(page.size()) - 1);  // all but the final '.'
  // Character offsets count code points: "Café résumé: " is 13 characters, 16 bytes.
  EXPECT_EQ(r.begin, 13);
  EXPECT_EQ(r.byte_begin, 16);
  // Non-ASCII case folding.
  EXPECT_TRUE(verify_citation({4, "CAF\xC3\x89 R\xC3\x89SUM\xC3\x89", 0, 0}, d).verified);
}

TEST(CitationVerify, EllipsisSplitsTheQuote) {
  const DocumentText d = contract();
  const CitationCheck r =
      verify_citation({2, "Either party may terminate ... written notice", 0, 0}, d);
  ASSERT_TRUE(r.verified) << r.reason;
  const std::string& page = d.pages[1].text;
  EXPECT_EQ(r.byte_begin, static_cast<int64_t>(page.find("Either")));
  EXPECT_EQ(r.byte_end, static_cast<int64_t>(page.find("notice") + 6));
  EXPECT_TRUE(verify_citation({2, "Either party\xE2\x80\xA6notice", 0, 0}, d).verified);
  // Parts out of order are not a match.
  EXPECT_FALSE(verify_citation({2, "written notice ... Either party", 0, 0}, d).verified);
}

TEST(CitationVerify, UnverifiedWithTheReason) {
  const DocumentText d = contract();
  CitationCheck r = verify_citation({2, "the supplier shall indemnify", 0, 0}, d);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "quote not found on page 2");
  EXPECT_EQ(r.begin, -1);
  EXPECT_EQ(r.found_on_page, 0);

  r = verify_citation({14, "anything", 0, 0}, d);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "page 14 is not in the document (pages 1-4)");

  r = verify_citation({2, "", 0, 0}, d);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "no quote");
  r = verify_citation({2, " ... ", 0, 0}, d);  // folds to nothing
  EXPECT_EQ(r.reason, "no quote");

  r = verify_citation({3, "terminate", 0, 0}, d);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "page 3 has no text (scanned)");
  EXPECT_EQ(r.found_on_page, 2);

  // The right quote on the wrong page: unverified, and where it is.
  r = verify_citation({1, "written notice", 0, 0}, d);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "quote not found on page 1");
  EXPECT_EQ(r.found_on_page, 2);
}

TEST(CitationVerify, QuestionMarksInTheFileAreNotQuotes) {
  // The file's '?' (lost quotes) is a character like any other: a quote with real quotes does
  // not match it, one with the '?' does.
  const DocumentText d = contract();
  EXPECT_FALSE(verify_citation({1, "N.A. (\"Chase\")", 0, 0}, d).verified);
  EXPECT_TRUE(verify_citation({1, "N.A. (?Chase?)", 0, 0}, d).verified);
}

TEST(CitationCheck, AnswerEndToEnd) {
  const DocumentText d = contract();
  const auto checks = check_citations(
      "Yes [p. 2] \"may terminate this Agreement at any time\"; the date [p. 4] \"the day you "
      "sign\" and [p. 9] \"nothing\" and [p. 1].",
      d);
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_TRUE(checks[0].verified);
  EXPECT_TRUE(checks[1].verified);
  EXPECT_FALSE(checks[2].verified);
  EXPECT_EQ(checks[2].reason, "page 9 is not in the document (pages 1-4)");
  EXPECT_FALSE(checks[3].verified);
  EXPECT_EQ(checks[3].reason, "no quote");
}

TEST(FindQuote, InvalidUtf8AndEdges) {
  // Invalid bytes are characters of their own; offsets stay consistent.
  const std::string text = std::string("ab\xFF") + "cd ef";
  const QuoteMatch m = find_quote(text, "cdef");
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.begin, 3);
  EXPECT_EQ(m.end, 8);
  EXPECT_EQ(m.byte_begin, 3);
  EXPECT_EQ(m.byte_end, 8);
  EXPECT_FALSE(find_quote(text, "").found);
  EXPECT_FALSE(find_quote("", "x").found);
  // Ligatures fold to letters on either side.
  EXPECT_TRUE(find_quote("the \xEF\xAC\x81nal o\xEF\xAC\x80"
                         "er",
                         "final offer")
                  .found);
  EXPECT_TRUE(find_quote("final offer", "\xEF\xAC\x81nal").found);
}

}  // namespace
}  // namespace spw::app
