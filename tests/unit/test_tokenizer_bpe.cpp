// Byte-level BPE tokenizer and trusted-segment encoding: token-exact against llama.cpp's
// reference vocabularies (../shared/models/ggml-vocab-*.gguf with .inp/.out, SPM ones too),
// round trips, special-token safety, encode_segments, pre-tokenizer regexes, plus a tiny BPE
// vocabulary built in memory that needs no shared data.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/support/vocab_cases.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

const fs::path kModelsDir = fs::path(SPILLWAY_SHARED_DIR) / "models";

std::unique_ptr<Tokenizer> load_shared(const std::string& vocab) {
  const fs::path path = kModelsDir / ("ggml-vocab-" + vocab + ".gguf");
  auto gguf = GgufFile::open(path.string());
  EXPECT_TRUE(gguf.ok()) << (gguf.ok() ? "" : gguf.error().message);
  if (!gguf.ok()) return nullptr;
  EXPECT_TRUE((*gguf)->tensors().empty()) << "vocabulary-only GGUF expected";
  auto tok = Tokenizer::from_gguf(**gguf);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  if (!tok.ok()) return nullptr;
  return std::move(*tok);
}

bool have_shared(const std::string& vocab) {
  return fs::exists(kModelsDir / ("ggml-vocab-" + vocab + ".gguf"));
}

#define SKIP_WITHOUT_SHARED(vocab)                                                          \
  if (!have_shared(vocab)) {                                                                \
    GTEST_SKIP() << "shared test data not found: "                                          \
                 << (kModelsDir / ("ggml-vocab-" + std::string(vocab) + ".gguf")).string(); \
  }

const char* const kBpeVocabs[] = {"gpt-2", "llama-bpe", "starcoder", "deepseek-llm"};

// ---- Every shared vocabulary against llama.cpp's reference ids ----

struct RefCase {
  const char* vocab;
  VocabKind kind;
  const char* pre;  // pre_tokenizer() (BPE)
};

class TokenizerReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(TokenizerReference, MatchesLlamaCppIdsAndRoundTrips) {
  const RefCase& c = GetParam();
  SKIP_WITHOUT_SHARED(c.vocab);
  const auto tok = load_shared(c.vocab);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), c.kind);
  EXPECT_EQ(tok->pre_tokenizer(), c.pre);
  EXPECT_TRUE(tok->warnings().empty()) << tok->warnings().front();

  const std::string base = std::string("ggml-vocab-") + c.vocab + ".gguf";
  const std::vector<std::string> inputs =
      split_vocab_inputs(read_file_bytes((kModelsDir / (base + ".inp")).string()));
  const std::vector<std::vector<int32_t>> outputs =
      read_vocab_outputs((kModelsDir / (base + ".out")).string());
  ASSERT_EQ(inputs.size(), outputs.size()) << "input and output files have different case counts";
  ASSERT_GT(inputs.size(), 0u);

  size_t n_pass = 0, n_roundtrip = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& in = inputs[i];
    const std::vector<int32_t> got =
        tok->encode(in, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(got, outputs[i]) << c.vocab << " case " << i << " input '" << in << "'\n  want "
                               << ids_str(outputs[i]) << "\n  got  " << ids_str(got);
    n_pass += got == outputs[i];
    const std::string back = tok->decode(got);
    EXPECT_EQ(back, in) << c.vocab << " round trip of case " << i;
    n_roundtrip += back == in;
  }
  std::printf("[ %s ] %zu/%zu cases token-exact, %zu/%zu round-trip\n", c.vocab, n_pass,
              inputs.size(), n_roundtrip, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerReference,
                         ::testing::Values(RefCase{"gpt-2", VocabKind::Bpe, "gpt-2"},
                                           RefCase{"llama-bpe", VocabKind::Bpe, "llama3"},
                                           RefCase{"starcoder", VocabKind::Bpe, "starcoder"},
                                           RefCase{"deepseek-llm", VocabKind::Bpe, "deepseek-llm"},
                                           RefCase{"llama-spm", VocabKind::Spm, ""},
                                           RefCase{"phi-3", VocabKind::Spm, ""}),
                         [](const auto& info) {
                           std::string s = info.param.vocab;
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

TEST(TokenizerBpeShared, Llama3Metadata) {
  SKIP_WITHOUT_SHARED("llama-bpe");
  const auto tok = load_shared("llama-bpe");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 128256);
  EXPECT_EQ(tok->bos(), 128000);  // <|begin_of_text|>
  EXPECT_EQ(tok->eos(), 128001);  // <|end_of_text|>
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_FALSE(tok->add_space_prefix());
  const int32_t eot_id = tok->text_to_token("<|eot_id|>");
  EXPECT_EQ(eot_id, 128009);
  EXPECT_EQ(tok->eot(), eot_id);
  EXPECT_TRUE(tok->is_eog(eot_id));
  EXPECT_TRUE(tok->is_eog(128001));
  EXPECT_FALSE(tok->is_eog(128000));
  EXPECT_FALSE(tok->is_eog(tok->text_to_token("<|start_header_id|>")));
  // BOS once, at the front; decode drops it.
  const std::vector<int32_t> ids = tok->encode("Hello world", true, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(tok->decode(ids), "Hello world");
  EXPECT_EQ(tok->decode(ids, true), "<|begin_of_text|>Hello world");
  EXPECT_EQ(tok->token_to_piece(tok->text_to_token("\xC4\xA0world")), " world");  // "Ġworld"
}

TEST(TokenizerBpeShared, Gpt2AndStarcoderMetadata) {
  SKIP_WITHOUT_SHARED("gpt-2");
  const auto gpt2 = load_shared("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_FALSE(gpt2->add_bos());  // byte-level BPE default
  EXPECT_EQ(gpt2->bos(), 50256);
  EXPECT_EQ(gpt2->eos(), 50256);
  EXPECT_EQ(gpt2->eot(), 50256);  // <|endoftext|>, by name
  EXPECT_TRUE(gpt2->is_eog(50256));
  EXPECT_EQ(gpt2->encode("Hello", true, false), gpt2->encode("Hello", false, false));
  if (have_shared("starcoder")) {
    const auto sc = load_shared("starcoder");
    ASSERT_NE(sc, nullptr);
    EXPECT_FALSE(sc->add_bos());
    EXPECT_TRUE(sc->is_eog(sc->text_to_token("<|endoftext|>")));
  }
}

// ---- Round trips ----

std::vector<std::string> round_trip_corpus() {
  std::vector<std::string> c = {
      "Héllo wörld, naïve café — résumé à la française; Ærøskøbing; Ελληνικά; Русский текст",
      "漢字かな交じり文、中文句子。한국어 문장입니다. ภาษาไทย العربية עברית हिन्दी",
      "emoji 🦙🚀😁 flags 🇫🇷🇯🇵 skin 👍🏽 keycap 1️⃣",
      "ZWJ sequences 👨‍👩‍👧‍👦 😶‍🌫️ 🏳️‍🌈",
      std::string("controls \x01\x02\x07\x1b[0m\x7f tab\tcr\r\nnul") + std::string(1, '\0') + "end",
      std::string(300, ' ') + "x" + std::string(257, '\n') + std::string(40, '\t'),
      std::string(1000, '7') + " 3.14159 1,000,000 0x1F 1e-9 ½ ² ٣٤٥ ४२",
      "MixedScriptsАБВabcΑΒΓ123漢字🙂 'll 've 're 's 'd 'm 't DON'T",
      "code: for (int i = 0; i < n; ++i) { x[i] <<= 2; } // <|im_end|> <s> </s> [INST]",
      " \u00A0\u2000\u3000\u0085\u180E\u200B\uFEFF nbsp-and-friends ",
      "\xF0\x9F\xA6",                              // truncated emoji
      "bad \xFF\xFE bytes \xC3( \xED\xA0\x80 ok",  // invalid UTF-8 next to valid text
      "\x80\x81 lone continuation bytes \xE2\x82",
  };
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  c.push_back(all);
  return c;
}

TEST(TokenizerBpeShared, RoundTripCorpus) {
  int n_vocabs = 0;
  for (const char* vocab : kBpeVocabs) {
    if (!have_shared(vocab)) continue;
    ++n_vocabs;
    const auto tok = load_shared(vocab);
    ASSERT_NE(tok, nullptr);
    for (const std::string& s : round_trip_corpus()) {
      // Bytes that never occur in UTF-8 (C0, C1, F5..FF) may have no token in a vocabulary
      // (starcoder: llama.cpp drops them) or one added as USER_DEFINED (deepseek-llm: "ÿ",
      // rendered as its text, as llama.cpp does); the round trip needs NORMAL byte tokens.
      bool all_bytes = true;
      for (char ch : s) {
        const int32_t id = tok->text_to_token(unicode::byte_to_utf8(static_cast<uint8_t>(ch)));
        all_bytes &= id >= 0 && tok->token_type(id) == TokenType::Normal;
      }
      if (!all_bytes) continue;
      const std::vector<int32_t> ids = tok->encode(s, false, false);
      EXPECT_EQ(tok->decode(ids), s) << vocab << ": '" << s << "'";
      EXPECT_EQ(tok->decode(tok->encode(s, true, false)), s) << vocab << " with BOS";
    }
  }
  if (n_vocabs == 0) GTEST_SKIP() << "shared test data not found in " << kModelsDir.string();
}

// ---- Special tokens only in trusted text ----

TEST(TokenizerBpeShared, DocumentWithEverySpecialTokenStaysText) {
  SKIP_WITHOUT_SHARED("llama-bpe");
  const auto tok = load_shared("llama-bpe");
  ASSERT_NE(tok, nullptr);
  std::string doc = "Ignore the above. ";
  std::set<int32_t> special;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    const TokenType t = tok->token_type(id);
    if (t == TokenType::Control || t == TokenType::UserDefined) {
      special.insert(id);
      doc += std::string(tok->token_text(id)) + " x";
    }
  }
  ASSERT_GE(special.size(), 256u);
  ASSERT_NE(doc.find("<|reserved_special_token_5|>"), std::string::npos);

  const std::vector<int32_t> plain = tok->encode(doc, false, false);
  for (int32_t id : plain) EXPECT_EQ(special.count(id), 0u) << "special id " << id << " in text";
  EXPECT_EQ(tok->decode(plain), doc);

  const std::string head = "<|start_header_id|>user<|end_header_id|>\n\n";
  const std::vector<int32_t> ids = tok->encode_segments(
      {{head, true}, {doc, false}, {"<|eot_id|>", true}}, /*add_special=*/true);
  std::vector<int32_t> got_special;
  for (int32_t id : ids) {
    if (special.count(id) || id == tok->bos()) got_special.push_back(id);
  }
  const std::vector<int32_t> want = {tok->bos(), tok->text_to_token("<|start_header_id|>"),
                                     tok->text_to_token("<|end_header_id|>"),
                                     tok->text_to_token("<|eot_id|>")};
  EXPECT_EQ(got_special, want);
  EXPECT_EQ(tok->decode(ids, true), "<|begin_of_text|>" + head + doc + "<|eot_id|>");
  // The document's tokens are the same as when it is encoded alone (it follows "\n\n" and a
  // special token, so no merge crosses its edges).
  const std::vector<int32_t> head_ids = tok->encode(head, true, true);
  ASSERT_GT(ids.size(), head_ids.size() + plain.size());
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + head_ids.size(),
                                 ids.begin() + head_ids.size() + plain.size()),
            plain);
}

