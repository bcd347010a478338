// Reading order of one page from positioned words (no poppler here, so it is testable with
// made-up boxes).
//
// Words are grouped into rows (vertical overlap). A run of consecutive rows that share an empty
// vertical channel (a gutter) is read column by column, left to right, when the channel looks
// like a gutter and not like word gaps that happen to line up:
//  - text on both sides in at least three rows, and in most rows of its stretch (a header on
//    one side and a footer far below do not make a column); or in two rows where both columns
//    start their lines at one x each (short column blocks);
//  - each side wider than a bullet or line-number margin, with prose (a table's label column of
//    a word or two per row is read row by row);
//  - the lines right of it start at one or two x positions (left-aligned text, indents);
//  - it is at least twice as wide as the other word gaps of its rows (a justified line spreads
//    its slack evenly over all its gaps, so a channel through them is no wider than the rest).
// Everything else is read row by row. Each column is laid out again on its own (columns inside
// columns, once).
//
// Line numbers in the left margin (at least five integers of one or two digits, each alone at
// the left of its row, aligned, counting up by one down the page) are taken out of the text
// and kept as each line's margin_number; a column of lone ':' (at least four, one per row,
// centred on one x: a transcript's or a court caption's) likewise, as margin_mark.
//
// Single upright letters stacked down the page (a vertical caption, `P` over `R` over `I`...)
// are read as one line after the page's text, a space where a letter's slot is left empty.
//
// Letter-spaced words (poppler splits them into single glyphs: `( t h e`) are joined when the
// glyph gaps say so: the gaps between the glyphs are even, and narrower than the gap to the
// words beside them, or than the wider gaps that separate the letter-spaced words.
//
// A title block at the top of the page (up to three rows of small boxes side by side, of
// different sizes, one box with fewer lines than another: a form's header) reads as one line,
// box by box left to right.
// A running head or foot in a columns' band (its pieces over the columns, set apart by a
// vertical gap) is read before or after the columns, not as their first or last lines.
//
// Vertical text (tategaki: most words single upright CJK glyphs, each closer to the one below
// than to the one beside it) is read in columns, right to left, each top to bottom, one line
// per column; other words on the page (a header band above, notes below) are laid out apart.
//
// A line with right-to-left letters (Hebrew, Arabic) is assembled in visual order, left to
// right by the glyphs' positions, and converted to logical order with ICU's inverse bidi
// (ubidi): the paragraph direction is right-to-left when RTL letters outnumber LTR ones, digits
// and Latin runs keep their order, mirrored brackets are unmirrored, marks stay after their
// base letter.
#pragma once

#include <string>
#include <vector>

namespace spw::app {

/// A word with its box in points, origin top-left, y growing down (poppler's convention for
/// an upright page).
struct WordBox {
  std::string text;  // UTF-8
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool space_after = true;  // poppler: a space follows this word on its line
  /// x of each code point's box centre, in the order of `text` (empty: unknown). Lines with
  /// right-to-left letters are put together from these (visual order), then turned into
  /// logical order by the Unicode bidi algorithm (ICU), whatever order the file drew them in.
  std::vector<double> char_x;
};

/// One line of text in reading order.
struct LayoutLine {
  std::string text;  // UTF-8, words joined by single spaces
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool block_start = false;  // first line of a column or after a vertical gap (a paragraph
                             // break is likely before it)
  /// The number printed in the left margin beside this line (transcripts, pleadings: 1-25 down
  /// the page), kept apart from the text; "" when none.
  std::string margin_number;
  /// The mark of the ':' column beside this line (a transcript's or a court caption's column of
  /// colons), kept apart from the text; "" when none.
  std::string margin_mark;
};

/// The lines of a page in reading order. `words` in any order.
std::vector<LayoutLine> layout_page(const std::vector<WordBox>& words);

/// Visual-order text (left to right as displayed) to logical order by the inverse Unicode bidi
/// algorithm; `rtl_paragraph`: the line's base direction is right-to-left. Bidi controls are
/// not added. Text without RTL characters comes back unchanged.
std::string visual_to_logical(const std::string& visual, bool rtl_paragraph);

}  // namespace spw::app
