// Byte-level BPE ("gpt2" vocabularies): merges and pre-tokenizer at load, and the encoding of one
// text fragment, as llama.cpp llama-vocab.cpp (llm_tokenizer_bpe_session::tokenize).
#include <queue>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/merge.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace spw {

namespace {

constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";

// Bigram of adjacent symbols listed in the merges (llama.cpp llm_bigram_bpe).
struct BpeBigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  size_t size;  // bytes of left + right when queued
};
// Lowest rank first; on equal ranks the leftmost pair.
struct BpeBigramGreater {
  bool operator()(const BpeBigram& l, const BpeBigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

Status Tokenizer::load_bpe(const GgufFile& file) {
  const std::string& path = file.path();
  Expected<const GgufArray*> merges = file.get_array(kKeyMerges, GgufType::STRING);
  if (!merges) return merges.error();
  if (!*merges) {
    return make_error("{}: {} is missing (required by tokenizer.ggml.model 'gpt2', byte-level BPE)",
                      path, kKeyMerges);
  }
  merges_.reserve((*merges)->items.size());
  for (const GgufValue& v : (*merges)->items) merges_.emplace_back(v.as_string());
  merge_rank_.reserve(merges_.size());
  for (size_t i = 0; i < merges_.size(); ++i) {
    // llama.cpp splits at the first space after the first byte; an entry without one can never
    // match a pair of symbols.
    const std::string_view m = merges_[i];
    if (m.size() < 2 || m.find(' ', 1) == std::string_view::npos) continue;
    merge_rank_.emplace(m, static_cast<int32_t>(i));  // the first of duplicates wins
  }

  Expected<std::string> pre = file.get_string(kKeyPre, std::string());
  if (!pre) return pre.error();
  const PreTokenizerConfig* config = PreTokenizer::find(*pre);
  if (!config) {
    config = &PreTokenizer::fallback();
    if (pre->empty()) {
      warnings_.push_back(fmt::format(
          "{}: {} is missing; using the '{}' pre-tokenizer. Text will not be split as the model "
          "was trained and generation quality will be degraded; re-convert the model with a "
          "current llama.cpp converter",
          path, kKeyPre, config->id));
    } else {
      warnings_.push_back(fmt::format(
          "{}: {} is '{}', a pre-tokenizer this build does not support; using the '{}' "
          "pre-tokenizer. Text will not be split as the model was trained and generation "
          "quality will be degraded",
          path, kKeyPre, *pre, config->id));
    }
  }
  Expected<std::unique_ptr<PreTokenizer>> pt = PreTokenizer::create(*config);
  if (!pt) return make_error("{}: {}", path, pt.error().message);
  pre_ = std::move(*pt);
  ignore_merges_ = config->ignore_merges;
  return Status::Ok();
}

std::string_view Tokenizer::pre_tokenizer() const {
  return pre_ ? pre_->config().id : std::string_view();
}

int32_t Tokenizer::bpe_rank(std::string_view left, std::string_view right,
                            std::string& scratch) const {
  scratch.assign(left);
  scratch += ' ';
  scratch += right;
  const auto it = merge_rank_.find(scratch);
  return it == merge_rank_.end() ? -1 : it->second;
}

// llama.cpp llm_tokenizer_bpe_session::tokenize on one text fragment.
void Tokenizer::encode_bpe_fragment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<PreTokenizer::Piece> pieces;
  pre_->split(text, pieces);

  std::string word;  // the piece's bytes through GPT-2's byte-to-unicode map
  std::string scratch;
  std::vector<MergeSymbol> symbols;
  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramGreater> work;
  for (const PreTokenizer::Piece& piece : pieces) {
    if (encode_should_stop()) return;  // encode_poll.h
    word.clear();
    for (const char c : text.substr(piece.pos, piece.n)) {
      word += unicode::byte_to_utf8(static_cast<uint8_t>(c));
    }
    // llama.cpp's ignore_merges (llama-3 family): a piece that is a token is that token.
    if (ignore_merges_) {
      if (const int32_t id = text_to_token(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }

    symbols.clear();
    for (size_t offs = 0; offs < word.size();) {
      const size_t len = std::min(unicode::utf8_len(word[offs]), word.size() - offs);
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back(
          MergeSymbol{index - 1, offs + len == word.size() ? -1 : index + 1, offs, len});
      offs += len;
    }
    auto try_add_bigram = [&](int32_t left, int32_t right) {
      if (left == -1 || right == -1) return;
      const MergeSymbol& l = symbols[left];
      const MergeSymbol& r = symbols[right];
      const int32_t rank = bpe_rank(std::string_view(word).substr(l.pos, l.n),
                                    std::string_view(word).substr(r.pos, r.n), scratch);
      if (rank < 0) return;
      work.push(BpeBigram{left, right, rank, l.n + r.n});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) {
      if (encode_should_stop()) return;
      try_add_bigram(i - 1, i);
    }

    if (!merge_bigrams(symbols, work, try_add_bigram)) return;

    for (int32_t i = 0; i != -1; i = symbols[i].next) {
      const MergeSymbol& s = symbols[i];
      const std::string_view str = std::string_view(word).substr(s.pos, s.n);
      if (const int32_t id = text_to_token(str); id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token: as llama.cpp, each byte of the mapped text on its own, dropped when that
      // one-byte string is not a token either.
      for (const char c : str) {
        if (const int32_t id = text_to_token(std::string_view(&c, 1)); id >= 0) out.push_back(id);
      }
    }
  }
}

}  // namespace spw
