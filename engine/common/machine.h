// What the machine offers a run, for the defaults that must respect it (the default context,
// docs/DESIGN.md §4.2). Read by the callers that choose those defaults (spillway-cli, the app's
// runtime) and handed to the pure policy code as plain numbers: engine/kv never reads /proc.
#pragma once

#include <cstdint>
#include <string_view>

namespace spw {

/// Memory of this machine and this process, in bytes.
struct MachineMemory {
  int64_t physical_bytes = 0;   // installed RAM (sysconf); 0: unknown
  int64_t available_bytes = 0;  // MemAvailable of /proc/meminfo now; 0: unknown
  /// The address space this process may still map under RLIMIT_AS (its soft limit less VmSize
  /// now); -1: no limit.
  int64_t address_space_left = -1;

  bool operator==(const MachineMemory&) const = default;
};

/// Reads the three now (after the model is mapped, so that its mapping counts in VmSize).
/// Never fails: what cannot be read is left unknown.
MachineMemory read_machine_memory();

/// The "MemAvailable:" line of /proc/meminfo text, in bytes (the file says kB, meaning KiB);
/// 0 when absent or malformed.
int64_t parse_mem_available(std::string_view meminfo);

}  // namespace spw
