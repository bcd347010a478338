#include "app/cli/ingest_docs.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/option_checks.h"
#include "app/ingest/ingest.h"
#include "app/ingest/normalize.h"
#include "app/paths.h"
#include "app/runtime/snapshot_budget.h"
#include "app/settings/app_settings.h"
#include "app/store/display_title.h"
#include "app/store/library.h"

namespace spw::cli {
namespace {

using app::DocumentRecord;
using app::Library;

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Expected<std::unique_ptr<Library>> open_library(const std::string& data_dir) {
  app::PathOverrides o;
  o.data_dir = data_dir;
  auto paths = app::prepare_paths(o);
  if (!paths) return paths.error();
  return Library::open(app::library_db_file(paths->data_dir));
}

enum class Access { Read, Write };

// The library of a command that only reads it (list, show, search), or removes or renames a
// document: an existing database is opened without the data folder's write check, read-only
// for reading, so these work in a read-only folder or on a full disk (where `docs remove` is how
// a user frees space). Without a database yet, as every other command: the folders are made and
// checked.
Expected<std::unique_ptr<Library>> open_existing_library(const std::string& data_dir,
                                                         Access access) {
  app::PathOverrides o;
  o.data_dir = data_dir;
  auto paths = app::resolve_paths(o, app::PathEnv::from_process());
  if (!paths) return paths.error();
  const std::filesystem::path file = app::library_db_file(paths->data_dir);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return open_library(data_dir);
  if (access == Access::Read) return Library::open_read_only(file);
  // A folder that cannot be written (a read-only mount, no write permission): say so with the
  // setting before SQLite does ("unable to open database file", or "attempt to write a readonly
  // database" at the first write when the -wal and -shm files are there). A full disk keeps its
  // own message (the caller's, which says what to free).
  const std::string dir = paths->data_dir.string();
  struct statvfs vfs {};
  const bool ro = ::statvfs(dir.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0;
  const bool denied = !ro && ::access(dir.c_str(), W_OK) != 0 && errno == EACCES;
  if (ro || denied) {
    return make_error(
        "the data folder '{}' is {}: renaming or removing a document writes the library "
        "(choose another with --data-dir)",
        dir, ro ? "on a read-only file system" : "not writable");
  }
  return Library::open(file);
}

nlohmann::json document_json(const DocumentRecord& d) {
  return {{"id", d.id},
          {"title", d.title},
          {"display_title", d.shown_title()},
          {"name", d.custom_title},
          {"path", d.path},
          {"sha256", d.sha256},
          {"pages", d.n_pages},
          {"characters", d.n_chars},
          {"encrypted", d.encrypted},
          {"repaired", d.repaired},
          {"scanned_pages", d.n_scanned},
          {"ocr_pages", d.n_ocr},
          {"undecodable_pages", d.n_undecodable},
          {"no_text", d.no_text},
          {"added_at", d.added_at}};
}

std::string flags_text(const DocumentRecord& d) {
  std::string f;
  auto add = [&](const std::string& s) { f += (f.empty() ? "" : ",") + s; };
  if (d.encrypted) add("encrypted");
  if (d.repaired) add("repaired");
  if (d.n_scanned > 0) add(fmt::format("scanned:{}", d.n_scanned));
  if (d.n_ocr > 0) add(fmt::format("ocr:{}", d.n_ocr));
  if (d.n_undecodable > 0) add(fmt::format("undecodable:{}", d.n_undecodable));
  if (d.no_text) add("no-text");
  return f.empty() ? "-" : f;
}

// Progress on stderr: a rewritten line on a terminal, else a line per tenth of the pages.
class Progress final {
 public:
  explicit Progress(std::string name) : name_(std::move(name)), tty_(isatty(STDERR_FILENO)) {}
  bool operator()(int done, int total) {
    if (tty_) {
      std::fprintf(stderr, "\r%s: page %d/%d", name_.c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (total >= 10) {
      const int tenth = done * 10 / total;
      if (tenth != last_tenth_) {
        std::fprintf(stderr, "%s: page %d/%d\n", name_.c_str(), done, total);
        last_tenth_ = tenth;
      }
    }
    return true;
  }

 private:
  std::string name_;
  bool tty_;
  int last_tenth_ = 0;
};

}  // namespace

CLI::App* add_ingest_command(CLI::App& app, IngestArgs& a) {
  auto* c = app.add_subcommand("ingest", "Add PDF files to the library (text per page, indexed)");
  c->add_option("files", a.files, "PDF files")->required();
  c->add_option("--password", a.password,
                "Password of an encrypted PDF (tried after the empty one; never stored)");
  c->add_flag("--ocr", a.ocr, "Read pages without a text layer with tesseract OCR");
  c->add_flag("--json", a.json, "One single-line JSON object per file on stdout");
  return c;
}

int run_ingest(const IngestArgs& a) {
  auto lib = open_library(a.data_dir);
  if (!lib) return fail(lib.error().message);
  app::IngestOptions opts;
  opts.password = a.password;
  opts.ocr = a.ocr;
  int rc = 0;
  for (const std::string& file : a.files) {
    Progress progress(file);
    auto r = app::ingest_file(**lib, file, opts, std::ref(progress));
    if (!r) {
      rc = 1;
      std::fprintf(stderr, "error: %s\n", r.error().message.c_str());
      if (a.json) {
        std::printf("%s\n", dump({{"file", file}, {"error", r.error().message}}).c_str());
        std::fflush(stdout);
      }
      continue;
    }
    // --ocr of a stored file whose scanned (or unreadable) pages were never read: read it
    // again in place (the same id; its name, chats and jobs stay).
    bool reread = false;
    if (r->already_present && a.ocr &&
        (r->document.n_scanned > r->document.n_ocr || r->document.n_undecodable > 0)) {
      app::IngestOptions again = opts;
      again.reread_doc_id = r->doc_id;
      auto rr = app::ingest_file(**lib, file, again, std::ref(progress));
      if (!rr) {
        rc = 1;
        std::fprintf(stderr, "error: %s\n", rr.error().message.c_str());
        continue;
      }
      r = std::move(rr);
      reread = true;
    }
    const DocumentRecord& d = r->document;
    for (const app::PageWarning& w : r->warnings) {
      if (w.page_no > 0) {
        std::fprintf(stderr, "warning: %s p. %d: %s\n", file.c_str(), w.page_no, w.message.c_str());
      } else {
        std::fprintf(stderr, "warning: %s: %s\n", file.c_str(), w.message.c_str());
      }
    }
    if (a.json) {
      nlohmann::json j = document_json(d);
      j["file"] = file;
      j["already_present"] = r->already_present;
      j["reread"] = reread;
      j["warnings"] = nlohmann::json::array();
      for (const app::PageWarning& w : r->warnings)
        j["warnings"].push_back({{"page", w.page_no}, {"message", w.message}});
      std::printf("%s\n", dump(j).c_str());
    } else if (r->already_present) {
      std::printf("document %lld: %s (already in the library)\n", static_cast<long long>(d.id),
                  file.c_str());
    } else {
      std::printf("document %lld: %s: %s%d page%s, %lld characters%s\n",
                  static_cast<long long>(d.id), file.c_str(), reread ? "read again with OCR: " : "",
                  d.n_pages, d.n_pages == 1 ? "" : "s", static_cast<long long>(d.n_chars),
                  flags_text(d) == "-" ? "" : (" [" + flags_text(d) + "]").c_str());
    }
    std::fflush(stdout);
  }
  return rc;
}

CLI::App* add_docs_command(CLI::App& app, DocsArgs& a) {
  auto* c =
      app.add_subcommand("docs", "The library: list, show, search, remove and rename documents");
  c->require_subcommand(1);
  a.list = c->add_subcommand("list", "All documents: id, pages, characters, flags, title");
  a.show = c->add_subcommand("show", "One document: its pages and flags, or its text");
  a.show->add_option("id", a.id, "Document id")->required();
  a.show->add_option("--page", a.page, "Only this page (1-based)")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              size_t used = 0;
              if (std::stoll(v, &used) >= 1 && used == v.size()) return std::string();
            } catch (const std::exception&) {
            }
            return "a page number is 1 or more, not '" + v + "'";
          },
          "N"));
  a.show->add_flag("--text", a.text,
                   "Print the normalised text, each page preceded by a line [p. N]");
  a.search = c->add_subcommand("search", "Full-text search: document, page and a snippet");
  a.search->add_option("query", a.query, "Words to find (all of them, on one page)")->required();
  a.search->add_option("--doc", a.doc, "Only in this document");
  a.search->add_option("--limit", a.limit, "At most this many hits")
      ->capture_default_str()
      ->check(int_range("--limit", 1, kMaxInt));
  a.remove = c->add_subcommand("remove", "Remove a document, its pages and its chats");
  a.remove->add_option("id", a.id, "Document id")->required();
  a.rename = c->add_subcommand(
      "rename", "Give a document the name it is shown under (its PDF title is kept)");
  a.rename->add_option("id", a.id, "Document id")->required();
  a.rename->add_option("name", a.name, "The new name; \"\" goes back to the title from the PDF")
      ->required();
  for (auto* sub : {a.list, a.show, a.search, a.remove, a.rename}) {
    sub->add_flag("--json", a.json, "One JSON object on stdout");
    sub->fallthrough();  // global options (--data-dir) after the command
  }
  return c;
}

