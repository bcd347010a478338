// The snapshot budget (least recently used saved KV removed first, files and rows) and the
// start-up clean-up of what killed processes leave (snapshot temporaries, spill files).
#include "app/runtime/snapshot_budget.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>
#include <string>

#include "app/store/test_temp_dir.h"
#include "engine/kv/snapshot.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;

void write_bytes(const fs::path& p, size_t n) {
  std::ofstream(p, std::ios::binary) << std::string(n, 'k');
}

// A pid that is not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(SnapshotBudget, LeastRecentlyUsedFilesAndTheirRowsGoFirst) {
  testing::TempDir dir("spillway-budget");
  auto lib = Library::open((dir / "library.db").string());
  ASSERT_TRUE(lib) << lib.error().message;
  const fs::path kv = dir / "snapshots";
  fs::create_directories(kv);
  // Five recorded snapshots of 1000 bytes, used at t = 1..5 s; snapshot 2 restored last.
  for (int i = 1; i <= 5; ++i) {
    const fs::path f = kv / ("s" + std::to_string(i) + ".kv");
    write_bytes(f, 1000);
    SnapshotRecord r;
    r.model_fingerprint = 7;
    r.prefix_hash = static_cast<uint64_t>(i);
    r.path = f.string();
    r.size_bytes = 1000;
    r.n_tokens = 10;
    r.last_used_ms = i * 1000;
    ASSERT_TRUE((*lib)->put_snapshot(r).ok());
  }
  ASSERT_TRUE((*lib)->touch_snapshot(7, 2).ok());  // now: the most recent
  write_bytes(kv / "other.txt", 5000);             // not saved KV: neither counted nor removed
  EXPECT_EQ(snapshot_usage(kv).files, 5);
  EXPECT_EQ(snapshot_usage(kv).bytes, 5000);

  auto ev = enforce_snapshot_budget(**lib, kv, 2500, (kv / "s1.kv").string());
  ASSERT_TRUE(ev) << ev.error().message;
  EXPECT_EQ(ev->files_removed, 3);
  EXPECT_EQ(ev->bytes_removed, 3000);
  EXPECT_EQ(ev->after.files, 2);
  EXPECT_EQ(ev->after.bytes, 2000);
  // s1 is the oldest but kept (just written); s3, s4, s5 went; s2 was restored last.
  EXPECT_TRUE(fs::exists(kv / "s1.kv"));
  EXPECT_TRUE(fs::exists(kv / "s2.kv"));
  for (const char* gone : {"s3.kv", "s4.kv", "s5.kv"}) EXPECT_FALSE(fs::exists(kv / gone)) << gone;
  EXPECT_TRUE(fs::exists(kv / "other.txt"));
  auto rows = (*lib)->snapshots();
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  for (const SnapshotRecord& r : *rows) EXPECT_TRUE(r.prefix_hash == 1 || r.prefix_hash == 2);

  // Within the budget: nothing more goes.
  auto again = enforce_snapshot_budget(**lib, kv, 2500);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files_removed, 0);
  EXPECT_EQ(snapshot_usage(kv).bytes, 2000);
}

TEST(SnapshotBudget, DefaultIsFourGibAtMostATenthOfTheFreeSpace) {
  testing::TempDir dir("spillway-budget");
  const fs::space_info sp = fs::space(dir.path());
  const int64_t want = std::min<int64_t>(int64_t{4} << 30, static_cast<int64_t>(sp.available / 10));
  // Not created yet: its nearest existing parent's file system.
  const int64_t got = default_snapshot_budget(dir / "not" / "yet");
  EXPECT_LE(std::abs(got - want), int64_t{64} << 20) << got << " vs " << want;
  EXPECT_EQ(effective_snapshot_budget(12345, dir.path()), 12345);
  EXPECT_EQ(snapshot_usage_text({3, 3 << 20}, int64_t{4} << 30),
            "saved KV: 3 files, 3.0 MiB of a 4.0 GiB budget");
}

TEST(SnapshotBudget, StaleTemporariesAndSpillFilesOfDeadProcessesAreRemoved) {
  testing::TempDir dir("spillway-stale");
  const fs::path kv = dir / "snapshots";
  const fs::path spill = dir / "spill";
  fs::create_directories(kv);
  fs::create_directories(spill);
  const pid_t dead = dead_pid();
  const pid_t live = ::fork();
  if (live == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(live, 0);
  const std::string d = std::to_string(dead), l = std::to_string(live);
  write_bytes(kv / ("a.kv.tmp-" + d + "-Ab12Cd"), 10);
  write_bytes(kv / ("b.kv.tmp-" + l + "-Ab12Cd"), 10);
  write_bytes(kv / ("c.kv.tmp-" + std::to_string(::getpid()) + "-Ab12Cd"), 10);
  write_bytes(kv / "d.kv", 10);
  write_bytes(spill / ("spillway-spill-" + d + "-0.kv"), 10);
  write_bytes(spill / ("spillway-spill-" + l + "-3.kv"), 10);
  EXPECT_EQ(kv::snapshot_temp_pid("a.kv.tmp-" + d + "-Ab12Cd"), dead);
  EXPECT_EQ(kv::snapshot_temp_pid("a.kv.tmp-12-short"), -1);
  EXPECT_EQ(kv::snapshot_temp_pid("a.kv"), -1);

  const StaleFiles st = remove_stale_files(kv, spill);
  ::kill(live, SIGKILL);
  int status = 0;
  ::waitpid(live, &status, 0);
  EXPECT_EQ(st.snapshot_temps, 1);
  EXPECT_EQ(st.spill_files, 1);
  EXPECT_FALSE(fs::exists(kv / ("a.kv.tmp-" + d + "-Ab12Cd")));
  EXPECT_TRUE(fs::exists(kv / ("b.kv.tmp-" + l + "-Ab12Cd")));  // a live process's
  EXPECT_TRUE(fs::exists(kv / ("c.kv.tmp-" + std::to_string(::getpid()) + "-Ab12Cd")));
  EXPECT_TRUE(fs::exists(kv / "d.kv"));
  EXPECT_FALSE(fs::exists(spill / ("spillway-spill-" + d + "-0.kv")));
  EXPECT_TRUE(fs::exists(spill / ("spillway-spill-" + l + "-3.kv")));
}

}  // namespace
}  // namespace spw::app
