#include "app/ingest/layout.h"

#include <unicode/ubidi.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "app/ingest/layout_parts.h"
#include "app/ingest/utf8.h"

namespace spw::app {

double layout_parts::median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

namespace {

using layout_parts::median;

using Interval = std::pair<double, double>;  // [a, b) in x
using Intervals = std::vector<Interval>;

constexpr int kMinColumnRows = 3;           // rows of text on each side of a gutter
constexpr int kMinShortColumnRows = 2;      // a short block: two rows, left and right aligned
constexpr size_t kMaxRowsForColumns = 250;  // beyond this (dense charts) read row by row
constexpr int kMaxDepth = 2;                // columns inside columns, once

struct Row {
  std::vector<int> words;  // indexes into the word list, by x
  double y0 = 0, y1 = 0;   // the band the row was seeded with
  double min_x0 = 0, max_x1 = 0;
};

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
bool starts_aligned(std::vector<double> starts, double tol, int min_rows) {
  if (starts.size() < static_cast<size_t>(min_rows)) return false;
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
                  const Intervals& free, double min_gutter, double min_column, double h,
                  int min_rows) {
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
    const double tol = std::max(2.0, 0.3 * h);
    if (!starts_aligned(starts, tol, min_rows)) continue;
    if (min_rows < kMinColumnRows) {
      // Two rows say little: both columns must start their lines at one x.
      std::vector<double> left_starts;
      for (size_t k = i; k <= j; ++k) {
        if (w[rows[k].words.front()].x1 <= g.first) left_starts.push_back(rows[k].min_x0);
      }
      if (left_starts.size() != starts.size()) continue;
      const auto [lo, hi] = std::minmax_element(left_starts.begin(), left_starts.end());
      const auto [rlo, rhi] = std::minmax_element(starts.begin(), starts.end());
      if (*hi - *lo > tol || *rhi - *rlo > tol) continue;
    }
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
      ok &= side->n >= min_rows && 2 * side->n >= static_cast<int>(side->last - side->first + 1) &&
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

std::u16string to_u16(std::string_view s) {
  std::u16string out(s.size() + 1, u'\0');
  int32_t n = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8Lenient(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &n,
                       s.data(), static_cast<int32_t>(s.size()), &err);
  out.resize(U_SUCCESS(err) ? static_cast<size_t>(n) : 0);
  return out;
}

std::string to_u8(const std::u16string& s) {
  std::string out(s.size() * 3 + 1, '\0');
  int32_t n = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n,
              reinterpret_cast<const UChar*>(s.data()), static_cast<int32_t>(s.size()), &err);
  out.resize(U_SUCCESS(err) ? static_cast<size_t>(n) : 0);
  return out;
}

// `text` reordered by ICU's bidi: `inverse` takes it as visual and writes logical order, else
// logical to visual. Empty on an ICU error (the caller keeps the input).
std::string reorder(const std::string& text, bool rtl_paragraph, bool inverse) {
  const std::u16string u = to_u16(text);
  if (u.empty()) return {};
  UErrorCode err = U_ZERO_ERROR;
  UBiDi* bidi = ubidi_open();
  if (!bidi) return {};
  if (inverse) ubidi_setReorderingMode(bidi, UBIDI_REORDER_INVERSE_LIKE_DIRECT);
  ubidi_setPara(bidi, reinterpret_cast<const UChar*>(u.data()), static_cast<int32_t>(u.size()),
                rtl_paragraph ? 1 : 0, nullptr, &err);
  std::u16string out(u.size() * 2 + 8, u'\0');
  const int32_t n = ubidi_writeReordered(
      bidi, reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
      UBIDI_DO_MIRRORING | UBIDI_KEEP_BASE_COMBINING | UBIDI_REMOVE_BIDI_CONTROLS, &err);
  ubidi_close(bidi);
  if (U_FAILURE(err)) return {};
  out.resize(static_cast<size_t>(n));
  return to_u8(out);
}

// A word's code points left to right as displayed: by their box centres, each combining mark
// kept after its base. Without positions the text is taken as logical order.
std::string visual_word(const WordBox& b) {
  struct Cluster {
    double x;
    std::string text;
  };
  std::vector<Cluster> clusters;
  size_t k = 0;
  bool positioned = true;
  utf8::for_each(b.text, [&](char32_t c, size_t pos, size_t len) {
    const std::string_view cp(b.text.data() + pos, len);
    const bool mark = u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
    if (k >= b.char_x.size()) positioned = false;
    const double x = k < b.char_x.size() ? b.char_x[k] : 0;
    ++k;
    if (mark && !clusters.empty()) {
      clusters.back().text += cp;
    } else {
      clusters.push_back(Cluster{x, std::string(cp)});
    }
  });
  if (!positioned || k != b.char_x.size()) {
    const std::string v = reorder(b.text, true, false);
    return v.empty() ? b.text : v;
  }
  std::stable_sort(clusters.begin(), clusters.end(),
                   [](const Cluster& a, const Cluster& c) { return a.x < c.x; });
  std::string out;
  for (const Cluster& c : clusters) out += c.text;
  return out;
}

// The direction of the first strong character from the left / right of `visual`: 'L', 'R' or 0.
std::pair<char, char> end_directions(const std::string& visual) {
  char first = 0, last = 0;
  utf8::for_each(visual, [&](char32_t c, size_t, size_t) {
    const UCharDirection d = u_charDirection(static_cast<UChar32>(c));
    const char dir = d == U_LEFT_TO_RIGHT                                    ? 'L'
                     : (d == U_RIGHT_TO_LEFT || d == U_RIGHT_TO_LEFT_ARABIC) ? 'R'
                                                                             : 0;
    if (!dir) return;
    if (!first) first = dir;
    last = dir;
  });
  return {first, last};
}

// A line with right-to-left letters: words left to right (row.words is by x), each word's
// glyphs by position, a space where the glyphs leave a gap, then logical order. The base
// direction: right-to-left when the line begins (at its right end) with an RTL letter and ends
// (at its left end) with one, left-to-right when both ends are LTR, else the page's majority.
std::string rtl_line_text(const std::vector<WordBox>& w, const Row& row, double h, bool page_rtl) {
  std::string visual;
  const WordBox* prev = nullptr;
  for (const int i : row.words) {
    const WordBox& b = w[i];
    if (b.text.empty()) continue;
    if (prev && b.x0 - prev->x1 > 0.15 * h) visual += ' ';
    visual += visual_word(b);
    prev = &b;
  }
  const auto [left, right] = end_directions(visual);
  const bool rtl = (left == 'R' && right == 'R') || (left != right && page_rtl);
  const std::string logical = reorder(visual, rtl, true);
  return logical.empty() ? visual : logical;
}

LayoutLine make_line(const std::vector<WordBox>& w, const Row& row, double h, bool page_rtl) {
  int rtl = 0;
  for (const int i : row.words) {
    utf8::for_each(w[i].text, [&](char32_t c, size_t, size_t) { rtl += is_rtl(c); });
  }
  LayoutLine line;
  line.x0 = row.min_x0;
  line.x1 = row.max_x1;
  line.y0 = w[row.words.front()].y0;
  line.y1 = w[row.words.front()].y1;
  for (const int i : row.words) {
    if (w[i].text.empty()) continue;
    line.y0 = std::min(line.y0, w[i].y0);
    line.y1 = std::max(line.y1, w[i].y1);
  }
  if (rtl > 0) {
    line.text = rtl_line_text(w, row, h, page_rtl);
    return line;
  }
  line.text = layout_parts::ltr_line_text(w, row.words, h);
  return line;
}

// Whether row `r` of a columns' band is a running head or foot (layout.h): it has words on both
// sides of a gutter and a gap of more than a line height to the band's next row `next`.
bool running_line(const std::vector<WordBox>& w, const std::vector<Row>& rows, size_t r,
                  size_t next, const Intervals& found, double h) {
  const double gap = r < next ? rows[next].y0 - rows[r].y1 : rows[r].y0 - rows[next].y1;
  if (gap <= h) return false;
  for (const Interval& g : found) {
    bool before = false, after = false;
    for (const int wi : rows[r].words) {
      before |= w[wi].x1 <= g.first;
      after |= w[wi].x0 >= g.second;
    }
    if (before && after) return true;
  }
  return false;
}

void layout_rec(const std::vector<WordBox>& w, const std::vector<int>& idx, int depth,
                bool page_rtl, std::vector<LayoutLine>& out);

// A title block at rows [i, i + n) (n <= 3, within the free channel's run [i, j]; layout.h):
// boxes between at least two free channels through all its rows, of different sizes (the
// tallest box's words 1.3 times the shortest's), one box with fewer lines than another. Appends
// it to `out` as one line, box by box left to right, and returns n; 0 when there is none.
size_t title_block(const std::vector<WordBox>& w, const std::vector<Row>& rows, size_t i, size_t j,
                   double left, double right, double min_gutter, bool page_rtl,
                   std::vector<LayoutLine>& out) {
  Intervals free = free_space(w, rows[i], left, right);
  std::vector<Intervals> free_at{free};
  for (size_t k = i + 1; k <= std::min(j, i + 2); ++k)
    free_at.push_back(intersect(free_at.back(), free_space(w, rows[k], left, right)));
  for (size_t n = free_at.size(); n >= 1; --n) {
    double x0 = 1e300, x1 = -1e300;
    for (size_t k = i; k < i + n; ++k) {
      x0 = std::min(x0, rows[k].min_x0);
      x1 = std::max(x1, rows[k].max_x1);
    }
    Intervals channels;
    for (const Interval& g : free_at[n - 1]) {
      if (g.first > x0 && g.second < x1 && g.second - g.first >= min_gutter) channels.push_back(g);
    }
    if (channels.size() < 2) continue;
    std::vector<std::vector<int>> boxes(channels.size() + 1);
    bool spread = true;  // every row has words in two boxes at least (a header band, not a
                         // body line below it)
    for (size_t k = i; k < i + n; ++k) {
      std::vector<bool> used(boxes.size(), false);
      for (const int wi : rows[k].words) {
        const double cx = 0.5 * (w[wi].x0 + w[wi].x1);
        size_t c = 0;
        while (c < channels.size() && cx > 0.5 * (channels[c].first + channels[c].second)) ++c;
        boxes[c].push_back(wi);
        used[c] = true;
      }
      spread &= std::count(used.begin(), used.end(), true) >= 2;
    }
    if (!spread) continue;
    size_t min_lines = SIZE_MAX, max_lines = 0;
    double min_h = 1e300, max_h = 0;
    for (const std::vector<int>& box : boxes) {
      if (box.empty()) return 0;
      const size_t lines = make_rows(w, box).size();
      min_lines = std::min(min_lines, lines);
      max_lines = std::max(max_lines, lines);
      std::vector<double> heights;
      for (const int wi : box) heights.push_back(w[wi].y1 - w[wi].y0);
      min_h = std::min(min_h, median(heights));
      max_h = std::max(max_h, median(heights));
    }
    if (min_lines == max_lines || max_h < 1.3 * min_h) continue;
    LayoutLine line;
    line.block_start = true;
    line.x0 = x0;
    line.x1 = x1;
    line.y0 = rows[i].y0;
    line.y1 = rows[i].y1;
    for (const std::vector<int>& box : boxes) {
      std::vector<LayoutLine> parts;
      layout_rec(w, box, kMaxDepth, page_rtl, parts);
      for (const LayoutLine& l : parts) {
        if (!line.text.empty()) line.text += ' ';
        line.text += l.text;
        line.y0 = std::min(line.y0, l.y0);
        line.y1 = std::max(line.y1, l.y1);
      }
    }
    out.push_back(std::move(line));
    return n;
  }
  return 0;
}

void layout_rec(const std::vector<WordBox>& w, const std::vector<int>& idx, int depth,
                bool page_rtl, std::vector<LayoutLine>& out) {
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
    LayoutLine line = make_line(w, row, h, page_rtl);
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
        found =
            gutters(w, rows, i, end, free_at[end - i], min_gutter, min_column, h, kMinColumnRows);
        if (!found.empty() || end + 1 == i + kMinColumnRows) break;
        --end;
      }
      if (found.empty() && depth == 0 && i == 0) {
        // A title block of small boxes heads the page (a figure's labels further down are not
        // one); tried before short column blocks, which its boxes would pass for.
        if (const size_t n = title_block(w, rows, i, j, left, right, min_gutter, page_rtl, out)) {
          next_starts_block = true;
          prev_y1 = rows[i + n - 1].y1;
          i += n;
          continue;
        }
      }
      if (found.empty() && j >= i + 1) {
        // Short column blocks: two rows whose channel passes every gutter test.
        end = i + 1;
        found =
            gutters(w, rows, i, end, free_at[1], min_gutter, min_column, h, kMinShortColumnRows);
      }
      if (!found.empty()) {
        // A running head or foot over the columns goes before or after them.
        const bool head = end >= i + 3 && running_line(w, rows, i, i + 1, found, h);
        const bool foot = end >= i + 3 + head && running_line(w, rows, end, end - 1, found, h);
        if (head) emit_row(rows[i]);
        const size_t first_row = i + head, last_row = end - foot;
        // Columns between the gutters, each laid out on its own (its rows re-formed).
        std::vector<std::vector<int>> columns(found.size() + 1);
        for (size_t k = first_row; k <= last_row; ++k) {
          for (const int wi : rows[k].words) {
            const double cx = 0.5 * (w[wi].x0 + w[wi].x1);
            size_t c = 0;
            while (c < found.size() && cx > 0.5 * (found[c].first + found[c].second)) ++c;
            columns[c].push_back(wi);
          }
        }
        for (const auto& col : columns) {
          const size_t first = out.size();
          layout_rec(w, col, depth + 1, page_rtl, out);
          if (out.size() > first) out[first].block_start = true;
        }
        next_starts_block = true;
        prev_y1 = rows[last_row].y1;
        if (foot) emit_row(rows[end]);
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
  using namespace layout_parts;
  std::vector<int> idx;
  idx.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    if (!words[i].text.empty()) idx.push_back(static_cast<int>(i));
  }
  if (const std::vector<int> cells = vertical_cells(words, idx); !cells.empty()) {
    // The other words (a horizontal header band, Latin words) are laid out on their own: those
    // above the columns before them, the rest after.
    double top = 1e300;
    for (const int i : cells) top = std::min(top, words[i].y0);
    std::vector<int> above, rest;
    std::vector<bool> is_cell(words.size(), false);
    for (const int i : cells) is_cell[static_cast<size_t>(i)] = true;
    for (const int i : idx) {
      if (is_cell[static_cast<size_t>(i)]) continue;
      (words[i].y1 <= top ? above : rest).push_back(i);
    }
    std::vector<LayoutLine> out;
    layout_rec(words, above, 0, false, out);
    for (LayoutLine& l : vertical_columns(words, cells)) out.push_back(std::move(l));
    const size_t first_rest = out.size();
    layout_rec(words, rest, 0, false, out);
    if (out.size() > first_rest) out[first_rest].block_start = true;
    return out;
  }
  // Words that are not part of the running text are taken out first: vertical captions, the
  // ':' column of a transcript, then margin line numbers.
  std::vector<bool> taken(words.size(), false);
  auto take = [&](const std::vector<int>& which) {
    for (const int i : which) taken[static_cast<size_t>(i)] = true;
    idx.erase(std::remove_if(idx.begin(), idx.end(),
                             [&](int i) { return taken[static_cast<size_t>(i)]; }),
              idx.end());
  };
  const std::vector<std::vector<int>> captions = vertical_captions(words, idx);
  for (const std::vector<int>& c : captions) take(c);
  const std::vector<int> marks = margin_marks(words, idx);
  take(marks);
  const std::vector<int> numbers = margin_numbers(words, idx);
  take(numbers);
  int rtl = 0, ltr = 0;
  for (const int i : idx) {
    utf8::for_each(words[i].text, [&](char32_t c, size_t, size_t) {
      rtl += is_rtl(c);
      ltr += is_ltr_letter(c);
    });
  }
  std::vector<LayoutLine> out;
  layout_rec(words, idx, 0, rtl > ltr, out);
  attach_margins(words, numbers, marks, out);
  // A caption reads apart from the lines it runs beside: after them.
  for (const std::vector<int>& c : captions) out.push_back(caption_line(words, c));
  return out;
}

std::string visual_to_logical(const std::string& visual, bool rtl_paragraph) {
  const std::string out = reorder(visual, rtl_paragraph, true);
  return out.empty() ? visual : out;
}

}  // namespace spw::app