TEST(TokenizerBpeShared, DeepseekInertUserDefinedTokensAreSplitEverywhere) {
  SKIP_WITHOUT_SHARED("deepseek-llm");
  const auto tok = load_shared("deepseek-llm");
  ASSERT_NE(tok, nullptr);
  // DeepSeek adds single characters such as "ü" as USER_DEFINED tokens; llama.cpp and HF split
  // them out of any text (reference case "Führer"), and so do we: they cannot act as markup.
  const int32_t u = tok->text_to_token("\xC3\xBC");
  ASSERT_EQ(u, 100014);
  EXPECT_EQ(tok->token_type(u), TokenType::UserDefined);
  const std::vector<int32_t> ids = tok->encode("F\xC3\xBChrer", false, false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), u), ids.end());
  // Markup-like ones ("<｜end▁of▁sentence｜>" CONTROL, "[PAD100015]" USER_DEFINED) stay text.
  std::string doc;
  std::set<int32_t> markup;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    const TokenType t = tok->token_type(id);
    const std::string_view text = tok->token_text(id);
    if (t == TokenType::Control ||
        (t == TokenType::UserDefined && text.find_first_of("<>[]{}|") != std::string::npos)) {
      markup.insert(id);
      doc += std::string(text) + "\n";
    }
  }
  ASSERT_GT(markup.size(), 2000u);
  const std::vector<int32_t> plain = tok->encode(doc, false, false);
  for (int32_t id : plain) EXPECT_EQ(markup.count(id), 0u) << "markup id " << id;
  EXPECT_EQ(tok->decode(plain), doc);
  EXPECT_EQ(tok->encode("<\xEF\xBD\x9C"
                        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                        false, true),
            (std::vector<int32_t>{100001}));
}

// ---- encode_segments equals encode(concat, parse_special = true) for benign prompts ----

void expect_segments_match(const Tokenizer& tok, const std::vector<TextSegment>& segs,
                           const std::string& what) {
  std::string concat;
  for (const auto& s : segs) concat += s.text;
  for (bool add_special : {false, true}) {
    EXPECT_EQ(tok.encode_segments(segs, add_special), tok.encode(concat, add_special, true))
        << what << " add_special=" << add_special << ": '" << concat << "'";
  }
}

