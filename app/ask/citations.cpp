#include "app/ask/citations.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <QChar>

namespace spw::app {

namespace {

// One code point of UTF-8 at s[pos]; a byte that does not start a well-formed sequence is
// U+FFFD of length 1, so every byte belongs to exactly one decoded character.
char32_t decode_utf8(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  len = 1;
  if (b0 < 0x80) return b0;
  int n = 0;
  char32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3;
    cp = b0 & 0x07;
  } else {
    return 0xFFFD;
  }
  for (int i = 1; i <= n; ++i) {
    if (pos + i >= s.size()) return 0xFFFD;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  static constexpr char32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
  len = static_cast<size_t>(n) + 1;
  return cp;
}

bool is_ignorable_space(char32_t c) {
  return c == 0x00AD /* soft hyphen */ || c == 0x200B || c == 0x200C || c == 0x200D ||
         c == 0xFEFF || QChar::isSpace(c);
}

// Characters folded to others before matching: typographic quotes, apostrophes and dashes to
// ASCII, the ellipsis to three dots, ligatures to their letters.
struct Fold {
  char32_t from;
  std::u32string_view to;
};
constexpr Fold kFolds[] = {
    {0x2018, U"'"},   {0x2019, U"'"},   {0x201A, U"'"},  {0x201B, U"'"},  {0x2032, U"'"},
    {0x0060, U"'"},   {0x00B4, U"'"},   {0x201C, U"\""}, {0x201D, U"\""}, {0x201E, U"\""},
    {0x201F, U"\""},  {0x2033, U"\""},  {0x00AB, U"\""}, {0x00BB, U"\""}, {0x2010, U"-"},
    {0x2011, U"-"},   {0x2012, U"-"},   {0x2013, U"-"},  {0x2014, U"-"},  {0x2015, U"-"},
    {0x2212, U"-"},   {0x2026, U"..."}, {0xFB00, U"ff"}, {0xFB01, U"fi"}, {0xFB02, U"fl"},
    {0xFB03, U"ffi"}, {0xFB04, U"ffl"}, {0xFB05, U"st"}, {0xFB06, U"st"},
};

// The folded form of one code point, appended to `out` (nothing for whitespace).
void fold_char(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    if (c == ' ' || (c >= '\t' && c <= '\r')) return;
    out += c >= 'A' && c <= 'Z' ? c + 32 : c;
    return;
  }
  if (is_ignorable_space(c)) return;
  for (const Fold& f : kFolds) {
    if (f.from == c) {
      out += f.to;
      return;
    }
  }
  out += QChar::toCaseFolded(c);
}

// `text` folded, with each folded character's origin: the code point index and byte range of
// the character of `text` it came from.
struct Folded {
  std::u32string chars;
  std::vector<int64_t> cp;          // [chars.size()]
  std::vector<int64_t> byte_begin;  // [chars.size()]
  std::vector<int64_t> byte_end;    // [chars.size()]
};

Folded fold(std::string_view text) {
  Folded f;
  int64_t index = 0;
  for (size_t pos = 0; pos < text.size(); ++index) {
    size_t len = 0;
    const char32_t c = decode_utf8(text, pos, len);
    const size_t before = f.chars.size();
    fold_char(c, f.chars);
    for (size_t i = before; i < f.chars.size(); ++i) {
      f.cp.push_back(index);
      f.byte_begin.push_back(static_cast<int64_t>(pos));
      f.byte_end.push_back(static_cast<int64_t>(pos + len));
    }
    pos += len;
  }
  return f;
}

bool is_edge_punct(char32_t c) {
  return c == U'.' || c == U',' || c == U';' || c == U':' || c == U'!' || c == U'?' || c == U'"' ||
         c == U'\'' || c == U'(' || c == U')' || c == U'[' || c == U']' || c == U'-';
}

// The folded quote split at ellipses into the parts that must appear in order, each without
// punctuation at its ends; empty parts dropped.
std::vector<std::u32string> quote_parts(std::string_view quote) {
  const std::u32string q = fold(quote).chars;
  std::vector<std::u32string> parts;
  size_t start = 0;
  while (start <= q.size()) {
    size_t cut = q.find(U"...", start);
    if (cut == std::u32string::npos) cut = q.size();
    std::u32string part = q.substr(start, cut - start);
    size_t a = 0, b = part.size();
    while (a < b && is_edge_punct(part[a])) ++a;
    while (b > a && is_edge_punct(part[b - 1])) --b;
    if (b > a) parts.push_back(part.substr(a, b - a));
    if (cut == q.size()) break;
    start = cut + 3;
    while (start < q.size() && q[start] == U'.') ++start;  // "...." and longer runs
  }
  return parts;
}

}  // namespace

