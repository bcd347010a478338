#include "app/store/search_tokenizer.h"

#include <sqlite3.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uscript.h>
#include <unicode/utf16.h>

#include <unordered_map>
#include <vector>

#include "engine/tokenizer/unicode.h"

namespace spw::app {
namespace {

// The code point at s[i] (a stray byte decodes as itself, one byte long).
char32_t decode(std::string_view s, size_t i, size_t& len) {
  const size_t n = unicode::valid_utf8_len(s, i);
  if (n == 0) {
    len = 1;
    return static_cast<unsigned char>(s[i]);
  }
  len = n;
  return unicode::decode_utf8(s, i, n);
}

enum class Kind { kSeparator, kWord, kUnsegmented };

struct Folded {
  std::u32string cps;  // the folded code points (empty: ignored, e.g. a mark)
  Kind kind = Kind::kSeparator;
};

Kind kind_of(char32_t c) {
  const auto type = static_cast<UCharCategory>(u_charType(static_cast<UChar32>(c)));
  switch (type) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
    case U_COMBINING_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_PRIVATE_USE_CHAR:
      break;
    default:
      return Kind::kSeparator;
  }
  UErrorCode err = U_ZERO_ERROR;
  const UScriptCode script = uscript_getScript(static_cast<UChar32>(c), &err);
  if (script == USCRIPT_HAN || script == USCRIPT_HIRAGANA || script == USCRIPT_KATAKANA ||
      c == 0x30FC /* ー, script Common */)
    return Kind::kUnsegmented;
  return Kind::kWord;
}

// NFKC_Casefold, then NFD without non-spacing marks; format characters and tatweel dropped.
Folded fold_slow(char32_t c) {
  Folded out;
  UErrorCode err = U_ZERO_ERROR;
  static const UNormalizer2* nfkc_cf = unorm2_getNFKCCasefoldInstance(&err);
  static const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  if (!nfkc_cf || !nfd) return out;
  UChar src[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(c));
  UChar a[32], b[64];
  err = U_ZERO_ERROR;
  const int32_t na = unorm2_normalize(nfkc_cf, src, n, a, 32, &err);
  if (U_FAILURE(err)) return out;
  const int32_t nb = unorm2_normalize(nfd, a, na, b, 64, &err);
  if (U_FAILURE(err)) return out;
  for (int32_t i = 0; i < nb;) {
    UChar32 d = 0;
    U16_NEXT(b, i, nb, d);
    const auto type = static_cast<UCharCategory>(u_charType(d));
    if (type == U_NON_SPACING_MARK || type == U_FORMAT_CHAR || d == 0x0640) continue;
    out.cps.push_back(static_cast<char32_t>(d));
  }
  // A code point folds to one kind: its first folded code point's (a ligature stays a word).
  out.kind = out.cps.empty() ? Kind::kSeparator : kind_of(out.cps.front());
  return out;
}

// Marks and format characters are "ignored" (continue the word), others as kind says.
bool ignorable(char32_t c) {
  const auto type = static_cast<UCharCategory>(u_charType(static_cast<UChar32>(c)));
  return type == U_NON_SPACING_MARK || type == U_FORMAT_CHAR || c == 0x0640;
}

const Folded& fold(char32_t c) {
  thread_local std::unordered_map<char32_t, Folded> cache;
  auto it = cache.find(c);
  if (it != cache.end()) return it->second;
  if (cache.size() > 65536) cache.clear();
  return cache.emplace(c, fold_slow(c)).first->second;
}

struct Unit {  // one code point of an unsegmented run
  std::string folded;
  int begin, end;
};

}  // namespace

