#include "app/store/library.h"

#include "app/store/display_title.h"

#include <sqlite3.h>

#include <cassert>
#include <string_view>

#include "app/store/migrations.h"
#include "app/store/search_tokenizer.h"
#include "app/store/sqlite_stmt.h"

namespace spw::app {
namespace {

using sql::Stmt;

// ---- SQL, one named constant per statement ------------------------------------------------

constexpr const char* kPragmas =
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;";
constexpr std::string_view kUserVersion = "PRAGMA user_version";

constexpr std::string_view kSelectDocuments =
    "SELECT id, title, path, sha256, n_pages, n_chars, encrypted, repaired, n_scanned, n_ocr, "
    "n_undecodable, no_text, added_at, custom_title, answer_over_parts FROM documents ORDER BY id";
constexpr std::string_view kSelectDocument =
    "SELECT id, title, path, sha256, n_pages, n_chars, encrypted, repaired, n_scanned, n_ocr, "
    "n_undecodable, no_text, added_at, custom_title, answer_over_parts FROM documents WHERE id = "
    "?1";
constexpr std::string_view kSelectDocumentBySha = "SELECT id FROM documents WHERE sha256 = ?1";
constexpr std::string_view kInsertDocument =
    "INSERT INTO documents (id, title, path, sha256, n_pages, n_chars, encrypted, repaired, "
    "n_scanned, n_ocr, n_undecodable, no_text, added_at) "
    "VALUES ((SELECT id + 1 FROM document_id_high_water), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "?10, ?11, ?12)";
constexpr std::string_view kDeleteDocument = "DELETE FROM documents WHERE id = ?1";
constexpr std::string_view kRenameDocument = "UPDATE documents SET custom_title = ?2 WHERE id = ?1";
constexpr std::string_view kSetAnswerOverParts =
    "UPDATE documents SET answer_over_parts = ?2 WHERE id = ?1";
constexpr std::string_view kUpdateDocumentCounts =
    "UPDATE documents SET n_pages = ?2, n_chars = ?3, n_scanned = ?4, n_ocr = ?5, "
    "n_undecodable = ?6, no_text = ?7 WHERE id = ?1";
constexpr std::string_view kDeletePartAnswersOfDocument =
    "DELETE FROM part_answers WHERE doc_id = ?1";
constexpr std::string_view kDeletePages = "DELETE FROM pages WHERE doc_id = ?1";
constexpr std::string_view kDeleteChatsOfDocument =
    "DELETE FROM chats WHERE doc_id = ?1";  // messages go by ON DELETE CASCADE

constexpr std::string_view kSelectPages =
    "SELECT page_no, original_text, text, scanned, ocr, undecodable, boilerplate "
    "FROM pages WHERE doc_id = ?1 ORDER BY page_no";
constexpr std::string_view kSelectPage =
    "SELECT page_no, original_text, text, scanned, ocr, undecodable, boilerplate "
    "FROM pages WHERE doc_id = ?1 AND page_no = ?2";
constexpr std::string_view kInsertPage =
    "INSERT INTO pages (doc_id, page_no, original_text, text, scanned, ocr, undecodable, "
    "boilerplate) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

// snippet(): column 0, highlight markers, ellipsis, about 16 tokens around the match.
constexpr std::string_view kSearch =
    "SELECT p.doc_id, d.title, p.page_no, "
    "snippet(pages_fts, 0, ?2, ?3, '…', 16), bm25(pages_fts) AS rank, d.path, d.custom_title "
    "FROM pages_fts JOIN pages p ON p.id = pages_fts.rowid JOIN documents d ON d.id = p.doc_id "
    "WHERE pages_fts MATCH ?1 AND (?4 = 0 OR p.doc_id = ?4) "
    "ORDER BY rank, p.doc_id, p.page_no LIMIT ?5";

constexpr std::string_view kInsertChat =
    "INSERT INTO chats (doc_id, title, created) VALUES (?1, ?2, ?3)";
constexpr std::string_view kSelectChats =
    "SELECT id, COALESCE(doc_id, 0), title, created FROM chats "
    "WHERE ?1 = 0 OR doc_id = ?1 ORDER BY created DESC, id DESC";
constexpr std::string_view kSelectChatExists = "SELECT 1 FROM chats WHERE id = ?1";
constexpr std::string_view kInsertMessage =
    "INSERT INTO messages (chat_id, role, content, created, meta) VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr std::string_view kSelectMessages =
    "SELECT id, chat_id, role, content, created, meta FROM messages WHERE chat_id = ?1 ORDER BY id";

constexpr std::string_view kSelectSetting = "SELECT value FROM settings WHERE key = ?1";
constexpr std::string_view kUpsertSetting =
    "INSERT INTO settings (key, value) VALUES (?1, ?2) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";

// -------------------------------------------------------------------------------------------

DocumentRecord read_document(const Stmt& s) {
  DocumentRecord d;
  d.id = s.i64(0);
  d.title = s.text(1);
  d.path = s.text(2);
  d.sha256 = s.text(3);
  d.n_pages = s.i32(4);
  d.n_chars = s.i64(5);
  d.encrypted = s.flag(6);
  d.repaired = s.flag(7);
  d.n_scanned = s.i32(8);
  d.n_ocr = s.i32(9);
  d.n_undecodable = s.i32(10);
  d.no_text = s.flag(11);
  d.added_at = s.i64(12);
  d.custom_title = s.text(13);
  d.answer_over_parts = s.flag(14);
  return d;
}

// Boilerplate ranges as "b-e,b-e".
std::string encode_ranges(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::string out;
  for (const auto& [b, e] : ranges) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}-{}", b, e);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> decode_ranges(std::string_view s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    const size_t dash = item.find('-');
    if (dash != std::string_view::npos) {
      try {
        out.emplace_back(std::stoll(std::string(item.substr(0, dash))),
                         std::stoll(std::string(item.substr(dash + 1))));
      } catch (const std::exception&) {  // a hand-edited database: skip the item
      }
    }
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

PageRecord read_page(const Stmt& s) {
  PageRecord p;
  p.page_no = s.i32(0);
  p.original_text = s.text(1);
  p.text = s.text(2);
  p.scanned = s.flag(3);
  p.ocr = s.flag(4);
  p.undecodable = s.flag(5);
  p.boilerplate = decode_ranges(s.text(6));
  return p;
}

// Words of a user query as an FTS5 expression: each word a quoted string (so '-', ':', '*' and
// keywords like OR are plain text), all required. Empty when the query has no word characters.
std::string fts_query(std::string_view q) {
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    if (!out.empty()) out += ' ';
    out += '"' + word + '"';
    word.clear();
  };
  for (const char c : q) {
    const auto u = static_cast<unsigned char>(c);
    // Bytes >= 0x80 belong to UTF-8 sequences: letters of other scripts are word characters.
    if (u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
        c == '_') {
      word += c;
    } else {
      flush();
    }
  }
  flush();
  return out;
}

