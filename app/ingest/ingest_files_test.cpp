// Ingest of awkward files: encrypted (qpdf), damaged and unreadable, the same file again,
// progress and cancel, and a process killed in the middle of storing.
#include "app/ingest/ingest.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "app/ingest/ingest_test_util.h"

namespace spw::app {
namespace {

using test::on_path;
using test::PdfDoc;
using test::PdfPage;
using test::PdfTextRun;

class IngestFiles : public testing::IngestFixture {
 protected:
  PdfDoc three_pages() {
    PdfDoc doc;
    for (int i = 1; i <= 3; ++i) {
      PdfPage p;
      p.runs.push_back(PdfTextRun{72, 700, 12, "Text of page " + std::to_string(i) + ".", 0, 0});
      doc.pages.push_back(p);
    }
    return doc;
  }
};

bool have_qpdf() { return on_path("qpdf"); }

// qpdf --encrypt USER OWNER 256 -- in out
void encrypt(const std::filesystem::path& in, const std::filesystem::path& out,
             const std::string& user) {
  const std::string cmd = "qpdf --encrypt '" + user + "' owner-secret 256 -- '" + in.string() +
                          "' '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST_F(IngestFiles, EncryptedNeedsThePasswordAndNeverStoresIt) {
  if (!have_qpdf()) GTEST_SKIP() << "qpdf not installed (needed to encrypt the test PDF)";
  const auto plain = write_pdf("plain.pdf", three_pages());
  const auto locked = tmp_ / "locked.pdf";
  encrypt(plain, locked, "s3cret-user");

  auto none = ingest_file(*lib_, locked, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            "'" + locked.string() + "' is encrypted: a password is needed (--password)");
  IngestOptions wrong;
  wrong.password = "not-it";
  auto bad = ingest_file(*lib_, locked, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "'" + locked.string() + "': wrong password");
  EXPECT_EQ(n_documents(), 0u);

  IngestOptions right;
  right.password = "s3cret-user";
  const auto r = ingest_ok(locked, right);
  EXPECT_TRUE(r.document.encrypted);
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[1].text, "Text of page 2.");
  // The password is nowhere in the database (WAL included).
  lib_.reset();
  for (const char* f : {"library.sqlite3", "library.sqlite3-wal"}) {
    if (!std::filesystem::exists(tmp_ / f)) continue;
    EXPECT_EQ(test::read_file(tmp_ / f).find("s3cret-user"), std::string::npos) << f;
  }
}

TEST_F(IngestFiles, EncryptedWithAnEmptyUserPasswordOpensWithoutOne) {
  if (!have_qpdf()) GTEST_SKIP() << "qpdf not installed (needed to encrypt the test PDF)";
  const auto plain = write_pdf("plain.pdf", three_pages());
  const auto locked = tmp_ / "owner-only.pdf";
  encrypt(plain, locked, "");
  const auto r = ingest_ok(locked);
  EXPECT_TRUE(r.document.encrypted);
  EXPECT_EQ(pages_of(r.doc_id)[0].text, "Text of page 1.");
}

TEST_F(IngestFiles, DamagedCrossReferenceIsRepairedAndMarked) {
  std::string bytes = test::build_pdf(three_pages());
  // startxref points into the middle of an object: poppler rebuilds the table.
  const size_t at = bytes.rfind("startxref\n");
  ASSERT_NE(at, std::string::npos);
  bytes = bytes.substr(0, at) + "startxref\n123\n%%EOF\n";
  const auto file = tmp_ / "damaged.pdf";
  test::write_file(file, bytes);
  const auto r = ingest_ok(file);
  EXPECT_TRUE(r.document.repaired);
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[2].text, "Text of page 3.");
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_EQ(r.warnings[0].page_no, 0);
  EXPECT_NE(r.warnings[0].message.find("damaged"), std::string::npos);
}

TEST_F(IngestFiles, WrongCrossReferenceOffsetsAreRepairedAndMarked) {
  std::string bytes = test::build_pdf(three_pages());
  // Every in-use entry of the table points 7 bytes early.
  size_t pos = bytes.find("xref\n0 ");
  ASSERT_NE(pos, std::string::npos);
  while ((pos = bytes.find(" 00000 n \n", pos)) != std::string::npos) {
    const size_t start = pos - 10;
    const long off = std::stol(bytes.substr(start, 10)) - 7;
    char buf[11];
    std::snprintf(buf, sizeof buf, "%010ld", off);
    bytes.replace(start, 10, buf);
    pos += 10;
  }
  const auto file = tmp_ / "badxref.pdf";
  test::write_file(file, bytes);
  const auto r = ingest_ok(file);
  EXPECT_TRUE(r.document.repaired);
  const auto pages = pages_of(r.doc_id);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[0].text, "Text of page 1.");
}

