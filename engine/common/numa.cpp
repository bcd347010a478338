#include "engine/common/numa.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "engine/common/size.h"

#if defined(SPILLWAY_HAVE_LIBNUMA)
#include <numa.h>
#include <numaif.h>
#endif

namespace spw {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<int> parse_int(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  int v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || s.empty()) return std::nullopt;
  return v;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Expected<NumaSetting> parse_numa_setting(std::string_view text) {
  const std::string t = lower(text);
  NumaSetting s;
  if (t == "auto") return s;
  if (t == "off") {
    s.mode = NumaSetting::Mode::Off;
    return s;
  }
  const auto n = parse_int(t);
  if (!n || *n < 0 || *n > 1023) {
    return make_error("--numa-node '{}': give auto, off or a node number (0, 1, ...)", text);
  }
  s.mode = NumaSetting::Mode::Node;
  s.node = *n;
  return s;
}

std::string numa_setting_name(const NumaSetting& s) {
  switch (s.mode) {
    case NumaSetting::Mode::Auto:
      return "auto";
    case NumaSetting::Mode::Off:
      return "off";
    case NumaSetting::Mode::Node:
      break;
  }
  return std::to_string(s.node);
}

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    const size_t dash = part.find('-');
    const auto a = parse_int(part.substr(0, dash));
    const auto b = dash == std::string_view::npos ? a : parse_int(part.substr(dash + 1));
    if (!a || !b || *a < 0 || *b < *a || *b - *a > 65535) return {};
    for (int c = *a; c <= *b; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return cpus;
}

NumaTopology read_numa_topology(const std::string& sysfs_root) {
  NumaTopology t;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(sysfs_root) / "node";
  int n_nodes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    const auto node = parse_int(std::string_view(name).substr(4));
    if (!node) continue;
    n_nodes = std::max(n_nodes, *node + 1);
    for (const int c : parse_cpu_list(read_text(e.path() / "cpulist"))) {
      if (static_cast<size_t>(c) >= t.node_of_cpu.size()) t.node_of_cpu.resize(c + 1, -1);
      t.node_of_cpu[static_cast<size_t>(c)] = *node;
    }
  }
  t.n_nodes = std::max(n_nodes, 1);
  return t;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::optional<int> node_of_cpus(const NumaTopology& t, const std::vector<int>& cpus) {
  std::optional<int> node;
  for (const int c : cpus) {
    if (c < 0 || static_cast<size_t>(c) >= t.node_of_cpu.size()) return std::nullopt;
    const int n = t.node_of_cpu[static_cast<size_t>(c)];
    if (n < 0 || (node && *node != n)) return std::nullopt;
    node = n;
  }
  return node;
}

std::optional<int> pci_numa_node(std::string_view bus_id, const std::string& pci_root) {
  if (bus_id.empty()) return std::nullopt;
  const auto n =
      parse_int(read_text(std::filesystem::path(pci_root) / lower(bus_id) / "numa_node"));
  if (!n || *n < 0) return std::nullopt;
  return n;
}

Expected<int> choose_numa_node(const NumaSetting& s, const NumaTopology& t,
                               std::optional<int> attending) {
  switch (s.mode) {
    case NumaSetting::Mode::Off:
      return -1;
    case NumaSetting::Mode::Auto:
      if (t.n_nodes <= 1 || !attending || !numa_binding_available()) return -1;
      return *attending;
    case NumaSetting::Mode::Node:
      break;
  }
  if (s.node >= t.n_nodes) {
    return make_error("--numa-node {}: this machine has {} NUMA node{} (0 to {})", s.node,
                      t.n_nodes, t.n_nodes == 1 ? "" : "s", t.n_nodes - 1);
  }
  if (!numa_binding_available()) {
    return make_error(
        "--numa-node {}: this build has no libnuma (install libnuma-dev and rebuild), set "
        "--numa-node auto or off",
        s.node);
  }
  return s.node;
}

#if defined(SPILLWAY_HAVE_LIBNUMA)

bool numa_binding_available() { return numa_available() >= 0; }

Status numa_bind(void* p, size_t bytes, int node, bool strict) {
  constexpr int kMaskBits = 1024;
  unsigned long mask[kMaskBits / (8 * sizeof(unsigned long))] = {};
  constexpr size_t kBitsPerWord = 8 * sizeof(unsigned long);
  if (node < 0 || node >= kMaskBits) {
    return make_error("NUMA node {} is out of range (0 to {}); set --numa-node auto or off", node,
                      kMaskBits - 1);
  }
  mask[static_cast<size_t>(node) / kBitsPerWord] |= 1UL
                                                    << (static_cast<size_t>(node) % kBitsPerWord);
  if (mbind(p, bytes, strict ? MPOL_BIND : MPOL_PREFERRED, mask, kMaskBits, 0) != 0) {
    return make_error(
        "cannot bind {} of the host KV tier to NUMA node {}: {}; set --numa-node "
        "auto or off",
        format_size(static_cast<int64_t>(bytes)), node,
        std::error_code(errno, std::generic_category()).message());
  }
  return Status::Ok();
}

int numa_bound_node(const void* p) {
  constexpr int kMaskBits = 1024;
  constexpr size_t kBitsPerWord = 8 * sizeof(unsigned long);
  unsigned long mask[kMaskBits / kBitsPerWord] = {};
  int mode = 0;
  if (get_mempolicy(&mode, mask, kMaskBits, const_cast<void*>(p), MPOL_F_ADDR) != 0) return -1;
  if (mode != MPOL_BIND && mode != MPOL_PREFERRED) return -1;
  for (size_t b = 0; b < static_cast<size_t>(kMaskBits); ++b) {
    if ((mask[b / kBitsPerWord] >> (b % kBitsPerWord)) & 1UL) return static_cast<int>(b);
  }
  return -1;
}

#else

bool numa_binding_available() { return false; }

Status numa_bind(void*, size_t, int node, bool) {
  return make_error(
      "cannot bind the host KV tier to NUMA node {}: this build has no libnuma; set --numa-node "
      "auto or off",
      node);
}

int numa_bound_node(const void*) { return -1; }

#endif

}  // namespace spw
