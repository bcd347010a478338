#include "engine/common/huge_pages.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace spw {

ThpMode parse_thp_mode(std::string_view text) {
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return ThpMode::Unknown;
  const std::string_view word = text.substr(open + 1, close - open - 1);
  if (word == "always") return ThpMode::Always;
  if (word == "madvise") return ThpMode::Madvise;
  if (word == "never") return ThpMode::Never;
  return ThpMode::Unknown;
}

ThpMode read_thp_mode(const std::string& path) {
  std::ifstream f(path);
  if (!f) return ThpMode::Unknown;
  std::string line;
  std::getline(f, line);
  return parse_thp_mode(line);
}

std::string_view thp_mode_name(ThpMode m) {
  switch (m) {
    case ThpMode::Always:
      return "always";
    case ThpMode::Madvise:
      return "madvise";
    case ThpMode::Never:
      return "never";
    case ThpMode::Unknown:
      break;
  }
  return "unknown";
}

namespace {

// "7f00a0000000-7f00a4000000 rw-p ...": a mapping's header line; false for a field line.
bool parse_header(std::string_view line, AddressRange& r) {
  const size_t dash = line.find('-');
  const size_t space = line.find(' ');
  if (dash == std::string_view::npos || space == std::string_view::npos || dash > space) {
    return false;
  }
  const char* b = line.data();
  auto [p1, e1] = std::from_chars(b, b + dash, r.begin, 16);
  auto [p2, e2] = std::from_chars(b + dash + 1, b + space, r.end, 16);
  return e1 == std::errc() && e2 == std::errc() && p1 == b + dash && p2 == b + space;
}

int64_t overlap(const AddressRange& m, std::span<const AddressRange> ranges) {
  int64_t bytes = 0;
  for (const AddressRange& r : ranges) {
    const uintptr_t lo = std::max(m.begin, r.begin), hi = std::min(m.end, r.end);
    if (hi > lo) bytes += static_cast<int64_t>(hi - lo);
  }
  return bytes;
}

}  // namespace

int64_t anon_huge_bytes(std::string_view smaps, std::span<const AddressRange> ranges) {
  constexpr std::string_view kField = "AnonHugePages:";
  int64_t total = 0, in_mapping = 0;  // in_mapping: the current mapping's overlap, bytes
  while (!smaps.empty()) {
    const size_t nl = smaps.find('\n');
    const std::string_view line = smaps.substr(0, nl);
    smaps.remove_prefix(nl == std::string_view::npos ? smaps.size() : nl + 1);
    AddressRange m;
    if (parse_header(line, m)) {
      in_mapping = overlap(m, ranges);
      continue;
    }
    if (in_mapping == 0 || line.substr(0, kField.size()) != kField) continue;
    std::string_view v = line.substr(kField.size());
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    int64_t kib = 0;
    if (std::from_chars(v.data(), v.data() + v.size(), kib).ec != std::errc()) continue;
    total += std::min(kib * 1024, in_mapping);
  }
  return total;
}

std::string read_self_smaps() {
  std::ifstream f("/proc/self/smaps");
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace spw