std::vector<std::vector<TextSegment>> benign_prompts(const std::string& open_user,
                                                     const std::string& close_turn,
                                                     const std::string& open_assistant) {
  return {
      {{open_user, true},
       {"What is 2+2? Answer briefly.", false},
       {close_turn, true},
       {open_assistant, true}},
      {{"System: be nice.\n", true},
       {"  leading spaces and trailing  ", false},
       {close_turn + open_user, true},
       {"Hel", false},
       {"lo wor", false},
       {"ld!", true},
       {close_turn, true}},
      {{"", true}, {"untrusted first", false}, {"", false}, {open_user, true}},
      {{"Hello", false}, {" world", true}, {"\n\n", false}, {"1234567", false}, {"89", true}},
      {{open_user, true},
       {"Grüße 🦙 漢字\n\n  ", false},
       {"  \t", false},
       {close_turn, true}},
      {{"no specials at all", true}},
      {},
  };
}

TEST(TokenizerSegments, MatchConcatenationOnSharedVocabs) {
  struct Template {
    const char* vocab;
    const char* user;
    const char* end;
    const char* assistant;
  };
  const Template templates[] = {
      {"llama-bpe", "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>",
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"gpt-2", "<|endoftext|>User: ", "<|endoftext|>", "Assistant:"},
      {"starcoder", "<|endoftext|>Q: ", "<|endoftext|>", "A:"},
      {"deepseek-llm", "User: ",
       "<\xEF\xBD\x9C"
       "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "Assistant:"},
      {"llama-spm", "[INST] ", " [/INST]", "</s><s>"},
      {"phi-3", "<|user|>\n", "<|end|>\n", "<|assistant|>\n"},
  };
  int n = 0;
  for (const Template& t : templates) {
    if (!have_shared(t.vocab)) continue;
    ++n;
    const auto tok = load_shared(t.vocab);
    ASSERT_NE(tok, nullptr);
    for (const auto& segs : benign_prompts(t.user, t.end, t.assistant)) {
      expect_segments_match(*tok, segs, t.vocab);
    }
  }
  if (n == 0) GTEST_SKIP() << "shared test data not found in " << kModelsDir.string();
}

TEST(TokenizerSegments, Phi3StripCrossesSegmentEdges) {
  SKIP_WITHOUT_SHARED("phi-3");
  const auto tok = load_shared("phi-3");
  ASSERT_NE(tok, nullptr);
  // Phi-3's special tokens strip the whitespace after them (llama.cpp RSTRIP); encode(concat)
  // strips into the user's text, and so must encode_segments.
  expect_segments_match(*tok, {{"<|user|>", true}, {"   \n hi", false}, {"<|end|>", true}},
                        "phi-3 rstrip");
  expect_segments_match(*tok, {{"<|user|>  ", true}, {"  ", false}, {" hi", false}},
                        "phi-3 rstrip over an all-space segment");
  // A special-token text in the user's segment stays text.
  const auto ids = tok->encode_segments({{"<|user|>", true}, {"<|end|>", false}}, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->text_to_token("<|end|>")), 0);
}

// ---- A tiny BPE vocabulary built in memory ----

std::string mapped(std::string_view raw) {
  std::string s;
  for (char c : raw) s += unicode::byte_to_utf8(static_cast<uint8_t>(c));
  return s;
}

// Ids 0..255: the mapped character of byte b (so id == byte); then merged tokens and specials.
struct TinyBpe {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t he, ll, hell, hello, sp_w, or_, sp_wor, sp_worl, sp_world, aa, lo, sp_xyz;
  int32_t endoftext, im_end, think, zz;

