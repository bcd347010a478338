#include "app/store/sqlite_stmt.h"

#include <chrono>

namespace spw::app::sql {

Error db_error(sqlite3* db, std::string_view what) {
  return make_error("{}: {} ({})", what, sqlite3_errmsg(db), sqlite3_extended_errcode(db));
}

Expected<Stmt> Stmt::prepare(sqlite3* db, std::string_view sql_text) {
  Stmt s;
  s.db_ = db;
  if (sqlite3_prepare_v2(db, sql_text.data(), static_cast<int>(sql_text.size()), &s.stmt_,
                         nullptr) != SQLITE_OK) {
    return db_error(db, fmt::format("preparing '{}'", sql_text.substr(0, 40)));
  }
  return s;
}

Expected<bool> Stmt::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_error(db_,
                  fmt::format("running '{}'", std::string_view(sqlite3_sql(stmt_)).substr(0, 40)));
}

Status Stmt::run() {
  for (;;) {
    auto r = step();
    if (!r) return r.error();
    if (!*r) return Status::Ok();
  }
}

Status exec(sqlite3* db, const char* sql_text, std::string_view what) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql_text, nullptr, nullptr, &msg) != SQLITE_OK) {
    Error e = make_error("{}: {}", what, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return e;
  }
  return Status::Ok();
}

Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

Status Transaction::begin() {
  if (auto s = exec(db_, "BEGIN IMMEDIATE", "starting a transaction"); !s) return s;
  open_ = true;
  return Status::Ok();
}

Status Transaction::commit() {
  if (auto s = exec(db_, "COMMIT", "committing a transaction"); !s) return s;
  open_ = false;
  return Status::Ok();
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t unix_milliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace spw::app::sql
