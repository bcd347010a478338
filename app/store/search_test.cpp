// Search in every script: the "spillway" FTS5 tokenizer's tokens, library search in Hebrew,
// Arabic (with and without harakat), Chinese and Japanese, and the migration that rebuilds the
// index of a library made by the previous schema.
#include "app/store/search_tokenizer.h"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/store/library.h"
#include "app/store/migrations.h"
#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

using testing::TempDir;

// "text@begin-end" per token, "+" before a colocated one.
std::vector<std::string> tokens(std::string_view text, TokenizeFor mode) {
  std::vector<std::string> out;
  tokenize_for_search(text, mode, [&](const SearchToken& t) {
    out.push_back((t.colocated ? "+" : "") + t.text + "@" + std::to_string(t.begin) + "-" +
                  std::to_string(t.end));
    return true;
  });
  return out;
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  tokenize_for_search(text, TokenizeFor::kQuery, [&](const SearchToken& t) {
    out.push_back(t.text);
    return true;
  });
  return out;
}

TEST(SearchTokenizer, LatinWordsAreFoldedLikeUnicode61) {
  EXPECT_EQ(words("Café RÉSUMÉ, price-determining x_y 42"),
            (std::vector<std::string>{"cafe", "resume", "price", "determining", "x", "y", "42"}));
  // Offsets are bytes of the original text.
  EXPECT_EQ(tokens("Ab  cé", TokenizeFor::kDocument),
            (std::vector<std::string>{"ab@0-2", "ce@4-7"}));
  // Ligatures and full-width letters fold to their letters; a soft hyphen does not split.
  EXPECT_EQ(words("\xEF\xAC\x81nal \xEF\xBC\xA1\xEF\xBC\xA2 ne\xC2\xADgotiation"),
            (std::vector<std::string>{"final", "ab", "negotiation"}));
}

TEST(SearchTokenizer, HebrewAndArabicMarksAndControlsAreIgnored) {
  // حَبيبي (with a fatha) and حبيبي are one word; so are שָׁלוֹם and שלום.
  EXPECT_EQ(words("\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A"),
            words("\xD8\xAD\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A"));
  EXPECT_EQ(words("\xD7\xA9\xD6\xB8\xD7\x81\xD7\x9C\xD7\x95\xD6\xB9\xD7\x9D"),
            (std::vector<std::string>{"\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D"}));
  // Presentation forms (ﻫ ﺬ ﺍ: isolated/initial/final forms) fold to the base letters; a bidi
  // mark and a tatweel inside the word do not split it.
  EXPECT_EQ(words("\xEF\xBB\xAB\xEF\xBA\xAC\xEF\xBA\x8E"),
            (std::vector<std::string>{"\xD9\x87\xD8\xB0\xD8\xA7"}));
  EXPECT_EQ(words("\xD9\x87\xE2\x80\x8F\xD8\xB0\xD9\x80\xD8\xA7"),
            (std::vector<std::string>{"\xD9\x87\xD8\xB0\xD8\xA7"}));
}

TEST(SearchTokenizer, ChineseIsIndexedByCharacterAndBigram) {
  // 东北电 in a document: each character at its position, the bigram colocated.
  EXPECT_EQ(tokens("A\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5", TokenizeFor::kDocument),
            (std::vector<std::string>{"a@0-1", "\xE4\xB8\x9C@1-4", "+\xE4\xB8\x9C\xE5\x8C\x97@1-7",
                                      "\xE5\x8C\x97@4-7", "+\xE5\x8C\x97\xE7\x94\xB5@4-10",
                                      "\xE7\x94\xB5@7-10"}));
  // The same in a query: bigrams, then the last character alone.
  EXPECT_EQ(tokens("\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5", TokenizeFor::kQuery),
            (std::vector<std::string>{"\xE4\xB8\x9C\xE5\x8C\x97@0-6",
                                      "\xE5\x8C\x97\xE7\x94\xB5@3-9", "\xE7\x94\xB5@6-9"}));
  // One character alone is its unigram.
  EXPECT_EQ(tokens("\xE4\xB8\x9C", TokenizeFor::kQuery),
            (std::vector<std::string>{"\xE4\xB8\x9C@0-3"}));
}

