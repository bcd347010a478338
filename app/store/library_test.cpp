// Tests of app/store: schema and migrations, documents and pages, FTS search, chats, settings,
// KV snapshot records. Rows are checked in SQLite itself where the API could hide a mistake.
#include "app/store/library.h"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "app/store/migrations.h"
#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

using testing::TempDir;

// One integer from a query on a separate connection (what another process would see).
int64_t query_int(const std::filesystem::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t v = -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

std::string query_text(const std::filesystem::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  std::string v;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
    v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

std::unique_ptr<Library> open_ok(const std::filesystem::path& file) {
  auto lib = Library::open(file);
  EXPECT_TRUE(lib.ok()) << (lib.ok() ? "" : lib.error().message);
  return lib.ok() ? std::move(*lib) : nullptr;
}

DocumentRecord doc_with_sha(const std::string& sha) {
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

TEST(LibraryStore, OpenCreatesTheSchemaInWalModeAtTheNewestVersion) {
  TempDir tmp;
  const auto file = library_db_file(tmp.path());
  EXPECT_EQ(file.filename(), "library.sqlite3");
  auto lib = open_ok(file);
  ASSERT_TRUE(lib);
  const int newest = static_cast<int>(migrations().size());
  EXPECT_GE(newest, 2);
  EXPECT_EQ(lib->schema_version(), newest);
  EXPECT_EQ(query_int(file, "PRAGMA user_version"), newest);
  EXPECT_EQ(query_text(file, "PRAGMA journal_mode"), "wal");
  for (const char* table :
       {"documents", "pages", "pages_fts", "chats", "messages", "settings", "kv_snapshots"}) {
    EXPECT_EQ(query_int(file, std::string("SELECT count(*) FROM sqlite_master WHERE name = '") +
                                  table + "'"),
              1)
        << table;
  }
  // Opening again applies nothing and keeps the data.
  ASSERT_TRUE(lib->set_setting("k", "v"));
  lib.reset();
  auto again = open_ok(file);
  ASSERT_TRUE(again);
  auto v = again->setting("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or(""), "v");
}

TEST(LibraryStore, MigrationsAreNumberedFromOneWithoutGaps) {
  int expect = 1;
  for (const Migration& m : migrations()) {
    EXPECT_EQ(m.version, expect++);
    const std::string sql(m.sql);
    EXPECT_TRUE(sql.find("CREATE") != std::string::npos || sql.find("ALTER") != std::string::npos)
        << m.name;
  }
  EXPECT_STREQ(migrations()[0].name, "library");
}

TEST(LibraryStore, AnOldDatabaseIsMigratedAndANewerOneRefused) {
  TempDir tmp;
  const auto file = tmp / "lib.sqlite3";
  {
    // A database at version 1 (only the first migration applied).
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, migrations()[0].sql, nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 1", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto lib = open_ok(file);
    ASSERT_TRUE(lib);
    EXPECT_EQ(query_int(file, "PRAGMA user_version"), static_cast<int64_t>(migrations().size()));
    EXPECT_EQ(query_int(file, "SELECT count(*) FROM sqlite_master WHERE name = 'kv_snapshots'"), 1);
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto lib = Library::open(file);
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("schema version 99 is newer"), std::string::npos)
      << lib.error().message;
  EXPECT_NE(lib.error().message.find(file.string()), std::string::npos) << lib.error().message;
}

TEST(LibraryStore, AnUnopenableFileIsAnErrorNamingIt) {
  TempDir tmp;
  const auto file = tmp / "missing-folder" / "lib.sqlite3";
  auto lib = Library::open(file);
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find(file.string()), std::string::npos) << lib.error().message;
}

TEST(LibraryStore, DocumentsAndPagesRoundTrip) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  DocumentRecord d = doc_with_sha("aa");
  d.encrypted = true;
  d.repaired = true;
  PageRecord p1 = page(1, "Header\nFirst page text");
  p1.original_text = "Header\nFirst page text with ﬁ";
  p1.boilerplate = {{0, 6}};
  PageRecord p2 = page(2, "");
  p2.scanned = true;
  PageRecord p3 = page(3, "Third page, naïve");
  p3.scanned = true;
  p3.ocr = true;
  auto id = lib->add_document(d, {p1, p2, p3});
  ASSERT_TRUE(id.ok()) << id.error().message;
  auto got = lib->document(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->title, "Doc aa");
  EXPECT_EQ(got->path, "/tmp/aa.pdf");
  EXPECT_EQ(got->n_pages, 3);
  EXPECT_EQ(got->n_chars, 22 + 0 + 17);  // code points of the normalised text
  EXPECT_TRUE(got->encrypted);
  EXPECT_TRUE(got->repaired);
  EXPECT_EQ(got->n_scanned, 2);
  EXPECT_EQ(got->n_ocr, 1);
  EXPECT_FALSE(got->no_text);
  EXPECT_GT(got->added_at, 1600000000);

  auto pages = lib->pages(*id);
  ASSERT_TRUE(pages.ok());
  ASSERT_EQ(pages->size(), 3u);
  EXPECT_EQ((*pages)[0].page_no, 1);
  EXPECT_EQ((*pages)[0].original_text, "Header\nFirst page text with ﬁ");
  EXPECT_EQ((*pages)[0].text, "Header\nFirst page text");
  ASSERT_EQ((*pages)[0].boilerplate.size(), 1u);
  EXPECT_EQ((*pages)[0].boilerplate[0], (std::pair<int64_t, int64_t>{0, 6}));
  EXPECT_TRUE((*pages)[1].scanned);
  EXPECT_FALSE((*pages)[1].ocr);
  EXPECT_TRUE((*pages)[2].ocr);
  EXPECT_EQ((*pages)[2].text, "Third page, naïve");
  EXPECT_EQ(
      query_int(lib->file(), "SELECT count(*) FROM pages WHERE doc_id = " + std::to_string(*id)),
      3);

  auto p = lib->page(*id, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->page_no, 3);
  auto missing = lib->page(*id, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            "document " + std::to_string(*id) + " has no page 4 (it has 3 pages)");
  auto none = lib->document(*id + 100);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "no document with id " + std::to_string(*id + 100));
  EXPECT_FALSE(lib->pages(*id + 100).ok());

  auto found = lib->find_document_by_sha256("aa");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->value_or(0), *id);
  auto not_found = lib->find_document_by_sha256("bb");
  ASSERT_TRUE(not_found.ok());
  EXPECT_FALSE(not_found->has_value());
}