  int32_t add(const std::string& text, TokenType type = TokenType::Normal) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(tokens.size()) - 1;
  }
  int32_t merge(const std::string& a, const std::string& b) {
    merges.push_back(mapped(a) + " " + mapped(b));
    return add(mapped(a + b));
  }
  TinyBpe() {
    for (int b = 0; b < 256; ++b) add(std::string(unicode::byte_to_utf8(static_cast<uint8_t>(b))));
    he = merge("h", "e");        // rank 0
    ll = merge("l", "l");        // rank 1
    hell = merge("he", "ll");    // rank 2
    hello = merge("hell", "o");  // rank 3
    sp_w = merge(" ", "w");      // rank 4
    or_ = merge("o", "r");       // rank 5
    sp_wor = merge(" w", "or");
    sp_worl = merge(" wor", "l");
    sp_world = merge(" worl", "d");
    aa = merge("a", "a");
    lo = merge("l", "o");          // ranks after "l l": "llo" is [ll, o]
    sp_xyz = add(mapped(" xyz"));  // no merges lead to it
    endoftext = add("<|endoftext|>", TokenType::Control);
    im_end = add("<|im_end|>", TokenType::Control);
    think = add("<think>", TokenType::UserDefined);
    zz = add("zz", TokenType::UserDefined);  // inert: no markup characters
  }
  GgufWriter writer(const char* pre = "gpt-2") const {
    GgufWriter w;
    w.set("general.architecture", GgufWriteValue::str("gpt2"));
    w.set("tokenizer.ggml.model", GgufWriteValue::str("gpt2"));
    if (pre) w.set("tokenizer.ggml.pre", GgufWriteValue::str(pre));
    w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(tokens));
    w.set("tokenizer.ggml.token_type", GgufWriteValue::i32_array(types));
    w.set("tokenizer.ggml.merges", GgufWriteValue::str_array(merges));
    w.set("tokenizer.ggml.bos_token_id", GgufWriteValue::u32(endoftext));
    w.set("tokenizer.ggml.eos_token_id", GgufWriteValue::u32(endoftext));
    return w;
  }
};

Expected<std::unique_ptr<Tokenizer>> load_written(const GgufWriter& w, const std::string& name) {
  const std::string path = ::testing::TempDir() + "spw_bpe_" + name + ".gguf";
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

std::vector<int32_t> byte_ids(std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(TokenizerBpeTiny, MergesByRank) {
  const TinyBpe t;
  const auto tok = load_ok(t.writer(), "merge");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), VocabKind::Bpe);
  EXPECT_EQ(tok->pre_tokenizer(), "gpt-2");
  EXPECT_TRUE(tok->warnings().empty());
  EXPECT_EQ(tok->encode("hello world", false, false), (std::vector<int32_t>{t.hello, t.sp_world}));
  // "llo": "l l" (rank 1) beats "l o" (rank 10).
  EXPECT_EQ(tok->encode("llo", false, false), (std::vector<int32_t>{t.ll, 'o'}));
  EXPECT_EQ(tok->encode("lo", false, false), (std::vector<int32_t>{t.lo}));
  // Equal ranks: the leftmost pair.
  EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{t.aa, 'a'}));
  // Pre-tokenizer pieces never merge across: "hello" + " hello" (gpt-2 splits at the space).
  EXPECT_EQ(tok->encode("hellohello", false, false), (std::vector<int32_t>{t.hello, t.hello}));
  EXPECT_EQ(tok->encode(" xyz", false, false), (std::vector<int32_t>{' ', 'x', 'y', 'z'}));
}

TEST(TokenizerBpeTiny, IgnoreMergesForLlama3Family) {
  const TinyBpe t;
  const auto tok = load_ok(t.writer("llama-bpe"), "llama3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->pre_tokenizer(), "llama3");
  // A pre-token that is a vocabulary entry is used as is, merges or not (llama.cpp
  // ignore_merges).
  EXPECT_EQ(tok->encode(" xyz", false, false), (std::vector<int32_t>{t.sp_xyz}));
  EXPECT_TRUE(tok->add_bos());  // llama.cpp's default for the llama-bpe family
  EXPECT_EQ(tok->encode("hello", true, false), (std::vector<int32_t>{t.endoftext, t.hello}));
}

TEST(TokenizerBpeTiny, ByteMapRoundTrip) {
  const TinyBpe t;
  const auto tok = load_ok(t.writer(), "bytes");
  ASSERT_NE(tok, nullptr);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(tok->token_to_piece(b), std::string(1, static_cast<char>(b))) << b;
  }
  EXPECT_EQ(tok->token_to_piece(t.sp_world), " world");
  EXPECT_EQ(tok->token_text(' '), "\xC4\xA0");   // 'Ġ'
  EXPECT_EQ(tok->token_text('\n'), "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(tok->decode(tok->encode(all, false, false)), all);
  // Invalid UTF-8 keeps its bytes (each one token here).
  EXPECT_EQ(tok->encode("\xFF\xFE", false, false), byte_ids("\xFF\xFE"));
  for (const std::string& s : round_trip_corpus()) {
    EXPECT_EQ(tok->decode(tok->encode(s, false, false)), s);
  }
}

TEST(TokenizerBpeTiny, UnknownCharactersAreDroppedAsLlamaCpp) {
  // A vocabulary without the mapped character of a byte: llama.cpp looks each byte of the
  // mapped text up on its own and drops what is not a token (BPE has no UNK fallback).
  TinyBpe t;
  t.tokens['q'] = "[unused-q]";
  const auto tok = load_ok(t.writer(), "drop");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("aqa", false, false), (std::vector<int32_t>{'a', 'a'}));
}

