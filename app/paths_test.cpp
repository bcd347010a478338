// Tests of app/paths: XDG resolution, --data-dir overrides, creation and the unwritable error.
#include "app/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace spw::app {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "spillway-paths-XXXXXX").string();
    path_ = fs::path(::mkdtemp(tmpl.data()));
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(Paths, XdgVariablesWin) {
  PathEnv env{"/home/u", "/xdg/data", "/xdg/cache"};
  auto p = resolve_paths({}, env);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->data_dir, fs::path("/xdg/data/spillway"));
  EXPECT_EQ(p->cache_dir, fs::path("/xdg/cache/spillway"));
}

TEST(Paths, HomeDefaultsWhenXdgUnsetOrRelative) {
  PathEnv env{"/home/u", "", "relative/cache"};
  auto p = resolve_paths({}, env);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->data_dir, fs::path("/home/u/.local/share/spillway"));
  EXPECT_EQ(p->cache_dir, fs::path("/home/u/.cache/spillway"));
}

TEST(Paths, DataDirOverrideCarriesTheCache) {
  PathEnv env{"/home/u", "/xdg/data", "/xdg/cache"};
  auto p = resolve_paths({.data_dir = "/srv/spw"}, env);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->data_dir, fs::path("/srv/spw"));
  EXPECT_EQ(p->cache_dir, fs::path("/srv/spw/cache"));

  auto q = resolve_paths({.data_dir = "/srv/spw", .cache_dir = "/fast/cache"}, env);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->cache_dir, fs::path("/fast/cache"));
}

TEST(Paths, RelativeOverrideBecomesAbsolute) {
  auto p = resolve_paths({.data_dir = "some/dir"}, PathEnv{});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->data_dir.is_absolute());
  EXPECT_EQ(p->data_dir, (fs::current_path() / "some/dir").lexically_normal());
}

TEST(Paths, NoHomeAndNoOverrideIsAClearError) {
  auto p = resolve_paths({}, PathEnv{});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("HOME"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("--data-dir"), std::string::npos) << p.error().message;
}

TEST(Paths, PrepareCreatesBothFolders) {
  TempDir tmp;
  PathEnv env{"/nonexistent-home", (tmp.path() / "d").string(), (tmp.path() / "c").string()};
  auto p = prepare_paths({}, env);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(fs::is_directory(tmp.path() / "d/spillway"));
  EXPECT_TRUE(fs::is_directory(tmp.path() / "c/spillway"));
  // The write probe is cleaned up.
  EXPECT_TRUE(fs::is_empty(tmp.path() / "d/spillway"));
}

TEST(Paths, FileInTheWayIsNamed) {
  TempDir tmp;
  const fs::path blocker = tmp.path() / "blocker";
  { std::ofstream(blocker) << "x"; }
  Status s = ensure_writable_dir(blocker, "data folder");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("data folder"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find(blocker.string()), std::string::npos) << s.error().message;
}

TEST(Paths, UnwritableFolderIsAClearError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can write into read-only folders";
  TempDir tmp;
  const fs::path ro = tmp.path() / "ro";
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  Status s = ensure_writable_dir(ro, "data folder");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("not writable"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find(ro.string()), std::string::npos) << s.error().message;
  fs::permissions(ro, fs::perms::owner_all);
}

}  // namespace
}  // namespace spw::app
