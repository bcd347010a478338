// The pieces of layout_page (layout.h) that live in their own files: vertical text and vertical
// captions (layout_vertical.cpp), margin line numbers and the ':' column of transcripts
// (layout_margin.cpp), the words of a left-to-right line with letter-spaced words joined
// (layout_spacing.cpp). Internal to app/ingest.
#pragma once

#include <string>
#include <vector>

#include "app/ingest/layout.h"

namespace spw::app::layout_parts {

/// The median of `v` (0 when empty).
double median(std::vector<double> v);

/// Vertical text (tategaki): the indexes of its glyphs among `idx`, or none (layout.h).
std::vector<int> vertical_cells(const std::vector<WordBox>& w, const std::vector<int>& idx);
/// Columns of vertical glyphs: right to left, each top to bottom, one line per column.
std::vector<LayoutLine> vertical_columns(const std::vector<WordBox>& w, std::vector<int> cells);

/// Vertical captions in Latin script: single upright letters stacked one under the other
/// (`P` / `R` / `I` / `N` / `T` down a form's margin), at least four, each much closer to the
/// letter below than a line apart. Each caption: its words' indexes, top to bottom.
std::vector<std::vector<int>> vertical_captions(const std::vector<WordBox>& w,
                                                const std::vector<int>& idx);
/// A caption as one line: the letters in order, a space where a letter's height or more is
/// left empty between two of them (`PRINT CLEARLY`).
LayoutLine caption_line(const std::vector<WordBox>& w, const std::vector<int>& caption);

/// Margin line numbers: the indexes of the number words (layout.h), or none.
std::vector<int> margin_numbers(const std::vector<WordBox>& w, const std::vector<int>& idx);
/// The ':' column of a transcript or a court caption: at least four words that are a lone ':',
/// one per row, centred on one x. Their indexes, or none.
std::vector<int> margin_marks(const std::vector<WordBox>& w, const std::vector<int>& idx);
/// Sets margin_number (from `numbers`) and margin_mark (from `marks`) of the line of `out`
/// beside each word: the line it overlaps most vertically that has none yet.
void attach_margins(const std::vector<WordBox>& w, const std::vector<int>& numbers,
                    const std::vector<int>& marks, std::vector<LayoutLine>& out);

/// The text of a left-to-right line whose words are `row` (indexes into `w`, by x), `h` the
/// usual word height: words joined by a space where poppler saw one or the gap is wide, and
/// letter-spaced words (single glyphs poppler split apart) joined (layout_spacing.cpp).
std::string ltr_line_text(const std::vector<WordBox>& w, const std::vector<int>& row, double h);

}  // namespace spw::app::layout_parts
