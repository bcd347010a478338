#include "engine/tokenizer/unicode.h"

#include <array>

namespace spw::unicode {

namespace {

bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

// GPT-2 bytes_to_unicode (also llama.cpp's unicode_byte_to_utf8_map): '!'..'~', U+00A1..U+00AC
// and U+00AE..U+00FF are themselves; the remaining 68 bytes get U+0100, U+0101, ... in order.
struct ByteMap {
  std::array<std::string, 256> utf8;
  std::array<int16_t, 324> byte_of_cpt;  // code points < 0x144 only; -1 = not mapped
  ByteMap() {
    byte_of_cpt.fill(-1);
    std::array<uint32_t, 256> cpt{};
    std::array<bool, 256> direct{};
    for (int b = 0; b < 256; ++b) {
      direct[b] = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    }
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) cpt[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) {
      append_utf8(cpt[b], utf8[b]);
      byte_of_cpt[cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

size_t complete_utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

size_t valid_utf8_len(std::string_view s, size_t pos) {
  const size_t left = s.size() - pos;
  const auto c0 = static_cast<uint8_t>(s[pos]);
  if (c0 < 0x80) return 1;
  if (c0 < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (c0 < 0xE0) return (left >= 2 && is_cont(static_cast<uint8_t>(s[pos + 1]))) ? 2 : 0;
  if (c0 < 0xF0) {
    if (left < 3) return 0;
    const auto c1 = static_cast<uint8_t>(s[pos + 1]);
    const auto c2 = static_cast<uint8_t>(s[pos + 2]);
    if (!is_cont(c1) || !is_cont(c2)) return 0;
    if (c0 == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c0 == 0xED && c1 >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c0 < 0xF5) {
    if (left < 4) return 0;
    const auto c1 = static_cast<uint8_t>(s[pos + 1]);
    if (!is_cont(c1) || !is_cont(static_cast<uint8_t>(s[pos + 2])) ||
        !is_cont(static_cast<uint8_t>(s[pos + 3]))) {
      return 0;
    }
    if (c0 == 0xF0 && c1 < 0x90) return 0;   // overlong
    if (c0 == 0xF4 && c1 >= 0x90) return 0;  // > U+10FFFF
    return 4;
  }
  return 0;
}

void append_utf8(uint32_t cpt, std::string& out) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

uint32_t decode_utf8(std::string_view s, size_t pos, size_t n) {
  const auto c0 = static_cast<uint8_t>(s[pos]);
  if (n == 1) return c0;
  uint32_t cpt = c0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cpt = (cpt << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  return cpt;
}

std::string sanitize_utf8(std::string_view text, std::vector<uint32_t>& orig_offset) {
  orig_offset.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = valid_utf8_len(text, pos);
    if (n == 0) break;
    pos += n;
  }
  if (pos == text.size()) return std::string(text);

  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size() + 16);
  orig_offset.reserve(text.size() + 16);
  pos = 0;
  while (pos < text.size()) {
    const size_t n = valid_utf8_len(text, pos);
    if (n == 0) {
      orig_offset.insert(orig_offset.end(), kReplacement.size(), static_cast<uint32_t>(pos));
      out += kReplacement;
      pos += 1;
    } else {
      for (size_t k = 0; k < n; ++k) orig_offset.push_back(static_cast<uint32_t>(pos + k));
      out.append(text.substr(pos, n));
      pos += n;
    }
  }
  orig_offset.push_back(static_cast<uint32_t>(text.size()));
  return out;
}

std::string_view byte_to_utf8(uint8_t b) { return byte_map().utf8[b]; }

int utf8_cpt_to_byte(uint32_t cpt) {
  const ByteMap& m = byte_map();
  return cpt < m.byte_of_cpt.size() ? m.byte_of_cpt[cpt] : -1;
}

}  // namespace spw::unicode