TEST(LibraryStore, AllScannedDocumentIsMarkedNoText) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  PageRecord p = page(1, "");
  p.scanned = true;
  auto id = lib->add_document(doc_with_sha("cc"), {p});
  ASSERT_TRUE(id.ok());
  auto d = lib->document(*id);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->no_text);
  EXPECT_EQ(d->n_scanned, 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT no_text FROM documents"), 1);
}

TEST(LibraryStore, TheSameFileTwiceStoresNothingNew) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto id = lib->add_document(doc_with_sha("dd"), {page(1, "one")});
  ASSERT_TRUE(id.ok());
  auto again = lib->add_document(doc_with_sha("dd"), {page(1, "one"), page(2, "two")});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already has this file as document " + std::to_string(*id)),
            std::string::npos);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM documents"), 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM pages"), 1);
}

TEST(LibraryStore, PagesMustBeNumberedInOrder) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto id = lib->add_document(doc_with_sha("ee"), {page(1, "a"), page(3, "c")});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM documents"), 0);
}

TEST(LibraryStore, RemovedIdsAreNeverGivenAgain) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto a = lib->add_document(doc_with_sha("a"), {page(1, "first")});
  auto b = lib->add_document(doc_with_sha("b"), {page(1, "second")});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(lib->remove_document(*b));  // the newest
  auto c = lib->add_document(doc_with_sha("c"), {page(1, "third")});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *b + 1) << "the removed newest id must not come back";
  ASSERT_TRUE(lib->remove_document(*a));
  ASSERT_TRUE(lib->remove_document(*c));  // an empty library
  auto d = lib->add_document(doc_with_sha("d"), {page(1, "fourth")});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, *c + 1);
}

TEST(LibraryStore, RemoveTakesPagesIndexAndChatsAlong) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto keep = lib->add_document(doc_with_sha("k"), {page(1, "kept zebra")});
  auto gone = lib->add_document(doc_with_sha("g"), {page(1, "removed zebra"), page(2, "more")});
  ASSERT_TRUE(keep.ok() && gone.ok());
  auto chat = lib->create_chat(*gone, "about it");
  ASSERT_TRUE(chat.ok());
  ASSERT_TRUE(lib->add_message(*chat, "user", "hello").ok());
  ASSERT_TRUE(lib->remove_document(*gone));
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM documents"), 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM pages"), 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM chats"), 0);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM messages"), 0);
  auto hits = lib->search("zebra");
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].doc_id, *keep);
  auto again = lib->remove_document(*gone);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, "no document with id " + std::to_string(*gone));
}

