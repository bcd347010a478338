// The Disk tier of the KV cache: one preallocated spill file per cache, holding whole logical
// blocks in fixed slots (slot i at byte i * slot_bytes). Written with pwrite by the copy thread,
// read through a read-only MAP_SHARED mapping of the same file, so a block that pwrite has
// written is visible to readers at once (both go through the page cache) and attention reads
// cold blocks where they lie, without a copy.
//
// Files are named spillway-spill-<pid>-<n>.kv so that leftovers of a crashed process can be told
// apart from the files of running ones (remove_stale_spill_files in kv_cache.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/common/expected.h"

namespace spw::kv {

class SpillFile {
 public:
  /// Creates dir/spillway-spill-<pid>-<n>.kv (a fresh name, O_EXCL) of n_slots * slot_bytes
  /// bytes, preallocated with posix_fallocate so that a full disk shows here and not in the
  /// middle of a decode, and maps it read-only. n_slots may be 0 (the folder is still checked).
  /// budget is the --disk-budget the user gave, for messages. Errors: "cannot create the spill
  /// file in DIR: REASON", "not enough disk space in DIR for the 768.0 MiB spill file
  /// (--disk-budget 1.0 GiB): REASON".
  static Expected<std::unique_ptr<SpillFile>> create(const std::string& dir, int64_t n_slots,
                                                     int64_t slot_bytes, int64_t budget);
  /// Unmaps, closes and removes the file.
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t n_slots() const { return n_slots_; }

  /// The mapped bytes of slot i (slot_bytes of them). Precondition: 0 <= i < n_slots().
  const uint8_t* slot(int64_t i) const;

  /// Writes slot_bytes bytes from src into slot i with pwrite (EINTR retried, short writes
  /// continued). Safe from any thread for distinct slots. Error: "writing the spill file FILE
  /// failed: REASON".
  Status write_slot(int64_t i, const uint8_t* src) const;

  /// The error write_slot reports for errno value err (also used for injected failures).
  Error write_error(int err) const;

 private:
  SpillFile(std::string path, int fd, int64_t n_slots, int64_t slot_bytes, uint8_t* map);

  std::string path_;
  int signal_slot_ = -1;  // entry in the table unlink_spill_files_for_signal() reads
  int fd_ = -1;
  int64_t n_slots_ = 0;
  int64_t slot_bytes_ = 0;
  uint8_t* map_ = nullptr;  // [n_slots][slot_bytes], PROT_READ, MAP_SHARED; null when empty
};

/// Parses "spillway-spill-<pid>-<n>.kv"; returns the pid, or -1 for any other name.
int64_t spill_file_pid(const std::string& file_name);

/// Async-signal-safe: unlinks every spill file this process has open (the memory they map
/// stays valid until exit). For a SIGINT/SIGTERM/SIGHUP handler, which should then end the
/// process (re-raise with the default action), since the caches still hold the removed names.
void unlink_spill_files_for_signal() noexcept;

}  // namespace spw::kv
