// Small UTF-8 helpers for app/ingest (lenient: a stray byte decodes as itself, one byte long).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "engine/tokenizer/unicode.h"

namespace spw::app::utf8 {

/// Decodes the code point starting at s[i]; sets `len` to its byte length (>= 1). A byte that
/// does not start a well-formed sequence decodes as itself, one byte long (engine/tokenizer's
/// UTF-8 rules: overlong forms, surrogates and truncated sequences are not well formed).
inline char32_t decode(std::string_view s, size_t i, size_t& len) {
  const size_t n = unicode::valid_utf8_len(s, i);
  if (n == 0) {
    len = 1;
    return static_cast<unsigned char>(s[i]);
  }
  len = n;
  return unicode::decode_utf8(s, i, n);
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
  unicode::append_utf8(static_cast<uint32_t>(cp), out);
}

}  // namespace spw::app::utf8