int64_t count_code_points(std::string_view s) {
  int64_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The document's counts (n_pages, n_chars, n_scanned, n_ocr, n_undecodable, no_text) from its
// pages, into `d`; an error when the pages are not numbered 1..N.
Status count_pages(const std::vector<PageRecord>& pages, DocumentRecord& d) {
  d.n_pages = static_cast<int>(pages.size());
  d.n_chars = 0;
  d.n_scanned = d.n_ocr = d.n_undecodable = 0;
  bool any_text = false;
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageRecord& p = pages[i];
    if (p.page_no != static_cast<int>(i) + 1)
      return make_error("page {} stored as number {} (pages must be numbered 1..N)", i + 1,
                        p.page_no);
    d.n_chars += count_code_points(p.text);
    d.n_scanned += p.scanned;
    d.n_ocr += p.ocr;
    d.n_undecodable += p.undecodable;
    any_text |= !p.undecodable && p.text.find_first_not_of(" \t\r\n") != std::string::npos;
  }
  d.no_text = !any_text;
  return Status::Ok();
}

Status insert_pages(sqlite3* db, int64_t doc_id, const std::vector<PageRecord>& pages,
                    Library::PageStoredHook hook, void* hook_user) {
  for (const PageRecord& p : pages) {
    auto st = Stmt::prepare(db, kInsertPage);
    if (!st) return st.error();
    st->bind(1, doc_id).bind(2, p.page_no).bind(3, p.original_text).bind(4, p.text);
    st->bind(5, p.scanned).bind(6, p.ocr).bind(7, p.undecodable);
    st->bind(8, encode_ranges(p.boilerplate));
    if (auto s = st->run(); !s) return s;
    if (hook) hook(p.page_no, hook_user);
  }
  return Status::Ok();
}

