#include "app/ask/document.h"

#include <algorithm>

namespace spw::app {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::string page_prompt_text(const PageText& page) {
  const auto n = static_cast<int64_t>(page.text.size());
  std::vector<std::pair<int64_t, int64_t>> cut;
  for (auto [b, e] : page.boilerplate) {
    b = std::clamp<int64_t>(b, 0, n);
    e = std::clamp<int64_t>(e, 0, n);
    if (b < e) cut.emplace_back(b, e);
  }
  std::sort(cut.begin(), cut.end());
  std::string out;
  out.reserve(page.text.size());
  int64_t pos = 0;
  for (const auto& [b, e] : cut) {
    if (b > pos) out.append(page.text, static_cast<size_t>(pos), static_cast<size_t>(b - pos));
    pos = std::max(pos, e);
  }
  if (pos < n) out.append(page.text, static_cast<size_t>(pos), std::string::npos);
  size_t a = 0, z = out.size();
  while (a < z && is_space(out[a])) ++a;
  while (z > a && is_space(out[z - 1])) --z;
  return out.substr(a, z - a);
}

bool page_has_text(const PageText& page) {
  if (page.undecodable) return false;
  if (page.scanned && !page.ocr) return false;
  return !page_prompt_text(page).empty();
}

}  // namespace spw::app