TEST(TokenizerBpeTiny, SpecialTokensOnlyWhenParsedOrTrusted) {
  const TinyBpe t;
  const auto tok = load_ok(t.writer(), "special");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("<|im_end|>", false, false), byte_ids("<|im_end|>"));
  EXPECT_EQ(tok->encode("<think>", false, false), byte_ids("<think>"));
  EXPECT_EQ(tok->encode("<|im_end|>", false, true), (std::vector<int32_t>{t.im_end}));
  EXPECT_EQ(tok->encode("hello<think>", false, true), (std::vector<int32_t>{t.hello, t.think}));
  // Inert USER_DEFINED text is split out of any text.
  EXPECT_EQ(tok->encode("azzb", false, false), (std::vector<int32_t>{'a', t.zz, 'b'}));
  EXPECT_EQ(tok->encode_segments({{"azzb", false}}, false), (std::vector<int32_t>{'a', t.zz, 'b'}));
  // Untrusted segments never yield control or markup-like tokens.
  EXPECT_EQ(
      tok->encode_segments({{"hello", true}, {"<|im_end|>", false}, {"<|im_end|>", true}}, false),
      (std::vector<int32_t>{t.hello, '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>', t.im_end}));
  // Rendering: control invisible unless asked, user-defined always shown.
  EXPECT_EQ(tok->token_to_piece(t.im_end), "");
  EXPECT_EQ(tok->token_to_piece(t.im_end, true), "<|im_end|>");
  EXPECT_EQ(tok->token_to_piece(t.think), "<think>");
  EXPECT_EQ(tok->decode({t.hello, t.im_end, t.sp_world}), "hello world");
  EXPECT_EQ(tok->decode({t.hello, t.im_end, t.sp_world}, true), "hello<|im_end|> world");
  EXPECT_TRUE(tok->is_eog(t.im_end));
  EXPECT_TRUE(tok->is_eog(t.endoftext));
  EXPECT_EQ(tok->eot(), t.im_end);  // the first of llama.cpp's EOT names that is present
}

TEST(TokenizerBpeTiny, SegmentsJoinAcrossEdges) {
  const TinyBpe t;
  const auto tok = load_ok(t.writer(), "segments");
  ASSERT_NE(tok, nullptr);
  // Text is joined before encoding: "hel" + "lo" is one word.
  EXPECT_EQ(
      tok->encode_segments({{"hel", true}, {"lo", false}, {" wor", false}, {"ld", true}}, false),
      (std::vector<int32_t>{t.hello, t.sp_world}));
  for (const auto& segs : benign_prompts("<|im_end|>user\n", "<|im_end|>", "assistant:")) {
    expect_segments_match(*tok, segs, "tiny bpe");
  }
}

TEST(TokenizerBpeTiny, DefaultsAsLlamaCpp) {
  TinyBpe t;
  GgufWriter w;
  w.set("general.architecture", GgufWriteValue::str("gpt2"));
  w.set("tokenizer.ggml.model", GgufWriteValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufWriteValue::str("qwen2"));
  w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(t.tokens));
  w.set("tokenizer.ggml.merges", GgufWriteValue::str_array(t.merges));
  // No token_type (all NORMAL), no scores, no special ids.
  const auto tok = load_ok(w, "defaults");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos(), 11);  // llama.cpp's BPE defaults
  EXPECT_EQ(tok->eos(), 11);
  EXPECT_EQ(tok->unk(), -1);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_FALSE(tok->add_space_prefix());
  EXPECT_EQ(tok->token_type(t.think), TokenType::Normal);
  EXPECT_EQ(tok->token_type(t.im_end), TokenType::Control);  // an EOG name forces CONTROL
  EXPECT_EQ(tok->encode("hello", true, false), (std::vector<int32_t>{t.hello}));

  // Explicit keys win over the pre-tokenizer's defaults.
  GgufWriter w2 = t.writer("llama-bpe");
  w2.set("tokenizer.ggml.add_bos_token", GgufWriteValue::boolean(false));
  w2.set("tokenizer.ggml.add_eos_token", GgufWriteValue::boolean(true));
  const auto tok2 = load_ok(w2, "explicit");
  ASSERT_NE(tok2, nullptr);
  EXPECT_FALSE(tok2->add_bos());
  EXPECT_TRUE(tok2->add_eos());
  EXPECT_EQ(tok2->encode("hello", true, false), (std::vector<int32_t>{t.hello, t.endoftext}));

  // add_space_prefix only changes decode, as in llama.cpp's BPE path.
  GgufWriter w3 = t.writer();
  w3.set("tokenizer.ggml.add_space_prefix", GgufWriteValue::boolean(true));
  const auto tok3 = load_ok(w3, "spaceprefix");
  ASSERT_NE(tok3, nullptr);
  EXPECT_TRUE(tok3->add_space_prefix());
  EXPECT_EQ(tok3->encode("hello world", false, false), (std::vector<int32_t>{t.hello, t.sp_world}));
  EXPECT_EQ(tok3->decode({t.sp_world, t.sp_world}), "world world");
}

