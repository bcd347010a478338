// Vertical text: CJK columns (tategaki) and Latin captions of upright letters stacked down the
// page (layout_parts.h).
#include <unicode/uchar.h>

#include <algorithm>

#include "app/ingest/layout_parts.h"
#include "app/ingest/utf8.h"

namespace spw::app::layout_parts {
namespace {

// One upright CJK glyph as its own word (a character of vertical text, or of horizontal text
// placed glyph by glyph).
bool is_cjk_cell(const WordBox& b) {
  size_t len = 0;
  if (b.text.empty()) return false;
  const char32_t c = utf8::decode(b.text, 0, len);
  if (len != b.text.size()) return false;
  return (c >= 0x3000 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x9FFF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFE10 && c <= 0xFE4F) ||
         (c >= 0xFF00 && c <= 0xFFEF) || (c >= 0x20000 && c <= 0x3FFFF);
}

// One letter alone in its word (not a CJK glyph): a candidate letter of a vertical caption.
bool is_single_letter(const WordBox& b) {
  size_t len = 0;
  if (b.text.empty() || is_cjk_cell(b)) return false;
  const char32_t c = utf8::decode(b.text, 0, len);
  return len == b.text.size() && u_isalpha(static_cast<UChar32>(c));
}

}  // namespace

// Vertical text (tategaki): most words are single CJK glyphs and a glyph's nearest neighbour
// below is closer than its neighbour to the right. Returns the glyphs' indexes, or none.
std::vector<int> vertical_cells(const std::vector<WordBox>& w, const std::vector<int>& idx) {
  std::vector<int> cells;
  for (const int i : idx) {
    if (is_cjk_cell(w[i])) cells.push_back(i);
  }
  if (cells.size() < 4 || 10 * cells.size() < 6 * idx.size()) return {};
  std::vector<double> below, right, heights;
  // Neighbours of a sample of the glyphs (a dense page would be quadratic otherwise).
  const size_t step = std::max<size_t>(1, cells.size() / 400);
  for (size_t k = 0; k < cells.size(); k += step) {
    const int i = cells[k];
    const WordBox& a = w[i];
    heights.push_back(a.y1 - a.y0);
    double best_below = 1e300, best_right = 1e300;
    for (const int j : cells) {
      if (j == i) continue;
      const WordBox& b = w[j];
      const double x_overlap = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
      const double y_overlap = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
      if (x_overlap >= 0.5 * (a.x1 - a.x0) && b.y0 > a.y0) {
        best_below = std::min(best_below, b.y0 - a.y1);
      }
      if (y_overlap >= 0.5 * (a.y1 - a.y0) && b.x0 > a.x0) {
        best_right = std::min(best_right, b.x0 - a.x1);
      }
    }
    if (best_below < 1e299) below.push_back(best_below);
    if (best_right < 1e299) right.push_back(best_right);
  }
  if (below.size() * 2 < heights.size()) return {};
  const double h = median(heights);
  const double right_gap = right.empty() ? 1e300 : median(right);
  return median(below) < right_gap - 0.1 * h ? cells : std::vector<int>{};
}

// Columns of vertical glyphs: right to left, each top to bottom, one line per column.
std::vector<LayoutLine> vertical_columns(const std::vector<WordBox>& w, std::vector<int> cells) {
  std::sort(cells.begin(), cells.end(), [&](int a, int b) {
    return w[a].x0 + w[a].x1 > w[b].x0 + w[b].x1;  // by centre, rightmost first
  });
  std::vector<std::vector<int>> columns;
  double centre = 0, width = 0;
  for (const int i : cells) {
    const double cx = 0.5 * (w[i].x0 + w[i].x1);
    if (columns.empty() || centre - cx > 0.5 * width) {
      columns.emplace_back();
      centre = cx;
      width = w[i].x1 - w[i].x0;
    }
    columns.back().push_back(i);
  }
  std::vector<LayoutLine> out;
  for (std::vector<int>& col : columns) {
    std::stable_sort(col.begin(), col.end(), [&](int a, int b) { return w[a].y0 < w[b].y0; });
    // Punctuation sits off the centre of its cell (。 high in it): glyphs much closer than a
    // cell apart keep the order poppler gives them (the drawing order).
    for (size_t k = 1; k < col.size(); ++k) {
      const double cell = w[col[k]].y1 - w[col[k]].y0;
      if (w[col[k]].y0 - w[col[k - 1]].y0 < 0.4 * cell && col[k] < col[k - 1]) {
        std::swap(col[k], col[k - 1]);
      }
    }
    LayoutLine line;
    line.x0 = w[col[0]].x0;
    line.y0 = w[col[0]].y0;
    line.x1 = w[col[0]].x1;
    line.y1 = w[col[0]].y1;
    for (const int i : col) {
      line.text += w[i].text;
      line.x0 = std::min(line.x0, w[i].x0);
      line.x1 = std::max(line.x1, w[i].x1);
      line.y1 = std::max(line.y1, w[i].y1);
    }
    line.block_start = out.empty();
    out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::vector<int>> vertical_captions(const std::vector<WordBox>& w,
                                                const std::vector<int>& idx) {
  std::vector<int> cand;
  for (const int i : idx) {
    if (!is_single_letter(w[i])) continue;
    // Alone in its row: a letter of horizontal text has a neighbour within about a letter.
    const WordBox& b = w[i];
    const double ht = b.y1 - b.y0;
    bool alone = true;
    for (const int j : idx) {
      if (j == i) continue;
      const WordBox& o = w[j];
      const double y_overlap = std::min(b.y1, o.y1) - std::max(b.y0, o.y0);
      if (y_overlap < 0.5 * std::min(ht, o.y1 - o.y0)) continue;
      if (o.x0 < b.x1 + 0.6 * ht && o.x1 > b.x0 - 0.6 * ht) {
        alone = false;
        break;
      }
    }
    if (alone) cand.push_back(i);
  }
  std::vector<std::vector<int>> out;
  if (cand.size() < 4) return out;
  // Strips of letters centred on one x, each read top to bottom.
  std::sort(cand.begin(), cand.end(),
            [&](int a, int b) { return w[a].x0 + w[a].x1 < w[b].x0 + w[b].x1; });
  std::vector<std::vector<int>> strips;
  double strip_cx = 0;
  for (const int i : cand) {
    const double cx = 0.5 * (w[i].x0 + w[i].x1);
    if (strips.empty() || cx - strip_cx > 0.5 * (w[i].y1 - w[i].y0)) {
      strips.emplace_back();
      strip_cx = cx;
    }
    strips.back().push_back(i);
  }
  for (std::vector<int>& strip : strips) {
    std::stable_sort(strip.begin(), strip.end(), [&](int a, int b) { return w[a].y0 < w[b].y0; });
    // Chains of letters each at most an empty letter slot and a half below the one above.
    std::vector<int> chain;
    auto flush = [&] {
      if (chain.size() >= 4) {
        // Stacked a font size apart (a table column of one-letter cells is a line spacing
        // apart: its glyphs leave a quarter of their height or more between them).
        std::vector<double> gaps;
        for (size_t k = 1; k < chain.size(); ++k)
          gaps.push_back((w[chain[k]].y0 - w[chain[k - 1]].y1) /
                         (w[chain[k - 1]].y1 - w[chain[k - 1]].y0));
        if (median(gaps) <= 0.12) out.push_back(chain);
      }
      chain.clear();
    };
    for (const int i : strip) {
      if (!chain.empty()) {
        const WordBox& prev = w[chain.back()];
        const double ht = prev.y1 - prev.y0;
        if (w[i].y0 < prev.y0 + 0.5 * ht || w[i].y0 - prev.y1 > 1.6 * ht) flush();
      }
      chain.push_back(i);
    }
    flush();
  }
  return out;
}

LayoutLine caption_line(const std::vector<WordBox>& w, const std::vector<int>& caption) {
  LayoutLine line;
  line.block_start = true;
  line.x0 = w[caption[0]].x0;
  line.y0 = w[caption[0]].y0;
  line.x1 = w[caption[0]].x1;
  line.y1 = w[caption[0]].y1;
  for (size_t k = 0; k < caption.size(); ++k) {
    const WordBox& b = w[caption[k]];
    if (k > 0) {
      const WordBox& prev = w[caption[k - 1]];
      if (b.y0 - prev.y1 > 0.5 * (prev.y1 - prev.y0)) line.text += ' ';
    }
    line.text += b.text;
    line.x0 = std::min(line.x0, b.x0);
    line.x1 = std::max(line.x1, b.x1);
    line.y1 = std::max(line.y1, b.y1);
  }
  return line;
}

}  // namespace spw::app::layout_parts
