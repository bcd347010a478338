// Small UTF-8 helpers for app/ingest (lenient: a stray byte decodes as itself, one byte long).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace spw::app::utf8 {

/// Decodes the code point starting at s[i]; sets `len` to its byte length (>= 1).
inline char32_t decode(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (n == 1 || i + n > s.size()) {
    len = 1;
    return c;
  }
  char32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  len = n;
  return cp;
}

/// Calls f(code_point, byte_offset, byte_length) for each code point of s.
template <typename F>
void for_each(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const char32_t cp = decode(s, i, len);
    f(cp, i, len);
    i += len;
  }
}

inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace spw::app::utf8