// A user's name for a document: stored beside the PDF's title (which stays), whitespace tidied,
// shown by shown_title() and search hits; "" (or the cleaned title itself) goes back to the
// cleaned title; too long or an unknown id is an error naming the numbers.
TEST(LibraryStore, RenameKeepsThePdfTitleAndSearchShowsTheName) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  DocumentRecord d = doc_with_sha("r");
  d.title = "Microsoft Word - lease_final_v2.docx";
  auto id = lib->add_document(d, {page(1, "the tenant pays rent monthly")});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(lib->document(*id)->shown_title(), "lease final v2");

  ASSERT_TRUE(lib->rename_document(*id, "  Lease with\n Acme\t2024 "));
  const std::string where = " FROM documents WHERE id = " + std::to_string(*id);
  EXPECT_EQ(query_text(lib->file(), "SELECT custom_title" + where), "Lease with Acme 2024");
  EXPECT_EQ(query_text(lib->file(), "SELECT title" + where),
            "Microsoft Word - lease_final_v2.docx");
  auto doc = lib->document(*id);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc->custom_title, "Lease with Acme 2024");
  EXPECT_EQ(doc->shown_title(), "Lease with Acme 2024");
  auto hits = lib->search("rent");
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].title, "Lease with Acme 2024");

  // The cleaned title typed back, or nothing: no name of its own.
  ASSERT_TRUE(lib->rename_document(*id, "lease final v2"));
  EXPECT_EQ(query_text(lib->file(), "SELECT custom_title" + where), "");
  ASSERT_TRUE(lib->rename_document(*id, "Other"));
  ASSERT_TRUE(lib->rename_document(*id, "   "));
  EXPECT_EQ(lib->document(*id)->shown_title(), "lease final v2");

  // 300 characters (code points, not bytes) is the most.
  std::string longest;
  for (int i = 0; i < 300; ++i) longest += "é";
  ASSERT_TRUE(lib->rename_document(*id, longest));
  EXPECT_EQ(lib->document(*id)->custom_title, longest);
  auto too_long = lib->rename_document(*id, longest + "x");
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().message,
            "a document name is at most 300 characters; this one has 301");
  EXPECT_EQ(lib->document(*id)->custom_title, longest);
  auto missing = lib->rename_document(*id + 9, "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "no document with id " + std::to_string(*id + 9));
}

// "Always answer this document over parts": one flag per document row, off by default; it
// survives reopening and re-reading the pages in place, and goes with the removed document.
TEST(LibraryStore, AnswerOverPartsIsRememberedPerDocumentAndGoesWithIt) {
  TempDir tmp;
  const auto file = tmp / "lib.sqlite3";
  int64_t a = 0, b = 0;
  {
    auto lib = open_ok(file);
    ASSERT_TRUE(lib);
    auto ida = lib->add_document(doc_with_sha("pa"), {page(1, "a long lease")});
    auto idb = lib->add_document(doc_with_sha("pb"), {page(1, "another lease")});
    ASSERT_TRUE(ida.ok() && idb.ok());
    a = *ida;
    b = *idb;
    EXPECT_FALSE(lib->document(a)->answer_over_parts);
    ASSERT_TRUE(lib->set_answer_over_parts(a, true));
  }
  const auto flag = [&](int64_t id) {
    return query_int(file,
                     "SELECT answer_over_parts FROM documents WHERE id = " + std::to_string(id));
  };
  EXPECT_EQ(flag(a), 1);
  EXPECT_EQ(flag(b), 0);
  auto lib = open_ok(file);
  ASSERT_TRUE(lib);
  EXPECT_TRUE(lib->document(a)->answer_over_parts);
  EXPECT_FALSE(lib->document(b)->answer_over_parts);
  auto all = lib->documents();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_TRUE((*all)[0].answer_over_parts);
  EXPECT_FALSE((*all)[1].answer_over_parts);
  ASSERT_TRUE(lib->replace_pages(a, {page(1, "a long lease, read again")}).ok());
  EXPECT_EQ(flag(a), 1);

  ASSERT_TRUE(lib->set_answer_over_parts(a, false));
  EXPECT_EQ(flag(a), 0);
  ASSERT_TRUE(lib->set_answer_over_parts(b, true));
  ASSERT_TRUE(lib->remove_document(b));
  EXPECT_EQ(query_int(file, "SELECT count(*) FROM documents WHERE id = " + std::to_string(b)), 0);
  auto missing = lib->set_answer_over_parts(b, true);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "no document with id " + std::to_string(b));
}

