// The library's FTS5 tokenizer, "spillway" (docs/DESIGN.md §5.2): words in every script.
//
// Text is folded per code point with ICU: NFKC case folding (presentation forms, ligatures,
// full-width and vertical forms to their base letters, case away), then canonical decomposition
// with the non-spacing marks dropped (Latin accents, Hebrew niqqud, Arabic harakat: `حَبيبي`
// and `حبيبي` are one word), format characters and the Arabic tatweel dropped (bidi controls,
// joiners, soft hyphens never split a word).
//  - A word is a run of letters, digits, spacing marks and private-use characters (what SQLite's
//    unicode61 takes, so Latin search behaves as before).
//  - Unsegmented scripts (Han, Hiragana, Katakana) have no spaces to split on: each character
//    of such a run is a token (its unigram) with the bigram of it and the next character at the
//    same position. A query run of n >= 2 characters is its n-1 bigrams and the last unigram, a
//    phrase, so any substring of two or more characters hits, and the highlight covers it.
// Byte offsets of the tokens point into the original (unfolded) UTF-8 text.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "engine/common/expected.h"

struct sqlite3;

namespace spw::app {

/// The FTS5 tokenizer name used in the schema (resources/migrations/006_search_all_scripts.sql).
inline constexpr const char* kSearchTokenizer = "spillway";

struct SearchToken {
  std::string text;  // folded UTF-8
  int begin = 0;     // [begin, end): bytes of the original text
  int end = 0;
  bool colocated = false;  // at the same position as the previous token
};

enum class TokenizeFor { kDocument, kQuery };

/// Calls `emit` for each token of `text` (see the file comment); stops when it returns false.
void tokenize_for_search(std::string_view text, TokenizeFor mode,
                         const std::function<bool(const SearchToken&)>& emit);

/// Registers the "spillway" tokenizer on `db` (needed on every connection that reads or writes
/// pages_fts). Error: FTS5 is missing from this SQLite or refused the tokenizer.
Status register_search_tokenizer(sqlite3* db);

}  // namespace spw::app