TEST_F(IngestFiles, TruncatedBeforeTheTrailerIsAnErrorNamingTheFile) {
  std::string bytes = test::build_pdf(three_pages());
  bytes.resize(bytes.find("xref\n0 "));  // no table, no trailer: poppler cannot find the root
  const auto file = tmp_ / "truncated.pdf";
  test::write_file(file, bytes);
  auto r = ingest_file(*lib_, file, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "cannot open PDF '" + file.string() + "': not a PDF, or damaged beyond repair");
  EXPECT_EQ(n_documents(), 0u);
}

TEST_F(IngestFiles, AnIntactFileIsNotMarkedRepaired) {
  const auto r = ingest_ok(write_pdf("ok.pdf", three_pages()));
  EXPECT_FALSE(r.document.repaired);
  EXPECT_FALSE(r.document.encrypted);
  EXPECT_TRUE(r.warnings.empty());
}

TEST_F(IngestFiles, UnreadableFilesAreErrorsNamingThem) {
  const auto junk = tmp_ / "junk.pdf";
  test::write_file(junk, "this is not a PDF at all, just some text\n");
  auto r = ingest_file(*lib_, junk, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "cannot open PDF '" + junk.string() + "': not a PDF, or damaged beyond repair");
  const auto missing = tmp_ / "missing.pdf";
  auto m = ingest_file(*lib_, missing, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message,
            "cannot open PDF '" + missing.string() + "': No such file or directory");
  auto dir = ingest_file(*lib_, tmp_.path(), {});
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().message,
            "cannot open PDF '" + tmp_.path().string() + "': not a regular file");
  auto dev = ingest_file(*lib_, "/dev/zero", {});  // read only: it must not be hashed forever
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.error().message, "cannot open PDF '/dev/zero': not a regular file");
  EXPECT_EQ(n_documents(), 0u);
}

TEST_F(IngestFiles, TheSameFileAgainIsANoOp) {
  const auto file = write_pdf("again.pdf", three_pages());
  const auto first = ingest_ok(file);
  EXPECT_FALSE(first.already_present);
  // A copy under another name is the same document too (same bytes).
  const auto copy = tmp_ / "copy.pdf";
  std::filesystem::copy_file(file, copy);
  const auto second = ingest_ok(copy);
  EXPECT_TRUE(second.already_present);
  EXPECT_EQ(second.doc_id, first.doc_id);
  EXPECT_EQ(second.document.n_pages, 3);
  EXPECT_EQ(n_documents(), 1u);
  EXPECT_EQ(pages_of(first.doc_id).size(), 3u);
}

TEST_F(IngestFiles, ProgressCountsPagesAndCanCancel) {
  const auto file = write_pdf("progress.pdf", three_pages());
  std::vector<std::pair<int, int>> seen;
  auto cancelled = ingest_file(*lib_, file, {}, [&](int done, int total) {
    seen.emplace_back(done, total);
    return done < 2;
  });
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.error().message, "ingest of '" + file.string() + "' cancelled");
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{0, 3}, {1, 3}, {2, 3}}));
  EXPECT_EQ(n_documents(), 0u);

  seen.clear();
  auto r = ingest_file(*lib_, file, {}, [&](int done, int total) {
    seen.emplace_back(done, total);
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{0, 3}, {1, 3}, {2, 3}, {3, 3}}));
}

// Runs in the child: dies by SIGKILL right after page 2's row is written, mid-transaction.
void kill_after_page_two(int page_no, void*) {
  if (page_no == 2) ::kill(::getpid(), SIGKILL);
}

TEST_F(IngestFiles, AKillDuringIngestLeavesNoHalfDocument) {
  const auto file = write_pdf("killed.pdf", three_pages());
  const auto db = tmp_ / "library.sqlite3";
  lib_.reset();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto lib = Library::open(db);
    if (!lib.ok()) ::_exit(3);
    IngestOptions opts;
    opts.page_stored_hook = kill_after_page_two;
    auto r = ingest_file(**lib, file, opts);
    ::_exit(r.ok() ? 0 : 4);  // not reached: the hook kills the process
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  auto lib = Library::open(db);
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  lib_ = std::move(*lib);
  EXPECT_EQ(n_documents(), 0u);
  ASSERT_TRUE(lib_->exec("CREATE TEMP TABLE n AS SELECT count(*) AS c FROM pages"));
  auto hits = lib_->search("page");
  ASSERT_TRUE(hits.ok());
  EXPECT_TRUE(hits->empty());
  // The library is usable and the file goes in whole.
  const auto r = ingest_ok(file);
  EXPECT_FALSE(r.already_present);
  EXPECT_EQ(pages_of(r.doc_id).size(), 3u);
  auto after = lib_->search("page");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), 3u);
}

}  // namespace
}  // namespace spw::app
