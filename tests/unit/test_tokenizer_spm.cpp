// SentencePiece tokenizer: token-exact against llama.cpp's reference vocabularies
// (../shared/models/ggml-vocab-*.gguf with .inp/.out), plus a tiny in-memory vocabulary that
// pins merges, byte fallback, special tokens, BOS/EOS and decoding without any shared data.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/vocab_cases.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

const fs::path kModelsDir = fs::path(SPILLWAY_SHARED_DIR) / "models";

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      n = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else
      return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

std::unique_ptr<Tokenizer> load_shared(const std::string& file) {
  auto gguf = GgufFile::open((kModelsDir / file).string());
  EXPECT_TRUE(gguf.ok()) << (gguf.ok() ? "" : gguf.error().message);
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::from_gguf(**gguf);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  if (!tok.ok()) return nullptr;
  return std::move(*tok);
}

class TokenizerSpmReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerSpmReference, MatchesLlamaCppIdsAndRoundTrips) {
  const std::string base = "ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(kModelsDir / base)) {
    GTEST_SKIP() << "shared test data not found: " << (kModelsDir / base).string();
  }
  const auto tok = load_shared(base);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), VocabKind::Spm);

  const std::vector<std::string> inputs =
      split_vocab_inputs(read_file_bytes((kModelsDir / (base + ".inp")).string()));
  const std::vector<std::vector<int32_t>> outputs =
      read_vocab_outputs((kModelsDir / (base + ".out")).string());
  ASSERT_EQ(inputs.size(), outputs.size()) << "input and output files have different case counts";
  ASSERT_GT(inputs.size(), 0u);

  size_t n_pass = 0, n_roundtrip = 0, n_utf8 = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& in = inputs[i];
    const std::vector<int32_t> got =
        tok->encode(in, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(got, outputs[i]) << "case " << i << " input '" << in << "'\n  want "
                               << ids_str(outputs[i]) << "\n  got  " << ids_str(got);
    n_pass += got == outputs[i];
    if (valid_utf8(in)) {
      ++n_utf8;
      const std::string back = tok->decode(got);
      EXPECT_EQ(back, in) << "round trip of case " << i;
      n_roundtrip += back == in;
    }
  }
  std::printf("[ %s ] %zu/%zu cases token-exact, %zu/%zu valid-UTF-8 inputs round-trip\n",
              GetParam().c_str(), n_pass, inputs.size(), n_roundtrip, n_utf8);
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerSpmReference,
                         ::testing::Values("llama-spm", "phi-3"), [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

TEST(TokenizerSpm, Stories260KPromptAndContinuation) {
  const fs::path model = kModelsDir / "stories260K.gguf";
  const fs::path ref_path = kModelsDir / "stories260K.reference.json";
  if (!fs::exists(model) || !fs::exists(ref_path)) {
    GTEST_SKIP() << "shared test data not found: " << model.string();
  }
  const auto tok = load_shared("stories260K.gguf");
  ASSERT_NE(tok, nullptr);
  const auto ref = nlohmann::json::parse(read_file_bytes((ref_path).string()));
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->pad(), -1);  // stored as 0xFFFFFFFF: "none"
  EXPECT_EQ(tok->encode(ref["prompt"].get<std::string>(), true, false),
            ref["prompt_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok->decode(ref["generated_tokens"].get<std::vector<int32_t>>()),
            ref["generated_text"].get<std::string>());
}

// ---- A tiny vocabulary built in memory ----

struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;

  int32_t add(const std::string& text, float score, TokenType type = TokenType::Normal) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(tokens.size()) - 1;
  }
};

constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t byte_id(uint8_t b) { return 3 + b; }
const std::string kSp = "\xE2\x96\x81";  // U+2581

