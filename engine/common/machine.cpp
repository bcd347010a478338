#include "engine/common/machine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <iterator>
#include <string>

namespace spw {

namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The first number after `key` in /proc text, 0 when absent.
int64_t field_kib(std::string_view text, std::string_view key) {
  size_t at = text.find(key);  // at the start of a line
  while (at != std::string_view::npos && at != 0 && text[at - 1] != '\n')
    at = text.find(key, at + 1);
  if (at == std::string_view::npos) return 0;
  size_t p = at + key.size();
  while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data() + p, text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data() + p || v < 0) return 0;
  return v;
}

}  // namespace

int64_t parse_mem_available(std::string_view meminfo) {
  const int64_t kib = field_kib(meminfo, "MemAvailable:");
  return kib > INT64_MAX / 1024 ? 0 : kib * 1024;
}

MachineMemory read_machine_memory() {
  MachineMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) m.physical_bytes = static_cast<int64_t>(pages) * page;
  m.available_bytes = parse_mem_available(read_file("/proc/meminfo"));
  struct rlimit rl = {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t vm = field_kib(read_file("/proc/self/status"), "VmSize:") * 1024;
    const auto limit = static_cast<int64_t>(rl.rlim_cur);
    m.address_space_left = limit > vm ? limit - vm : 0;
  }
  return m;
}

}  // namespace spw
