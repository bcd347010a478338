#include "app/ingest/layout.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "app/ingest/utf8.h"

namespace spw::app {
namespace {

using Interval = std::pair<double, double>;  // [a, b) in x
using Intervals = std::vector<Interval>;

constexpr int kMinColumnRows = 3;           // rows of text on each side of a gutter
constexpr size_t kMaxRowsForColumns = 250;  // beyond this (dense charts) read row by row
constexpr int kMaxDepth = 2;                // columns inside columns, once

struct Row {
  std::vector<int> words;  // indexes into the word list, by x
  double y0 = 0, y1 = 0;   // the band the row was seeded with
  double min_x0 = 0, max_x1 = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Rows: a word joins the row it overlaps vertically by at least half of the smaller height
// (a superscript joins its line), else it starts a new row. The band is not widened, so rows of
// two columns with offset baselines do not chain into one.
std::vector<Row> make_rows(const std::vector<WordBox>& w, std::vector<int> idx) {
  std::sort(idx.begin(), idx.end(), [&](int a, int b) {
    return w[a].y0 != w[b].y0 ? w[a].y0 < w[b].y0 : w[a].x0 < w[b].x0;
  });
  std::vector<Row> rows;
  for (const int i : idx) {
    const WordBox& b = w[i];
    int best = -1;
    double best_ratio = 0;
    const int first = std::max(0, static_cast<int>(rows.size()) - 16);
    for (int r = static_cast<int>(rows.size()) - 1; r >= first; --r) {
      const double overlap = std::min(rows[r].y1, b.y1) - std::max(rows[r].y0, b.y0);
      const double denom = std::max(0.1, std::min(rows[r].y1 - rows[r].y0, b.y1 - b.y0));
      const double ratio = overlap / denom;
      if (ratio > best_ratio) {
        best_ratio = ratio;
        best = r;
      }
    }
    if (best >= 0 && best_ratio >= 0.5) {
      rows[best].words.push_back(i);
    } else {
      Row r;
      r.words.push_back(i);
      r.y0 = b.y0;
      r.y1 = b.y1;
      rows.push_back(std::move(r));
    }
  }
  for (Row& r : rows) {
    std::sort(r.words.begin(), r.words.end(), [&](int a, int b) { return w[a].x0 < w[b].x0; });
    r.min_x0 = w[r.words.front()].x0;
    r.max_x1 = w[r.words.front()].x1;
    for (const int i : r.words) {
      r.min_x0 = std::min(r.min_x0, w[i].x0);
      r.max_x1 = std::max(r.max_x1, w[i].x1);
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.y0 < b.y0; });
  return rows;
}

// The parts of [left, right) that no word of the row covers.
Intervals free_space(const std::vector<WordBox>& w, const Row& row, double left, double right) {
  Intervals out;
  double x = left;
  for (const int i : row.words) {
    if (w[i].x0 > x) out.emplace_back(x, w[i].x0);
    x = std::max(x, w[i].x1);
  }
  if (x < right) out.emplace_back(x, right);
  return out;
}

Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

bool has_wide(const Intervals& v, double min_width) {
  return std::any_of(v.begin(), v.end(),
                     [&](const Interval& g) { return g.second - g.first >= min_width; });
}

// Whether the most common start position (within `tol`) holds half of `starts` and the two
// most common hold 70%.
bool starts_aligned(std::vector<double> starts, double tol) {
  if (starts.size() < static_cast<size_t>(kMinColumnRows)) return false;
  std::sort(starts.begin(), starts.end());
  std::vector<int> groups;
  double group_start = starts[0];
  groups.push_back(0);
  for (const double x : starts) {
    if (x - group_start > tol) {
      groups.push_back(0);
      group_start = x;
    }
    ++groups.back();
  }
  std::sort(groups.rbegin(), groups.rend());
  const int n = static_cast<int>(starts.size());
  const int top2 = groups[0] + (groups.size() > 1 ? groups[1] : 0);
  return 2 * groups[0] >= n && 10 * top2 >= 7 * n;
}

// A justified line spreads its slack evenly, so a channel through its word gaps is no wider
// than its other gaps; a gutter is much wider than the word gaps of the lines beside it. True
// when, in most rows with words on both sides and other gaps to compare, the gap across `g` is
// at least twice their median.
bool wider_than_word_gaps(const std::vector<WordBox>& w, const std::vector<Row>& rows, size_t i,
                          size_t j, const Interval& g) {
  int checked = 0, wide = 0;
  std::vector<double> gaps;
  for (size_t k = i; k <= j; ++k) {
    const std::vector<int>& ws = rows[k].words;
    double across = -1;
    gaps.clear();
    for (size_t m = 1; m < ws.size(); ++m) {
      const double gap = w[ws[m]].x0 - w[ws[m - 1]].x1;
      if (w[ws[m - 1]].x1 <= g.first && w[ws[m]].x0 >= g.second) {
        across = gap;
      } else {
        gaps.push_back(gap);
      }
    }
    if (across < 0 || gaps.empty()) continue;
    ++checked;
    wide += across >= 2 * median(gaps);
  }
  return 10 * wide >= 6 * checked;
}

// Gutters of rows [i, j]: wide free intervals with real columns on both sides: text in at least
// kMinColumnRows rows, in most rows of its stretch (not a header on one side and a footer
// further down), wider than a list bullet or a line-number margin, and lines on the right that
// start at one x.
Intervals gutters(const std::vector<WordBox>& w, const std::vector<Row>& rows, size_t i, size_t j,
                  const Intervals& free, double min_gutter, double min_column, double h) {
  Intervals out;
  for (const Interval& g : free) {
    if (g.second - g.first < min_gutter) continue;
    // A column right of a gutter starts its lines at one or two x (left-aligned text with
    // indents or hanging indents); a channel that happens to run through a justified
    // paragraph's word gaps has its right-hand words start anywhere.
    std::vector<double> starts;
    for (size_t k = i; k <= j; ++k) {
      for (const int wi : rows[k].words) {
        if (w[wi].x0 < g.second) continue;
        starts.push_back(w[wi].x0);
        break;
      }
    }
    if (!starts_aligned(starts, std::max(2.0, 0.3 * h))) continue;
    if (!wider_than_word_gaps(w, rows, i, j, g)) continue;
    // Prose on both sides: a table's label column (a word or two per row) is read row by row.
    int left_words = 0, right_words = 0;
    for (size_t k = i; k <= j; ++k) {
      for (const int wi : rows[k].words) (w[wi].x1 <= g.first ? left_words : right_words)++;
    }
    struct Side {
      int n = 0;
      size_t first = 0, last = 0;
      double extent = 0;
    } left, right;
    double left_min = g.first, right_max = g.second;
    for (size_t k = i; k <= j; ++k) {
      for (auto [side, has] : {std::pair{&left, rows[k].min_x0 < g.first},
                               std::pair{&right, rows[k].max_x1 > g.second}}) {
        if (!has) continue;
        if (side->n++ == 0) side->first = k;
        side->last = k;
      }
      if (rows[k].min_x0 < g.first) left_min = std::min(left_min, rows[k].min_x0);
      if (rows[k].max_x1 > g.second) right_max = std::max(right_max, rows[k].max_x1);
    }
    left.extent = g.first - left_min;
    right.extent = right_max - g.second;
    bool ok = true;
    for (const Side* side : {&left, &right}) {
      ok &= side->n >= kMinColumnRows &&
            2 * side->n >= static_cast<int>(side->last - side->first + 1) &&
            side->extent >= min_column;
    }
    ok &= 2 * left_words >= 5 * left.n && 2 * right_words >= 5 * right.n;
    if (ok) out.push_back(g);
  }
  return out;
}

bool is_rtl(char32_t c) {
  return (c >= 0x0590 && c <= 0x08FF) || (c >= 0xFB1D && c <= 0xFDFF) ||
         (c >= 0xFE70 && c <= 0xFEFF);
}
bool is_ltr_letter(char32_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= 0xC0 && c < 0x0590) ||
         (c >= 0x1E00 && c <= 0x1FFF) || (c >= 0x3040 && c <= 0x9FFF);
}

LayoutLine make_line(const std::vector<WordBox>& w, const Row& row, double h) {
  std::vector<int> order = row.words;
  int rtl = 0, ltr = 0;
  for (const int i : order) {
    utf8::for_each(w[i].text, [&](char32_t c, size_t, size_t) {
      rtl += is_rtl(c);
      ltr += is_ltr_letter(c);
    });
  }
  // A right-to-left line is read from its right end (logical order).
  if (rtl > ltr) std::reverse(order.begin(), order.end());
  LayoutLine line;
  line.x0 = row.min_x0;
  line.x1 = row.max_x1;
  line.y0 = w[order.front()].y0;
  line.y1 = w[order.front()].y1;
  const WordBox* prev = nullptr;
  for (const int i : order) {
    const WordBox& b = w[i];
    if (b.text.empty()) continue;
    line.y0 = std::min(line.y0, b.y0);
    line.y1 = std::max(line.y1, b.y1);
    if (prev) {
      const double gap = rtl > ltr ? prev->x0 - b.x1 : b.x0 - prev->x1;
      if (prev->space_after || gap > 0.15 * h) line.text += ' ';
    }
    line.text += b.text;
    prev = &b;
  }
  return line;
}

void layout_rec(const std::vector<WordBox>& w, const std::vector<int>& idx, int depth,
                std::vector<LayoutLine>& out) {
  if (idx.empty()) return;
  std::vector<double> heights;
  heights.reserve(idx.size());
  double left = w[idx[0]].x0, right = w[idx[0]].x1;
  for (const int i : idx) {
    heights.push_back(w[i].y1 - w[i].y0);
    left = std::min(left, w[i].x0);
    right = std::max(right, w[i].x1);
  }
  const double h = std::max(1.0, median(heights));
  // A gutter is at least about one line height wide; justified word gaps that wide do not
  // line up over three rows.
  const double min_gutter = std::max(3.0, 0.9 * h);
  const double min_column = std::max(6 * h, 0.15 * (right - left));
  const std::vector<Row> rows = make_rows(w, idx);
  const bool look_for_columns = depth < kMaxDepth && rows.size() <= kMaxRowsForColumns;

  bool next_starts_block = true;
  double prev_y1 = -1e300;
  auto emit_row = [&](const Row& row) {
    LayoutLine line = make_line(w, row, h);
    line.block_start = next_starts_block || line.y0 - prev_y1 > 0.8 * h;
    next_starts_block = false;
    prev_y1 = line.y1;
    out.push_back(std::move(line));
  };

  for (size_t i = 0; i < rows.size();) {
    if (look_for_columns) {
      // Extend the run from row i while a wide free channel survives; then take the longest
      // prefix of the run whose channel is a real gutter (text both sides, enough rows).
      std::vector<Intervals> free_at{free_space(w, rows[i], left, right)};
      size_t j = i;
      while (j + 1 < rows.size()) {
        Intervals next = intersect(free_at.back(), free_space(w, rows[j + 1], left, right));
        if (!has_wide(next, min_gutter)) break;
        free_at.push_back(std::move(next));
        ++j;
      }
      Intervals found;
      size_t end = j;
      while (end + 1 >= i + kMinColumnRows) {
        found = gutters(w, rows, i, end, free_at[end - i], min_gutter, min_column, h);
        if (!found.empty() || end + 1 == i + kMinColumnRows) break;
        --end;
      }
      if (!found.empty()) {
        // Columns between the gutters, each laid out on its own (its rows re-formed).
        std::vector<std::vector<int>> columns(found.size() + 1);
        for (size_t k = i; k <= end; ++k) {
          for (const int wi : rows[k].words) {
            const double cx = 0.5 * (w[wi].x0 + w[wi].x1);
            size_t c = 0;
            while (c < found.size() && cx > 0.5 * (found[c].first + found[c].second)) ++c;
            columns[c].push_back(wi);
          }
        }
        for (const auto& col : columns) {
          const size_t first = out.size();
          layout_rec(w, col, depth + 1, out);
          if (out.size() > first) out[first].block_start = true;
        }
        next_starts_block = true;
        prev_y1 = rows[end].y1;
        i = end + 1;
        continue;
      }
    }
    emit_row(rows[i]);
    ++i;
  }
}

}  // namespace

std::vector<LayoutLine> layout_page(const std::vector<WordBox>& words) {
  std::vector<int> idx;
  idx.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    if (!words[i].text.empty()) idx.push_back(static_cast<int>(i));
  }
  std::vector<LayoutLine> out;
  layout_rec(words, idx, 0, out);
  return out;
}

}  // namespace spw::app