// A name as stored: runs of whitespace (line breaks, tabs) one space, the ends trimmed.
std::string tidy_name(std::string_view name) {
  std::string out;
  bool space = false;
  for (const char c : name) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      space = !out.empty();
    } else {
      if (space) out += ' ';
      space = false;
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string DocumentRecord::shown_title() const {
  return custom_title.empty() ? display_title(title, path) : custom_title;
}

std::filesystem::path library_db_file(const std::filesystem::path& data_dir) {
  return data_dir / "library.sqlite3";
}

Expected<std::unique_ptr<Library>> Library::open(const std::filesystem::path& db_file) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(db_file.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = make_error("cannot open the library database '{}': {}", db_file.string(),
                         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return e;
  }
  std::unique_ptr<Library> lib(new Library(db, db_file));
  sqlite3_busy_timeout(db, 5000);
  if (auto s = register_search_tokenizer(db); !s) {
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  if (auto s = sql::exec(db, kPragmas, "setting up the library database"); !s) {
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  if (auto s = lib->migrate(); !s) {
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  return lib;
}

namespace {

// A file: URI for sqlite3_open_v2 (characters URIs give meaning to percent-encoded).
std::string file_uri(const std::filesystem::path& file, std::string_view query) {
  std::string out = "file:";
  for (const char c : file.string()) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '%' || c == '?' || c == '#' || u < 0x20 || u == 0x7f) {
      out += fmt::format("%{:02X}", u);
    } else {
      out += c;
    }
  }
  return out + "?" + std::string(query);
}

Expected<sqlite3*> open_uri(const std::string& uri, const std::filesystem::path& file) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = make_error("cannot open the library database '{}': {}", file.string(),
                         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return e;
  }
  return db;
}

// The first read of a WAL database maps its -shm file: it fails here when that file cannot be
// made.
Status first_read(sqlite3* db) {
  auto st = Stmt::prepare(db, "SELECT COUNT(*) FROM sqlite_master");
  if (!st) return st.error();
  auto row = st->step();
  if (!row) return row.error();
  return Status::Ok();
}

}  // namespace

Expected<sqlite3*> open_read_only_connection(const std::filesystem::path& db_file,
                                             int busy_timeout_ms) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(db_file, ec))
    return make_error("there is no library database '{}'", db_file.string());
  auto db = open_uri(file_uri(db_file, "mode=ro"), db_file);
  if (!db) return db.error();
  sqlite3_busy_timeout(*db, busy_timeout_ms);
  Status st = first_read(*db);
  if (!st) {
    const int code = sqlite3_errcode(*db) & 0xff;
    sqlite3_close(*db);
    std::filesystem::path wal = db_file;
    wal += "-wal";
    const auto wal_bytes = std::filesystem::file_size(wal, ec);
    const bool wal_pending = !ec && wal_bytes > 0;
    if (wal_pending || code == SQLITE_BUSY || code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
      return make_error("library database '{}': {}", db_file.string(), st.error().message);
    // Nothing waits in a write-ahead log: the main file holds the whole database.
    db = open_uri(file_uri(db_file, "mode=ro&immutable=1"), db_file);
    if (!db) return db.error();
    if (Status again = first_read(*db); !again) {
      sqlite3_close(*db);
      return make_error("library database '{}': {}", db_file.string(), again.error().message);
    }
  }
  if (auto s = sql::exec(*db, "PRAGMA foreign_keys = ON;", "setting up the library database"); !s) {
    sqlite3_close(*db);
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  return db;
}

Expected<std::unique_ptr<Library>> Library::open_read_only(const std::filesystem::path& db_file) {
  auto db = open_read_only_connection(db_file, 5000);
  if (!db) return db.error();
  std::unique_ptr<Library> lib(new Library(*db, db_file));
  if (auto s = register_search_tokenizer(*db); !s) {
    return make_error("library database '{}': {}", db_file.string(), s.error().message);
  }
  auto st = Stmt::prepare(*db, kUserVersion);
  if (!st) return make_error("library database '{}': {}", db_file.string(), st.error().message);
  auto row = st->step();
  if (!row) return make_error("library database '{}': {}", db_file.string(), row.error().message);
  const int version = st->i32(0);
  const int newest = static_cast<int>(migrations().size());
  if (version > newest) {
    return make_error(
        "library database '{}': schema version {} is newer than this Spillway knows ({}); "
        "update Spillway",
        db_file.string(), version, newest);
  }
  if (version < newest) {
    return make_error(
        "library database '{}' has schema version {} and this Spillway reads {}: it must be "
        "upgraded first, which needs a writable data folder (run any command that writes, such "
        "as `spillway-cli ingest`, once the folder is writable)",
        db_file.string(), version, newest);
  }
  lib->schema_version_ = version;
  return lib;
}

Library::~Library() { sqlite3_close(db_); }

Status Library::migrate() {
  auto read_version = [&]() -> Expected<int> {
    auto st = Stmt::prepare(db_, kUserVersion);
    if (!st) return st.error();
    auto row = st->step();
    if (!row) return row.error();
    return st->i32(0);
  };
  auto v = read_version();
  if (!v) return v.error();
  const auto all = migrations();
  const int newest = static_cast<int>(all.size());
  if (*v > newest) {
    return make_error("schema version {} is newer than this Spillway knows ({}); update Spillway",
                      *v, newest);
  }
  for (const Migration& m : all) {
    assert(m.version == static_cast<int>(&m - all.data()) + 1);
    if (m.version <= *v) continue;
    sql::Transaction tx(db_);
    if (auto s = tx.begin(); !s) return s;
    // Another process may have migrated between our read and BEGIN IMMEDIATE: re-check.
    auto again = read_version();
    if (!again) return again.error();
    if (*again >= m.version) continue;
    if (auto s = sql::exec(db_, m.sql, fmt::format("migration {:03}_{}", m.version, m.name)); !s)
      return s;
    const std::string set_version = fmt::format("PRAGMA user_version = {}", m.version);
    if (auto s = sql::exec(db_, set_version.c_str(), "setting the schema version"); !s) return s;
    if (auto s = tx.commit(); !s) return s;
  }
  schema_version_ = newest;
  return Status::Ok();
}

Status Library::exec(const std::string& sql_text) {
  return sql::exec(db_, sql_text.c_str(), "library");
}

// ---- documents ----------------------------------------------------------------------------

Expected<std::vector<DocumentRecord>> Library::documents() {
  auto st = Stmt::prepare(db_, kSelectDocuments);
  if (!st) return st.error();
  std::vector<DocumentRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(read_document(*st));
  }
  return out;
}

