// Tokenizer read from GGUF metadata (tokenizer.ggml.*): SentencePiece ("llama") and byte-level
// BPE ("gpt2") vocabularies.
//
// Behaviour is that of llama.cpp's llama-vocab.cpp (llm_tokenizer_spm, llm_tokenizer_bpe,
// unicode_regex_split, tokenizer_st_partition, token_to_piece, detokenize), checked token for
// token against its ggml-vocab-*.gguf test data, with these deliberate differences:
//  - special-token texts are recognised only when the caller passes parse_special = true (or,
//    with encode_segments, only inside trusted segments). llama.cpp always splits USER_DEFINED
//    token texts out of the input, even with parse_special = false; we do so only for "inert"
//    ones whose text cannot act as markup (see encode), so that text from documents and users
//    cannot smuggle in tokens (docs/DESIGN.md §3.2: special tokens only in trusted text);
//  - when the metadata names no EOT token, the first of llama.cpp's EOT names (in its list
//    order) that the vocabulary has is taken, where llama.cpp takes whichever its hash map
//    yields first;
//  - BPE: bytes that are not well-formed UTF-8 keep their own bytes (llama.cpp replaces each with
//    U+FFFD before encoding), so decode(encode(x)) == x for any bytes the vocabulary can
//    represent (a vocabulary without a token for a byte such as 0xFF drops it, as llama.cpp);
//  - SPM: a byte that does not start a well-formed UTF-8 character is a symbol of its own
//    (llama.cpp lets a lone lead byte swallow the bytes after it);
//  - BPE: decode does not apply llama.cpp's clean_spaces pass (" ," -> ","), which would break
//    decode(encode(x)) == x;
//  - BPE: an unknown tokenizer.ggml.pre loads (llama.cpp refuses it) with the default
//    pre-tokenizer and a warning; see warnings().
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
class PreTokenizer;

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

/// A piece of a prompt: trusted text (template scaffolding: special-token texts in it become
/// special tokens) or untrusted content (documents, user messages: always ordinary text).
struct TextSegment {
  std::string text;
  bool trusted = false;
};

/// An immutable vocabulary and its encoder/decoder. All methods are const and thread-safe.
/// Token ids are int32 in [0, n_vocab()); -1 means "no such token".
class Tokenizer {
 public:
  /// Builds the tokenizer from the metadata of `file` (the file may be released afterwards). Only
  /// tokenizer metadata is read: vocabulary-only GGUFs (zero tensors) of any general.architecture
  /// load.
  ///
  /// Reads tokenizer.ggml.model, .tokens, .scores (FLOAT32 or INT32), .token_type, .merges (BPE),
  /// .pre (BPE), .bos_token_id, .eos_token_id, .unknown_token_id, .padding_token_id,
  /// .eot_token_id, .eom_token_id, the FIM ids, .add_bos_token, .add_eos_token,
  /// .add_space_prefix, and general.name. Defaults follow llama.cpp:
  ///  - SPM ("llama"): BOS 1, EOS 2, UNK 0 when their keys are absent (each dropped to -1 if
  ///    outside the vocabulary), add_bos true, add_eos false, add_space_prefix true; scores and
  ///    token_type are required.
  ///  - BPE ("gpt2"): BOS 11, EOS 11 (llama.cpp's odd defaults; converters always write the
  ///    keys), no UNK; add_bos false except for the llama-bpe family (llama3, llama-v3,
  ///    llama-bpe, ...), tekken and chameleon; add_eos false; add_space_prefix false (it only
  ///    affects decode, as in llama.cpp). scores and token_type are optional (0 / NORMAL).
  ///    tokenizer.ggml.merges is required ("a b" strings; rank = index, the first of duplicates
  ///    wins). tokenizer.ggml.pre picks the pre-tokenizer regexes (see pretokenizer.cpp); when it
  ///    is missing or not one we support, the "default" pre-tokenizer is used and warnings() says
  ///    so: tokenization then differs from the model's training and output quality degrades.
  ///
  /// Errors (messages start with the file path and name the key):
  ///  - tokenizer.ggml.model missing, or not "llama" / "gpt2";
  ///  - tokens missing; scores / token_type (required for SPM) missing, of the wrong type, or of
  ///    a different length; BPE merges missing or not an array of strings; an empty vocabulary;
  ///    a token text that appears twice;
  ///  - a special-token id >= n_vocab (negative ids and 0xFFFFFFFF mean "none", as converters
  ///    write them, and are not errors);
  ///  - add_bos_token / add_eos_token true while that token does not exist.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Problems found at load that did not stop it, one sentence each, e.g. a BPE vocabulary
  /// without tokenizer.ggml.pre ("... using the 'default' pre-tokenizer ..."). Empty when all is
  /// well. The tokenizer does not print them: callers show them to the user (CLI: to stderr).
  const std::vector<std::string>& warnings() const { return warnings_; }

