// Encoding entry points shared by SPM and BPE: the special-token partition (llama.cpp
// tokenizer_st_partition), encode, and encode_segments (trusted/untrusted prompt pieces).
#include <string>

#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw {

namespace {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// C isspace() in the "C" locale, as llama.cpp's lstrip/rstrip use it (never true for bytes >=
// 0x80).
bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

// llama.cpp tokenizer_st_partition: for each special token (longest first), split every unlocked
// text fragment at each occurrence of its text. Fragments hold offsets into `text`.
void Tokenizer::partition_special(std::string_view text, std::vector<Fragment>& fragments) const {
  bool any_unlocked = false;
  for (const Fragment& f : fragments) any_unlocked |= f.token < 0 && !f.locked;
  if (!any_unlocked && !has_inert_) return;
  std::vector<Fragment> next;
  for (const int32_t id : special_tokens_) {
    if (encode_should_stop()) return;  // stopped (encode_poll.h): the encoders stop at once
    const TokenData& tok = tokens_[id];
    if (!any_unlocked && !tok.inert) continue;
    const std::string_view needle = tok.text;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0 || (f.locked && !tok.inert)) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.pos;
      size_t n = f.n;
      while (n > 0) {
        const size_t match = text.substr(0, pos + n).find(needle, pos);
        if (match == std::string_view::npos) {
          next.push_back(Fragment{-1, pos, n, f.locked});
          break;
        }
        size_t left_n = match - pos;
        if (tok.lstrip) {
          while (left_n > 0 && is_c_space(text[pos + left_n - 1])) --left_n;
        }
        if (left_n > 0) next.push_back(Fragment{-1, pos, left_n, f.locked});
        next.push_back(Fragment{id, 0, 0});
        size_t right_pos = match + needle.size();
        size_t right_n = pos + n - right_pos;
        if (tok.rstrip) {
          while (right_n > 0 && is_c_space(text[right_pos])) {
            ++right_pos;
            --right_n;
          }
        }
        pos = right_pos;
        n = right_n;
      }
    }
    fragments.swap(next);
  }
}

std::vector<int32_t> Tokenizer::encode_fragments(std::string_view text,
                                                 const std::vector<Fragment>& fragments,
                                                 bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_) out.push_back(bos_);
  bool prev_special = true;  // SPM: the first fragment gets the space prefix
  std::string escaped;
  for (const Fragment& f : fragments) {
    if (encode_should_stop()) break;  // stopped (encode_poll.h): the ids are incomplete
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view piece = text.substr(f.pos, f.n);
    if (kind_ == VocabKind::Bpe) {
      // llama.cpp's BPE path ignores add_space_prefix when encoding.
      encode_bpe_fragment(piece, out);
      continue;
    }
    escaped.clear();
    escaped.reserve(f.n + f.n / 2 + 4);
    if (add_space_prefix_ && prev_special) escaped += kSpaceMarker;
    for (const char c : piece) {
      if (c == ' ') {
        escaped += kSpaceMarker;
      } else {
        escaped += c;
      }
    }
    encode_spm_fragment(escaped, out);
    prev_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) {
    // Our rule (see the header): without parse_special the text is locked, and only inert
    // USER_DEFINED texts are split out of it (llama.cpp would split every USER_DEFINED text).
    fragments.push_back(Fragment{-1, 0, text.size(), /*locked=*/!parse_special});
    partition_special(text, fragments);
  }
  return encode_fragments(text, fragments, add_special);
}

std::vector<int32_t> Tokenizer::encode_segments(const std::vector<TextSegment>& segments,
                                                bool add_special) const {
  std::string text;
  size_t total = 0;
  for (const TextSegment& s : segments) total += s.text.size();
  text.reserve(total);
  std::vector<Fragment> fragments;
  for (const TextSegment& s : segments) {
    if (s.text.empty()) continue;
    fragments.push_back(Fragment{-1, text.size(), s.text.size(), /*locked=*/!s.trusted});
    text += s.text;
  }
  // Special tokens only inside trusted segments: each is partitioned on its own, with offsets
  // into the concatenation.
  partition_special(text, fragments);

  // The whitespace stripping of special tokens (Phi-3's rstrip) reaches across segment edges in
  // encode(concat): a trusted "<|user|>" followed by an untrusted "  hi" loses those spaces there,
  // so it does here. (Within a segment the partition already stripped.)
  for (size_t i = 0; i < fragments.size(); ++i) {
    if (fragments[i].token < 0) continue;
    const TokenData& tok = tokens_[fragments[i].token];
    if (tok.rstrip) {
      for (size_t j = i + 1; j < fragments.size() && fragments[j].token < 0;) {
        Fragment& f = fragments[j];
        while (f.n > 0 && is_c_space(text[f.pos])) {
          ++f.pos;
          --f.n;
        }
        if (f.n > 0) break;
        fragments.erase(fragments.begin() + static_cast<std::ptrdiff_t>(j));
      }
    }
    if (tok.lstrip) {
      for (size_t j = i; j > 0 && fragments[j - 1].token < 0;) {
        Fragment& f = fragments[j - 1];
        while (f.n > 0 && is_c_space(text[f.pos + f.n - 1])) --f.n;
        if (f.n > 0) break;
        fragments.erase(fragments.begin() + static_cast<std::ptrdiff_t>(j - 1));
        --j;
        --i;
      }
    }
  }

  // Join text that is contiguous in the concatenation, whatever segment it came from.
  std::vector<Fragment> joined;
  joined.reserve(fragments.size());
  for (const Fragment& f : fragments) {
    if (f.token < 0 && !joined.empty() && joined.back().token < 0 &&
        joined.back().pos + joined.back().n == f.pos) {
      joined.back().n += f.n;
    } else {
      joined.push_back(f);
    }
  }
  return encode_fragments(text, joined, add_special);
}

}  // namespace spw
