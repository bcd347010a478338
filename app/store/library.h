// The document library: one SQLite database (<data_dir>/library.sqlite3) holding documents, their
// pages (original and normalised text), an FTS5 index over the normalised page text, chats and
// messages, settings and KV snapshot records.
//
// Threading: a Library is one SQLite connection; use it from the thread that opened it only
// ("one connection per thread"). Several Library objects (threads, processes) may open the
// same file: WAL mode lets readers run beside the one writer; a writer waits up to 5 s for
// another's transaction (busy timeout) before failing.
//
// Schema: PRAGMA user_version counts the applied migrations (resources/migrations/NNN_*.sql,
// compiled in); open() applies the missing ones, each in its own transaction, and refuses a
// database written by a newer Spillway (user_version above the known migrations).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/common/expected.h"

struct sqlite3;

namespace spw::app {

/// One page of a document. Text is UTF-8; byte offsets index `text` (the normalised text).
struct PageRecord {
  int page_no = 0;            // 1-based
  std::string original_text;  // as extracted, in reading order (display, citation offsets)
  std::string text;           // normalised: what the model and search see
  bool scanned = false;       // no text layer (an image); with ocr the text came from OCR
  bool ocr = false;           // text produced by tesseract
  bool undecodable = false;   // the text layer is garbage ((cid:N), private-use): never fed
  std::vector<std::pair<int64_t, int64_t>> boilerplate;  // [begin,end) byte ranges of running
                                                         // headers/footers in text
};

/// One document (one PDF file, identified by the sha256 of its bytes).
struct DocumentRecord {
  int64_t id = 0;
  std::string title;   // PDF Title, else the file name without extension (as ingest read it)
  std::string path;    // absolute path at ingest time (informational; the file may move)
  std::string sha256;  // lowercase hex of the file's bytes
  int n_pages = 0;
  int64_t n_chars = 0;  // Unicode code points of the normalised text, all pages
  bool encrypted = false;
  bool repaired = false;  // poppler had to reconstruct a damaged file
  int n_scanned = 0;      // pages without a text layer (OCR'd or not)
  // Added beyond the first contract:
  int n_ocr = 0;             // scanned pages whose text came from OCR
  int n_undecodable = 0;     // pages flagged undecodable
  bool no_text = false;      // no page has usable text (all scanned without OCR / undecodable):
                             // the document must never be answered from
  int64_t added_at = 0;      // unix seconds
  std::string custom_title;  // the name a user gave it (Library::rename_document); "" : none
  bool answer_over_parts = false;  // "always answer this document over parts": questions go
                                   // straight to map-reduce (Library::set_answer_over_parts)

