#include "app/paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

namespace spw::app {
namespace fs = std::filesystem;

namespace {

constexpr const char* kAppDirName = "spillway";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// XDG base directory spec: a variable that is unset, empty or not absolute is ignored.
Expected<fs::path> xdg_base(const std::string& xdg_value, const std::string& home,
                            const char* home_relative_default, const char* variable) {
  if (!xdg_value.empty() && fs::path(xdg_value).is_absolute()) return fs::path(xdg_value);
  if (home.empty() || !fs::path(home).is_absolute()) {
    return make_error(
        "cannot find a folder for Spillway's files: ${} is not set and $HOME is {} "
        "(pass --data-dir DIR)",
        variable, home.empty() ? "not set" : "not an absolute path");
  }
  return fs::path(home) / home_relative_default;
}

Expected<fs::path> absolute_of(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) return make_error("cannot resolve folder '{}': {}", p.string(), ec.message());
  return abs.lexically_normal();
}

}  // namespace

PathEnv PathEnv::from_process() {
  return PathEnv{env_or_empty("HOME"), env_or_empty("XDG_DATA_HOME"),
                 env_or_empty("XDG_CACHE_HOME")};
}

Expected<AppPaths> resolve_paths(const PathOverrides& overrides, const PathEnv& env) {
  AppPaths out;
  if (!overrides.data_dir.empty()) {
    auto data = absolute_of(overrides.data_dir);
    if (!data) return data.error();
    out.data_dir = *data;
  } else {
    auto base = xdg_base(env.xdg_data_home, env.home, ".local/share", "XDG_DATA_HOME");
    if (!base) return base.error();
    out.data_dir = (*base / kAppDirName).lexically_normal();
  }

  if (!overrides.cache_dir.empty()) {
    auto cache = absolute_of(overrides.cache_dir);
    if (!cache) return cache.error();
    out.cache_dir = *cache;
  } else if (!overrides.data_dir.empty()) {
    out.cache_dir = out.data_dir / "cache";
  } else {
    auto base = xdg_base(env.xdg_cache_home, env.home, ".cache", "XDG_CACHE_HOME");
    if (!base) return base.error();
    out.cache_dir = (*base / kAppDirName).lexically_normal();
  }
  return out;
}

Status ensure_writable_dir(const fs::path& dir, std::string_view what, std::string_view flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return make_error("cannot create the {} '{}': {}", what, dir.string(), ec.message());
  }
  if (!fs::is_directory(dir, ec)) {
    return make_error("the {} '{}' exists but is not a folder", what, dir.string());
  }
  // access(W_OK) is not enough (root, read-only mounts, ACLs): really create a file.
  const fs::path probe = dir / (".spillway-write-test-" + std::to_string(::getpid()));
  errno = 0;
  bool written = false;
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    written = f && (f << 'x') && f.flush();
  }
  const int err = errno;
  if (!written) {
    fs::remove(probe, ec);
    return make_error("the {} '{}' is not writable: {} (choose another with {})", what,
                      dir.string(), std::strerror(err != 0 ? err : EACCES), flag);
  }
  fs::remove(probe, ec);
  return Status::Ok();
}

Expected<AppPaths> prepare_paths(const PathOverrides& overrides, const PathEnv& env) {
  auto paths = resolve_paths(overrides, env);
  if (!paths) return paths;
  if (Status s = ensure_writable_dir(paths->data_dir, "data folder"); !s) return s.error();
  if (Status s = ensure_writable_dir(paths->cache_dir, "cache folder"); !s) return s.error();
  return paths;
}

}  // namespace spw::app
