// Page citations in an answer, `[p. N] "short quote"`, and their check against the page text.
//
// Parsing accepts what models actually write around the requested form: "[p. 3]", "[p.3]",
// "[P. 3]", "[page 3]", "[pg. 3]", with the quote after the marker (optionally after ':', ',' or
// a dash) or right before it ("quote" [p. 3]); quotes in "...", “...”, „...“ or «...». A marker
// without a quote is a citation with an empty quote (unverified: nothing to check).
//
// Matching is on a folded form of both texts: case folded, whitespace removed (PDF text has
// stray and missing spaces), typographic quotes, apostrophes and dashes folded to ASCII,
// ligatures expanded. Quote ends lose their punctuation ("Agreement." finds "Agreement;"); an
// ellipsis ("..." or U+2026) splits a quote into parts that must appear in order on the page.
// A verified citation carries the matched range of the page's normalised text, as Unicode
// character (code point) offsets and as UTF-8 byte offsets, both half-open.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "app/ask/document.h"

namespace spw::app {

struct Citation {
  int page = 0;       // N of [p. N]
  std::string quote;  // the quoted text without its quote marks; empty when none
  int64_t answer_begin = 0, answer_end = 0;  // bytes of the marker (and quote) in the answer
};

/// Every citation in `answer`, in order of appearance.
std::vector<Citation> parse_citations(std::string_view answer);

struct CitationCheck {
  Citation citation;
  bool verified = false;
  int64_t begin = -1, end = -1;            // code points of page.text, [begin, end); -1 if not
  int64_t byte_begin = -1, byte_end = -1;  // the same range in bytes
  /// Empty when verified; otherwise why not: "no quote", "page 14 is not in the document
  /// (pages 1-12)", "page 3 has no text (scanned)", "quote not found on page 3".
  std::string reason;
  int found_on_page = 0;  // unverified but the quote is on this other page; 0 when not
};

/// Checks one citation against the document's pages.
CitationCheck verify_citation(const Citation& citation, const DocumentText& doc);

/// parse_citations + verify_citation for each.
std::vector<CitationCheck> check_citations(std::string_view answer, const DocumentText& doc);

/// A match of `quote` in `text` (folded as described above): [begin, end) in code points and
/// bytes of `text`; found == false when absent or when the quote folds to nothing.
struct QuoteMatch {
  bool found = false;
  int64_t begin = -1, end = -1;
  int64_t byte_begin = -1, byte_end = -1;
};
QuoteMatch find_quote(std::string_view text, std::string_view quote);

}  // namespace spw::app
