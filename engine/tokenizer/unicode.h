// UTF-8 and GPT-2 byte-map helpers for the tokenizers (internal to engine/tokenizer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spw::unicode {

/// Length of the UTF-8 sequence a lead byte announces, exactly as llama.cpp's unicode_len_utf8:
/// from the high nibble only, so a stray continuation byte counts as a 1-byte character and a
/// lead byte is taken at its word even if the following bytes are not continuations.
inline size_t utf8_len(char lead) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(lead) >> 4];
}

/// Length of the well-formed UTF-8 sequence at s[pos] (1..4), or 0 when the bytes there are not
/// one (stray continuation, truncated sequence, overlong form, surrogate, > U+10FFFF).
size_t valid_utf8_len(std::string_view s, size_t pos);

/// Appends the UTF-8 encoding of `cpt` (<= 0x10FFFF).
void append_utf8(uint32_t cpt, std::string& out);

/// Decodes the well-formed sequence of `n` bytes at s[pos] (as valid_utf8_len returned).
uint32_t decode_utf8(std::string_view s, size_t pos, size_t n);

/// `text` with every byte that does not start a well-formed sequence replaced by U+FFFD, so that
/// a UTF-8 regex engine can run on it (llama.cpp's unicode_cpts_from_utf8 does the same). When a
/// replacement happened, `orig_offset` gets, for each byte offset of the result that starts a
/// character (and for its end), the matching offset in `text`; otherwise it is left empty and
/// the result equals `text`.
std::string sanitize_utf8(std::string_view text, std::vector<uint32_t>& orig_offset);

/// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to U+0100.. in
/// order. Returns the UTF-8 text (1 or 2 bytes) of byte `b`'s code point.
std::string_view byte_to_utf8(uint8_t b);

/// The byte whose mapped code point is `cpt`, or -1 when `cpt` is not in the GPT-2 map.
int utf8_cpt_to_byte(uint32_t cpt);

}  // namespace spw::unicode