namespace {

int docs_list(Library& lib, const DocsArgs& a) {
  auto docs = lib.documents();
  if (!docs) return fail(docs.error().message);
  if (a.json) {
    nlohmann::json j = {{"documents", nlohmann::json::array()}};
    for (const DocumentRecord& d : *docs) j["documents"].push_back(document_json(d));
    std::printf("%s\n", dump(j).c_str());
    return 0;
  }
  if (docs->empty()) {
    std::fprintf(stderr, "the library is empty (add PDFs with: spillway-cli ingest FILE.pdf)\n");
    return 0;
  }
  std::printf("%4s  %5s  %10s  %-24s  %s\n", "ID", "PAGES", "CHARS", "FLAGS", "TITLE");
  for (const DocumentRecord& d : *docs) {
    std::printf("%4lld  %5d  %10lld  %-24s  %s\n", static_cast<long long>(d.id), d.n_pages,
                static_cast<long long>(d.n_chars), flags_text(d).c_str(), d.shown_title().c_str());
  }
  return 0;
}

// The saved KV of every document (snapshots are keyed by prefix, not by document): files,
// bytes and the budget.
struct SavedKv {
  app::SnapshotUsage usage;
  int64_t budget = 0;
};
SavedKv saved_kv(Library& lib, const std::string& data_dir) {
  app::PathOverrides o;
  o.data_dir = data_dir;
  SavedKv out;
  auto paths = app::resolve_paths(o, app::PathEnv::from_process());
  if (!paths) return out;
  const std::filesystem::path dir = paths->cache_dir / "snapshots";
  auto settings = app::load_app_settings(lib);
  out.usage = app::snapshot_usage(dir);
  out.budget = app::effective_snapshot_budget(settings ? settings->snapshot_budget : 0, dir);
  return out;
}

int docs_show(Library& lib, const DocsArgs& a) {
  auto doc = lib.document(a.id);
  if (!doc) return fail(doc.error().message);
  const SavedKv kv = saved_kv(lib, a.data_dir);
  std::vector<app::PageRecord> pages;
  if (a.page > 0) {
    auto p = lib.page(a.id, a.page);
    if (!p) return fail(p.error().message);
    pages.push_back(std::move(*p));
  } else {
    auto all = lib.pages(a.id);
    if (!all) return fail(all.error().message);
    pages = std::move(*all);
  }
  auto n_chars = [](const std::string& s) {
    int64_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  };
  if (a.json) {
    nlohmann::json j = document_json(*doc);
    j["page_count"] = doc->n_pages;
    j["saved_kv"] = {
        {"files", kv.usage.files}, {"bytes", kv.usage.bytes}, {"budget_bytes", kv.budget}};
    j["pages"] = nlohmann::json::array();
    for (const app::PageRecord& p : pages) {
      nlohmann::json pj = {{"page", p.page_no},
                           {"scanned", p.scanned},
                           {"ocr", p.ocr},
                           {"undecodable", p.undecodable},
                           {"characters", n_chars(p.text)},
                           {"boilerplate", nlohmann::json::array()}};
      for (const auto& [b, e] : p.boilerplate) pj["boilerplate"].push_back({b, e});
      if (a.text || a.page > 0) pj["text"] = p.text;
      if (a.page > 0) pj["original_text"] = p.original_text;
      j["pages"].push_back(std::move(pj));
    }
    std::printf("%s\n", dump(j).c_str());
    return 0;
  }
  if (a.text) {
    for (size_t i = 0; i < pages.size(); ++i) {
      std::printf("%s[p. %d]\n%s\n", i > 0 ? "\n" : "", pages[i].page_no, pages[i].text.c_str());
    }
    if (doc->no_text) {
      std::fprintf(stderr,
                   "note: document %lld has no text (scanned): to read it with OCR (in place: "
                   "same id, chats and jobs kept), `spillway-cli ingest --ocr %s`\n",
                   static_cast<long long>(doc->id), doc->path.c_str());
    }
    return 0;
  }
  const std::string shown = doc->shown_title();
  std::printf("id:         %lld\ntitle:      %s\n", static_cast<long long>(doc->id), shown.c_str());
  const std::string cleaned = app::display_title(doc->title, doc->path);
  if (!doc->custom_title.empty() && cleaned != doc->title)
    std::printf("cleaned:    %s (its title before it was renamed)\n", cleaned.c_str());
  if (!doc->title.empty() && doc->title != shown)
    std::printf("pdf title:  %s\n", doc->title.c_str());
  std::printf("path:       %s\nsha256:     %s\n", doc->path.c_str(), doc->sha256.c_str());
  std::printf("pages:      %d\ncharacters: %lld\nflags:      %s\n", doc->n_pages,
              static_cast<long long>(doc->n_chars), flags_text(*doc).c_str());
  if (doc->no_text)
    std::printf(
        "text:       none (scanned, 0 tokens; OCR reads it in place: `spillway-cli ingest "
        "--ocr %s`)\n",
        doc->path.c_str());
  std::printf("%s (all documents)\n", app::snapshot_usage_text(kv.usage, kv.budget).c_str());
  for (const app::PageRecord& p : pages) {
    std::string flags;
    if (p.scanned) flags += " scanned";
    if (p.ocr) flags += " ocr";
    if (p.undecodable) flags += " undecodable";
    if (!p.boilerplate.empty()) flags += " header/footer";
    std::printf("p. %-4d %8lld chars%s\n", p.page_no, static_cast<long long>(n_chars(p.text)),
                flags.c_str());
  }
  return 0;
}

int docs_search(Library& lib, const DocsArgs& a) {
  if (a.limit < 1) {
    return fail(fmt::format("--limit {}: at least 1 hit (default 20)", a.limit));
  }
  if (a.doc != 0) {
    if (auto d = lib.document(a.doc); !d) return fail(d.error().message);
  }
  // The query is normalised as page text is (ligatures, soft hyphens), so "ﬁrst" finds "first".
  auto hits = lib.search(app::normalize_line(a.query), a.limit, a.doc);
  if (!hits) return fail(hits.error().message);
  if (a.json) {
    nlohmann::json j = {{"query", a.query}, {"hits", nlohmann::json::array()}};
    for (const app::SearchHit& h : *hits) {
      j["hits"].push_back({{"document", h.doc_id},
                           {"title", h.title},
                           {"page", h.page_no},
                           {"snippet", h.snippet}});
    }
    std::printf("%s\n", dump(j).c_str());
    return 0;
  }
  if (hits->empty()) std::fprintf(stderr, "no matches for \"%s\"\n", a.query.c_str());
  for (const app::SearchHit& h : *hits) {
    std::string snippet = h.snippet;
    for (char& c : snippet) {
      if (c == '\n') c = ' ';
    }
    std::printf("%lld p. %d  %s: %s\n", static_cast<long long>(h.doc_id), h.page_no,
                h.title.c_str(), snippet.c_str());
  }
  return 0;
}

// A failed removal; on a full disk (or one that takes no write), what the removal needs.
std::string remove_error(const DocsArgs& a, const std::string& m) {
  if (m.find("disk is full") == std::string::npos && m.find("disk I/O error") == std::string::npos)
    return m;
  app::PathOverrides o;
  o.data_dir = a.data_dir;
  auto paths = app::resolve_paths(o, app::PathEnv::from_process());
  return fmt::format(
      "cannot remove document {}: {} (the database writes the change to its journal first, "
      "which needs a little free space on the disk of {}; free some, for instance saved KV "
      "under the cache folder's snapshots, and try again)",
      a.id, m, paths ? paths->data_dir.string() : std::string("the data folder"));
}

int docs_remove(Library& lib, const DocsArgs& a) {
  auto doc = lib.document(a.id);
  if (!doc) return fail(doc.error().message);
  if (auto s = lib.remove_document(a.id); !s) return fail(remove_error(a, s.error().message));
  if (a.json) {
    std::printf("%s\n", dump({{"removed", a.id}, {"title", doc->title}}).c_str());
    return 0;
  }
  std::printf("removed document %lld (%s)\n", static_cast<long long>(a.id),
              doc->shown_title().c_str());
  return 0;
}

int docs_rename(Library& lib, const DocsArgs& a) {
  if (auto s = lib.rename_document(a.id, a.name); !s) {
    return fail(fmt::format("cannot rename document {}: {}", a.id, s.error().message));
  }
  auto doc = lib.document(a.id);
  if (!doc) return fail(doc.error().message);
  if (a.json) {
    nlohmann::json j = document_json(*doc);
    std::printf("%s\n", dump(j).c_str());
    return 0;
  }
  if (doc->custom_title.empty()) {
    std::printf("document %lld: shown as \"%s\" (its own title; no name given)\n",
                static_cast<long long>(a.id), doc->shown_title().c_str());
  } else {
    std::printf("document %lld: renamed to \"%s\" (PDF title: \"%s\")\n",
                static_cast<long long>(a.id), doc->custom_title.c_str(), doc->title.c_str());
  }
  return 0;
}

}  // namespace

int run_docs(const DocsArgs& a) {
  const bool writes = *a.remove || *a.rename;
  auto lib = open_existing_library(a.data_dir, writes ? Access::Write : Access::Read);
  if (!lib) return fail(*a.remove ? remove_error(a, lib.error().message) : lib.error().message);
  if (*a.list) return docs_list(**lib, a);
  if (*a.show) return docs_show(**lib, a);
  if (*a.search) return docs_search(**lib, a);
  if (*a.remove) return docs_remove(**lib, a);
  if (*a.rename) return docs_rename(**lib, a);
  return fail("docs needs a command: list, show, search, remove or rename");
}

}  // namespace spw::cli
