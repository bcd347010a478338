#include "app/ingest/normalize.h"

#include <QChar>
#include <QString>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>

#include "app/ingest/utf8.h"

namespace spw::app {
namespace {

constexpr char32_t kSoftHyphen = 0x00AD;
constexpr double kMarginBand = 0.10;   // top / bottom tenth of the page: header / footer zone
constexpr size_t kMaxMarginLines = 3;  // per band and page

bool is_letter(char32_t c) { return QChar::isLetter(c); }
bool is_lower(char32_t c) { return QChar::isLower(c); }

bool is_padding(char32_t c) {
  return c == ' ' || c == '\t' || c == 0xA0 || (c >= 0x2000 && c <= 0x200A) || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

const char* ligature(char32_t c) {
  switch (c) {
    case 0xFB00:
      return "ff";
    case 0xFB01:
      return "fi";
    case 0xFB02:
      return "fl";
    case 0xFB03:
      return "ffi";
    case 0xFB04:
      return "ffl";
    case 0xFB05:
      return "st";  // long s + t
    case 0xFB06:
      return "st";
    default:
      return nullptr;
  }
}

std::string lower(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())).toLower().toStdString();
}

// The code point that ends `s` (0 for an empty string) and where it starts.
char32_t last_code_point(std::string_view s, size_t& pos) {
  if (s.empty()) return 0;
  pos = s.size() - 1;
  while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
  size_t len = 1;
  return utf8::decode(s, pos, len);
}

// Letters (and digits, with `digits`) at the end of `s` (before position `end`): [begin, end).
size_t word_start_before(std::string_view s, size_t end, bool digits = false) {
  size_t b = end;
  while (b > 0) {
    size_t p = b - 1;
    while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    size_t len = 1;
    const char32_t c = utf8::decode(s, p, len);
    if (!is_letter(c) && !(digits && c >= '0' && c <= '9')) break;
    b = p;
  }
  return b;
}

// Letters (and digits) at the start of `s`: [0, end).
size_t word_end(std::string_view s) {
  size_t e = 0;
  while (e < s.size()) {
    size_t len = 1;
    const char32_t c = utf8::decode(s, e, len);
    if (!is_letter(c) && !(c >= '0' && c <= '9')) break;
    e += len;
  }
  return e;
}

// Every "a-b" pair of letter words joined by a hyphen inside a line, lower case.
void collect_compounds(std::string_view line, std::unordered_set<std::string>& out) {
  size_t i = 0;
  while (i < line.size()) {
    const size_t h = line.find('-', i);
    if (h == std::string_view::npos || h + 1 >= line.size()) break;
    const size_t b = word_start_before(line, h);
    const size_t e = h + 1 + word_end(line.substr(h + 1));
    if (b < h && e > h + 1) out.insert(lower(line.substr(b, e - b)));
    i = h + 1;
  }
}

// Every word of letters (lower case) of a line.
void collect_words(std::string_view line, std::unordered_set<std::string>& out) {
  size_t i = 0;
  while (i < line.size()) {
    const size_t e = word_end(line.substr(i));
    if (e > 0) {
      out.insert(lower(line.substr(i, e)));
      i += e;
    } else {
      size_t len = 1;
      utf8::decode(line, i, len);
      i += len;
    }
  }
}

// Header/footer signature: band, lower case, digit runs as '#', spaces collapsed.
std::string margin_signature(char band, std::string_view text) {
  std::string sig(1, band);
  const std::string low = lower(text);
  bool in_digits = false;
  for (const char c : low) {
    const bool digit = c >= '0' && c <= '9';
    if (digit && in_digits) continue;
    in_digits = digit;
    if (c == ' ' && sig.back() == ' ') continue;
    sig += digit ? '#' : c;
  }
  return sig;
}

struct Line {
  std::string text;         // normalised
  bool soft_break = false;  // ended with a soft hyphen (removed)
  bool boilerplate = false;
  bool block_start = false;
};

// Margin lines of a page: indexes of lines in the top / bottom band, nearest the edge first.
std::vector<std::pair<size_t, char>> margin_lines(const PageLines& page) {
  std::vector<std::pair<size_t, char>> out;
  if (page.height <= 0) return out;
  std::vector<size_t> top, bottom;
  for (size_t i = 0; i < page.lines.size(); ++i) {
    const LayoutLine& l = page.lines[i];
    if (l.y1 < 0) continue;
    if (l.y1 <= kMarginBand * page.height) top.push_back(i);
    if (l.y0 >= (1 - kMarginBand) * page.height) bottom.push_back(i);
  }
  std::sort(top.begin(), top.end(),
            [&](size_t a, size_t b) { return page.lines[a].y0 < page.lines[b].y0; });
  std::sort(bottom.begin(), bottom.end(),
            [&](size_t a, size_t b) { return page.lines[a].y1 > page.lines[b].y1; });
  for (size_t k = 0; k < top.size() && k < kMaxMarginLines; ++k) out.emplace_back(top[k], 't');
  for (size_t k = 0; k < bottom.size() && k < kMaxMarginLines; ++k)
    out.emplace_back(bottom[k], 'b');
  return out;
}

// The document's own spelling: hyphenated compounds written inside a line ("price-determining",
// each adjacent pair) and all its words, lower case.
struct DocWords {
  std::unordered_set<std::string> compounds;
  std::unordered_set<std::string> words;
};

// If `a` ends with a word broken by a hyphen and `b` continues it, moves the continuation up:
// joined without the hyphen, or with it when the document writes the compound with one.
void join_hyphenated(Line& a, Line& b, const DocWords& doc) {
  if (a.text.empty() || b.text.empty()) return;
  // The continuation moves up whole, with its punctuation ("guages]:").
  // `cut`: where `a` ends before the continuation (before the hyphen, or at its end).
  auto move_up = [&](size_t cut) {
    a.text.erase(cut);
    const size_t token = std::min(b.text.find(' '), b.text.size());
    a.text += b.text.substr(0, token);
    b.text.erase(0, std::min(b.text.size(), token + 1));
  };
  if (a.soft_break) {
    if (word_end(b.text) == 0) return;
    move_up(a.text.size());
    return;
  }
  size_t hpos = 0;
  const char32_t last = last_code_point(a.text, hpos);
  if (last != '-' && last != 0x2010) return;
  const size_t wb = word_start_before(a.text, hpos, /*digits=*/true);
  if (wb == hpos) return;  // nothing before the hyphen: a dash, not a broken word
  const size_t e = word_end(b.text);
  if (e == 0) return;
  size_t len = 1;
  const char32_t first = utf8::decode(b.text, 0, len);
  const std::string left = a.text.substr(wb, hpos - wb);
  const std::string right = b.text.substr(0, e);
  // The document decides: a compound it writes with a hyphen keeps it, a word it writes whole
  // is joined; otherwise a lower-case continuation is a broken word, a capital or digit not.
  const bool keep = doc.compounds.count(lower(left + "-" + right)) > 0 ||
                    (!is_lower(first) && doc.words.count(lower(left + right)) == 0);
  move_up(keep ? a.text.size() : hpos);
}

}  // namespace

