// spillway-cli ingest and docs: PDFs into the library, and the library's documents.
//
//   ingest FILE.pdf... [--password P] [--ocr] [--json]
//     Each file is stored (or found: same bytes, same id). Progress goes to stderr. With --json
//     stdout holds one single-line JSON object per file, nothing else: "file", "id", "title",
//     "pages", "characters", "already_present", "encrypted", "repaired", "scanned_pages",
//     "ocr_pages", "undecodable_pages", "no_text", "warnings" ([{"page", "message"}], page 0 =
//     the whole document); a file that failed has "file" and "error" instead. Exit 1 if any
//     file failed (the others are still stored).
//   docs list | show ID [--page N] [--text] | search "QUERY" [--doc ID] [--limit N] | remove ID
//     `show --text` prints the normalised text, each page preceded by a line "[p. N]".
//     `--json` on each: one JSON object on stdout.
// The database is <data folder>/library.sqlite3 (--data-dir DIR: DIR/library.sqlite3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace spw::cli {

struct IngestArgs {
  std::vector<std::string> files;
  std::string password;  // --password (never stored)
  bool ocr = false;
  bool json = false;
  std::string data_dir;  // set by main from the global --data-dir
};

/// Adds `ingest` to `app`; returns the subcommand.
CLI::App* add_ingest_command(CLI::App& app, IngestArgs& args);
int run_ingest(const IngestArgs& args);

struct DocsArgs {
  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* search = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* rename = nullptr;
  int64_t id = 0;     // show, remove, rename
  std::string name;   // rename ("": back to the cleaned title)
  int page = 0;       // show --page (0: all)
  bool text = false;  // show --text
  std::string query;  // search
  int64_t doc = 0;    // search --doc (0: all documents)
  int limit = 20;     // search --limit
  bool json = false;
  std::string data_dir;  // set by main from the global --data-dir
};

/// Adds `docs` (list, show, search, remove, rename) to `app`; returns the subcommand.
CLI::App* add_docs_command(CLI::App& app, DocsArgs& args);
int run_docs(const DocsArgs& args);

}  // namespace spw::cli