Expected<DocumentRecord> Library::document(int64_t id) {
  auto st = Stmt::prepare(db_, kSelectDocument);
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return make_error("no document with id {}", id);
  return read_document(*st);
}

Expected<std::optional<int64_t>> Library::find_document_by_sha256(const std::string& sha256) {
  auto st = Stmt::prepare(db_, kSelectDocumentBySha);
  if (!st) return st.error();
  st->bind(1, sha256);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<int64_t>();
  return std::optional<int64_t>(st->i64(0));
}

Expected<std::vector<PageRecord>> Library::pages(int64_t doc_id) {
  if (auto d = document(doc_id); !d) return d.error();
  auto st = Stmt::prepare(db_, kSelectPages);
  if (!st) return st.error();
  st->bind(1, doc_id);
  std::vector<PageRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(read_page(*st));
  }
  return out;
}

Expected<PageRecord> Library::page(int64_t doc_id, int page_no) {
  auto d = document(doc_id);
  if (!d) return d.error();
  auto st = Stmt::prepare(db_, kSelectPage);
  if (!st) return st.error();
  st->bind(1, doc_id).bind(2, page_no);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) {
    return make_error("document {} has no page {} (it has {} page{})", doc_id, page_no, d->n_pages,
                      d->n_pages == 1 ? "" : "s");
  }
  return read_page(*st);
}

