// Byte-level BPE pre-tokenizers: the regex lists llama.cpp (llm_tokenizer_bpe) applies for each
// tokenizer.ggml.pre name, run with PCRE2 (UTF + UCP, JIT when available). Internal to
// engine/tokenizer.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"

namespace spw {

/// What a tokenizer.ggml.pre name selects (llama.cpp llama_vocab::impl::load + llm_tokenizer_bpe).
struct PreTokenizerConfig {
  std::string_view id;                        ///< canonical name, e.g. "llama3", "default"
  std::span<const std::string_view> regexes;  ///< applied in sequence
  bool ignore_merges = false;  ///< a pre-token that is a whole vocabulary entry is used as is
  bool add_bos = false;        ///< default of add_bos_token when the key is absent
  bool no_bos = false;         ///< the vocabulary has no BOS unless the metadata names one
};

/// A compiled list of regexes. Immutable and thread-safe (each split allocates its own match
/// data).
class PreTokenizer {
 public:
  /// The configuration for `pre` (a tokenizer.ggml.pre value, including llama.cpp's aliases such
  /// as "llama-bpe", "qwen2", "smollm"); nullptr when the name is unknown.
  static const PreTokenizerConfig* find(std::string_view pre);
  /// The "default" configuration (llama.cpp's fallback for a missing pre name).
  static const PreTokenizerConfig& fallback();

  /// Compiles the config's regexes. Errors name the regex and PCRE2's message.
  static Expected<std::unique_ptr<PreTokenizer>> create(const PreTokenizerConfig& config);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  /// A pre-token: bytes [pos, pos + n) of the text given to split().
  struct Piece {
    size_t pos;
    size_t n;
  };

  /// Splits `text` (any bytes) into consecutive non-empty pieces that cover it, as llama.cpp's
  /// unicode_regex_split: each regex in turn splits every piece the previous one produced into
  /// its matches and the unmatched text between them (each gap one piece). Bytes that are not
  /// well-formed UTF-8 are seen by the regexes as U+FFFD but keep their own bytes in the pieces.
  /// Should PCRE2 fail on a piece (only pathological input: a regex with a repeated group, such
  /// as tekken's, on a single word of millions of characters exhausts the 64 MiB JIT stack), the
  /// rest of that piece stays one pre-token: the text is still encoded, only split less.
  void split(std::string_view text, std::vector<Piece>& pieces) const;

  const PreTokenizerConfig& config() const { return *config_; }

 private:
  struct Regex;
  PreTokenizer() = default;
  const PreTokenizerConfig* config_ = nullptr;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace spw