// Ids are fixed by insertion order: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then these.
struct Tiny {
  TinyVocab v;
  int32_t sp, a, b, c, ab, bc, sp_a, abc, x, y, z, xy, yz, im_end, end, tool;
  Tiny() {
    v.add("<unk>", 0, TokenType::Unknown);
    v.add("<s>", 0, TokenType::Control);
    v.add("</s>", 0, TokenType::Control);
    for (int i = 0; i < 256; ++i) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", i);
      v.add(name, 0, TokenType::Byte);
    }
    sp = v.add(kSp, -1.0f);
    a = v.add("a", -2.0f);
    b = v.add("b", -2.0f);
    c = v.add("c", -2.0f);
    ab = v.add("ab", -3.0f);
    bc = v.add("bc", -1.0f);  // beats "ab"
    sp_a = v.add(kSp + "a", -4.0f);
    abc = v.add("abc", -0.5f);
    x = v.add("x", -2.0f);
    y = v.add("y", -2.0f);
    z = v.add("z", -2.0f);
    xy = v.add("xy", -1.5f);  // ties with "yz": the leftmost pair wins
    yz = v.add("yz", -1.5f);
    im_end = v.add("<|im_end|>", 0, TokenType::Control);
    end = v.add("<|end|>", 0, TokenType::Control);
    tool = v.add("<tool>", 0, TokenType::UserDefined);
  }

  GgufWriter writer() const {
    GgufWriter w;
    w.set("general.architecture", GgufWriteValue::str("llama"));
    w.set("tokenizer.ggml.model", GgufWriteValue::str("llama"));
    w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(v.tokens));
    w.set("tokenizer.ggml.scores", GgufWriteValue::f32_array(v.scores));
    w.set("tokenizer.ggml.token_type", GgufWriteValue::i32_array(v.types));
    w.set("tokenizer.ggml.bos_token_id", GgufWriteValue::u32(kBos));
    w.set("tokenizer.ggml.eos_token_id", GgufWriteValue::u32(kEos));
    w.set("tokenizer.ggml.unknown_token_id", GgufWriteValue::u32(kUnk));
    w.set("tokenizer.ggml.padding_token_id", GgufWriteValue::u32(0xFFFFFFFFu));
    return w;
  }
};

Expected<std::unique_ptr<Tokenizer>> load_written(const GgufWriter& w, const std::string& name) {
  const std::string path = ::testing::TempDir() + "spw_tok_" + name + ".gguf";
  if (Status s = w.write(path); !s) return s.error();
  auto file = GgufFile::open(path);
  if (!file) return file.error();
  auto tok = Tokenizer::from_gguf(**file);
  std::remove(path.c_str());
  return tok;
}

std::unique_ptr<Tokenizer> load_ok(const GgufWriter& w, const std::string& name) {
  auto tok = load_written(w, name);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::string error_of(const GgufWriter& w, const std::string& name) {
  auto tok = load_written(w, name);
  return tok.ok() ? std::string("(loaded without error)") : tok.error().message;
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> ids;
  for (char ch : s) ids.push_back(byte_id(static_cast<uint8_t>(ch)));
  return ids;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TokenizerSpm, TinyVocabMetadata) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "meta");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), static_cast<int32_t>(t.v.tokens.size()));
  EXPECT_EQ(tok->kind(), VocabKind::Spm);
  EXPECT_EQ(tok->bos(), kBos);
  EXPECT_EQ(tok->eos(), kEos);
  EXPECT_EQ(tok->unk(), kUnk);
  EXPECT_EQ(tok->pad(), -1);
  EXPECT_TRUE(tok->add_bos());  // SPM default when add_bos_token is absent
  EXPECT_FALSE(tok->add_eos());
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_EQ(tok->eot(), t.im_end);  // found by name (lowest id of <|im_end|>, <|end|>)
  EXPECT_TRUE(tok->is_eog(kEos));
  EXPECT_TRUE(tok->is_eog(t.im_end));
  EXPECT_TRUE(tok->is_eog(t.end));
  EXPECT_FALSE(tok->is_eog(kBos));
  EXPECT_FALSE(tok->is_eog(t.ab));
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_FALSE(tok->is_eog(tok->n_vocab()));
  EXPECT_EQ(tok->token_type(t.im_end), TokenType::Control);
  EXPECT_EQ(tok->token_type(byte_id(0x41)), TokenType::Byte);
  EXPECT_EQ(tok->token_type(t.tool), TokenType::UserDefined);
  EXPECT_EQ(tok->token_type(-5), TokenType::Undefined);
  EXPECT_EQ(tok->token_text(t.sp_a), kSp + "a");
  EXPECT_EQ(tok->token_text(99999), "");
  EXPECT_EQ(tok->text_to_token("abc"), t.abc);
  EXPECT_EQ(tok->text_to_token("nope"), -1);
}

