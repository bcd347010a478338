// Normalisation of extracted page text: what the model and the search index see.
//
//  - ligatures U+FB00-FB06 expanded ("ﬁ" -> "fi", "ﬅ"/"ﬆ" -> "st");
//  - display forms NFKC-folded (ICU): Arabic presentation forms (U+FB50-FDFF, U+FE70-FEFE) to
//    base letters, vertical forms (U+FE10-FE19, U+FE30-FE4F) to the horizontal ones, ASCII
//    punctuation as its full-width form ("︵︶" -> "（）");
//  - bidi controls (U+200E/F, U+202A-202E, U+2066-2069, U+061C) and U+FEFF removed (the text
//    is in logical order, see layout.h);
//  - soft hyphens (U+00AD) removed; one at a line end joins the word across the break;
//  - a word hyphenated across a line break joined ("negoti-" / "ation" -> "negotiation") or
//    kept as a compound: the document decides first (whichever of "copy-right" and "copyright"
//    it writes more often inside its lines); then a continuation with a capital or a digit
//    keeps its hyphen ("Trace-"/"Monkey" unless the document writes "TraceMonkey", "1990-"/
//    "1995"); then the word list: a lower-case continuation is joined unless the list has both
//    halves and not the joined word ("price-"/"determining" -> "price-determining", "cli-"/
//    "mate" -> "climate"); either way the whole word moves to the first line;
//  - layout padding (runs of spaces, tabs, no-break and other fixed-width spaces) collapsed to one
//    space, lines trimmed, blank lines collapsed;
//  - running headers and footers (the same line, digits aside, in the top or bottom tenth of most
//    pages) kept but marked as boilerplate ranges so prompts can drop them.
// Every other character stays as it is (a '?' in the file stays a '?').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
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
  std::string original_text;  // lines as extracted, '\n' between, a blank line before blocks;
                              // a margin line number before its line
  std::string text;           // normalised
  std::vector<std::pair<int64_t, int64_t>> boilerplate;  // [begin, end) byte ranges in text
};

/// Lower-case words for hyphenation where the document does not decide.
using WordList = std::unordered_set<std::string>;

/// Debian's word list (wamerican: /usr/share/dict/american-english, else /usr/share/dict/words),
/// read once; empty when neither file exists (hyphenation then goes by the document alone).
const WordList& system_word_list();

/// Normalises all pages of a document together (hyphenation looks at the whole document's
/// words; headers and footers at all pages). Output has one entry per input page.
/// `dictionary` (may be null): see the hyphenation rule above.
std::vector<NormalizedPage> normalize_document(const std::vector<PageLines>& pages,
                                               const WordList* dictionary = &system_word_list());

/// One line: ligatures expanded, soft hyphens removed, padding collapsed, trimmed.
std::string normalize_line(std::string_view line);

/// Counts over a page's extracted text for judging whether it is text at all.
struct TextQuality {
  int64_t n_chars = 0;     // non-space code points ((cid:N) counts as one)
  int64_t n_unmapped = 0;  // (cid:N), U+FFFD, private-use and control characters
  int64_t n_symbols = 0;   // symbols (Sm, Sc, Sk, So) and rare WinAnsi glyphs (™ › œ ‰ …)
  int64_t n_words = 0;     // runs between spaces
  int64_t n_one_char_words = 0;  // of them, one letter long

  /// Unreliable: unmapped characters are a quarter or more of the characters; or unmapped and
  /// symbols half or more (of at least 4); or, over at least 12 words, 60% or more are one
  /// character long (letter soup: per-glyph or mirrored placement). Prose, CJK text without
  /// spaces and tables of numbers pass.
  bool unreliable() const;
};

TextQuality assess_text(std::string_view text);

/// assess_text(text).unreliable(): the page's text is not to be given to the model or indexed.
bool looks_undecodable(std::string_view text);

}  // namespace spw::app
