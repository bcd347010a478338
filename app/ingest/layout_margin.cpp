// Margin marks kept apart from the text: line numbers down the left edge and the ':' column
// of a transcript (layout_parts.h).
#include <algorithm>
#include <string>

#include "app/ingest/layout_parts.h"

namespace spw::app::layout_parts {

// Margin line numbers: indexes of the number words (see layout.h), or none.
std::vector<int> margin_numbers(const std::vector<WordBox>& w, const std::vector<int>& idx) {
  std::vector<int> order = idx;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return w[a].y0 < w[b].y0; });
  std::vector<int> cand;
  double min_other_x0 = 1e300;
  for (const int i : idx) {
    const WordBox& b = w[i];
    const bool number = b.text.size() <= 2 && std::all_of(b.text.begin(), b.text.end(), [](char c) {
                          return c >= '0' && c <= '9';
                        });
    // Alone at the left of its row: no word of the row starts left of it or touches it.
    bool leftmost = number;
    for (const int j : idx) {
      if (!leftmost) break;
      if (j == i) continue;
      const WordBox& o = w[j];
      const double y_overlap = std::min(b.y1, o.y1) - std::max(b.y0, o.y0);
      if (y_overlap < 0.5 * std::min(b.y1 - b.y0, o.y1 - o.y0)) continue;
      if (o.x0 < b.x1 + (b.y1 - b.y0)) leftmost = false;  // a gap of a line height at least
    }
    if (leftmost) cand.push_back(i);
  }
  if (cand.size() < 5) return {};
  std::sort(cand.begin(), cand.end(), [&](int a, int b) { return w[a].y0 < w[b].y0; });
  // Right-aligned (or left-aligned) in one column, counting up by one.
  double lo = 1e300, hi = -1e300;
  for (const int i : cand) {
    lo = std::min(lo, w[i].x1);
    hi = std::max(hi, w[i].x1);
  }
  if (hi - lo > 0.5 * (w[cand[0]].y1 - w[cand[0]].y0)) return {};
  int steps = 0;
  for (size_t k = 1; k < cand.size(); ++k) {
    steps += std::stoi(w[cand[k]].text) == std::stoi(w[cand[k - 1]].text) + 1;
  }
  if (10 * steps < 8 * static_cast<int>(cand.size() - 1)) return {};
  // Every other word lies right of the numbers.
  for (const int i : idx) {
    if (std::find(cand.begin(), cand.end(), i) == cand.end()) {
      min_other_x0 = std::min(min_other_x0, w[i].x0);
    }
  }
  return min_other_x0 > hi ? cand : std::vector<int>{};
}

std::vector<int> margin_marks(const std::vector<WordBox>& w, const std::vector<int>& idx) {
  std::vector<int> colons;
  for (const int i : idx) {
    if (w[i].text == ":") colons.push_back(i);
  }
  if (colons.size() < 4) return {};
  // The largest group centred on one x (within half a line height), one colon per row.
  std::sort(colons.begin(), colons.end(),
            [&](int a, int b) { return w[a].x0 + w[a].x1 < w[b].x0 + w[b].x1; });
  std::vector<int> best, group;
  double group_cx = 0;
  auto close_group = [&] {
    if (group.size() > best.size()) best = group;
    group.clear();
  };
  for (const int i : colons) {
    const double cx = 0.5 * (w[i].x0 + w[i].x1);
    if (!group.empty() && cx - group_cx > 0.5 * (w[i].y1 - w[i].y0)) close_group();
    if (group.empty()) group_cx = cx;
    group.push_back(i);
  }
  close_group();
  if (best.size() < 4) return {};
  std::sort(best.begin(), best.end(), [&](int a, int b) { return w[a].y0 < w[b].y0; });
  for (size_t k = 1; k < best.size(); ++k) {
    const WordBox& a = w[best[k - 1]];
    if (w[best[k]].y0 < a.y0 + 0.5 * (a.y1 - a.y0)) return {};  // two in one row
  }
  return best;
}

void attach_margins(const std::vector<WordBox>& w, const std::vector<int>& numbers,
                    const std::vector<int>& marks, std::vector<LayoutLine>& out) {
  for (const bool number : {true, false}) {
    for (const int n : number ? numbers : marks) {
      // The line beside the word: the most vertical overlap.
      const WordBox& b = w[n];
      LayoutLine* best = nullptr;
      double best_overlap = 0;
      for (LayoutLine& l : out) {
        const double overlap = std::min(b.y1, l.y1) - std::max(b.y0, l.y0);
        const bool taken = !(number ? l.margin_number : l.margin_mark).empty();
        if (overlap > best_overlap && !taken) {
          best_overlap = overlap;
          best = &l;
        }
      }
      if (best) (number ? best->margin_number : best->margin_mark) = b.text;
    }
  }
}

}  // namespace spw::app::layout_parts