TEST(TokenizerSpm, MergesHighestScoreFirst) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "merge");
  ASSERT_NE(tok, nullptr);
  // "▁abc": bigrams ▁a (-4), ab (-3), bc (-1). bc merges first, then a+bc = abc (-0.5);
  // ab and ▁a are stale by then.
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{t.sp, t.abc}));
  // "▁cab": only ab is a token.
  EXPECT_EQ(tok->encode("cab", false, false), (std::vector<int32_t>{t.sp, t.c, t.ab}));
  // "▁a": merges into the single token ▁a.
  EXPECT_EQ(tok->encode("a", false, false), (std::vector<int32_t>{t.sp_a}));
  // Equal scores: the leftmost pair (xy) wins over yz.
  EXPECT_EQ(tok->encode("xyz", false, false), (std::vector<int32_t>{t.sp, t.xy, t.z}));
  // Spaces become ▁ and every space is its own symbol.
  EXPECT_EQ(tok->encode("ab  c", false, false),
            (std::vector<int32_t>{t.sp, t.ab, t.sp, t.sp, t.c}));
}

TEST(TokenizerSpm, ByteFallbackForUnseenCharacters) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "bytes");
  ASSERT_NE(tok, nullptr);
  // "€" = E2 82 AC is not in the vocabulary: three byte tokens.
  EXPECT_EQ(tok->encode("\xE2\x82\xAC", false, false),
            (std::vector<int32_t>{t.sp, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}));
  EXPECT_EQ(tok->encode("a\n", false, false), (std::vector<int32_t>{t.sp_a, byte_id('\n')}));
  // Invalid UTF-8 (a lone continuation byte, a truncated lead byte) still encodes byte by byte.
  EXPECT_EQ(tok->encode("\x80"
                        "a\xE2",
                        false, false),
            (std::vector<int32_t>{t.sp, byte_id(0x80), t.a, byte_id(0xE2)}));
  // A piece renders its byte; bytes reassemble in decode.
  EXPECT_EQ(tok->token_to_piece(byte_id(0x41)), "A");
  EXPECT_EQ(tok->decode({t.sp, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}), "\xE2\x82\xAC");
}

TEST(TokenizerSpm, SpecialTokensOnlyWhenParsed) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "special");
  ASSERT_NE(tok, nullptr);
  // parse_special = false: the text is plain text, byte fallback for each character.
  EXPECT_EQ(tok->encode("<|im_end|>", false, false), cat({{t.sp}, bytes_of("<|im_end|>")}));
  // ... and so is a USER_DEFINED token (llama.cpp would split this one; we do not).
  EXPECT_EQ(tok->encode("<tool>", false, false), cat({{t.sp}, bytes_of("<tool>")}));
  // parse_special = true: the single ids, and no space prefix where no text fragment is.
  EXPECT_EQ(tok->encode("<|im_end|>", false, true), (std::vector<int32_t>{t.im_end}));
  EXPECT_EQ(tok->encode("<tool>", false, true), (std::vector<int32_t>{t.tool}));
  EXPECT_EQ(tok->encode("<s>", false, true), (std::vector<int32_t>{kBos}));
  EXPECT_EQ(tok->encode("<unk>", false, true), (std::vector<int32_t>{kUnk}));
  // The text after a special token gets the space prefix again.
  EXPECT_EQ(tok->encode("c<|im_end|>ab", false, true),
            (std::vector<int32_t>{t.sp, t.c, t.im_end, t.sp, t.ab}));
  // Without a Phi-3 name, whitespace after a special token is kept: "▁" + "▁ab".
  EXPECT_EQ(tok->encode("<|end|> ab", false, true),
            (std::vector<int32_t>{t.end, t.sp, t.sp, t.ab}));
  // Rendering: control tokens are invisible unless asked for; user-defined ones always show.
  EXPECT_EQ(tok->token_to_piece(t.im_end), "");
  EXPECT_EQ(tok->token_to_piece(t.im_end, true), "<|im_end|>");
  EXPECT_EQ(tok->token_to_piece(t.tool), "<tool>");
  EXPECT_EQ(tok->token_to_piece(kUnk), "");
  EXPECT_EQ(tok->token_to_piece(kUnk, true), "<unk>");
  EXPECT_EQ(tok->token_to_piece(t.sp_a), " a");
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->decode({t.sp, t.c, t.im_end, t.sp, t.ab}), "c ab");
  EXPECT_EQ(tok->decode({t.sp, t.c, t.im_end, t.sp, t.ab}, true), "c<|im_end|> ab");
}

