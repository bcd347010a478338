#include "app/store/library.h"

#include "app/store/display_title.h"

#include <sqlite3.h>

#include <bit>
#include <cassert>
#include <chrono>
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
    "n_undecodable, no_text, added_at FROM documents ORDER BY id";
constexpr std::string_view kSelectDocument =
    "SELECT id, title, path, sha256, n_pages, n_chars, encrypted, repaired, n_scanned, n_ocr, "
    "n_undecodable, no_text, added_at FROM documents WHERE id = ?1";
constexpr std::string_view kSelectDocumentBySha = "SELECT id FROM documents WHERE sha256 = ?1";
constexpr std::string_view kInsertDocument =
    "INSERT INTO documents (id, title, path, sha256, n_pages, n_chars, encrypted, repaired, "
    "n_scanned, n_ocr, n_undecodable, no_text, added_at) "
    "VALUES ((SELECT id + 1 FROM document_id_high_water), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "?10, ?11, ?12)";
constexpr std::string_view kDeleteDocument = "DELETE FROM documents WHERE id = ?1";
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
    "snippet(pages_fts, 0, ?2, ?3, '…', 16), bm25(pages_fts) AS rank, d.path "
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

constexpr std::string_view kSelectSnapshot =
    "SELECT id, model_fingerprint, prefix_hash, path, size_bytes, n_tokens, created, "
    "last_used_ms FROM kv_snapshots WHERE model_fingerprint = ?1 AND prefix_hash = ?2";
constexpr std::string_view kSelectSnapshots =
    "SELECT id, model_fingerprint, prefix_hash, path, size_bytes, n_tokens, created, "
    "last_used_ms FROM kv_snapshots ORDER BY created, id";
constexpr std::string_view kUpsertSnapshot =
    "INSERT INTO kv_snapshots (model_fingerprint, prefix_hash, path, size_bytes, n_tokens, "
    "created, last_used_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
    "ON CONFLICT (model_fingerprint, prefix_hash) DO UPDATE SET path = excluded.path, "
    "size_bytes = excluded.size_bytes, n_tokens = excluded.n_tokens, created = excluded.created, "
    "last_used_ms = excluded.last_used_ms";
constexpr std::string_view kTouchSnapshot =
    "UPDATE kv_snapshots SET last_used_ms = ?3 WHERE model_fingerprint = ?1 AND prefix_hash = ?2";
constexpr std::string_view kDeleteSnapshot =
    "DELETE FROM kv_snapshots WHERE model_fingerprint = ?1 AND prefix_hash = ?2";

constexpr std::string_view kSelectPartAnswer =
    "SELECT model_fingerprint, answer_key, doc_id, part, n_parts, first_page, last_page, answer, "
    "prompt_tokens, generated_tokens, stopped, created FROM part_answers "
    "WHERE model_fingerprint = ?1 AND answer_key = ?2";
constexpr std::string_view kSelectPartAnswers =
    "SELECT model_fingerprint, answer_key, doc_id, part, n_parts, first_page, last_page, answer, "
    "prompt_tokens, generated_tokens, stopped, created FROM part_answers WHERE doc_id = ?1 "
    "ORDER BY part, created, id";
constexpr std::string_view kUpsertPartAnswer =
    "INSERT INTO part_answers (model_fingerprint, answer_key, doc_id, part, n_parts, first_page, "
    "last_page, answer, prompt_tokens, generated_tokens, stopped, created) VALUES (?1, ?2, ?3, "
    "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT (model_fingerprint, answer_key) DO "
    "UPDATE SET doc_id = excluded.doc_id, part = excluded.part, n_parts = excluded.n_parts, "
    "first_page = excluded.first_page, last_page = excluded.last_page, answer = excluded.answer, "
    "prompt_tokens = excluded.prompt_tokens, generated_tokens = excluded.generated_tokens, "
    "stopped = excluded.stopped, created = excluded.created";

// -------------------------------------------------------------------------------------------

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t now_milliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// SQLite integers are signed 64-bit; u64 hashes are stored bit for bit.
int64_t to_db(uint64_t v) { return std::bit_cast<int64_t>(v); }
uint64_t from_db(int64_t v) { return std::bit_cast<uint64_t>(v); }

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

SnapshotRecord read_snapshot(const Stmt& s) {
  SnapshotRecord r;
  r.id = s.i64(0);
  r.model_fingerprint = from_db(s.i64(1));
  r.prefix_hash = from_db(s.i64(2));
  r.path = s.text(3);
  r.size_bytes = s.i64(4);
  r.n_tokens = s.i64(5);
  r.created = s.i64(6);
  r.last_used_ms = s.i64(7);
  return r;
}

