// Tokenizer: loading from GGUF metadata, decoding, lookups. Encoding is in encode.cpp (shared),
// spm.cpp and bpe.cpp. Mirrors llama.cpp src/llama-vocab.cpp; comments mark where we differ on
// purpose.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <span>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace spw {

namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// Token texts llama.cpp (llama_vocab::impl::load) recognises by name when the metadata does not
// give the id. Matching tokens are forced to CONTROL; several end generation.
using Names = std::span<const std::string_view>;
constexpr std::string_view kEotNames[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>"};
constexpr std::string_view kEomNames[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreNames[] = {"<|fim_prefix|>",
                                             "<fim-prefix>",
                                             "<fim_prefix>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81"
                                             "begin\xEF\xBD\x9C>",
                                             "<PRE>",
                                             "\xE2\x96\x81<PRE>",
                                             "<|code_prefix|>",
                                             "<|prefix|>"};
constexpr std::string_view kFimSufNames[] = {"<|fim_suffix|>",
                                             "<fim-suffix>",
                                             "<fim_suffix>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                                             "<SUF>",
                                             "\xE2\x96\x81<SUF>",
                                             "<|code_suffix|>",
                                             "<|suffix|>"};
constexpr std::string_view kFimMidNames[] = {"<|fim_middle|>",
                                             "<fim-middle>",
                                             "<fim_middle>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81"
                                             "end\xEF\xBD\x9C>",
                                             "<MID>",
                                             "\xE2\x96\x81<MID>",
                                             "<|code_middle|>",
                                             "<|middle|>"};
constexpr std::string_view kFimPadNames[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepNames[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepNames[] = {"<|file_sep|>"};
constexpr std::string_view kEogNames[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "[e~["};
// gpt-oss: always rendered, so USER_DEFINED whatever the file says.
constexpr std::string_view kAlwaysRenderedNames[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                     "<|constrain|>"};

TokenType to_token_type(int64_t v) {
  return (v >= 0 && v <= 6) ? static_cast<TokenType>(v) : TokenType::Undefined;
}

// llama.cpp token_to_byte: strtol(text.substr(3, 2), 16) for "<0xNN>".
uint8_t byte_of_token_text(std::string_view text) {
  unsigned value = 0;
  for (size_t i = 3; i < text.size() && i < 5; ++i) {
    const char c = text[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      break;
    value = value * 16 + d;
  }
  return static_cast<uint8_t>(value);
}

// A BPE token's text back to bytes: each code point through GPT-2's byte map. A code point
// outside the map (llama.cpp renders "[UNK_BYTE_0x...]" there) is kept as its UTF-8.
std::string bpe_text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = unicode::valid_utf8_len(text, i);
    if (n == 0) {
      out += text[i++];
      continue;
    }
    const int b = unicode::utf8_cpt_to_byte(unicode::decode_utf8(text, i, n));
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

// Reads an optional token-id key into `id` (left unchanged when absent). Negative values and
// 0xFFFFFFFF are how converters write "none"; like llama.cpp we keep the default then. Any other
// value outside the vocabulary is an error (llama.cpp only warns).
Status read_token_id(const GgufFile& file, std::string_view key, int32_t n_vocab, int32_t& id) {
  if (!file.find(key)) return Status::Ok();
  Expected<int64_t> v = file.get_int(key);
  if (!v) return v.error();
  if (*v < 0 || *v == 0xFFFFFFFFll) return Status::Ok();
  if (*v >= n_vocab) {
    return make_error("{}: {} = {} is outside the vocabulary ({} tokens)", file.path(), key, *v,
                      n_vocab);
  }
  id = static_cast<int32_t>(*v);
  return Status::Ok();
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  Expected<std::string> model = file.get_string(kKeyModel);
  if (!model) return model.error();
  VocabKind kind;
  if (*model == "llama") {
    kind = VocabKind::Spm;
  } else if (*model == "gpt2") {
    kind = VocabKind::Bpe;
  } else {
    return make_error(
        "{}: {} is '{}', an unsupported tokenizer model (supported: 'llama' (SentencePiece), "
        "'gpt2' (byte-level BPE))",
        path, kKeyModel, *model);
  }
  const bool bpe = kind == VocabKind::Bpe;

  // tokens, scores and token types: parallel arrays. llama.cpp lets scores and types be absent;
  // we require them for SPM, where merging is driven by the scores.
  Expected<const GgufArray*> texts = file.get_array(kKeyTokens, GgufType::STRING);
  if (!texts) return texts.error();
  if (!*texts) return make_error("{}: {} is missing", path, kKeyTokens);
  const GgufValue* scores_v = file.find(kKeyScores);
  if (!scores_v && !bpe) return make_error("{}: {} is missing", path, kKeyScores);
  if (scores_v &&
      (scores_v->type != GgufType::ARRAY || (scores_v->as_array().elem_type != GgufType::FLOAT32 &&
                                             scores_v->as_array().elem_type != GgufType::INT32))) {
    return make_error("{}: {} must be an ARRAY of FLOAT32 or INT32", path, kKeyScores);
  }
  const GgufValue* types_v = file.find(kKeyTokenType);
  if (!types_v && !bpe) return make_error("{}: {} is missing", path, kKeyTokenType);
  if (types_v &&
      (types_v->type != GgufType::ARRAY || types_v->as_array().elem_type == GgufType::ARRAY ||
       (!types_v->as_array().items.empty() && !types_v->as_array().items[0].is_integer()))) {
    return make_error("{}: {} must be an ARRAY of INT32", path, kKeyTokenType);
  }
  const GgufArray* scores = scores_v ? &scores_v->as_array() : nullptr;
  const GgufArray* types = types_v ? &types_v->as_array() : nullptr;
  const size_t n = (*texts)->items.size();
  if (n == 0) return make_error("{}: {} is empty", path, kKeyTokens);
  if (n > static_cast<size_t>(INT32_MAX))
    return make_error("{}: {} has too many tokens", path, kKeyTokens);
  if (scores && scores->items.size() != n) {
    return make_error("{}: {} has {} entries but {} has {}", path, kKeyScores, scores->items.size(),
                      kKeyTokens, n);
  }
  if (types && types->items.size() != n) {
    return make_error("{}: {} has {} entries but {} has {}", path, kKeyTokenType,
                      types->items.size(), kKeyTokens, n);
  }

  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->kind_ = kind;
  tok->tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tok->tokens_[i];
    t.text = std::string((*texts)->items[i].as_string());
    // llama.cpp renames empty tokens so that none can match empty text.
    if (t.text.empty()) t.text = fmt::format("[EMPTY_{}]", i);
    t.score = scores ? static_cast<float>(scores->items[i].as_double()) : 0.0f;
    t.type = types ? to_token_type(types->items[i].as_int()) : TokenType::Normal;
  }
  tok->text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto [it, inserted] =
        tok->text_to_id_.emplace(std::string_view(tok->tokens_[i].text), static_cast<int32_t>(i));
    if (!inserted) {
      return make_error("{}: {} has the token '{}' twice (ids {} and {})", path, kKeyTokens,
                        tok->tokens_[i].text, it->second, i);
    }
  }

  // BPE: merges and the pre-tokenizer, which also picks llama.cpp's add_bos default.
  bool default_add_bos = true;
  bool default_no_bos = false;
  if (bpe) {
    if (Status s = tok->load_bpe(file); !s) return s.error();
    default_add_bos = tok->pre_->config().add_bos;
    default_no_bos = tok->pre_->config().no_bos;
  }

  // Special ids: llama.cpp's defaults (SPM: BOS 1, EOS 2, UNK 0; BPE: BOS = EOS = 11, no UNK),
  // dropped if outside the vocabulary, then the metadata.
  const int32_t n_vocab = tok->n_vocab();
  auto in_vocab = [&](int32_t id) { return id < n_vocab ? id : -1; };
  tok->bos_ = default_no_bos ? -1 : in_vocab(bpe ? 11 : 1);
  tok->eos_ = in_vocab(bpe ? 11 : 2);
  tok->unk_ = bpe ? -1 : in_vocab(0);
  const std::pair<std::string_view, int32_t*> id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &tok->bos_},
      {"tokenizer.ggml.eos_token_id", &tok->eos_},
      {"tokenizer.ggml.eot_token_id", &tok->eot_},
      {"tokenizer.ggml.eom_token_id", &tok->eom_},
      {"tokenizer.ggml.unknown_token_id", &tok->unk_},
      {"tokenizer.ggml.padding_token_id", &tok->pad_},
      {"tokenizer.ggml.fim_pre_token_id", &tok->fim_pre_},
      {"tokenizer.ggml.fim_suf_token_id", &tok->fim_suf_},
      {"tokenizer.ggml.fim_mid_token_id", &tok->fim_mid_},
      {"tokenizer.ggml.fim_pad_token_id", &tok->fim_pad_},
      {"tokenizer.ggml.fim_rep_token_id", &tok->fim_rep_},
      {"tokenizer.ggml.fim_sep_token_id", &tok->fim_sep_},
      // deprecated spellings of the FIM ids
      {"tokenizer.ggml.prefix_token_id", &tok->fim_pre_},
      {"tokenizer.ggml.suffix_token_id", &tok->fim_suf_},
      {"tokenizer.ggml.middle_token_id", &tok->fim_mid_},
  };
  for (const auto& [key, id] : id_keys) {
    if (Status s = read_token_id(file, key, n_vocab, *id); !s) return s.error();
  }

  Expected<bool> add_bos = file.get_bool(kKeyAddBos, default_add_bos);
  if (!add_bos) return add_bos.error();
  Expected<bool> add_eos = file.get_bool(kKeyAddEos, false);
  if (!add_eos) return add_eos.error();
  Expected<bool> add_space = file.get_bool(kKeyAddSpacePrefix, !bpe);
  if (!add_space) return add_space.error();
  tok->add_bos_ = *add_bos;
  tok->add_eos_ = *add_eos;
  tok->add_space_prefix_ = *add_space;
  if (tok->add_bos_ && tok->bos_ < 0) {
    return make_error("{}: {} is true but the vocabulary has no BOS token", path, kKeyAddBos);
  }
  if (tok->add_eos_ && tok->eos_ < 0) {
    return make_error("{}: {} is true but the vocabulary has no EOS token", path, kKeyAddEos);
  }

  Expected<std::string> name = file.get_string("general.name", std::string());
  if (!name) return name.error();
  tok->finish_load(*name);
  return tok;
}

// Everything llama.cpp derives after reading the arrays: control-by-name, end-of-generation set,
// special-token list, piece cache, byte fallback table, per-model strip flags.
void Tokenizer::finish_load(const std::string& model_name) {
  const int32_t n = n_vocab();
  auto force_control = [&](int32_t id) { tokens_[id].type = TokenType::Control; };
  // llama.cpp takes the first match in unordered_map order; we take the first name in list order
  // that the vocabulary has (deterministic, and the list starts with the most specific end-of-turn
  // markers: Llama 3's <|eot_id|> before <|end_of_text|>, Qwen's <|im_end|> before
  // <|endoftext|>).
  auto first_named = [&](Names names) {
    for (std::string_view s : names) {
      if (const int32_t id = text_to_token(s); id >= 0) return id;
    }
    return int32_t{-1};
  };
  const std::pair<int32_t*, Names> roles[] = {{&eot_, kEotNames},        {&eom_, kEomNames},
                                              {&fim_pre_, kFimPreNames}, {&fim_suf_, kFimSufNames},
                                              {&fim_mid_, kFimMidNames}, {&fim_pad_, kFimPadNames},
                                              {&fim_rep_, kFimRepNames}, {&fim_sep_, kFimSepNames}};
  for (const auto& [id, names] : roles) {
    if (*id < 0) {
      *id = first_named(names);
      if (*id >= 0) force_control(*id);
    }
  }

  eog_.assign(n, 0);
  for (int32_t id : {fim_pad_, fim_rep_, fim_sep_}) {
    if (id >= 0) eog_[id] = 1;
  }
  for (std::string_view s : kEogNames) {
    if (const int32_t id = text_to_token(s); id >= 0) {
      eog_[id] = 1;
      force_control(id);
    }
  }
  for (std::string_view s : kAlwaysRenderedNames) {
    if (const int32_t id = text_to_token(s); id >= 0) tokens_[id].type = TokenType::UserDefined;
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) eog_[id] = 1;
  }
  // o200k_harmony / solar-open: there "<|end|>" ends a message, not the generation.
  auto eog_named = [&](std::string_view s) {
    const int32_t id = text_to_token(s);
    return id >= 0 && eog_[id];
  };
  const bool has_call = eog_named("<|call|>") || eog_named("<|calls|>");
  if (eog_named("<|end|>") && has_call && (eog_named("<|return|>") || eog_named("<|flush|>"))) {
    const int32_t id = text_to_token("<|end|>");
    eog_[id] = 0;
    tokens_[id].type = TokenType::UserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end of generation when "<|tool_response>" is.
  if (eog_named("<|tool_response>") && eog_named("</s>")) {
    const int32_t id = text_to_token("</s>");
    eog_[id] = 0;
    tokens_[id].type = TokenType::Normal;
  }

  // Special tokens, longest text first so that "<|im_end|>" wins over a shorter prefix of it.
  // llama.cpp uses an unstable sort; ties (same length) keep id order here.
  special_tokens_.clear();
  for (int32_t id = 0; id < n; ++id) {
    const TokenType t = tokens_[id].type;
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });
  has_inert_ = false;
  for (int32_t id : special_tokens_) {
    TokenData& t = tokens_[id];
    t.inert =
        t.type == TokenType::UserDefined && t.text.find_first_of("<>[]{}|") == std::string::npos;
    has_inert_ |= t.inert;
  }

  // Pieces as llama.cpp's cache (token_to_piece with special = true).
  pieces_.assign(n, std::string());
  for (int32_t id = 0; id < n; ++id) {
    const TokenData& t = tokens_[id];
    switch (t.type) {
      case TokenType::Control:
      case TokenType::Unknown:
      case TokenType::UserDefined:
        pieces_[id] = t.text;
        break;
      case TokenType::Normal: {
        std::string& p = pieces_[id];
        p.reserve(t.text.size());
        if (kind_ == VocabKind::Bpe) {
          p = bpe_text_to_bytes(t.text);
          break;
        }
        for (size_t i = 0; i < t.text.size();) {
          if (t.text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
            p += ' ';
            i += kSpaceMarker.size();
          } else {
            p += t.text[i++];
          }
        }
        break;
      }
      case TokenType::Byte:
        pieces_[id] = std::string(1, static_cast<char>(byte_of_token_text(t.text)));
        break;
      case TokenType::Unused:
      case TokenType::Undefined:
        break;  // rendered as nothing
    }
  }

  // Byte fallback (llama.cpp byte_to_token): "<0xNN>", else the one-byte token, else (where
  // llama.cpp would throw) UNK, else nothing. SPM only: BPE falls back per mapped byte.
  static constexpr char kHex[] = "0123456789ABCDEF";
  byte_to_token_.fill(-1);
  for (int b = 0; b < 256 && kind_ == VocabKind::Spm; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = text_to_token(std::string_view(name, 6));
    // llama.cpp looks the byte up as a C string, so byte 0 is the empty string: never a token.
    const char ch = static_cast<char>(b);
    if (id < 0 && b != 0) id = text_to_token(std::string_view(&ch, 1));
    byte_to_token_[b] = id >= 0 ? id : unk_;
  }

  // Per-model strip flags that llama.cpp sets by model name (Phi-3 strips whitespace after its
  // special tokens, except after <unk>, <s>, <|endoftext|>).
  std::string lname = model_name;
  std::transform(lname.begin(), lname.end(), lname.begin(), [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  });
  if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens_) tokens_[id].rstrip = true;
    if (const int32_t id = text_to_token("</s>"); id >= 0) tokens_[id].rstrip = true;
    for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const int32_t id = text_to_token(s); id >= 0) tokens_[id].rstrip = false;
    }
  }
}