TEST(TokenizerSpm, Phi3NameStripsWhitespaceAfterSpecialTokens) {
  const Tiny t;
  GgufWriter w = t.writer();
  w.set("general.name", GgufWriteValue::str("Phi3"));
  const auto tok = load_ok(w, "phi3");
  ASSERT_NE(tok, nullptr);
  // llama.cpp sets RSTRIP on Phi-3's special tokens: " ab" after <|end|> loses its space,
  // then the fragment gets the usual prefix.
  EXPECT_EQ(tok->encode("<|end|> ab", false, true), (std::vector<int32_t>{t.end, t.sp, t.ab}));
  // ... except after <s>.
  EXPECT_EQ(tok->encode("<s> ab", false, true), (std::vector<int32_t>{kBos, t.sp, t.sp, t.ab}));
}

TEST(TokenizerSpm, BosEosAndEmptyText) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "bos");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{kBos, t.sp, t.ab}));
  EXPECT_EQ(tok->encode("", true, false), (std::vector<int32_t>{kBos}));
  EXPECT_EQ(tok->encode("", true, true), (std::vector<int32_t>{kBos}));
  EXPECT_EQ(tok->encode("", false, false), (std::vector<int32_t>{}));
  EXPECT_EQ(tok->encode("", false, true), (std::vector<int32_t>{}));

  GgufWriter w = t.writer();
  w.set("tokenizer.ggml.add_bos_token", GgufWriteValue::boolean(false));
  w.set("tokenizer.ggml.add_eos_token", GgufWriteValue::boolean(true));
  const auto tok2 = load_ok(w, "eos");
  ASSERT_NE(tok2, nullptr);
  EXPECT_FALSE(tok2->add_bos());
  EXPECT_TRUE(tok2->add_eos());
  EXPECT_EQ(tok2->encode("ab", true, false), (std::vector<int32_t>{t.sp, t.ab, kEos}));
  EXPECT_EQ(tok2->encode("ab", false, false), (std::vector<int32_t>{t.sp, t.ab}));
  EXPECT_EQ(tok2->encode("", true, false), (std::vector<int32_t>{kEos}));
}

TEST(TokenizerSpm, NoSpacePrefixWhenDisabled) {
  const Tiny t;
  GgufWriter w = t.writer();
  w.set("tokenizer.ggml.add_space_prefix", GgufWriteValue::boolean(false));
  const auto tok = load_ok(w, "noprefix");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{t.abc}));
  EXPECT_EQ(tok->encode(" a", false, false), (std::vector<int32_t>{t.sp_a}));
  EXPECT_EQ(tok->decode({t.sp_a}), " a");  // nothing to remove
}

TEST(TokenizerSpm, DecodeRoundTripAndLeadingSpace) {
  const Tiny t;
  const auto tok = load_ok(t.writer(), "decode");
  ASSERT_NE(tok, nullptr);
  for (const std::string s :
       {"abc", "ab  c", " xyz", "a\n\tb", "\xE2\x82\xAC x", "<|im_end|>", "  ", "z"}) {
    EXPECT_EQ(tok->decode(tok->encode(s, false, false)), s) << "'" << s << "'";
  }
  // As llama.cpp detokenize: the first token (here BOS, which renders as nothing) takes the
  // leading-space removal, so the text after BOS keeps its space.
  EXPECT_EQ(tok->decode({kBos, t.sp, t.ab}), "ab");  // leading BOS dropped, then its space
  EXPECT_EQ(tok->decode(tok->encode("ab", true, false)), "ab");
  EXPECT_EQ(tok->decode({kBos, t.sp, t.ab}, true), "<s> ab");
  EXPECT_EQ(tok->decode({t.sp, t.ab, kEos}), "ab");
  EXPECT_EQ(tok->decode({t.sp, t.ab, kEos}, true), "ab</s>");
  EXPECT_EQ(tok->decode({}), "");
  EXPECT_EQ(tok->decode({t.ab, -7, 1 << 30}), "ab");  // unknown ids render as nothing
}

