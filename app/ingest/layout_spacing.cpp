// The words of a left-to-right line, with letter-spaced words joined (layout_parts.h).
//
// Poppler splits a word set with wide character spacing (Tc) into single glyphs, each with a
// space after it. Spaced glyphs are told from one-letter words by their gaps: the gaps inside
// a letter-spaced word are even, and the gap to the next word is wider by about a space (the
// word space comes on top of the character spacing), while real one-letter words (`a b c`) are
// one ordinary space apart, like the words around them.
#include <unicode/uchar.h>

#include <algorithm>

#include "app/ingest/layout_parts.h"
#include "app/ingest/utf8.h"

namespace spw::app::layout_parts {
namespace {

constexpr size_t kMinSpacedGlyphs = 3;  // a run of single glyphs worth looking at
constexpr double kMaxGlyphGap = 0.6;    // x line height: wider gaps are not letter spacing
constexpr double kMaxRunGap = 1.6;      // x line height: a word space between spaced words
constexpr double kLetterGapSlack = 0.12;
constexpr double kWordGapExtra = 0.15;  // a word space on top of the letter spacing, at least

enum class Glyph { kNone, kLetter, kOther };

// A word that is one glyph (not a CJK one: those are set glyph by glyph anyway).
Glyph glyph_kind(const WordBox& b) {
  size_t len = 0;
  if (b.text.empty()) return Glyph::kNone;
  const auto c = static_cast<UChar32>(utf8::decode(b.text, 0, len));
  if (len != b.text.size()) return Glyph::kNone;
  if ((c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF) || c >= 0x20000)
    return Glyph::kNone;
  if (u_isalpha(c)) return Glyph::kLetter;
  if (u_ispunct(c) || u_isdigit(c)) return Glyph::kOther;
  return Glyph::kNone;
}

}  // namespace

std::string ltr_line_text(const std::vector<WordBox>& w, const std::vector<int>& row, double h) {
  std::vector<const WordBox*> words;
  for (const int i : row) {
    if (!w[i].text.empty()) words.push_back(&w[i]);
  }
  const size_t n = words.size();
  // gap[k], space[k]: between words k-1 and k.
  std::vector<double> gap(n, 0);
  std::vector<bool> space(n, false);
  std::vector<Glyph> kind(n);
  for (size_t k = 0; k < n; ++k) {
    kind[k] = glyph_kind(*words[k]);
    if (k == 0) continue;
    gap[k] = words[k]->x0 - words[k - 1]->x1;
    space[k] = words[k - 1]->space_after || gap[k] > 0.15 * h;
  }
  for (size_t k = 0; k < n;) {
    if (kind[k] == Glyph::kNone) {
      ++k;
      continue;
    }
    size_t end = k + 1;  // the run [k, end) of single glyphs, each close to the one before
    while (end < n && kind[end] != Glyph::kNone && gap[end] <= kMaxRunGap * h) ++end;
    const auto letters =
        std::count(kind.begin() + static_cast<std::ptrdiff_t>(k),
                   kind.begin() + static_cast<std::ptrdiff_t>(end), Glyph::kLetter);
    if (end - k >= kMinSpacedGlyphs && letters >= 2) {
      const double g_min = *std::min_element(gap.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                                             gap.begin() + static_cast<std::ptrdiff_t>(end));
      const double g_max = *std::max_element(gap.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                                             gap.begin() + static_cast<std::ptrdiff_t>(end));
      const double word_gap = g_min + kWordGapExtra * h;
      int letter_gaps = 0;
      bool word_gaps = false;
      for (size_t m = k + 1; m < end; ++m) {
        letter_gaps += gap[m] <= g_min + kLetterGapSlack * h;
        word_gaps |= gap[m] >= word_gap;
      }
      // Evidence that the even gaps are letter spacing: wider gaps between the spaced words,
      // the words beside the run a word space further off, or a run of letters alone on its
      // line with gaps narrower than a space.
      const bool left = k > 0, right = end < n;
      const bool spaced_words = word_gaps && letter_gaps >= 2;
      const bool set_off = (left || right) && (!left || gap[k] >= word_gap) &&
                           (!right || gap[end] >= word_gap) &&
                           letter_gaps == static_cast<int>(end - k - 1);
      const bool alone = !left && !right && end - k >= 4 &&
                         letters == static_cast<std::ptrdiff_t>(end - k) && g_max <= 0.45 * h;
      if (g_min >= -0.1 * h && g_min <= kMaxGlyphGap * h && (spaced_words || set_off || alone)) {
        for (size_t m = k + 1; m < end; ++m) space[m] = gap[m] > g_min + kLetterGapSlack * h;
      }
    }
    k = end;
  }
  std::string text;
  for (size_t k = 0; k < n; ++k) {
    if (k > 0 && space[k]) text += ' ';
    text += words[k]->text;
  }
  return text;
}

}  // namespace spw::app::layout_parts