  /// Text (UTF-8 bytes; invalid UTF-8 is accepted and falls back to byte tokens) to token ids.
  ///
  /// add_special: prepend BOS when add_bos() and append EOS when add_eos(). Empty text gives
  /// [BOS] (if added) or [].
  /// parse_special: find the texts of CONTROL, USER_DEFINED and UNKNOWN tokens (e.g.
  /// "<|im_end|>", "<s>") in `text` and emit their ids, longest first, with the lstrip/rstrip
  /// rules llama.cpp applies (Phi-3 strips whitespace after its special tokens). When false the
  /// whole text is ordinary text: "<|im_end|>" becomes the pieces of those characters. This is
  /// our rule, not llama.cpp's (which splits all USER_DEFINED texts even then): special tokens
  /// come only from trusted text such as a chat template, never from documents or user input.
  /// The one exception are "inert" USER_DEFINED tokens, whose text holds none of <>[]{}| (e.g.
  /// DeepSeek's added "ü", whitespace runs): they cannot act as markup, the model was trained
  /// with them split out of all text, and llama.cpp and HF split them whatever parse_special
  /// says; so do we.
  ///
  /// SPM: a space is prepended to each text fragment that starts the input or follows a special
  /// token (when add_space_prefix), spaces become U+2581, and pieces are merged by score.
  /// BPE: each text fragment is split by the pre-tokenizer regexes, each piece's bytes are mapped
  /// through GPT-2's byte-to-unicode table and merged by lowest merge rank.
  /// Time O(n log n) in the text length.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  /// Encodes the concatenation of `segments` exactly as encode(concat, add_special,
  /// parse_special = true) would, except that special-token texts are only recognised inside
  /// trusted segments (inert USER_DEFINED texts, see encode, everywhere). Adjacent text
  /// (untrusted segments and the non-special parts of trusted ones) is joined before encoding,
  /// so token boundaries across segment edges match the single-string encoding of a benign
  /// prompt (one without special-token texts in untrusted segments). A special-token text that
  /// straddles a segment edge is not recognised. Whitespace stripping after/before a special
  /// token (Phi-3) reaches into neighbouring segments, as in encode(concat).
  std::vector<int32_t> encode_segments(const std::vector<TextSegment>& segments,
                                       bool add_special) const;

  /// Token ids to text, as llama.cpp's llama_vocab::detokenize(tokens, remove_special =
  /// !render_special): the pieces (see token_to_piece) concatenated; without render_special a
  /// leading BOS is dropped; then one leading space is removed from the first remaining piece
  /// when add_space_prefix (the space that encode added), so decode(encode(x, true, false)) == x.
  /// Byte tokens are raw bytes, so split UTF-8 sequences reassemble. Ids outside the
  /// vocabulary render as nothing.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  /// One token's bytes: NORMAL tokens with U+2581 turned back into ' ' (SPM) or with each code
  /// point mapped back to its byte through GPT-2's table (BPE), BYTE tokens "<0xNN>" as
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
  /// BPE: the pre-tokenizer in use (a canonical name such as "llama3", "qwen2", "default");
  /// "" for SPM.
  std::string_view pre_tokenizer() const;

 private:
  struct TokenData {
    std::string text;
    float score = 0.0f;
    TokenType type = TokenType::Normal;
    bool lstrip = false;  // strip whitespace before this special token when it is parsed
    bool rstrip = false;  // strip whitespace after it
    // USER_DEFINED text that cannot act as markup (no <>[]{}| in it, e.g. DeepSeek's "ü"): split
    // out of all text, trusted or not, as llama.cpp and HF do for non-special added tokens.
    bool inert = false;
  };
  // A run of the input that is either plain text [pos, pos + n) or one special token.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token; -1: text
    size_t pos = 0;
    size_t n = 0;
    bool locked = false;  // untrusted text: only inert USER_DEFINED texts are split out of it
  };

  Tokenizer();
  Status load_bpe(const GgufFile& file);  // merges, pre-tokenizer (bpe.cpp)
  void finish_load(const std::string& model_name);
  // llama.cpp tokenizer_st_partition over the text fragments of `fragments` (locked ones: inert
  // tokens only).
  void partition_special(std::string_view text, std::vector<Fragment>& fragments) const;
  // Fragments to ids: BOS/EOS when add_special, special tokens as is, text by SPM or BPE.
  std::vector<int32_t> encode_fragments(std::string_view text,
                                        const std::vector<Fragment>& fragments,
                                        bool add_special) const;
  void encode_spm_fragment(std::string_view escaped, std::vector<int32_t>& out) const;
  void encode_bpe_fragment(std::string_view text, std::vector<int32_t>& out) const;
  int32_t bpe_rank(std::string_view left, std::string_view right, std::string& scratch) const;
  // llama.cpp's token_to_piece with `lstrip` leading spaces removed.
  void append_piece(int32_t id, bool render_special, int lstrip, std::string& out) const;

  VocabKind kind_ = VocabKind::Spm;
  std::vector<TokenData> tokens_;
  // Keys view tokens_[i].text; tokens_ is never resized after the map is built.
  std::unordered_map<std::string_view, int32_t> text_to_id_;
  std::vector<std::string> pieces_;      // token_to_piece(id, render_special = true)
  std::vector<int32_t> special_tokens_;  // CONTROL/USER_DEFINED/UNKNOWN, longest text first
  bool has_inert_ = false;               // some special token is inert
  std::array<int32_t, 256>
      byte_to_token_{};       // byte fallback: <0xNN>, else the 1-byte token, else UNK
  std::vector<uint8_t> eog_;  // per token: 1 = end of generation

  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1, eot_ = -1, eom_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;

  // BPE only.
  std::vector<std::string> merges_;  // tokenizer.ggml.merges as stored
  // "left right" -> rank; keys view merges_, never resized after the map is built.
  std::unordered_map<std::string_view, int32_t> merge_rank_;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;

  std::vector<std::string> warnings_;
};

}  // namespace spw