PartAnswerRecord read_part_answer(const Stmt& s) {
  PartAnswerRecord r;
  r.model_fingerprint = from_db(s.i64(0));
  r.answer_key = from_db(s.i64(1));
  r.doc_id = s.i64(2);
  r.part = static_cast<int>(s.i64(3));
  r.n_parts = static_cast<int>(s.i64(4));
  r.first_page = static_cast<int>(s.i64(5));
  r.last_page = static_cast<int>(s.i64(6));
  r.answer = s.text(7);
  r.prompt_tokens = s.i64(8);
  r.generated_tokens = s.i64(9);
  r.stopped = s.text(10);
  r.created = s.i64(11);
  return r;
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

}  // namespace

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
  d.added_at = now_seconds();

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

  for (const PageRecord& p : pages) {
    auto st = Stmt::prepare(db_, kInsertPage);
    if (!st) return st.error();
    st->bind(1, id).bind(2, p.page_no).bind(3, p.original_text).bind(4, p.text);
    st->bind(5, p.scanned).bind(6, p.ocr).bind(7, p.undecodable);
    st->bind(8, encode_ranges(p.boilerplate));
    if (auto s = st->run(); !s) return s.error();
    if (hook) hook(p.page_no, hook_user);
  }
  if (auto s = tx.commit(); !s) return s.error();
  return id;
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
    h.title = display_title(st->text(1), st->text(5));
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
  st->bind(2, title).bind(3, now_seconds());
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
  st->bind(1, chat_id).bind(2, role).bind(3, content).bind(4, now_seconds()).bind(5, meta);
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

// ---- snapshots ----------------------------------------------------------------------------

Expected<std::optional<SnapshotRecord>> Library::find_snapshot(uint64_t model_fingerprint,
                                                               uint64_t prefix_hash) {
  auto st = Stmt::prepare(db_, kSelectSnapshot);
  if (!st) return st.error();
  st->bind(1, to_db(model_fingerprint)).bind(2, to_db(prefix_hash));
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<SnapshotRecord>();
  return std::optional<SnapshotRecord>(read_snapshot(*st));
}

Status Library::put_snapshot(const SnapshotRecord& r) {
  auto st = Stmt::prepare(db_, kUpsertSnapshot);
  if (!st) return st.error();
  st->bind(1, to_db(r.model_fingerprint)).bind(2, to_db(r.prefix_hash)).bind(3, r.path);
  st->bind(4, r.size_bytes).bind(5, r.n_tokens).bind(6, r.created ? r.created : now_seconds());
  st->bind(7, r.last_used_ms ? r.last_used_ms : now_milliseconds());
  return st->run();
}

Status Library::touch_snapshot(uint64_t model_fingerprint, uint64_t prefix_hash) {
  auto st = Stmt::prepare(db_, kTouchSnapshot);
  if (!st) return st.error();
  st->bind(1, to_db(model_fingerprint)).bind(2, to_db(prefix_hash)).bind(3, now_milliseconds());
  return st->run();
}

Status Library::remove_snapshot(uint64_t model_fingerprint, uint64_t prefix_hash) {
  auto st = Stmt::prepare(db_, kDeleteSnapshot);
  if (!st) return st.error();
  st->bind(1, to_db(model_fingerprint)).bind(2, to_db(prefix_hash));
  return st->run();
}

Expected<std::vector<SnapshotRecord>> Library::snapshots() {
  auto st = Stmt::prepare(db_, kSelectSnapshots);
  if (!st) return st.error();
  std::vector<SnapshotRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(read_snapshot(*st));
  }
  return out;
}

// ---- map-reduce parts' answers ------------------------------------------------------------

Expected<std::optional<PartAnswerRecord>> Library::find_part_answer(uint64_t model_fingerprint,
                                                                    uint64_t answer_key) {
  auto st = Stmt::prepare(db_, kSelectPartAnswer);
  if (!st) return st.error();
  st->bind(1, to_db(model_fingerprint)).bind(2, to_db(answer_key));
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<PartAnswerRecord>();
  return std::optional<PartAnswerRecord>(read_part_answer(*st));
}

Status Library::put_part_answer(const PartAnswerRecord& r) {
  auto st = Stmt::prepare(db_, kUpsertPartAnswer);
  if (!st) return st.error();
  st->bind(1, to_db(r.model_fingerprint)).bind(2, to_db(r.answer_key)).bind(3, r.doc_id);
  st->bind(4, static_cast<int64_t>(r.part)).bind(5, static_cast<int64_t>(r.n_parts));
  st->bind(6, static_cast<int64_t>(r.first_page)).bind(7, static_cast<int64_t>(r.last_page));
  st->bind(8, r.answer).bind(9, r.prompt_tokens).bind(10, r.generated_tokens).bind(11, r.stopped);
  st->bind(12, r.created ? r.created : now_seconds());
  return st->run();
}

Expected<std::vector<PartAnswerRecord>> Library::part_answers(int64_t doc_id) {
  auto st = Stmt::prepare(db_, kSelectPartAnswers);
  if (!st) return st.error();
  st->bind(1, doc_id);
  std::vector<PartAnswerRecord> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    out.push_back(read_part_answer(*st));
  }
  return out;
}

}  // namespace spw::app
