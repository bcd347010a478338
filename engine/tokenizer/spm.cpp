// SentencePiece encoding: the special-token partition and the score-driven merge, as llama.cpp
// llama-vocab.cpp (tokenizer_st_partition, llm_tokenizer_spm_session, tokenize).
#include <algorithm>
#include <queue>
#include <string>

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

// Length of the UTF-8 sequence a lead byte announces, exactly as llama.cpp's unicode_len_utf8:
// from the high nibble only, so a stray continuation byte counts as a 1-byte character and a
// lead byte is taken at its word even if the following bytes are not continuations.
size_t utf8_len(char lead) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(lead) >> 4];
}

// Bigram of adjacent symbols whose concatenation is a token (llama.cpp llm_bigram_spm).
struct SpmBigram {
  int32_t left;
  int32_t right;
  float score;
  size_t size;
};
// Highest score first; on equal scores the leftmost pair.
struct SpmBigramLess {
  bool operator()(const SpmBigram& l, const SpmBigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};
// A run of bytes [pos, pos + n) of the fragment; n == 0 once merged into its left neighbour.
struct SpmSymbol {
  int32_t prev;
  int32_t next;
  size_t pos;
  size_t n;
};

}  // namespace

// llama.cpp tokenizer_st_partition: for each special token (longest first), split every text
// fragment at each occurrence of its text. Fragments hold offsets into `text`.
void Tokenizer::partition_special(std::string_view text, std::vector<Fragment>& fragments) const {
  fragments.clear();
  if (text.empty()) return;
  fragments.push_back(Fragment{-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : special_tokens_) {
    const TokenData& tok = tokens_[id];
    const std::string_view needle = tok.text;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.pos;
      size_t n = f.n;
      while (n > 0) {
        const size_t match = text.substr(0, pos + n).find(needle, pos);
        if (match == std::string_view::npos) {
          next.push_back(Fragment{-1, pos, n});
          break;
        }
        size_t left_n = match - pos;
        if (tok.lstrip) {
          while (left_n > 0 && is_c_space(text[pos + left_n - 1])) --left_n;
        }
        if (left_n > 0) next.push_back(Fragment{-1, pos, left_n});
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

// llama.cpp llm_tokenizer_spm_session::tokenize on one fragment (spaces already escaped).
void Tokenizer::encode_spm_fragment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t len = std::min(utf8_len(text[offs]), text.size() - offs);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(SpmSymbol{index - 1, offs + len == text.size() ? -1 : index + 1, offs, len});
    offs += len;
  }

  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramLess> work;
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left == -1 || right == -1) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = text_to_token(text.substr(symbols[left].pos, size));
    if (id < 0) return;
    work.push(SpmBigram{left, right, tokens_[id].score, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!work.empty()) {
    const SpmBigram bigram = work.top();
    work.pop();
    SpmSymbol& left = symbols[bigram.left];
    SpmSymbol& right = symbols[bigram.right];
    // Stale: one side was merged away or has grown since the bigram was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  // Resegment. A merged symbol's text is always a token (it was a queued bigram's text), and an
  // unmerged one is a single character; so llama.cpp's rev_merge split (consulted only for text
  // that is not a token, while every rev_merge key is a token text) never applies, and the only
  // cases are "a token" or "byte fallback".
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const SpmSymbol& s = symbols[i];
    const std::string_view piece = text.substr(s.pos, s.n);
    const int32_t id = text_to_token(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const int32_t b = byte_to_token_[static_cast<uint8_t>(c)];
      if (b >= 0) out.push_back(b);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  std::vector<Fragment> fragments;
  if (parse_special) {
    partition_special(text, fragments);
  } else if (!text.empty()) {
    // Our rule (see the header): without parse_special nothing is special, not even
    // USER_DEFINED texts, which llama.cpp would still split out here.
    fragments.push_back(Fragment{-1, 0, text.size()});
  }

  bool prev_special = true;  // the first fragment gets the space prefix
  if (add_special && add_bos_) out.push_back(bos_);
  std::string escaped;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    escaped.clear();
    escaped.reserve(f.n + f.n / 2 + 4);
    if (add_space_prefix_ && prev_special) escaped += kSpaceMarker;
    for (const char c : text.substr(f.pos, f.n)) {
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

}  // namespace spw
