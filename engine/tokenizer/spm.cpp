// SentencePiece encoding of one text fragment: the score-driven merge, as llama.cpp
// llama-vocab.cpp (llm_tokenizer_spm_session).
#include <algorithm>
#include <queue>
#include <string>

#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/merge.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace spw {

namespace {

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

}  // namespace

// llama.cpp llm_tokenizer_spm_session::tokenize on one fragment (spaces already escaped).
void Tokenizer::encode_spm_fragment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<MergeSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    if (encode_should_stop()) return;  // megabytes of text take a while even here
    // A well-formed character is one symbol (as llama.cpp). A byte that does not start one is a
    // symbol of its own, so it cannot swallow the bytes after it (llama.cpp takes the length from
    // the lead byte alone, which turns "\xE2 x" into a lone byte followed by a literal U+2581 and
    // breaks decode(encode(x)) == x).
    const size_t valid = unicode::valid_utf8_len(text, offs);
    const size_t len = valid == 0 ? 1 : valid;
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        MergeSymbol{index - 1, offs + len == text.size() ? -1 : index + 1, offs, len});
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
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) {
    if (encode_should_stop()) return;  // stopped (encode_poll.h)
    try_add_bigram(i - 1, i);
  }

  if (!merge_bigrams(symbols, work, try_add_bigram)) return;  // stopped (encode_poll.h)

  // Resegment. A merged symbol's text is always a token (it was a queued bigram's text), and an
  // unmerged one is a single character; so llama.cpp's rev_merge split (consulted only for text
  // that is not a token, while every rev_merge key is a token text) never applies, and the only
  // cases are "a token" or "byte fallback".
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const MergeSymbol& s = symbols[i];
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

}  // namespace spw