QuoteMatch find_quote(std::string_view text, std::string_view quote) {
  QuoteMatch m;
  const std::vector<std::u32string> parts = quote_parts(quote);
  if (parts.empty()) return m;
  const Folded page = fold(text);
  const std::u32string_view hay(page.chars);
  // Each occurrence of the first part, the later parts placed greedily after it; the tightest
  // span wins (a highlight should cover the passage, not half the page).
  size_t best_b = 0, best_e = 0;
  bool found = false;
  for (size_t first = hay.find(parts[0]); first != std::u32string_view::npos;
       first = hay.find(parts[0], first + 1)) {
    size_t end = first + parts[0].size();
    bool ok = true;
    for (size_t i = 1; i < parts.size() && ok; ++i) {
      const size_t at = hay.find(parts[i], end);
      if (at == std::u32string_view::npos) {
        ok = false;
      } else {
        end = at + parts[i].size();
      }
    }
    if (!ok) break;  // a later start cannot place the parts either
    if (!found || end - first < best_e - best_b) {
      best_b = first;
      best_e = end;
      found = true;
    }
    if (parts.size() == 1) break;  // one part: the first occurrence is as tight as any
  }
  if (!found) return m;
  m.found = true;
  m.begin = page.cp[best_b];
  m.end = page.cp[best_e - 1] + 1;
  m.byte_begin = page.byte_begin[best_b];
  m.byte_end = page.byte_end[best_e - 1];
  return m;
}

namespace {

bool starts_with_ci(std::string_view s, size_t pos, std::string_view word) {
  if (pos + word.size() > s.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    char c = s[pos + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    if (c != word[i]) return false;
  }
  return true;
}

// "[p. 12]" and its variants at s[pos] == '['; on success the page and the position after ']'.
bool parse_marker(std::string_view s, size_t pos, int& page, size_t& after) {
  size_t i = pos + 1;
  while (i < s.size() && s[i] == ' ') ++i;
  bool matched = false;
  for (std::string_view w : {"page", "pg", "p"}) {
    if (starts_with_ci(s, i, w)) {
      i += w.size();
      matched = true;
      break;
    }
  }
  if (!matched) return false;
  if (i < s.size() && s[i] == '.') ++i;
  while (i < s.size() && s[i] == ' ') ++i;
  const size_t digits = i;
  int64_t n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - digits < 7) n = n * 10 + (s[i++] - '0');
  if (i == digits || n < 1 || n > 1000000) return false;
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size() || s[i] != ']') return false;
  page = static_cast<int>(n);
  after = i + 1;
  return true;
}

bool is_open_quote(char32_t c) {
  return c == U'"' || c == 0x201C || c == 0x201E || c == 0x00AB || c == 0x201D;
}
bool is_close_quote(char32_t c) {
  return c == U'"' || c == 0x201D || c == 0x201C || c == 0x00BB || c == 0x201F;
}

constexpr size_t kMaxQuoteBytes = 1000;

// A quote opening at s[pos]: its text and the position after the closing mark. A quote that
// does not close before a blank line, the next marker or kMaxQuoteBytes is no quote.
bool read_quote_forward(std::string_view s, size_t pos, std::string& quote, size_t& after) {
  size_t len = 0;
  if (pos >= s.size() || !is_open_quote(decode_utf8(s, pos, len))) return false;
  const size_t body = pos + len;
  for (size_t i = body; i < s.size() && i - body <= kMaxQuoteBytes;) {
    const char32_t c = decode_utf8(s, i, len);
    if (is_close_quote(c)) {
      quote.assign(s.substr(body, i - body));
      after = i + len;
      return true;
    }
    if (c == U'\n' && i + 1 < s.size() && s[i + 1] == '\n') return false;
    if (c == U'[') {
      int page = 0;
      size_t a = 0;
      if (parse_marker(s, i, page, a)) return false;
    }
    i += len;
  }
  return false;
}

// Start of the UTF-8 character that ends just before s[pos].
size_t prev_char(std::string_view s, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80 && pos - p < 4) --p;
  return p;
}

