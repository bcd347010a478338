// The library's saved work: KV snapshot records and map-reduce part answers (library.h).
#include <sqlite3.h>

#include <string_view>

#include "app/store/library.h"
#include "app/store/sqlite_stmt.h"

namespace spw::app {
namespace {

using sql::from_db;
using sql::Stmt;
using sql::to_db;

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

}  // namespace

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
  st->bind(4, r.size_bytes)
      .bind(5, r.n_tokens)
      .bind(6, r.created ? r.created : sql::unix_seconds());
  st->bind(7, r.last_used_ms ? r.last_used_ms : sql::unix_milliseconds());
  return st->run();
}

Status Library::touch_snapshot(uint64_t model_fingerprint, uint64_t prefix_hash) {
  auto st = Stmt::prepare(db_, kTouchSnapshot);
  if (!st) return st.error();
  st->bind(1, to_db(model_fingerprint))
      .bind(2, to_db(prefix_hash))
      .bind(3, sql::unix_milliseconds());
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
  st->bind(12, r.created ? r.created : sql::unix_seconds());
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
