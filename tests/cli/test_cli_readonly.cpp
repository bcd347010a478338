// spillway-cli's library readers (docs list, show, search; jobs list, show) on a library no file
// of which can be written: a full disk (the file size limit at 0 bytes, which binds root too) and
// a read-only folder (chmod, meaningless for root: skipped then). They open the database
// read-only and leave its bytes as they were; `docs remove` says what it needs.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/cli_runner.h"
#include "tests/support/pdf_builder.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-readonly-test"); }

CliResult run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir().string());
}

class CliReadOnlyLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(data_);
    fs::create_directories(data_);
    const fs::path model = tmp_dir() / "model.gguf";
    ASSERT_TRUE(write_test_model(TestModelSpec{}, model.string()).ok());
    test::PdfDoc doc;
    doc.title = "Lease Agreement";
    for (const char* body : {"The tenant pays rent monthly.", "The indemnification clause."}) {
      test::PdfPage p;
      p.runs.push_back(test::PdfTextRun{72, 700, 12, body, 0, 0});
      doc.pages.push_back(p);
    }
    const fs::path pdf = tmp_dir() / "lease.pdf";
    test::write_file(pdf, test::build_pdf(doc));
    ASSERT_EQ(run(with_data({"ingest", pdf.string()})).exit_code, 0);
    const CliResult add = run(with_data({"jobs", "add", "-m", model.string(), "--doc", "1",
                                         "--title", "Lease summary", "--at", "2099-01-01T00:00Z"}));
    ASSERT_EQ(add.exit_code, 0) << add.err;
    db_ = data_ / "library.sqlite3";
    ASSERT_TRUE(fs::exists(db_));
    ASSERT_FALSE(fs::exists(fs::path(db_.string() + "-wal"))) << "the last writer checkpointed";
    db_bytes_ = test::read_file(db_);
  }
  std::vector<std::string> with_data(std::vector<std::string> args) const {
    args.push_back("--data-dir");
    args.push_back(data_.string());
    return args;
  }
  // Every reading command's exact output on the library SetUp made.
  void expect_reading_works(const std::function<CliResult(const std::vector<std::string>&)>& go) {
    CliResult r = go(with_data({"docs", "list"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("   1      2  "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  Lease Agreement\n"), std::string::npos) << r.out;
    r = go(with_data({"docs", "search", "indemnification"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("1 p. 2  Lease Agreement: ", 0), 0u) << r.out << r.err;
    r = go(with_data({"docs", "show", "1"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("pages:      2\n"), std::string::npos) << r.out;
    r = go(with_data({"jobs", "list"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Lease summary"), std::string::npos) << r.out;
    r = go(with_data({"jobs", "show", "1"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("queued\njob 1: Lease summary\n", 0), 0u) << r.out;
    EXPECT_EQ(test::read_file(db_), db_bytes_) << "a reader wrote to the database";
  }
  fs::path data_, db_;
  std::string db_bytes_;
};

// No byte can be written (ENOSPC's stand-in): the readers work; the write check that refused
// them ("the data folder ... is not writable") is not made for them.
TEST_F(CliReadOnlyLibrary, ReadersWorkWhenNothingCanBeWritten) {
  expect_reading_works([](const std::vector<std::string>& args) {
    return run_cli_file_size_limited(SPILLWAY_CLI_PATH, args, 0);
  });
  // A command that writes still says why it cannot.
  const CliResult ingest = run_cli_file_size_limited(
      SPILLWAY_CLI_PATH, with_data({"ingest", (tmp_dir() / "lease.pdf").string()}), 0);
  EXPECT_EQ(ingest.exit_code, 1);
  EXPECT_NE(ingest.err.find("error: the data folder '" + data_.string() + "' is not writable: "),
            std::string::npos)
      << ingest.err;
  // docs remove is tried (it may free space) and says what it needs when the disk is full.
  const CliResult rm =
      run_cli_file_size_limited(SPILLWAY_CLI_PATH, with_data({"docs", "remove", "1"}), 0);
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_NE(rm.err.find("error: cannot remove document 1: "), std::string::npos) << rm.err;
  EXPECT_NE(rm.err.find("which needs a little free space on the disk of " + data_.string()),
            std::string::npos)
      << rm.err;
  EXPECT_EQ(run(with_data({"docs", "list"})).out.find("Lease Agreement") != std::string::npos,
            true);
  // With space again it removes the document.
  const CliResult freed = run(with_data({"docs", "remove", "1"}));
  EXPECT_EQ(freed.exit_code, 0) << freed.err;
  EXPECT_EQ(freed.out, "removed document 1 (Lease Agreement)\n");
}

TEST_F(CliReadOnlyLibrary, ReadersWorkInAReadOnlyFolder) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can write into read-only folders";
  fs::permissions(data_, fs::perms::owner_read | fs::perms::owner_exec);
  expect_reading_works(run);
  const CliResult rm = run(with_data({"docs", "remove", "1"}));
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_NE(rm.err.find("error: the data folder '" + data_.string() + "' is not writable"),
            std::string::npos)
      << rm.err;
  fs::permissions(data_, fs::perms::owner_all);
}

// A read-only mount (root can write into a read-only folder, not into a read-only file
// system): the readers work, and rename and remove name the folder and the setting instead of
// SQLite's "unable to open database file".
TEST_F(CliReadOnlyLibrary, RenameAndRemoveOnAReadOnlyMountNameTheFolder) {
  if (::geteuid() != 0) GTEST_SKIP() << "a bind mount needs root";
  // A reader first: SQLite's -wal and -shm files are there, as in a library in use (the open
  // then succeeds and only the first write would fail).
  ASSERT_EQ(run(with_data({"docs", "list"})).exit_code, 0);
  const fs::path ro = data_.string() + "-ro";
  fs::create_directories(ro);
  const std::string mount = "mount --bind '" + data_.string() + "' '" + ro.string() +
                            "' && mount -o remount,bind,ro '" + ro.string() + "' 2>/dev/null";
  if (std::system(mount.c_str()) != 0) {
    std::system(("umount '" + ro.string() + "' 2>/dev/null").c_str());
    GTEST_SKIP() << "this machine allows no read-only bind mount";
  }
  const auto on_ro = [&](std::vector<std::string> args) {
    args.push_back("--data-dir");
    args.push_back(ro.string());
    return run(args);
  };
  const CliResult list = on_ro({"docs", "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("Lease Agreement"), std::string::npos) << list.out;
  for (const auto& args : std::vector<std::vector<std::string>>{{"docs", "rename", "1", "Other"},
                                                                {"docs", "remove", "1"}}) {
    const CliResult r = on_ro(args);
    EXPECT_EQ(r.exit_code, 1) << args[1];
    EXPECT_EQ(r.err, "error: the data folder '" + ro.string() +
                         "' is on a read-only file system: renaming or removing a document "
                         "writes the library (choose another with --data-dir)\n");
  }
  EXPECT_EQ(std::system(("umount '" + ro.string() + "'").c_str()), 0);
  // Nothing changed: the document is there under its title.
  const CliResult after = run(with_data({"docs", "list"}));
  EXPECT_NE(after.out.find("Lease Agreement"), std::string::npos) << after.out;
}

}  // namespace
}  // namespace spw
