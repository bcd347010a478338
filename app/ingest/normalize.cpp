#include "app/ingest/normalize.h"

#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include <QChar>
#include <QString>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>
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

// Directional formatting characters: they order text for display, the text is stored in
// logical order already.
bool is_bidi_control(char32_t c) {
  return c == 0x200E || c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069) || c == 0x061C || c == 0xFEFF;
}

// Compatibility forms that only shape or turn a character for display: Arabic presentation
// forms A and B, vertical forms and CJK compatibility forms (vertical brackets).
bool is_display_form(char32_t c) {
  return (c >= 0xFB50 && c <= 0xFDFF) || (c >= 0xFE70 && c <= 0xFEFE) ||
         (c >= 0xFE10 && c <= 0xFE19) || (c >= 0xFE30 && c <= 0xFE4F);
}

// NFKC of one code point (ICU), appended to `out`; the code point itself if ICU fails. A
// vertical form whose NFKC is ASCII punctuation becomes the full-width form CJK text uses
// ("︵" -> "（", not "(").
void append_nfkc(std::string& out, char32_t c) {
  const bool vertical = c >= 0xFE10 && c <= 0xFE4F;
  UErrorCode err = U_ZERO_ERROR;
  static const UNormalizer2* nfkc = unorm2_getNFKCInstance(&err);
  UChar src[2], dst[32];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(c));
  err = U_ZERO_ERROR;
  const int32_t m = nfkc ? unorm2_normalize(nfkc, src, n, dst, 32, &err) : 0;
  if (!nfkc || U_FAILURE(err) || m <= 0) {
    utf8::append(out, c);
    return;
  }
  for (int32_t i = 0; i < m;) {
    UChar32 d = 0;
    U16_NEXT(dst, i, m, d);
    if (vertical && d > 0x20 && d < 0x7F) d += 0xFEE0;
    utf8::append(out, static_cast<char32_t>(d));
  }
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
using Counts = std::unordered_map<std::string, int>;

void collect_compounds(std::string_view line, Counts& out) {
  size_t i = 0;
  while (i < line.size()) {
    const size_t h = line.find('-', i);
    if (h == std::string_view::npos || h + 1 >= line.size()) break;
    const size_t b = word_start_before(line, h);
    const size_t e = h + 1 + word_end(line.substr(h + 1));
    if (b < h && e > h + 1) ++out[lower(line.substr(b, e - b))];
    i = h + 1;
  }
}

// Every word of letters (lower case) of a line.
void collect_words(std::string_view line, Counts& out) {
  size_t i = 0;
  while (i < line.size()) {
    const size_t e = word_end(line.substr(i));
    if (e > 0) {
      ++out[lower(line.substr(i, e))];
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
  Counts compounds;
  Counts words;
  const WordList* dictionary = nullptr;  // may be null or empty
};

int count_of(const Counts& c, const std::string& key) {
  const auto it = c.find(key);
  return it == c.end() ? 0 : it->second;
}

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
  // The document decides: the form it writes more often inside its lines (hyphenated or
  // whole). Otherwise a capital or digit continuation keeps its hyphen (names, numeric
  // ranges), and a lower-case one is joined unless the dictionary knows both halves and not the
  // joined word ("price-" / "determining", but "cli-" / "mate").
  const std::string joined = lower(left + right);
  const int n_compound = count_of(doc.compounds, lower(left + "-" + right));
  const int n_joined = count_of(doc.words, joined);
  bool keep = false;
  if (n_compound != n_joined) {
    keep = n_compound > n_joined;
  } else if (!is_lower(first)) {
    keep = true;
  } else if (doc.dictionary && !doc.dictionary->empty() && doc.dictionary->count(joined) == 0) {
    keep = doc.dictionary->count(lower(left)) > 0 && doc.dictionary->count(lower(right)) > 0;
  }
  move_up(keep ? a.text.size() : hpos);
}

}  // namespace

