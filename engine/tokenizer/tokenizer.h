// Tokenizer read from GGUF metadata (tokenizer.ggml.*). SentencePiece ("llama") vocabularies
// now; byte-level BPE ("gpt2") arrives with the BPE tokenizer.
//
// Behaviour is that of llama.cpp's llama-vocab.cpp (llm_tokenizer_spm, tokenizer_st_partition,
// token_to_piece, detokenize), checked token for token against its ggml-vocab-*.gguf test data,
// with ONE deliberate difference: special-token texts are recognised only when the caller
// passes parse_special = true. llama.cpp always splits USER_DEFINED token texts out of the
// input, even with parse_special = false; we never do, so that text from documents and users
// cannot smuggle in tokens (DESIGN.md §3: special tokens only in trusted text).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/common/expected.h"

namespace spw {

class GgufFile;

/// Token types as stored in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// Which algorithm the vocabulary uses: SentencePiece (scores + byte fallback) or byte-level BPE.
enum class VocabKind { Spm, Bpe };

/// An immutable vocabulary and its encoder/decoder. All methods are const and thread-safe.
/// Token ids are int32 in [0, n_vocab()); -1 means "no such token".
class Tokenizer {
 public:
  /// Builds the tokenizer from the metadata of `file` (the file may be released afterwards).
  ///
  /// Reads tokenizer.ggml.model, .tokens, .scores (FLOAT32 or INT32), .token_type, .bos_token_id,
  /// .eos_token_id, .unknown_token_id, .padding_token_id, .eot_token_id, .eom_token_id, the FIM
  /// ids, .add_bos_token, .add_eos_token, .add_space_prefix, and general.name. Defaults follow
  /// llama.cpp for SPM: BOS 1, EOS 2, UNK 0 when their keys are absent (each dropped to -1 if
  /// outside the vocabulary), add_bos true, add_eos false, add_space_prefix true.
  ///
  /// Errors (messages start with the file path and name the key):
  ///  - tokenizer.ggml.model missing; "gpt2" (BPE: not supported until the BPE tokenizer lands);
  ///    any other name than "llama";
  ///  - tokens / scores / token_type missing, of the wrong type, or of different lengths;
  ///    an empty vocabulary; a token text that appears twice;
  ///  - a special-token id >= n_vocab (negative ids and 0xFFFFFFFF mean "none", as converters
  ///    write them, and are not errors);
  ///  - add_bos_token / add_eos_token true while that token does not exist.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Text (UTF-8 bytes; invalid UTF-8 is accepted and falls back to byte tokens) to token ids.
  ///
  /// add_special: prepend BOS when add_bos() and append EOS when add_eos(). Empty text gives
  /// [BOS] (if added) or [].
  /// parse_special: find the texts of CONTROL, USER_DEFINED and UNKNOWN tokens (e.g.
  /// "<|im_end|>", "<s>") in `text` and emit their ids, longest first, with the lstrip/rstrip
  /// rules llama.cpp applies (Phi-3 strips whitespace after its special tokens). When false the
  /// whole text is ordinary text: "<|im_end|>" becomes the pieces of those characters. This is
  /// our rule, not llama.cpp's (which splits USER_DEFINED texts even then): special tokens come
  /// only from trusted text such as a chat template, never from documents or user input.
  ///
  /// SPM: a space is prepended to each text fragment that starts the input or follows a special
  /// token (when add_space_prefix), spaces become U+2581, and pieces are merged by score.
  /// Time O(n log n) in the text length.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  /// Token ids to text, as llama.cpp's llama_vocab::detokenize(tokens, remove_special =
  /// !render_special): the pieces (see token_to_piece) concatenated; without render_special a
  /// leading BOS is dropped; then one leading space is removed from the first remaining piece
  /// when add_space_prefix (the space that encode added), so decode(encode(x, true, false)) == x.
  /// Byte tokens are raw bytes, so split UTF-8 sequences reassemble. Ids outside the
  /// vocabulary render as nothing.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  /// One token's bytes: NORMAL tokens with U+2581 turned back into ' ', BYTE tokens "<0xNN>" as
  /// that single byte (possibly half a UTF-8 character), USER_DEFINED tokens as their text,
  /// CONTROL and UNKNOWN tokens as nothing unless render_special (then their text), UNUSED and
  /// UNDEFINED tokens as nothing. "" for ids outside the vocabulary.
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  ///< -1 when the vocabulary has none
  int32_t eos() const { return eos_; }  ///< -1 when the vocabulary has none
  int32_t unk() const { return unk_; }  ///< -1 when the vocabulary has none
  int32_t pad() const { return pad_; }  ///< -1 when the vocabulary has none
  int32_t eot() const { return eot_; }  ///< end of turn (from metadata or by name); -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  /// End of generation: EOS, EOT, EOM, and (as llama.cpp) tokens named like <|eot_id|>,
  /// <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, </s>, ... and the FIM pad/repo/file-sep
  /// tokens. False for ids outside the vocabulary.
  bool is_eog(int32_t id) const;

  /// Effective type: the stored tokenizer.ggml.token_type, except that tokens llama.cpp treats
  /// as control by name (EOG/EOT/FIM names) report Control. Undefined for ids out of range.
  TokenType token_type(int32_t id) const;
  /// The vocabulary entry (with U+2581 for spaces, "<0x0A>" for byte tokens); "" out of range.
  std::string_view token_text(int32_t id) const;
  /// The SentencePiece score; 0 out of range.
  float token_score(int32_t id) const;
  /// Exact vocabulary lookup; -1 when `text` is not a token.
  int32_t text_to_token(std::string_view text) const;

  VocabKind kind() const { return kind_; }

 private:
  struct TokenData {
    std::string text;
    float score = 0.0f;
    TokenType type = TokenType::Normal;
    bool lstrip = false;  // strip whitespace before this special token when it is parsed
    bool rstrip = false;  // strip whitespace after it
  };
  // A run of the input that is either plain text [pos, pos + n) or one special token.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token; -1: text
    size_t pos = 0;
    size_t n = 0;
  };

  Tokenizer() = default;
  void finish_load(const std::string& model_name);
  void partition_special(std::string_view text, std::vector<Fragment>& fragments) const;
  void encode_spm_fragment(std::string_view escaped, std::vector<int32_t>& out) const;
  // llama.cpp's token_to_piece with `lstrip` leading spaces removed.
  void append_piece(int32_t id, bool render_special, int lstrip, std::string& out) const;

  VocabKind kind_ = VocabKind::Spm;
  std::vector<TokenData> tokens_;
  // Keys view tokens_[i].text; tokens_ is never resized after the map is built.
  std::unordered_map<std::string_view, int32_t> text_to_id_;
  std::vector<std::string> pieces_;      // token_to_piece(id, render_special = true)
  std::vector<int32_t> special_tokens_;  // CONTROL/USER_DEFINED/UNKNOWN, longest text first
  std::array<int32_t, 256>
      byte_to_token_{};       // byte fallback: <0xNN>, else the 1-byte token, else UNK
  std::vector<uint8_t> eog_;  // per token: 1 = end of generation

  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1, eot_ = -1, eom_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
};

}  // namespace spw
