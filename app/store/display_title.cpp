#include "app/store/display_title.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace spw::app {

namespace {

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower_ascii(s.substr(0, prefix.size())) == prefix;
}

// Whitespace runs (ASCII and no-break space) to one space, ends trimmed.
std::string squeeze(std::string_view s) {
  std::string out;
  bool space = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    size_t skip = 0;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xA0) {
      ws = true;  // U+00A0
      skip = 1;
    }
    if (ws) {
      space = !out.empty();
      i += skip;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += static_cast<char>(c);
  }
  return out;
}

// "Microsoft Word - X" (or "–", U+2013) -> "X".
std::string_view drop_program_prefix(std::string_view t) {
  static constexpr std::array<std::string_view, 5> kPrograms = {
      "microsoft word", "microsoft powerpoint", "microsoft excel", "microsoft visio",
      "microsoft publisher"};
  for (const std::string_view p : kPrograms) {
    if (!starts_with_ci(t, p)) continue;
    std::string_view rest = t.substr(p.size());
    const size_t lead = rest.find_first_not_of(' ');
    if (lead == std::string_view::npos) return {};
    rest.remove_prefix(lead);
    if (rest.starts_with("-")) {
      rest.remove_prefix(1);
    } else if (rest.starts_with("\xE2\x80\x93")) {
      rest.remove_prefix(3);
    } else {
      continue;  // "Microsoft Word documents explained": a real title
    }
    const size_t start = rest.find_first_not_of(' ');
    return start == std::string_view::npos ? std::string_view{} : rest.substr(start);
  }
  return t;
}

// ".docx" etc. at the end -> without it.
std::string_view drop_extension(std::string_view t) {
  static constexpr std::array<std::string_view, 13> kExtensions = {
      ".doc",  ".docx", ".odt",  ".rtf",   ".txt", ".pdf", ".xls",
      ".xlsx", ".ppt",  ".pptx", ".pages", ".wpd", ".odp"};
  const size_t dot = t.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return t;
  const std::string ext = lower_ascii(t.substr(dot));
  if (std::find(kExtensions.begin(), kExtensions.end(), ext) == kExtensions.end()) return t;
  std::string_view out = t.substr(0, dot);
  while (!out.empty() && out.back() == ' ') out.remove_suffix(1);
  return out;
}

// "C:\a\b\NDA.doc" or "/home/x/NDA.doc" -> "NDA.doc"; only when it ends like a file.
std::string_view last_path_part(std::string_view t) {
  const size_t slash = t.find_last_of("/\\");
  if (slash == std::string_view::npos || slash + 1 >= t.size()) return t;
  const std::string_view last = t.substr(slash + 1);
  if (drop_extension(last).size() == last.size()) return t;  // "Q1/Q2 results": a title
  return last;
}

bool is_placeholder(std::string_view t) {
  const std::string l = lower_ascii(t);
  if (l.find_first_not_of(" -_.,:;*#()[]") == std::string::npos) return true;
  static constexpr std::array<std::string_view, 14> kNames = {
      "untitled",     "untitled document",
      "document",     "title",
      "no title",     "new document",
      "presentation", "powerpoint presentation",
      "unknown",      "(anonymous)",
      "anonymous",    "microsoft word document",
      "pdf document", "slide"};
  if (std::find(kNames.begin(), kNames.end(), l) != kNames.end()) return true;
  // "Document1", "Untitled-3", "Slide 1", "Doc2": a program's numbered default.
  for (const std::string_view stem : {"document", "untitled", "slide", "doc", "book"}) {
    if (!l.starts_with(stem)) continue;
    std::string_view rest = std::string_view(l).substr(stem.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '-' || rest.front() == '_'))
      rest.remove_prefix(1);
    if (!rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        }))
      return true;
  }
  return false;
}

std::string underscores_as_spaces(std::string_view t) {
  std::string out(t);
  std::replace(out.begin(), out.end(), '_', ' ');
  return squeeze(out);
}

std::string file_stem(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot > 0) name = name.substr(0, dot);
  return std::string(name);
}

}  // namespace

std::string display_title(std::string_view pdf_title, std::string_view file_path) {
  const std::string squeezed = squeeze(pdf_title);
  std::string_view t = drop_program_prefix(squeezed);
  t = drop_extension(last_path_part(t));
  const bool looks_like_file_name =
      t.find(' ') == std::string_view::npos && t.find('_') != std::string_view::npos;
  if (!t.empty() && !is_placeholder(t))
    return looks_like_file_name ? underscores_as_spaces(t) : std::string(t);
  const std::string stem = underscores_as_spaces(file_stem(file_path));
  if (!stem.empty()) return stem;
  return squeezed.empty() ? std::string("Untitled document") : squeezed;
}

}  // namespace spw::app
