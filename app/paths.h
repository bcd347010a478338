// Where Spillway keeps its files.
//
// data folder  (library database, settings, job results): $XDG_DATA_HOME/spillway, or
//              ~/.local/share/spillway when XDG_DATA_HOME is unset, empty or relative (XDG spec).
// cache folder (KV snapshots, the disk tier's spill files): $XDG_CACHE_HOME/spillway, or
//              ~/.cache/spillway.
// A `--data-dir DIR` given by the user replaces the data folder and, unless a cache folder is
// given too, puts the cache under DIR/cache, so one flag keeps a run entirely inside DIR
// (tests, portable installs).
//
// Resolving touches nothing on disk; prepare_paths() also creates both folders and checks that
// a file can be written in each, failing with a message that names the folder and the reason.
#pragma once

#include <filesystem>
#include <string>

#include "engine/common/expected.h"

namespace spw::app {

/// The environment values path resolution reads, gathered once so tests can pass their own.
struct PathEnv {
  std::string home;            // $HOME
  std::string xdg_data_home;   // $XDG_DATA_HOME
  std::string xdg_cache_home;  // $XDG_CACHE_HOME

  /// Reads HOME, XDG_DATA_HOME and XDG_CACHE_HOME from this process's environment.
  static PathEnv from_process();
};

/// Folders chosen by the user (command line or settings); empty means "use the default".
struct PathOverrides {
  std::filesystem::path data_dir{};   // --data-dir
  std::filesystem::path cache_dir{};  // empty: <data_dir>/cache when data_dir is set, else XDG
};

/// The resolved folders, both absolute.
struct AppPaths {
  std::filesystem::path data_dir;
  std::filesystem::path cache_dir;
};

/// Works out both folders without touching the disk. Fails only when a default is needed and
/// $HOME is unset or relative. Relative overrides are taken relative to the working directory.
Expected<AppPaths> resolve_paths(const PathOverrides& overrides, const PathEnv& env);

/// Creates `dir` (and its parents) if missing and checks a file can be created in it.
/// `what` names the folder in the message ("data folder", "cache folder"), `flag` the option
/// that chooses another ("--data-dir", "--spill-dir").
Status ensure_writable_dir(const std::filesystem::path& dir, std::string_view what,
                           std::string_view flag = "--data-dir");

/// resolve_paths() followed by ensure_writable_dir() on both folders.
Expected<AppPaths> prepare_paths(const PathOverrides& overrides,
                                 const PathEnv& env = PathEnv::from_process());

}  // namespace spw::app
