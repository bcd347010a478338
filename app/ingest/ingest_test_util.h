// Shared by the app/ingest tests: a library in a temporary folder, PDFs written there, and
// ingest with the result checked.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "app/ingest/ingest.h"
#include "app/store/library.h"
#include "app/store/test_temp_dir.h"
#include "tests/support/pdf_builder.h"

namespace spw::app::testing {

class IngestFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lib = Library::open(tmp_ / "library.sqlite3");
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    lib_ = std::move(*lib);
  }

  std::filesystem::path write_pdf(const std::string& name, const test::PdfDoc& doc) {
    const auto file = tmp_ / name;
    test::write_file(file, test::build_pdf(doc));
    return file;
  }

  /// Ingests and expects success.
  IngestResult ingest_ok(const std::filesystem::path& file, const IngestOptions& opts = {}) {
    auto r = ingest_file(*lib_, file, opts);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(*r) : IngestResult{};
  }

  std::vector<PageRecord> pages_of(int64_t id) {
    auto p = lib_->pages(id);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return p.ok() ? std::move(*p) : std::vector<PageRecord>{};
  }

  size_t n_documents() {
    auto d = lib_->documents();
    return d.ok() ? d->size() : 0;
  }

  TempDir tmp_{"spillway-ingest"};
  std::unique_ptr<Library> lib_;
};

/// `text` with every run of whitespace as one space (for comparing across line breaks).
inline std::string squash(const std::string& text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

/// Positions of `parts` in `text`, each after the previous; fails the test for a missing one.
inline void expect_in_order(const std::string& text, const std::vector<std::string>& parts) {
  size_t pos = 0;
  for (const std::string& p : parts) {
    const size_t at = text.find(p, pos);
    ASSERT_NE(at, std::string::npos) << "missing (in order): \"" << p << "\" in:\n" << text;
    pos = at + p.size();
  }
}

}  // namespace spw::app::testing
