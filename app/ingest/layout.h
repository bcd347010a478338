// Reading order of one page from positioned words (no poppler here, so it is testable with
// made-up boxes).
//
// Words are grouped into rows (vertical overlap). A run of consecutive rows that share an empty
// vertical channel (a gutter) is read column by column, left to right, when the channel looks
// like a gutter and not like word gaps that happen to line up:
//  - text on both sides in at least three rows, and in most rows of its stretch (a header on
//    one side and a footer far below do not make a column);
//  - each side wider than a bullet or line-number margin, with prose (a table's label column of
//    a word or two per row is read row by row);
//  - the lines right of it start at one or two x positions (left-aligned text, indents);
//  - it is at least twice as wide as the other word gaps of its rows (a justified line spreads
//    its slack evenly over all its gaps, so a channel through them is no wider than the rest).
// Everything else is read row by row. Each column is laid out again on its own (columns inside
// columns, once).
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
};

/// One line of text in reading order.
struct LayoutLine {
  std::string text;  // UTF-8, words joined by single spaces
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool block_start = false;  // first line of a column or after a vertical gap (a paragraph
                             // break is likely before it)
};

/// The lines of a page in reading order. `words` in any order.
std::vector<LayoutLine> layout_page(const std::vector<WordBox>& words);

}  // namespace spw::app
