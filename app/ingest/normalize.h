// Normalisation of extracted page text: what the model and the search index see.
//
//  - ligatures U+FB00-FB06 expanded ("ﬁ" -> "fi", "ﬅ"/"ﬆ" -> "st");
//  - soft hyphens (U+00AD) removed; one at a line end joins the word across the break;
//  - a word hyphenated across a line break joined ("negoti-" / "ation" -> "negotiation") unless
//    the document itself writes that compound with a hyphen inside a line ("price-determining");
//    a continuation with a capital or a digit keeps its hyphen unless the document writes the
//    word whole ("Trace-"/"Monkey" -> "TraceMonkey"); either way the whole word moves to the
//    first line;
//  - layout padding (runs of spaces, tabs, no-break and other fixed-width spaces) collapsed to one
//    space, lines trimmed, blank lines collapsed;
//  - running headers and footers (the same line, digits aside, in the top or bottom tenth of most
//    pages) kept but marked as boilerplate ranges so prompts can drop them.
// Every other character stays as it is (a '?' in the file stays a '?').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/ingest/layout.h"

namespace spw::app {

/// One page before normalisation. Lines with y1 < 0 have no position (OCR text, form fields)
/// and are never taken for headers or footers.
struct PageLines {
  std::vector<LayoutLine> lines;  // reading order
  double height = 0;              // page height in points; 0: no geometry
};

struct NormalizedPage {
  std::string original_text;  // lines as extracted, '\n' between, a blank line before blocks
  std::string text;           // normalised
  std::vector<std::pair<int64_t, int64_t>> boilerplate;  // [begin, end) byte ranges in text
};

/// Normalises all pages of a document together (hyphenation looks at the whole document's
/// words; headers and footers at all pages). Output has one entry per input page.
std::vector<NormalizedPage> normalize_document(const std::vector<PageLines>& pages);

/// One line: ligatures expanded, soft hyphens removed, padding collapsed, trimmed.
std::string normalize_line(std::string_view line);

/// True when a page's extracted text is mostly not text: (cid:N) placeholders, U+FFFD,
/// private-use or control characters make up a quarter or more of its non-space characters.
bool looks_undecodable(std::string_view text);

}  // namespace spw::app