void tokenize_for_search(std::string_view text, TokenizeFor mode,
                         const std::function<bool(const SearchToken&)>& emit) {
  SearchToken word;  // the word being read
  bool in_word = false;
  std::vector<Unit> run;  // the unsegmented run being read
  bool go = true;

  auto flush_word = [&] {
    if (in_word && go && !word.text.empty()) go = emit(word);
    in_word = false;
    word.text.clear();
  };
  auto flush_run = [&] {
    if (run.empty() || !go) {
      run.clear();
      return;
    }
    const size_t n = run.size();
    SearchToken t;
    for (size_t i = 0; i < n && go; ++i) {
      const bool has_next = i + 1 < n;
      if (mode == TokenizeFor::kQuery) {
        // Bigrams, then the last character alone (so the phrase spans the whole run).
        if (has_next) {
          t = {run[i].folded + run[i + 1].folded, run[i].begin, run[i + 1].end, false};
        } else {
          t = {run[i].folded, run[i].begin, run[i].end, false};
        }
        go = emit(t);
        continue;
      }
      t = {run[i].folded, run[i].begin, run[i].end, false};
      go = emit(t);
      if (go && has_next) {
        t = {run[i].folded + run[i + 1].folded, run[i].begin, run[i + 1].end, true};
        go = emit(t);
      }
    }
    run.clear();
  };

  for (size_t i = 0; i < text.size() && go;) {
    size_t len = 1;
    const char32_t c = decode(text, i, len);
    const int begin = static_cast<int>(i);
    const int end = static_cast<int>(i + len);
    i += len;
    if (c < 0x80) {
      const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      const bool upper = c >= 'A' && c <= 'Z';
      if (!alnum && !upper) {
        flush_word();
        flush_run();
        continue;
      }
      flush_run();
      if (!in_word) {
        in_word = true;
        word.begin = begin;
      }
      word.text += static_cast<char>(upper ? c - 'A' + 'a' : c);
      word.end = end;
      continue;
    }
    const Folded& f = fold(c);
    if (f.cps.empty()) {
      if (ignorable(c)) {
        if (in_word) word.end = end;
        continue;  // a mark or a control inside a word does not end it
      }
      flush_word();
      flush_run();
      continue;
    }
    if (f.kind == Kind::kSeparator) {
      flush_word();
      flush_run();
      continue;
    }
    std::string folded;
    for (const char32_t d : f.cps) unicode::append_utf8(static_cast<uint32_t>(d), folded);
    if (f.kind == Kind::kUnsegmented) {
      flush_word();
      run.push_back(Unit{std::move(folded), begin, end});
      continue;
    }
    flush_run();
    if (!in_word) {
      in_word = true;
      word.begin = begin;
    }
    word.text += folded;
    word.end = end;
  }
  flush_word();
  flush_run();
}

namespace {

struct Fts5TokenizerImpl {};

int tok_create(void*, const char**, int, Fts5Tokenizer** out) {
  *out = reinterpret_cast<Fts5Tokenizer*>(new Fts5TokenizerImpl);
  return SQLITE_OK;
}

void tok_delete(Fts5Tokenizer* t) { delete reinterpret_cast<Fts5TokenizerImpl*>(t); }

int tok_tokenize(Fts5Tokenizer*, void* ctx, int flags, const char* text, int n_text,
                 int (*x_token)(void*, int, const char*, int, int, int)) {
  const TokenizeFor mode =
      (flags & FTS5_TOKENIZE_QUERY) ? TokenizeFor::kQuery : TokenizeFor::kDocument;
  int rc = SQLITE_OK;
  tokenize_for_search(std::string_view(text, static_cast<size_t>(std::max(0, n_text))), mode,
                      [&](const SearchToken& t) {
                        rc = x_token(ctx, t.colocated ? FTS5_TOKEN_COLOCATED : 0, t.text.data(),
                                     static_cast<int>(t.text.size()), t.begin, t.end);
                        return rc == SQLITE_OK;
                      });
  return rc;
}

}  // namespace

Status register_search_tokenizer(sqlite3* db) {
  fts5_api* api = nullptr;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &st, nullptr) != SQLITE_OK) {
    return make_error("this SQLite has no FTS5: {}", sqlite3_errmsg(db));
  }
  sqlite3_bind_pointer(st, 1, reinterpret_cast<void*>(&api), "fts5_api_ptr", nullptr);
  sqlite3_step(st);
  sqlite3_finalize(st);
  if (!api || api->iVersion < 2) return make_error("this SQLite's FTS5 is too old (no fts5_api)");
  fts5_tokenizer tok{tok_create, tok_delete, tok_tokenize};
  if (api->xCreateTokenizer(api, kSearchTokenizer, nullptr, &tok, nullptr) != SQLITE_OK) {
    return make_error("cannot register the search tokenizer: {}", sqlite3_errmsg(db));
  }
  return Status::Ok();
}

}  // namespace spw::app