// A quote whose closing mark ends just before s[end] (after optional spaces and a comma), not
// reaching back before `floor`: its text and where its opening mark starts.
bool read_quote_backward(std::string_view s, size_t end, size_t floor, std::string& quote,
                         size_t& begin) {
  size_t i = end;
  while (i > floor && (s[i - 1] == ' ' || s[i - 1] == ',')) --i;
  if (i <= floor) return false;
  size_t len = 0;
  const size_t close = prev_char(s, i);
  if (!is_close_quote(decode_utf8(s, close, len))) return false;
  for (size_t j = close; j > floor && close - j <= kMaxQuoteBytes;) {
    j = prev_char(s, j);
    const char32_t c = decode_utf8(s, j, len);
    if (is_open_quote(c)) {
      quote.assign(s.substr(j + len, close - (j + len)));
      begin = j;
      return true;
    }
    if (c == U'\n' && j > 0 && s[j - 1] == '\n') return false;
    if (c == U']') return false;  // another marker: this quote is not ours
  }
  return false;
}

}  // namespace

std::vector<Citation> parse_citations(std::string_view answer) {
  std::vector<Citation> out;
  size_t consumed = 0;  // nothing before this may be taken as a quote again
  for (size_t pos = answer.find('['); pos != std::string_view::npos;
       pos = answer.find('[', pos + 1)) {
    Citation c;
    size_t after = 0;
    if (!parse_marker(answer, pos, c.page, after)) continue;
    c.answer_begin = static_cast<int64_t>(pos);
    c.answer_end = static_cast<int64_t>(after);
    // The requested form: the quote after the marker, perhaps after ':', ',' or a dash.
    size_t q = after;
    while (q < answer.size() && (answer[q] == ' ' || answer[q] == '\t')) ++q;
    if (q < answer.size() && (answer[q] == ':' || answer[q] == ',' || answer[q] == '-')) ++q;
    for (std::string_view dash : {"\u2013", "\u2014"}) {
      if (answer.substr(q, dash.size()) == dash) q += dash.size();
    }
    while (q < answer.size() && (answer[q] == ' ' || answer[q] == '\t')) ++q;
    size_t quote_end = 0, quote_begin = 0;
    if (read_quote_forward(answer, q, c.quote, quote_end)) {
      c.answer_end = static_cast<int64_t>(quote_end);
    } else if (read_quote_backward(answer, pos, consumed, c.quote, quote_begin)) {
      c.answer_begin = static_cast<int64_t>(quote_begin);
    }
    consumed = static_cast<size_t>(c.answer_end);
    pos = consumed - 1;
    out.push_back(std::move(c));
  }
  return out;
}

CitationCheck verify_citation(const Citation& citation, const DocumentText& doc) {
  CitationCheck r;
  r.citation = citation;
  const PageText* page = nullptr;
  for (const PageText& p : doc.pages) {
    if (p.page_no == citation.page) page = &p;
  }
  if (page == nullptr) {
    r.reason = doc.pages.empty()
                   ? fmt::format("page {} is not in the document (it has no pages)", citation.page)
                   : fmt::format("page {} is not in the document (pages {}-{})", citation.page,
                                 doc.pages.front().page_no, doc.pages.back().page_no);
    return r;
  }
  if (quote_parts(citation.quote).empty()) {
    r.reason = "no quote";
    return r;
  }
  if (!page_has_text(*page)) {
    r.reason = fmt::format("page {} has no text ({})", citation.page,
                           page->undecodable ? "undecodable"
                           : page->scanned   ? "scanned"
                                             : "empty");
  } else if (const QuoteMatch m = find_quote(page->text, citation.quote); m.found) {
    r.verified = true;
    r.begin = m.begin;
    r.end = m.end;
    r.byte_begin = m.byte_begin;
    r.byte_end = m.byte_end;
    return r;
  } else {
    r.reason = fmt::format("quote not found on page {}", citation.page);
  }
  // Where the quote really is, if anywhere: a wrong page number is a common slip.
  for (const PageText& p : doc.pages) {
    if (&p == page || !page_has_text(p)) continue;
    if (find_quote(p.text, citation.quote).found) {
      r.found_on_page = p.page_no;
      break;
    }
  }
  return r;
}

std::vector<CitationCheck> check_citations(std::string_view answer, const DocumentText& doc) {
  std::vector<CitationCheck> out;
  for (const Citation& c : parse_citations(answer)) out.push_back(verify_citation(c, doc));
  return out;
}

}  // namespace spw::app