// Re-reading in place (OCR): the pages and index change, the id, name, chats and the other
// documents do not; the part answers of the old text go; the counts follow the new pages.
TEST(LibraryStore, ReplacePagesKeepsTheIdNameAndChats) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  PageRecord scanned = page(2, "");
  scanned.scanned = true;
  auto id = lib->add_document(doc_with_sha("s"), {page(1, "cover walrus"), scanned});
  auto other = lib->add_document(doc_with_sha("o"), {page(1, "other walrus")});
  ASSERT_TRUE(id.ok() && other.ok());
  ASSERT_TRUE(lib->rename_document(*id, "Scanned minutes"));
  auto chat = lib->create_chat(*id, "minutes");
  ASSERT_TRUE(chat.ok());
  ASSERT_TRUE(lib->add_message(*chat, "user", "who attended?").ok());
  PartAnswerRecord part;
  part.model_fingerprint = 1;
  part.answer_key = 2;
  part.doc_id = *id;
  part.part = part.n_parts = 1;
  ASSERT_TRUE(lib->put_part_answer(part));
  ASSERT_EQ(lib->document(*id)->n_scanned, 1);

  PageRecord read = page(2, "attendees narwhal and walrus");
  read.scanned = read.ocr = true;
  auto doc = lib->replace_pages(*id, {page(1, "cover"), read});
  ASSERT_TRUE(doc.ok()) << doc.error().message;
  EXPECT_EQ(doc->id, *id);
  EXPECT_EQ(doc->custom_title, "Scanned minutes");
  EXPECT_EQ(doc->n_pages, 2);
  EXPECT_EQ(doc->n_scanned, 1);
  EXPECT_EQ(doc->n_ocr, 1);
  EXPECT_EQ(doc->n_chars, 5 + 28);
  EXPECT_EQ(query_int(lib->file(), "SELECT n_ocr FROM documents WHERE id = " + std::to_string(*id)),
            1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM pages"), 3);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM chats"), 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM messages"), 1);
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM part_answers"), 0);
  auto narwhal = lib->search("narwhal");
  ASSERT_TRUE(narwhal.ok());
  ASSERT_EQ(narwhal->size(), 1u);
  EXPECT_EQ((*narwhal)[0].doc_id, *id);
  EXPECT_EQ((*narwhal)[0].page_no, 2);
  // Page 1's old word is gone from the index; the other document's is not.
  auto walrus = lib->search("walrus");
  ASSERT_TRUE(walrus.ok());
  ASSERT_EQ(walrus->size(), 2u);
  EXPECT_TRUE(lib->search("cover walrus")->size() == 0u);

  auto bad = lib->replace_pages(*id, {page(2, "misnumbered")});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(lib->pages(*id)->size(), 2u) << "a failed replacement changes nothing";
  auto missing = lib->replace_pages(*other + 5, {page(1, "x")});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "no document with id " + std::to_string(*other + 5));
}

TEST(LibrarySearch, FindsTheRightPageWithAHighlightedSnippet) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto a = lib->add_document(doc_with_sha("a"), {page(1, "The cat sat on the mat."),
                                                 page(2, "Termination of the agreement by notice."),
                                                 page(3, "Nothing here.")});
  auto b = lib->add_document(doc_with_sha("b"), {page(1, "Café résumé, price-determining terms.")});
  ASSERT_TRUE(a.ok() && b.ok());
  auto hits = lib->search("termination notice");
  ASSERT_TRUE(hits.ok()) << hits.error().message;
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].doc_id, *a);
  EXPECT_EQ((*hits)[0].page_no, 2);
  EXPECT_EQ((*hits)[0].title, "Doc a");
  EXPECT_EQ((*hits)[0].snippet, "**Termination** of the agreement by **notice**.");

  // Case and diacritics are ignored; FTS syntax in the query is plain text.
  auto cafe = lib->search("CAFE resume");
  ASSERT_TRUE(cafe.ok());
  ASSERT_EQ(cafe->size(), 1u);
  EXPECT_EQ((*cafe)[0].doc_id, *b);
  auto syntax = lib->search("price-determining \"terms");
  ASSERT_TRUE(syntax.ok()) << syntax.error().message;
  ASSERT_EQ(syntax->size(), 1u);
  auto op = lib->search("cat OR nothing");
  ASSERT_TRUE(op.ok()) << op.error().message;
  EXPECT_TRUE(op->empty());  // "OR" is a word to find, not an operator
  auto only_b = lib->search("the", 20, *b);
  ASSERT_TRUE(only_b.ok());
  EXPECT_TRUE(only_b->empty());
  auto nothing = lib->search("  !!  ");
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
}