Expected<int64_t> Library::add_document(const DocumentRecord& doc,
                                        const std::vector<PageRecord>& pages, PageStoredHook hook,
                                        void* hook_user) {
  DocumentRecord d = doc;
  if (Status st = count_pages(pages, d); !st) return st.error();
  d.added_at = sql::unix_seconds();

  sql::Transaction tx(db_);
  if (auto s = tx.begin(); !s) return s.error();
  {
    auto dup = find_document_by_sha256(d.sha256);
    if (!dup) return dup.error();
    if (*dup) return make_error("the library already has this file as document {}", **dup);
  }
  auto ins = Stmt::prepare(db_, kInsertDocument);
  if (!ins) return ins.error();
  ins->bind(1, d.title).bind(2, d.path).bind(3, d.sha256).bind(4, d.n_pages).bind(5, d.n_chars);
  ins->bind(6, d.encrypted).bind(7, d.repaired).bind(8, d.n_scanned).bind(9, d.n_ocr);
  ins->bind(10, d.n_undecodable).bind(11, d.no_text).bind(12, d.added_at);
  if (auto s = ins->run(); !s) return s.error();
  const int64_t id = sqlite3_last_insert_rowid(db_);
  if (auto s = insert_pages(db_, id, pages, hook, hook_user); !s) return s.error();
  if (auto s = tx.commit(); !s) return s.error();
  return id;
}

Expected<DocumentRecord> Library::replace_pages(int64_t id, const std::vector<PageRecord>& pages,
                                                PageStoredHook hook, void* hook_user) {
  auto d = document(id);
  if (!d) return d.error();
  if (Status st = count_pages(pages, *d); !st) return st.error();
  sql::Transaction tx(db_);
  if (auto s = tx.begin(); !s) return s.error();
  for (const std::string_view q : {kDeletePages, kDeletePartAnswersOfDocument}) {
    auto st = Stmt::prepare(db_, q);
    if (!st) return st.error();
    st->bind(1, id);
    if (auto s = st->run(); !s) return s.error();
  }
  auto up = Stmt::prepare(db_, kUpdateDocumentCounts);
  if (!up) return up.error();
  up->bind(1, id).bind(2, d->n_pages).bind(3, d->n_chars).bind(4, d->n_scanned);
  up->bind(5, d->n_ocr).bind(6, d->n_undecodable).bind(7, d->no_text);
  if (auto s = up->run(); !s) return s.error();
  if (auto s = insert_pages(db_, id, pages, hook, hook_user); !s) return s.error();
  if (auto s = tx.commit(); !s) return s.error();
  return d;
}

Status Library::rename_document(int64_t id, std::string_view name) {
  auto d = document(id);
  if (!d) return d.error();
  std::string stored = tidy_name(name);
  const int64_t n = count_code_points(stored);
  if (n > kMaxDocumentName) {
    return make_error("a document name is at most {} characters; this one has {}", kMaxDocumentName,
                      n);
  }
  // The cleaned title itself is no name of its own: the document keeps following it.
  if (stored == display_title(d->title, d->path)) stored.clear();
  auto st = Stmt::prepare(db_, kRenameDocument);
  if (!st) return st.error();
  st->bind(1, id).bind(2, stored);
  return st->run();
}

Status Library::set_answer_over_parts(int64_t id, bool always) {
  if (auto d = document(id); !d) return d.error();
  auto st = Stmt::prepare(db_, kSetAnswerOverParts);
  if (!st) return st.error();
  st->bind(1, id).bind(2, always);
  return st->run();
}

