#include "engine/common/size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace spw {

Expected<int64_t> parse_size(std::string_view text) {
  const auto bad = [&] {
    return make_error(
        "invalid size '{}' (use a number with K, M, G or T, e.g. 512M or 8GiB; all powers of "
        "1024)",
        text);
  };
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return bad();
  double value = 0;
  {
    const std::string num(s.substr(0, i));
    char* end = nullptr;
    value = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || !std::isfinite(value)) return bad();
  }
  std::string unit;
  for (char c : s.substr(i)) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    unit.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else {
    const char p = unit[0];
    const std::string_view rest = std::string_view(unit).substr(1);
    if (rest != "" && rest != "B" && rest != "IB") return bad();
    switch (p) {
      case 'K':
        mult = 1024.0;
        break;
      case 'M':
        mult = 1024.0 * 1024;
        break;
      case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return bad();
    }
  }
  const double bytes = std::floor(value * mult);
  if (bytes >= 9.2e18) return bad();
  return static_cast<int64_t>(bytes);
}

std::string format_size(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace spw
