// The schema migrations compiled into the app: resources/migrations/NNN_name.sql, embedded at
// build time (app/store/embed_migrations.cmake). Migration n brings PRAGMA user_version from
// n-1 to n; they are applied in order, each in its own transaction.
#pragma once

#include <span>

namespace spw::app {

struct Migration {
  int version;       // NNN of the file name: 1, 2, 3, ...
  const char* name;  // the file name's rest, e.g. "library"
  const char* sql;   // the file's text
};

/// All migrations, by version ascending (version == index + 1).
std::span<const Migration> migrations();

}  // namespace spw::app