std::string normalize_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  bool pending_space = false;
  utf8::for_each(line, [&](char32_t c, size_t pos, size_t len) {
    if (c == kSoftHyphen) return;
    if (is_padding(c) || c == '\n' || c == '\r') {
      pending_space = !out.empty();
      return;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    if (const char* lig = ligature(c)) {
      out += lig;
    } else {
      out.append(line.substr(pos, len));
    }
  });
  return out;
}

bool looks_undecodable(std::string_view text) {
  int64_t n = 0, bad = 0;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 5, "(cid:") == 0) {
      size_t j = i + 5;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      if (j < text.size() && text[j] == ')' && j > i + 5) {
        ++n;
        ++bad;
        i = j + 1;
        continue;
      }
    }
    size_t len = 1;
    const char32_t c = utf8::decode(text, i, len);
    i += len;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || is_padding(c)) continue;
    ++n;
    bad += c == 0xFFFD || c < 0x20 || (c >= 0x7F && c < 0xA0) || (c >= 0xE000 && c <= 0xF8FF) ||
           c >= 0xF0000;
  }
  return n > 0 && bad * 4 >= n;
}

std::vector<NormalizedPage> normalize_document(const std::vector<PageLines>& pages) {
  // Lines, normalised one by one; the document's hyphenated compounds.
  std::vector<std::vector<Line>> lines(pages.size());
  DocWords doc;
  for (size_t p = 0; p < pages.size(); ++p) {
    for (const LayoutLine& l : pages[p].lines) {
      Line line;
      size_t pos = 0;
      std::string_view raw = l.text;
      while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\t')) raw.remove_suffix(1);
      line.soft_break = last_code_point(raw, pos) == kSoftHyphen;
      line.text = normalize_line(l.text);
      line.block_start = l.block_start;
      collect_compounds(line.text, doc.compounds);
      collect_words(line.text, doc.words);
      lines[p].push_back(std::move(line));
    }
  }

  // Running headers and footers: margin lines whose signature recurs on most pages.
  std::map<std::string, std::set<size_t>> seen;  // signature -> pages
  std::vector<std::vector<std::pair<size_t, std::string>>> margins(pages.size());
  for (size_t p = 0; p < pages.size(); ++p) {
    for (const auto& [i, band] : margin_lines(pages[p])) {
      if (lines[p][i].text.empty()) continue;
      std::string sig = margin_signature(band, lines[p][i].text);
      seen[sig].insert(p);
      margins[p].emplace_back(i, std::move(sig));
    }
  }
  const size_t min_pages = std::max<size_t>(3, (pages.size() + 1) / 2);
  if (pages.size() >= 3) {
    for (size_t p = 0; p < pages.size(); ++p) {
      for (const auto& [i, sig] : margins[p]) {
        if (seen[sig].size() >= min_pages) lines[p][i].boilerplate = true;
      }
    }
  }

  std::vector<NormalizedPage> out(pages.size());
  for (size_t p = 0; p < pages.size(); ++p) {
    NormalizedPage& np = out[p];
    for (size_t i = 0; i < pages[p].lines.size(); ++i) {
      if (i > 0) np.original_text += pages[p].lines[i].block_start ? "\n\n" : "\n";
      np.original_text += pages[p].lines[i].text;
    }
    std::vector<Line>& ls = lines[p];
    for (size_t i = 0; i + 1 < ls.size(); ++i) {
      if (!ls[i].boilerplate && !ls[i + 1].boilerplate) join_hyphenated(ls[i], ls[i + 1], doc);
    }
    bool pending_break = false;
    for (const Line& l : ls) {
      pending_break |= l.block_start;
      if (l.text.empty()) continue;
      if (!np.text.empty()) np.text += pending_break ? "\n\n" : "\n";
      pending_break = false;
      const auto begin = static_cast<int64_t>(np.text.size());
      np.text += l.text;
      if (l.boilerplate) {
        const auto end = static_cast<int64_t>(np.text.size());
        // Adjacent boilerplate lines make one range (the separator included).
        if (!np.boilerplate.empty() && np.boilerplate.back().second + 2 >= begin &&
            np.text.find_first_not_of('\n', static_cast<size_t>(np.boilerplate.back().second)) ==
                static_cast<size_t>(begin)) {
          np.boilerplate.back().second = end;
        } else {
          np.boilerplate.emplace_back(begin, end);
        }
      }
    }
  }
  return out;
}

}  // namespace spw::app