TEST(LibraryStore, ChatsAndMessagesInOrder) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto d = lib->add_document(doc_with_sha("c"), {page(1, "x")});
  ASSERT_TRUE(d.ok());
  auto c1 = lib->create_chat(*d, "first");
  auto c2 = lib->create_chat(0, "free");
  ASSERT_TRUE(c1.ok() && c2.ok());
  ASSERT_TRUE(lib->add_message(*c1, "system", "be brief").ok());
  ASSERT_TRUE(lib->add_message(*c1, "user", "what?").ok());
  ASSERT_TRUE(lib->add_message(*c1, "assistant", "that [p. 1]", R"({"stopped":true})").ok());
  EXPECT_FALSE(lib->add_message(*c1, "robot", "x").ok());
  auto bad = lib->add_message(999, "user", "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "no chat with id 999");
  auto msgs = lib->messages(*c1);
  ASSERT_TRUE(msgs.ok());
  ASSERT_EQ(msgs->size(), 3u);
  EXPECT_EQ((*msgs)[0].role, "system");
  EXPECT_EQ((*msgs)[2].content, "that [p. 1]");
  EXPECT_EQ((*msgs)[2].meta, R"({"stopped":true})");
  EXPECT_EQ((*msgs)[1].meta, "");
  auto of_doc = lib->chats(*d);
  ASSERT_TRUE(of_doc.ok());
  ASSERT_EQ(of_doc->size(), 1u);
  EXPECT_EQ((*of_doc)[0].title, "first");
  auto all = lib->chats();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_FALSE(lib->create_chat(12345, "no such doc").ok());
}

TEST(LibraryStore, SettingsOverwrite) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  auto none = lib->setting("model");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(lib->set_setting("model", "a.gguf"));
  ASSERT_TRUE(lib->set_setting("model", "b.gguf"));
  auto v = lib->setting("model");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or(""), "b.gguf");
  EXPECT_EQ(query_int(lib->file(), "SELECT count(*) FROM settings"), 1);
}

TEST(LibraryStore, SnapshotsUpsertOnFingerprintAndPrefixWithFullU64) {
  TempDir tmp;
  auto lib = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(lib);
  const uint64_t fp = std::numeric_limits<uint64_t>::max() - 5;  // above INT64_MAX
  const uint64_t ph = 0x8000000000000001ull;
  auto none = lib->find_snapshot(fp, ph);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  SnapshotRecord r;
  r.model_fingerprint = fp;
  r.prefix_hash = ph;
  r.path = "/cache/a.spwkv";
  r.size_bytes = 1234;
  r.n_tokens = 56;
  ASSERT_TRUE(lib->put_snapshot(r));
  r.path = "/cache/b.spwkv";
  r.size_bytes = 999;
  ASSERT_TRUE(lib->put_snapshot(r));
  SnapshotRecord other = r;
  other.prefix_hash = 7;
  ASSERT_TRUE(lib->put_snapshot(other));
  auto got = lib->find_snapshot(fp, ph);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->model_fingerprint, fp);
  EXPECT_EQ((*got)->prefix_hash, ph);
  EXPECT_EQ((*got)->path, "/cache/b.spwkv");
  EXPECT_EQ((*got)->size_bytes, 999);
  EXPECT_EQ((*got)->n_tokens, 56);
  EXPECT_GT((*got)->created, 0);
  auto all = lib->snapshots();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  ASSERT_TRUE(lib->remove_snapshot(fp, ph));
  auto after = lib->find_snapshot(fp, ph);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
  EXPECT_TRUE(lib->remove_snapshot(fp, ph));  // removing nothing is fine
}

TEST(LibraryStore, TwoConnectionsSeeEachOthersCommits) {
  TempDir tmp;
  auto a = open_ok(tmp / "lib.sqlite3");
  auto b = open_ok(tmp / "lib.sqlite3");
  ASSERT_TRUE(a && b);
  auto id = a->add_document(doc_with_sha("x"), {page(1, "shared")});
  ASSERT_TRUE(id.ok());
  auto d = b->document(*id);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sha256, "x");
}

}  // namespace
}  // namespace spw::app