void Tokenizer::append_piece(int32_t id, bool render_special, int lstrip, std::string& out) const {
  if (id < 0 || id >= n_vocab()) return;
  const TokenType t = tokens_[id].type;
  if (!render_special && (t == TokenType::Control || t == TokenType::Unknown)) return;
  const std::string& p = pieces_[id];
  size_t skip = 0;
  while (static_cast<int>(skip) < lstrip && skip < p.size() && p[skip] == ' ') ++skip;
  out.append(p, skip, std::string::npos);
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  std::string out;
  append_piece(id, render_special, 0, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  // As llama.cpp's detokenize(remove_special = !render_special): a leading BOS is dropped, then
  // the first remaining token loses one leading space when add_space_prefix, so that
  // decode(encode(x, add_special = true)) == x. (SPM: no clean_spaces pass.)
  size_t first = 0;
  if (!render_special && !ids.empty() && bos_ >= 0 && ids[0] == bos_) first = 1;
  bool remove_space = add_space_prefix_;
  for (size_t i = first; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    append_piece(id, render_special, remove_space ? 1 : 0, out);
    remove_space = false;
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id] != 0; }

TokenType Tokenizer::token_type(int32_t id) const {
  return (id >= 0 && id < n_vocab()) ? tokens_[id].type : TokenType::Undefined;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  return (id >= 0 && id < n_vocab()) ? std::string_view(tokens_[id].text) : std::string_view();
}

float Tokenizer::token_score(int32_t id) const {
  return (id >= 0 && id < n_vocab()) ? tokens_[id].score : 0.0f;
}

int32_t Tokenizer::text_to_token(std::string_view text) const {
  const auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

}  // namespace spw