DocumentRecord doc(const std::string& sha) {
  DocumentRecord d;
  d.title = "Doc " + sha;
  d.path = "/tmp/" + sha + ".pdf";
  d.sha256 = sha;
  return d;
}

PageRecord page(int no, const std::string& text) {
  PageRecord p;
  p.page_no = no;
  p.original_text = text;
  p.text = text;
  return p;
}

// (doc, page) of each hit, best first.
std::vector<std::pair<int64_t, int>> hits_of(Library& lib, const std::string& q) {
  auto hits = lib.search(q);
  EXPECT_TRUE(hits.ok()) << (hits.ok() ? "" : hits.error().message);
  std::vector<std::pair<int64_t, int>> out;
  if (hits.ok()) {
    for (const SearchHit& h : *hits) out.emplace_back(h.doc_id, h.page_no);
  }
  return out;
}

std::string first_snippet(Library& lib, const std::string& q) {
  auto hits = lib.search(q);
  return hits.ok() && !hits->empty() ? (*hits)[0].snippet : "(no hit)";
}

const char* kChinese =  // 东北电气发展股份有限公司主要财务指标
    "\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94\xE5\x8F\x91\xE5\xB1\x95\xE8\x82\xA1\xE4\xBB"
    "\xBD\xE6\x9C\x89\xE9\x99\x90\xE5\x85\xAC\xE5\x8F\xB8\xE4\xB8\xBB\xE8\xA6\x81\xE8\xB4\xA2\xE5"
    "\x8A\xA1\xE6\x8C\x87\xE6\xA0\x87";
const char* kJapanese =  // 東京都の人口は増えている
    "\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\xE3\x81\xAE\xE4\xBA\xBA\xE5\x8F\xA3\xE3\x81\xAF\xE5\xA2"
    "\x97\xE3\x81\x88\xE3\x81\xA6\xE3\x81\x84\xE3\x82\x8B";
const char* kHebrew =
    "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D";  // שלום עולם
const char* kArabic =                                                     // حَبيبي محمد21
    "\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A \xD9\x85\xD8\xAD\xD9\x85\xD8\xAF"
    "21";

void add_script_pages(Library& lib) {
  auto id = lib.add_document(doc("s"), {page(1, kChinese), page(2, kJapanese), page(3, kHebrew),
                                        page(4, kArabic), page(5, "Plain English text.")});
  ASSERT_TRUE(id.ok()) << id.error().message;
}

void expect_script_hits(Library& lib) {
  const int64_t d = 1;
  // Chinese: sub-phrases of the unsegmented run, of two or more characters.
  EXPECT_EQ(hits_of(lib, kChinese), (std::vector<std::pair<int64_t, int>>{{d, 1}}));
  EXPECT_EQ(hits_of(lib, "\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94"),  // 东北电气
            (std::vector<std::pair<int64_t, int>>{{d, 1}}));
  EXPECT_EQ(hits_of(lib, "\xE8\xB4\xA2\xE5\x8A\xA1\xE6\x8C\x87\xE6\xA0\x87"),  // 财务指标
            (std::vector<std::pair<int64_t, int>>{{d, 1}}));
  EXPECT_EQ(hits_of(lib, "\xE5\x85\xAC\xE5\x8F\xB8"),  // 公司
            (std::vector<std::pair<int64_t, int>>{{d, 1}}));
  EXPECT_TRUE(hits_of(lib, "\xE5\x8C\x97\xE4\xB8\x9C").empty());  // 北东: not in that order
  // Japanese: kanji and kana sub-phrases.
  EXPECT_EQ(hits_of(lib, "\xE6\x9D\xB1\xE4\xBA\xAC"),  // 東京
            (std::vector<std::pair<int64_t, int>>{{d, 2}}));
  EXPECT_EQ(hits_of(lib, "\xE4\xBA\xBA\xE5\x8F\xA3\xE3\x81\xAF"),  // 人口は
            (std::vector<std::pair<int64_t, int>>{{d, 2}}));
  // Hebrew and Arabic words, with and without harakat.
  EXPECT_EQ(hits_of(lib, "\xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D"),  // עולם
            (std::vector<std::pair<int64_t, int>>{{d, 3}}));
  EXPECT_EQ(hits_of(lib, "\xD8\xAD\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A"),  // حبيبي
            (std::vector<std::pair<int64_t, int>>{{d, 4}}));
  EXPECT_EQ(hits_of(lib, "\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A"),  // حَبيبي
            (std::vector<std::pair<int64_t, int>>{{d, 4}}));
  // Latin as before.
  EXPECT_EQ(hits_of(lib, "english"), (std::vector<std::pair<int64_t, int>>{{d, 5}}));
}