std::string normalize_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  bool pending_space = false;
  utf8::for_each(line, [&](char32_t c, size_t pos, size_t len) {
    if (c == kSoftHyphen || is_bidi_control(c)) return;
    if (is_padding(c) || c == '\n' || c == '\r') {
      pending_space = !out.empty();
      return;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    if (const char* lig = ligature(c)) {
      out += lig;
    } else if (is_display_form(c)) {
      append_nfkc(out, c);
    } else {
      out.append(line.substr(pos, len));
    }
  });
  return out;
}

namespace {

// Characters a font without a usable ToUnicode map typically comes out as (its codes read as
// WinAnsi): rare in prose, common in such garbage ("™— › ™œ" for digits).
bool is_winansi_oddity(char32_t c) {
  switch (c) {
    case 0x201A:
    case 0x201E:
    case 0x2020:
    case 0x2021:
    case 0x02C6:
    case 0x2030:
    case 0x2039:
    case 0x203A:
    case 0x02DC:
    case 0x2122:
    case 0x0153:
    case 0x0152:
    case 0x0161:
    case 0x0160:
    case 0x017E:
    case 0x017D:
    case 0x0178:
    case 0x0192:
      return true;
    default:
      return false;
  }
}

bool is_symbol(char32_t c) {
  switch (QChar::category(c)) {
    case QChar::Symbol_Math:
    case QChar::Symbol_Currency:
    case QChar::Symbol_Modifier:
    case QChar::Symbol_Other:
      return true;
    default:
      return false;
  }
}

}  // namespace

TextQuality assess_text(std::string_view text) {
  TextQuality q;
  int64_t word_len = 0;
  char32_t word_first = 0;
  auto end_word = [&] {
    if (word_len > 0) {
      ++q.n_words;
      q.n_one_char_words += word_len == 1 && is_letter(word_first);
    }
    word_len = 0;
  };
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 5, "(cid:") == 0) {
      size_t j = i + 5;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      if (j < text.size() && text[j] == ')' && j > i + 5) {
        ++q.n_chars;
        ++q.n_unmapped;
        word_len += 2;  // a placeholder is no one-letter word
        i = j + 1;
        continue;
      }
    }
    size_t len = 1;
    const char32_t c = utf8::decode(text, i, len);
    i += len;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || is_padding(c)) {
      end_word();
      continue;
    }
    ++q.n_chars;
    if (word_len++ == 0) word_first = c;
    q.n_unmapped += c == 0xFFFD || c < 0x20 || (c >= 0x7F && c < 0xA0) ||
                    (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000;
    q.n_symbols += is_symbol(c) || is_winansi_oddity(c);
  }
  end_word();
  return q;
}

bool TextQuality::unreliable() const {
  if (n_chars == 0) return false;
  if (4 * n_unmapped >= n_chars) return true;  // placeholders, PUA, U+FFFD
  if (n_chars >= 4 && 2 * (n_unmapped + n_symbols) >= n_chars) return true;  // symbol soup
  // Letter soup: glyphs placed one by one, mirrored or shuffled, read as one-letter words.
  return n_words >= 12 && 10 * n_one_char_words >= 6 * n_words;
}

bool looks_undecodable(std::string_view text) { return assess_text(text).unreliable(); }

const WordList& system_word_list() {
  static const WordList words = [] {
    WordList out;
    for (const char* file : {"/usr/share/dict/american-english", "/usr/share/dict/words"}) {
      std::ifstream in(file);
      if (!in) continue;
      std::string w;
      while (std::getline(in, w)) {
        if (w.empty() || w.find('\'') != std::string::npos) continue;
        out.insert(lower(w));
      }
      break;
    }
    return out;
  }();
  return words;
}

std::vector<NormalizedPage> normalize_document(const std::vector<PageLines>& pages,
                                               const WordList* dictionary) {
  // Lines, normalised one by one; the document's hyphenated compounds.
  std::vector<std::vector<Line>> lines(pages.size());
  DocWords doc;
  doc.dictionary = dictionary;
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
      // The original keeps a margin line number where it stood, before its line.
      const LayoutLine& l = pages[p].lines[i];
      if (!l.margin_number.empty()) np.original_text += l.margin_number + ' ';
      np.original_text += l.text;
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
