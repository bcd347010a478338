// NUMA placement of the host KV tier's arena (docs/DESIGN.md §4.1): which node its chunks are
// bound to. The topology is read from sysfs (no libnuma needed to read it); binding needs
// libnuma (Debian's libnuma-dev, found at configure time: SPILLWAY_HAVE_LIBNUMA). Without it, or
// on a single-node machine, nothing is bound and the kernel places pages where they are first
// touched, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"

namespace spw {

/// --numa-node: auto (bind to the node of the threads that attend the arena, or of the GPU,
/// where the machine has more than one node), off (never bind), or a node number.
struct NumaSetting {
  enum class Mode : uint8_t { Auto, Off, Node };
  Mode mode = Mode::Auto;
  int node = 0;  // Mode::Node only

  bool operator==(const NumaSetting&) const = default;
};

/// "auto" | "off" (any case) | N (a whole number >= 0). Error: "--numa-node 'x': give auto, off
/// or a node number (0, 1, ...)".
Expected<NumaSetting> parse_numa_setting(std::string_view text);
/// "auto", "off" or the node number.
std::string numa_setting_name(const NumaSetting& s);

/// The machine's nodes: node_of_cpu[c] is CPU c's node (-1: not listed).
struct NumaTopology {
  int n_nodes = 1;
  std::vector<int> node_of_cpu;
};

/// Reads <sysfs_root>/node/nodeN/cpulist (sysfs_root: /sys/devices/system). A machine without
/// that folder reads as one node.
NumaTopology read_numa_topology(const std::string& sysfs_root = "/sys/devices/system");

/// A cpulist as sysfs writes it ("0-3,8,10-11") as CPU numbers; empty when malformed.
std::vector<int> parse_cpu_list(std::string_view text);

/// The CPUs this thread may run on (sched_getaffinity); the pool's threads inherit them.
std::vector<int> allowed_cpus();

/// The node every one of `cpus` is on, or none when they span nodes (or one is unknown).
std::optional<int> node_of_cpus(const NumaTopology& t, const std::vector<int>& cpus);

/// A PCI device's node, from <pci_root>/<bus_id>/numa_node (pci_root: /sys/bus/pci/devices;
/// bus_id as "0000:65:00.0", lower case). None when unreadable or -1 (no affinity).
std::optional<int> pci_numa_node(std::string_view bus_id,
                                 const std::string& pci_root = "/sys/bus/pci/devices");

/// The node to bind the arena to, -1 for none. Off: -1. Auto: -1 on a single-node machine or
/// when `attending` is none, else *attending. Node N: N. Errors (Node only): "--numa-node 3:
/// this machine has 1 NUMA node (0 to 0)", "--numa-node 1: this build has no libnuma (install
/// libnuma-dev and rebuild), set --numa-node auto or off".
Expected<int> choose_numa_node(const NumaSetting& s, const NumaTopology& t,
                               std::optional<int> attending);

/// Whether this build links libnuma and the kernel supports its calls.
bool numa_binding_available();

/// Binds [p, p + bytes) to `node` before it is touched: strictly (MPOL_BIND: the allocation
/// fails rather than go elsewhere) or preferred (MPOL_PREFERRED: other nodes when it is full).
/// Precondition: p page-aligned. Error: "cannot bind 64.0 MiB of the host KV tier to NUMA node
/// 1: Invalid argument; set --numa-node auto or off".
Status numa_bind(void* p, size_t bytes, int node, bool strict);

/// The node [p, p + 1) is bound to by its memory policy, -1 when it has none (or without
/// libnuma). For tests.
int numa_bound_node(const void* p);

}  // namespace spw
