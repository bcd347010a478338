// The snapshot budget: how much disk the saved KV of documents (app/ask/ask.h snapshots and
// prefill checkpoints, <cache>/snapshots/*.kv) may take. When a snapshot is written and the
// folder holds more than the budget, the least recently used files are removed first (last use:
// the kv_snapshots row's last_used_ms, restores included; a file without a row, such as a
// checkpoint, by its modification time), never the one just written.
//
// Also here: the start-up clean-up of what killed processes leave behind, the temporary files of
// snapshots being written (".kv.tmp-<pid>-XXXXXX") and spill files ("spillway-spill-<pid>-N.kv",
// engine/kv/spill_file.h) whose process no longer runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "app/store/library.h"
#include "engine/common/expected.h"

namespace spw::app {

/// The default budget when none is set: 4 GiB, at most a tenth of the free space of the file
/// system that holds `dir` (its nearest existing parent when it does not exist yet).
int64_t default_snapshot_budget(const std::filesystem::path& dir);

/// `budget` when > 0, else default_snapshot_budget(dir).
int64_t effective_snapshot_budget(int64_t budget, const std::filesystem::path& dir);

/// What the folder's saved KV takes now: the *.kv files (snapshots and checkpoints; temporary
/// files and other files are not counted).
struct SnapshotUsage {
  int64_t files = 0;
  int64_t bytes = 0;
};
SnapshotUsage snapshot_usage(const std::filesystem::path& dir);

struct Eviction {
  int files_removed = 0;
  int64_t bytes_removed = 0;
  SnapshotUsage after;
};

/// Removes the least recently used *.kv files of `dir` (and their kv_snapshots rows) until the
/// folder holds at most `budget` bytes; `keep` (a path in dir, may be empty) is never removed,
/// so one snapshot larger than the budget stays until the next one is written. Errors: the
/// database's.
Expected<Eviction> enforce_snapshot_budget(Library& lib, const std::filesystem::path& dir,
                                           int64_t budget, const std::string& keep = {});

/// Leftovers of killed processes.
struct StaleFiles {
  int snapshot_temps = 0;  // ".kv.tmp-<pid>-*" of snapshot_dir
  int spill_files = 0;     // "spillway-spill-<pid>-N.kv" of spill_dir
};
/// Removes the temporary snapshot files of snapshot_dir and the spill files of spill_dir whose
/// process is not alive (either folder may be empty: skipped). For start-up: the CLI commands
/// that use snapshots, serve and the app.
StaleFiles remove_stale_files(const std::filesystem::path& snapshot_dir,
                              const std::filesystem::path& spill_dir);

/// "saved KV: 12 files, 58.0 MiB of a 4 GiB budget" (docs show, Settings).
std::string snapshot_usage_text(const SnapshotUsage& u, int64_t budget);

}  // namespace spw::app