TEST(TokenizerSpm, LoadErrorsNameTheKey) {
  const Tiny t;
  {
    // A BPE vocabulary needs its merges (test_tokenizer_bpe.cpp covers BPE loading).
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.model", GgufWriteValue::str("gpt2"));
    const std::string e = error_of(w, "gpt2");
    EXPECT_NE(e.find("BPE"), std::string::npos) << e;
    EXPECT_NE(e.find("tokenizer.ggml.merges"), std::string::npos) << e;
    EXPECT_NE(e.find("tokenizer.ggml.model"), std::string::npos) << e;
  }
  {
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.model", GgufWriteValue::str("rwkv"));
    const std::string e = error_of(w, "rwkv");
    EXPECT_NE(e.find("'rwkv'"), std::string::npos) << e;
  }
  {
    GgufWriter w;
    w.set("general.architecture", GgufWriteValue::str("llama"));
    const std::string e = error_of(w, "nomodel");
    EXPECT_NE(e.find("tokenizer.ggml.model"), std::string::npos) << e;
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufWriteValue::str("llama"));
    w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(t.v.tokens));
    w.set("tokenizer.ggml.token_type", GgufWriteValue::i32_array(t.v.types));
    const std::string e = error_of(w, "noscores");
    EXPECT_NE(e.find("tokenizer.ggml.scores"), std::string::npos) << e;
  }
  {
    GgufWriter w = t.writer();
    std::vector<int32_t> types = t.v.types;
    types.pop_back();
    w.set("tokenizer.ggml.token_type", GgufWriteValue::i32_array(types));
    const std::string e = error_of(w, "shorttypes");
    EXPECT_NE(e.find("tokenizer.ggml.token_type"), std::string::npos) << e;
  }
  {
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.scores", GgufWriteValue::str_array(t.v.tokens));
    const std::string e = error_of(w, "strscores");
    EXPECT_NE(e.find("tokenizer.ggml.scores"), std::string::npos) << e;
  }
  {
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.eos_token_id", GgufWriteValue::u32(100000));
    const std::string e = error_of(w, "eosrange");
    EXPECT_NE(e.find("tokenizer.ggml.eos_token_id"), std::string::npos) << e;
  }
  {
    GgufWriter w = t.writer();
    std::vector<std::string> tokens = t.v.tokens;
    tokens.back() = "abc";
    w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(tokens));
    const std::string e = error_of(w, "dup");
    EXPECT_NE(e.find("'abc' twice"), std::string::npos) << e;
  }
}

TEST(TokenizerSpm, LongTextIsNotQuadratic) {
  // Correctness on a long input (the priority-queue merge keeps it O(n log n)); no timing.
  const Tiny t;
  const auto tok = load_ok(t.writer(), "long");
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "abc xyz ";
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  ASSERT_EQ(ids.size(), 20000u * 5 + 1);
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace spw

namespace spw {
namespace {

// A byte that does not start a well-formed UTF-8 character must not swallow the bytes after it:
// "\xE2 x" once came back as "\xE2\xE2\x96\x81x" (the space turned into a literal U+2581).
TEST(TokenizerSpmInvalidUtf8, LoneBytesRoundTripNextToSpaces) {
  const fs::path vocab = fs::path(SPILLWAY_SHARED_DIR) / "models" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "shared test data not found at " << vocab;
  auto gguf = GgufFile::open(vocab.string());
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::from_gguf(**gguf);
  ASSERT_TRUE(tok.ok());
  for (const std::string s :
       {std::string("\xE2 x"), std::string("x\xF0\x9F y"), std::string("a \xC3"),
        std::string("\xFF\xFE  z"), std::string("\xE2\x82 \xE2\x82\xAC")}) {
    EXPECT_EQ((*tok)->decode((*tok)->encode(s, false, false)), s)
        << ids_str((*tok)->encode(s, false, false));
    EXPECT_EQ((*tok)->decode((*tok)->encode(s, true, false)), s);
  }
}

}  // namespace
}  // namespace spw