Status Library::remove_document(int64_t id) {
  if (auto d = document(id); !d) return d.error();
  sql::Transaction tx(db_);
  if (auto s = tx.begin(); !s) return s;
  for (const std::string_view q : {kDeleteChatsOfDocument, kDeletePages, kDeleteDocument}) {
    auto st = Stmt::prepare(db_, q);
    if (!st) return st.error();
    st->bind(1, id);
    if (auto s = st->run(); !s) return s;
  }
  return tx.commit();
}

Expected<std::vector<SearchHit>> Library::search(const std::string& query, int limit,
                                                 int64_t doc_id) {
  std::vector<SearchHit> out;
  const std::string match = fts_query(query);
  if (match.empty() || limit <= 0) return out;
  auto st = Stmt::prepare(db_, kSearch);
  if (!st) return st.error();
  st->bind(1, match).bind(2, kHighlightOpen).bind(3, kHighlightClose).bind(4, doc_id);
  st->bind(5, limit);
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    SearchHit h;
    h.doc_id = st->i64(0);
    h.title = st->text(6).empty() ? display_title(st->text(1), st->text(5)) : st->text(6);
    h.page_no = st->i32(2);
    h.snippet = st->text(3);
    h.rank = st->f64(4);
    out.push_back(std::move(h));
  }
  return out;
}

// ---- chats --------------------------------------------------------------------------------

Expected<int64_t> Library::create_chat(int64_t doc_id, const std::string& title) {
  if (doc_id != 0) {
    if (auto d = document(doc_id); !d) return d.error();
  }
  auto st = Stmt::prepare(db_, kInsertChat);
  if (!st) return st.error();
  if (doc_id == 0) {
    st->bind_null(1);
  } else {
    st->bind(1, doc_id);
  }
  st->bind(2, title).bind(3, sql::unix_seconds());
  if (auto s = st->run(); !s) return s.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Expected<std::vector<ChatRecord>> Library::chats(int64_t doc_id) {
  auto st = Stmt::prepare(db_, kSelectChats);
  if (!st) return st.error();
  st->bind(1, doc_id);
  std::vector<ChatRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(ChatRecord{st->i64(0), st->i64(1), st->text(2), st->i64(3)});
  }
  return out;
}

Expected<int64_t> Library::add_message(int64_t chat_id, const std::string& role,
                                       const std::string& content, const std::string& meta) {
  {
    auto st = Stmt::prepare(db_, kSelectChatExists);
    if (!st) return st.error();
    st->bind(1, chat_id);
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return make_error("no chat with id {}", chat_id);
  }
  if (role != "system" && role != "user" && role != "assistant")
    return make_error("message role '{}' is not one of system, user, assistant", role);
  auto st = Stmt::prepare(db_, kInsertMessage);
  if (!st) return st.error();
  st->bind(1, chat_id).bind(2, role).bind(3, content).bind(4, sql::unix_seconds()).bind(5, meta);
  if (auto s = st->run(); !s) return s.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Expected<std::vector<MessageRecord>> Library::messages(int64_t chat_id) {
  auto st = Stmt::prepare(db_, kSelectMessages);
  if (!st) return st.error();
  st->bind(1, chat_id);
  std::vector<MessageRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(
        MessageRecord{st->i64(0), st->i64(1), st->text(2), st->text(3), st->i64(4), st->text(5)});
  }
  return out;
}

// ---- settings -----------------------------------------------------------------------------

Expected<std::optional<std::string>> Library::setting(const std::string& key) {
  auto st = Stmt::prepare(db_, kSelectSetting);
  if (!st) return st.error();
  st->bind(1, key);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<std::string>();
  return std::optional<std::string>(st->text(0));
}

Status Library::set_setting(const std::string& key, const std::string& value) {
  auto st = Stmt::prepare(db_, kUpsertSetting);
  if (!st) return st.error();
  st->bind(1, key).bind(2, value);
  return st->run();
}

}  // namespace spw::app