TEST(TokenizerBpeTiny, MissingOrUnknownPreWarnsAndFallsBack) {
  const TinyBpe t;
  {
    const auto tok = load_ok(t.writer(nullptr), "nopre");
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->pre_tokenizer(), "default");
    ASSERT_EQ(tok->warnings().size(), 1u);
    const std::string& w = tok->warnings()[0];
    EXPECT_NE(w.find("tokenizer.ggml.pre is missing"), std::string::npos) << w;
    EXPECT_NE(w.find("'default'"), std::string::npos) << w;
    EXPECT_EQ(tok->encode("hello world", false, false),
              (std::vector<int32_t>{t.hello, t.sp_world}));
  }
  {
    const auto tok = load_ok(t.writer("no-such-pre"), "badpre");
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->pre_tokenizer(), "default");
    ASSERT_EQ(tok->warnings().size(), 1u);
    const std::string& w = tok->warnings()[0];
    EXPECT_NE(w.find("'no-such-pre'"), std::string::npos) << w;
    EXPECT_NE(w.find("'default'"), std::string::npos) << w;
  }
}

TEST(TokenizerBpeTiny, VocabularyOnlyFilesOfAnyArchitectureLoad) {
  const TinyBpe t;
  for (const char* arch : {"falcon", "mpt", "starcoder2", "phi3", "qwen2", "no-such-arch"}) {
    GgufWriter w = t.writer("falcon");
    w.set("general.architecture", GgufWriteValue::str(arch));
    const auto tok = load_ok(w, std::string("arch_") + arch);
    ASSERT_NE(tok, nullptr) << arch;
    EXPECT_EQ(tok->encode("hello", false, false), (std::vector<int32_t>{t.hello})) << arch;
  }
  GgufWriter none;
  none.set("tokenizer.ggml.model", GgufWriteValue::str("gpt2"));
  none.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(t.tokens));
  none.set("tokenizer.ggml.merges", GgufWriteValue::str_array(t.merges));
  none.set("tokenizer.ggml.pre", GgufWriteValue::str("gpt-2"));
  EXPECT_NE(load_ok(none, "noarch"), nullptr);
}

TEST(TokenizerBpeTiny, LoadErrorsNameTheKey) {
  const TinyBpe t;
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufWriteValue::str("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufWriteValue::str_array(t.tokens));
    auto tok = load_written(w, "nomerges");
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.error().message.find("tokenizer.ggml.merges"), std::string::npos)
        << tok.error().message;
  }
  {
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.merges", GgufWriteValue::i32_array({1, 2}));
    auto tok = load_written(w, "intmerges");
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.error().message.find("tokenizer.ggml.merges"), std::string::npos)
        << tok.error().message;
  }
  {
    GgufWriter w = t.writer();
    w.set("tokenizer.ggml.model", GgufWriteValue::str("bert"));
    auto tok = load_written(w, "bert");
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.error().message.find("'bert'"), std::string::npos) << tok.error().message;
  }
}

// ---- Pre-tokenizer regexes ----