  /// The title the document is shown under: the user's name for it, else the PDF's title
  /// cleaned (display_title.h).
  std::string shown_title() const;
};

/// The longest name Library::rename_document takes, in characters (code points).
inline constexpr int64_t kMaxDocumentName = 300;

/// A saved KV snapshot (the file is written by the engine; this is its index entry).
struct SnapshotRecord {
  int64_t id = 0;
  uint64_t model_fingerprint = 0;
  uint64_t prefix_hash = 0;
  std::string path;  // the snapshot file
  int64_t size_bytes = 0;
  int64_t n_tokens = 0;
  int64_t created = 0;       // unix seconds; set by put_snapshot when 0
  int64_t last_used_ms = 0;  // unix milliseconds of the last restore or write; put_snapshot
                             // sets it to now when 0
};

/// A finished map-reduce part's answer (resources/migrations/008_part_answers.sql).
struct PartAnswerRecord {
  uint64_t model_fingerprint = 0;
  uint64_t answer_key = 0;  // app/ask/ask.h part_answer_key
  int64_t doc_id = 0;
  int part = 0, n_parts = 0;  // 1-based
  int first_page = 0, last_page = 0;
  std::string answer;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  std::string stopped;  // why its generation ended early, or empty
  int64_t created = 0;  // unix seconds; set by put_part_answer when 0
};

/// One FTS hit: a page of a document.
struct SearchHit {
  int64_t doc_id = 0;
  std::string title;  // as shown (display_title.h), not the PDF's own
  int page_no = 0;
  std::string snippet;  // a few words around the match, matches wrapped in kHighlightOpen/Close
  double rank = 0;      // bm25 (lower is better); hits come best first
};
inline constexpr const char* kHighlightOpen = "**";
inline constexpr const char* kHighlightClose = "**";

struct ChatRecord {
  int64_t id = 0;
  int64_t doc_id = 0;  // 0: not tied to a document
  std::string title;
  int64_t created = 0;  // unix seconds
};

struct MessageRecord {
  int64_t id = 0;
  int64_t chat_id = 0;
  std::string role;     // "system" | "user" | "assistant"
  std::string content;  // UTF-8
  int64_t created = 0;  // unix seconds
  std::string meta;     // how an answer was made, a JSON object (the app's); "" for none
};

/// The library database file inside a data folder: <data_dir>/library.sqlite3.
std::filesystem::path library_db_file(const std::filesystem::path& data_dir);

/// A read-only SQLite connection to the existing database `db_file` (foreign keys on, a busy
/// timeout of `busy_timeout_ms`). A WAL database needs its -shm file to be read; where that file
/// cannot be made (a read-only folder, a full disk) and no write-ahead log is pending (no -wal
/// file, or an empty one: everything is in the main file), the file is opened immutable, which
/// reads it without any lock file. Errors name the file.
Expected<sqlite3*> open_read_only_connection(const std::filesystem::path& db_file,
                                             int busy_timeout_ms);

class Library final {
 public:
  /// Opens (creating if missing) the database at `db_file`, sets WAL mode and foreign keys, and
  /// migrates it to the newest schema. The parent folder must exist. Errors name the file.
  static Expected<std::unique_ptr<Library>> open(const std::filesystem::path& db_file);
  /// Opens an existing database for reading only (open_read_only_connection): nothing is
  /// created, migrated or written, so it works on a read-only folder or a full disk. Writes
  /// through it fail. Errors: no such file, a schema this build cannot read without migrating
  /// (older or newer), and SQLite's, each naming the file.
  static Expected<std::unique_ptr<Library>> open_read_only(const std::filesystem::path& db_file);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  /// The schema version (PRAGMA user_version) after open().
  int schema_version() const { return schema_version_; }

  // --- documents and pages -------------------------------------------------------------

  /// All documents, by id ascending.
  Expected<std::vector<DocumentRecord>> documents();
  /// One document; error "no document with id N" when there is none.
  Expected<DocumentRecord> document(int64_t id);
  /// The id of the document whose file bytes hash to `sha256` (lowercase hex), if any.
  Expected<std::optional<int64_t>> find_document_by_sha256(const std::string& sha256);
  /// All pages of a document, in page order (1..n_pages). Error "no document with id N".
  Expected<std::vector<PageRecord>> pages(int64_t doc_id);
  /// One page; error "no document with id N" or "document N has no page P (it has M pages)".
  Expected<PageRecord> page(int64_t doc_id, int page_no);

  /// Called after each page row is written inside add_document's transaction (tests use it to
  /// kill the process mid-transaction). May be empty.
  using PageStoredHook = void (*)(int page_no, void* user);
  /// Stores a document and its pages in ONE transaction (all or nothing) and returns the new
  /// id. `doc.id`, `doc.added_at` are ignored (assigned here); n_pages/n_chars/n_scanned/n_ocr/
  /// n_undecodable/no_text are recomputed from `pages`. Pages must be numbered 1..N in order.
  /// Fails (storing nothing) when a document with the same sha256 exists.
  Expected<int64_t> add_document(const DocumentRecord& doc, const std::vector<PageRecord>& pages,
                                 PageStoredHook hook = nullptr, void* hook_user = nullptr);
  /// Removes a document, its pages, index entries and chats (one transaction).
  /// Error "no document with id N".
  Status remove_document(int64_t id);
  /// Re-reads a document in place (OCR of its scanned pages): its pages and their index entries
  /// are replaced by `pages` (numbered 1..N) and its counts recomputed, in one transaction; its
  /// id, title, name, path, file hash, chats and jobs stay. Its stored map-reduce part answers
  /// go (they answered the old text). Returns the document as stored now. Errors: "no document
  /// with id N", misnumbered pages, SQLite's (nothing changed).
  Expected<DocumentRecord> replace_pages(int64_t id, const std::vector<PageRecord>& pages,
                                         PageStoredHook hook = nullptr, void* hook_user = nullptr);
  /// Gives a document the name `name` (UTF-8; whitespace runs become one space, the ends are
  /// trimmed). An empty name, or the cleaned title itself, goes back to the cleaned title.
  /// The PDF's own title is kept either way. Errors: "no document with id N", a name longer
  /// than kMaxDocumentName characters (with its length), SQLite's.
  Status rename_document(int64_t id, std::string_view name);
  /// Remembers whether questions on a document are always answered over parts (map-reduce)
  /// without the planner's verdict asking first (DocumentRecord::answer_over_parts). Kept when
  /// its pages are replaced; gone with the document. Errors: "no document with id N", SQLite's.
  Status set_answer_over_parts(int64_t id, bool always);

