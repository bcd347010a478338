// A small RAII layer over the SQLite C API for app/store: prepared statements with typed binds
// and columns, and a transaction guard that rolls back unless committed. Internal to app/store.
#pragma once

#include <sqlite3.h>

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/common/expected.h"

namespace spw::app::sql {

/// "what: SQLite's message (code)".
Error db_error(sqlite3* db, std::string_view what);

/// One prepared statement. Bind indexes are 1-based, column indexes 0-based (SQLite's).
class Stmt final {
 public:
  Stmt() = default;
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt(Stmt&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }

  /// Prepares `sql` (one statement). Errors name the first words of the SQL.
  static Expected<Stmt> prepare(sqlite3* db, std::string_view sql);

  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, bool v) { return bind(i, static_cast<int64_t>(v ? 1 : 0)); }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Stmt& bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }

  /// Steps once: true when a row is ready, false when done; an error otherwise.
  Expected<bool> step();
  /// Steps to completion (a statement without rows).
  Status run();

  int64_t i64(int col) const { return sqlite3_column_int64(stmt_, col); }
  int i32(int col) const { return sqlite3_column_int(stmt_, col); }
  bool flag(int col) const { return sqlite3_column_int64(stmt_, col) != 0; }
  double f64(int col) const { return sqlite3_column_double(stmt_, col); }
  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

/// BEGIN IMMEDIATE on construction (begin() reports failure); ROLLBACK in the destructor unless
/// commit() succeeded. IMMEDIATE takes the write lock up front, so a busy database fails at
/// the start instead of halfway.
class Transaction final {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status begin();
  Status commit();

 private:
  sqlite3* db_;
  bool open_ = false;
};

/// Runs SQL text (one or more statements, no results).
Status exec(sqlite3* db, const char* sql, std::string_view what);

/// Now, as the library's rows store it: unix seconds / milliseconds.
int64_t unix_seconds();
int64_t unix_milliseconds();

/// SQLite integers are signed 64-bit; u64 hashes are stored bit for bit.
inline int64_t to_db(uint64_t v) { return std::bit_cast<int64_t>(v); }
inline uint64_t from_db(int64_t v) { return std::bit_cast<uint64_t>(v); }

}  // namespace spw::app::sql