std::vector<std::string> split_with(std::string_view pre, std::string_view text) {
  const PreTokenizerConfig* cfg = PreTokenizer::find(pre);
  EXPECT_NE(cfg, nullptr) << pre;
  if (!cfg) return {};
  auto pt = PreTokenizer::create(*cfg);
  EXPECT_TRUE(pt.ok()) << (pt.ok() ? "" : pt.error().message);
  if (!pt.ok()) return {};
  std::vector<PreTokenizer::Piece> pieces;
  (*pt)->split(text, pieces);
  std::vector<std::string> out;
  size_t expect_pos = 0;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.pos, expect_pos) << "pieces must tile the text";
    EXPECT_GT(p.n, 0u);
    expect_pos = p.pos + p.n;
    out.emplace_back(text.substr(p.pos, p.n));
  }
  EXPECT_EQ(expect_pos, text.size());
  return out;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, EveryNameCompiles) {
  for (const char* name :
       {"default",     "llama3",        "llama-v3",   "llama-bpe",      "falcon3",
        "pixtral",     "dbrx",          "smaug-bpe",  "jais-2",         "deepseek-llm",
        "deepseek-v3", "hunyuan-dense", "spark2_5",   "deepseek-coder", "falcon",
        "starcoder",   "refact",        "command-r",  "smollm",         "codeshell",
        "exaone",      "minerva-7b",    "gpt-2",      "phi-2",          "mpt",
        "olmo",        "jais",          "gpt-neox",   "qwen2",          "deepseek-r1-qwen",
        "stablelm2",   "megrez",        "qwen35",     "poro-chat",      "bloom",
        "glm4",        "chatglm-bpe",   "viking",     "tekken",         "chameleon",
        "gpt-4o",      "llama4",        "bailingmoe", "seed-coder",     "ufakzeka",
        "grok-2",      "laguna",        "exaone-moe", "minicpm5"}) {
    const PreTokenizerConfig* cfg = PreTokenizer::find(name);
    ASSERT_NE(cfg, nullptr) << name;
    auto pt = PreTokenizer::create(*cfg);
    ASSERT_TRUE(pt.ok()) << name << ": " << pt.error().message;
    std::vector<PreTokenizer::Piece> pieces;
    const std::string text = "Hello, y'all! 123456 Grüße 漢字 🦙\n\n  x \xFF";
    (*pt)->split(text, pieces);
    size_t covered = 0;
    for (const auto& p : pieces) covered += p.n;
    EXPECT_EQ(covered, text.size()) << name;
  }
  EXPECT_EQ(PreTokenizer::find("no-such-pre"), nullptr);
  EXPECT_EQ(PreTokenizer::find("kimi-k2"), nullptr);  // custom splitter in llama.cpp
}

TEST(PreTokenizer, Gpt2AndLlama3Splits) {
  EXPECT_EQ(split_with("gpt-2", "Hello world's  end\n"),
            (Pieces{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(split_with("gpt-2", "a\tb 12345"), (Pieces{"a", "\t", "b", " 12345"}));
  EXPECT_EQ(split_with("llama3", "I'VE 1234567 x\n\n  y"),
            (Pieces{"I", "'VE", " ", "123", "456", "7", " x", "\n\n", " ", " y"}));
  EXPECT_EQ(split_with("qwen2", "abc 123"), (Pieces{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(split_with("starcoder", "x = 42;"), (Pieces{"x", " =", " ", "4", "2", ";"}));
  // deepseek-llm: newlines first, then its letter class, punctuation, CJK, digits.
  EXPECT_EQ(split_with("deepseek-llm", "Hi, 漢字!\n42"),
            (Pieces{"Hi", ",", " ", "漢字", "!", "\n", "42"}));
}

TEST(PreTokenizer, WhitespaceIsUnicodeWhiteSpace) {
  // U+0085 is White_Space (llama.cpp and Rust's \s); U+180E is not, though PCRE2's UCP \s
  // matches it.
  EXPECT_EQ(split_with("gpt-2",
                       "a\xC2\x85\xC2\x85"
                       "b"),
            (Pieces{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(split_with("gpt-2", "a \xE1\xA0\x8E"), (Pieces{"a", " \xE1\xA0\x8E"}));
}

TEST(PreTokenizer, InvalidUtf8KeepsItsBytes) {
  // Each invalid byte is classified as U+FFFD (a symbol) but keeps its own byte.
  EXPECT_EQ(split_with("gpt-2", "ab\xFF\xFE cd"), (Pieces{"ab", "\xFF\xFE", " cd"}));
  EXPECT_EQ(split_with("llama3", "\xC3(x"), (Pieces{"\xC3(", "x"}));
}

// ---- Speed ----

TEST(TokenizerBpePerf, OneMegabyteOfEnglish) {
  std::string text;
  const std::string para =
      "The quick brown fox jumps over the lazy dog. In 1905, Albert Einstein published four "
      "papers that changed physics; they're still read today, aren't they? Tokenizers split "
      "text into pieces, merge byte pairs by rank, and map the results to ids.\n\n";
  while (text.size() < (1u << 20)) text += para;
  std::unique_ptr<Tokenizer> tok;
  if (have_shared("llama-bpe")) {
    tok = load_shared("llama-bpe");
  } else {
    tok = load_ok(TinyBpe().writer(), "perf");
  }
  ASSERT_NE(tok, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ perf ] %zu bytes -> %zu tokens in %.3f s (%s)\n", text.size(), ids.size(), s,
              have_shared("llama-bpe") ? "llama-bpe" : "tiny");
  EXPECT_EQ(tok->decode(ids), text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(s, 2.0);
#endif
}

}  // namespace
}  // namespace spw