  /// Full-text search over the normalised page text. The query is taken as words (all must
  /// occur on the page, any order, case- and diacritic-insensitive; FTS syntax is not
  /// interpreted). `doc_id` 0: all documents. Best hits first, at most `limit`.
  Expected<std::vector<SearchHit>> search(const std::string& query, int limit = 20,
                                          int64_t doc_id = 0);

  // --- chats and messages --------------------------------------------------------------

  /// A new chat (doc_id 0: none). Returns its id.
  Expected<int64_t> create_chat(int64_t doc_id, const std::string& title);
  /// Chats of a document (doc_id 0: all chats), newest first.
  Expected<std::vector<ChatRecord>> chats(int64_t doc_id = 0);
  /// Appends a message (`meta`: MessageRecord::meta); returns its id. Error "no chat with id N".
  Expected<int64_t> add_message(int64_t chat_id, const std::string& role,
                                const std::string& content, const std::string& meta = {});
  /// Messages of a chat, oldest first.
  Expected<std::vector<MessageRecord>> messages(int64_t chat_id);

  // --- settings (key -> UTF-8 value) ---------------------------------------------------

  Expected<std::optional<std::string>> setting(const std::string& key);
  Status set_setting(const std::string& key, const std::string& value);

  // --- KV snapshots --------------------------------------------------------------------

  /// The snapshot record for (fingerprint, prefix hash), if any. The file itself is not
  /// checked; a caller that finds it missing or rejected should remove_snapshot().
  Expected<std::optional<SnapshotRecord>> find_snapshot(uint64_t model_fingerprint,
                                                        uint64_t prefix_hash);
  /// Inserts, or replaces the record with the same (model_fingerprint, prefix_hash).
  Status put_snapshot(const SnapshotRecord& r);
  /// Removes the record for (fingerprint, prefix hash); no error when there is none.
  Status remove_snapshot(uint64_t model_fingerprint, uint64_t prefix_hash);
  /// All snapshot records, oldest first.
  Expected<std::vector<SnapshotRecord>> snapshots();
  /// Records a use (a restore) of the snapshot now: the budget evicts the least recently used
  /// first. No error when there is no such record.
  Status touch_snapshot(uint64_t model_fingerprint, uint64_t prefix_hash);

  // --- map-reduce parts' answers ------------------------------------------------------

  /// The stored answer of (fingerprint, answer key), if any.
  Expected<std::optional<PartAnswerRecord>> find_part_answer(uint64_t model_fingerprint,
                                                             uint64_t answer_key);
  /// Inserts, or replaces the record with the same (model_fingerprint, answer_key).
  Status put_part_answer(const PartAnswerRecord& r);
  /// The stored part answers of a document, by part then age.
  Expected<std::vector<PartAnswerRecord>> part_answers(int64_t doc_id);

  // --- low level -----------------------------------------------------------------------

  /// The database file this library was opened on.
  const std::filesystem::path& file() const { return file_; }
  /// Runs SQL without results (tests, maintenance). Errors carry SQLite's message.
  Status exec(const std::string& sql);

 private:
  Library(sqlite3* db, std::filesystem::path file) : db_(db), file_(std::move(file)) {}
  Status migrate();

  sqlite3* db_ = nullptr;
  std::filesystem::path file_;
  int schema_version_ = 0;
};

}  // namespace spw::app