TEST(LibrarySearchScripts, HebrewArabicChineseAndJapaneseSubPhrasesHit) {
  TempDir tmp;
  auto lib = Library::open(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  add_script_pages(**lib);
  expect_script_hits(**lib);
  // The highlight covers the whole sub-phrase, in the page's own text (16 characters around
  // it: each CJK character is a token of the snippet's window).
  EXPECT_EQ(first_snippet(**lib, "\xE6\x9C\x89\xE9\x99\x90\xE5\x85\xAC\xE5\x8F\xB8"),  // 有限公司
            std::string(kChinese).substr(0, 24) + "**" + std::string(kChinese).substr(24, 12) +
                "**" + std::string(kChinese).substr(36, 12) + "\xE2\x80\xA6");
  EXPECT_EQ(first_snippet(**lib, "\xD8\xAD\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A"),
            "**\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A** \xD9\x85\xD8\xAD\xD9\x85\xD8\xAF"
            "21");
  // Two adjacent sub-phrases both highlighted, nothing repeated.
  EXPECT_EQ(first_snippet(**lib, "\xE6\x9D\xB1\xE4\xBA\xAC \xE9\x83\xBD\xE3\x81\xAE"),
            "**\xE6\x9D\xB1\xE4\xBA\xAC****\xE9\x83\xBD\xE3\x81\xAE**" +
                std::string(kJapanese).substr(12));
}

TEST(LibrarySearchScripts, TheMigrationRebuildsTheIndexOfAnOldLibrary) {
  TempDir tmp;
  const auto file = tmp / "old.sqlite3";
  {
    // A library made by schema 5 (unicode61 tokenizer), with pages in it.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    const auto all = migrations();
    ASSERT_GE(all.size(), 6u);
    for (size_t i = 0; i < 5; ++i) {
      ASSERT_EQ(sqlite3_exec(db, all[i].sql, nullptr, nullptr, nullptr), SQLITE_OK)
          << all[i].name << ": " << sqlite3_errmsg(db);
    }
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 5", nullptr, nullptr, nullptr), SQLITE_OK);
    std::string sql =
        "INSERT INTO documents (id, sha256, title, path, n_pages, n_chars, added_at) VALUES "
        "(1, 's', 'Doc s', '/tmp/s.pdf', 5, 0, 0);";
    const char* texts[] = {kChinese, kJapanese, kHebrew, kArabic, "Plain English text."};
    for (int i = 0; i < 5; ++i) {
      sql += "INSERT INTO pages (doc_id, page_no, original_text, text) VALUES (1, " +
             std::to_string(i + 1) + ", '" + texts[i] + "', '" + texts[i] + "');";
    }
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    // The old index does not find a Chinese sub-phrase.
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH "
                                 "'\"\xE8\xB4\xA2\xE5\x8A\xA1\xE6\x8C\x87\xE6\xA0\x87\"'",
                                 -1, &st, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  auto lib = Library::open(file);
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  EXPECT_EQ((*lib)->schema_version(), static_cast<int>(migrations().size()));
  expect_script_hits(**lib);
  // The index stays in step after the migration: a removed document is no longer found.
  ASSERT_TRUE((*lib)->remove_document(1).ok());
  EXPECT_TRUE(hits_of(**lib, "english").empty());
  EXPECT_TRUE(hits_of(**lib, "\xE4\xB8\x9C\xE5\x8C\x97").empty());
}

}  // namespace
}  // namespace spw::app
