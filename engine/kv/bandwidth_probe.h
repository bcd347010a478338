// Short bandwidth probes of the memory the KV tiers live in, measured at the moment they run:
// RAM (the window without a GPU, the host tier, the weights of a CPU run) and the disk of the
// spill folder. `spillway-cli bench` reports the RAM probe beside its measured decode bandwidth;
// `spillway-cli plan` predicts prefill and decode times from both (engine/kv/planner.h).
#pragma once

#include <cstdint>
#include <string>

#include "engine/common/expected.h"

namespace spw::kv {

/// Read bandwidth of RAM in GB/s (1e9 bytes/s): the best of 3 timed multi-threaded sums over a
/// buffer of `bytes` (rounded down to 256 KiB, at least 256 KiB), filled first by the same
/// threads so its pages lie near the threads that read them. Returns 0 only if the sum came out
/// wrong (it never should; the check keeps the reads from being optimised away).
double probe_ram_read_gb_per_s(int n_threads, int64_t bytes = int64_t{512} << 20);

struct DiskProbe {
  double read_gb_per_s = 0;   // sequential read of the file, its pages dropped from the cache
  double write_gb_per_s = 0;  // writing it, fsync included
  int64_t bytes = 0;
};

/// Writes a temporary file of `bytes` (rounded up to 4 MiB) in `dir`, fsyncs it, drops its pages
/// from the page cache (posix_fadvise DONTNEED) and reads it back, timing both directions; the
/// file is removed. On tmpfs, or where the kernel keeps the pages anyway, the read runs at RAM
/// speed, which is then what the spill file gets too. Errors name the folder: "cannot measure
/// the disk of DIR: No space left on device".
Expected<DiskProbe> probe_disk(const std::string& dir, int64_t bytes = int64_t{64} << 20);

}  // namespace spw::kv
