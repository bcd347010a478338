// Pre-tokenizer regexes per tokenizer.ggml.pre name, copied from llama.cpp's llm_tokenizer_bpe
// constructor (src/llama-vocab.cpp) with the name -> type mapping of llama_vocab::impl::load.
//
// llama.cpp runs the gpt-2 and llama-3 regexes with hand-written splitters and the others with
// std::regex over a "collapsed" text (each non-ASCII code point replaced by a byte standing for
// its category). We run every regex with PCRE2 (UTF + UCP); for the regexes below the results
// are the same, with two adjustments that keep them so:
//  - \s and \S are rewritten to Unicode's White_Space set (llama.cpp's unicode_set_whitespace;
//    also what Rust's regex, used by HF tokenizers, means by \s). PCRE2's UCP \s would also
//    match U+180E.
//  - $ matches only at the very end of the piece (PCRE2_DOLLAR_ENDONLY, as ECMAScript's $).
// Names whose llama.cpp regexes rely on the category collapse in a way real Unicode categories
// do not reproduce (\p{Lu} vs \p{Ll}: youtu, tiny_aya) or on custom code (kimi-k2, afmoe,
// superbpe, gemma4, whitespace) are not listed: they load with the default pre-tokenizer and a
// warning.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/unicode.h"

namespace spw {

namespace {

using Regexes = std::span<const std::string_view>;

// The contraction alternatives llama.cpp writes without (?i:...).
#define SPW_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3Regex = SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex = SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kDefault[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2Regex,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};
constexpr std::string_view kGpt2[] = {kGpt2Regex};
constexpr std::string_view kLlama3[] = {kLlama3Regex};
constexpr std::string_view kJais2[] = {
    SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})",
};
constexpr std::string_view kDeepseekLlm[] = {
    "[\r\n]",
    // Cased letters (Lu, Ll, Lt), written with escapes: several of these code points (U+1F7D,
    // U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are canonical singletons that text tools silently
    // replace by their NFC form, which would change the class.
    R"re(\s?[)re"
    R"re(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})re"
    R"re(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386})re"
    R"re(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F})re"
    R"re(\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA})re"
    R"re(\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})re"
    R"re(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})re"
    R"re(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4})re"
    R"re(\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})re"
    R"re(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})re"
    R"re(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})re"
    R"re(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})re"
    R"re(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})re"
    R"re(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E})re"
    R"re(\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A})re"
    R"re(\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})re"
    R"re(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})re"
    R"re(]+)re",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
constexpr std::string_view kDeepseek3Tail =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDeepseek3[] = {
    R"(\p{N}{1,3})",
    "[一-龥぀-ゟ゠-ヿ]+",
    kDeepseek3Tail,
};
constexpr std::string_view kSpark25[] = {
    R"(\p{N}{1,3})",
    "[一-龥぀-ゟ゠-ヿ]+",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
    R"(\p{N})",
};
constexpr std::string_view kDeepseekCoder[] = {
    "[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})",
};
constexpr std::string_view kFalcon[] = {
    R"([\p{P}\$\+<=>\^~\|`]+)",
    kGpt2Regex,
    R"([0-9][0-9][0-9])",
};
constexpr std::string_view kStarcoder[] = {R"(\p{N})", kGpt2Regex};
constexpr std::string_view kQwen2[] = {kQwen2Regex};
constexpr std::string_view kQwen35[] = {
    SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr std::string_view kPoro[] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)"};
constexpr std::string_view kViking[] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"};
constexpr std::string_view kTekken[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr std::string_view kChameleon[] = {
    R"(<sentinel:[0-9]+>)",                    // sentinel tokens
    R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)",  // image tokens
    R"(([\t\n]|    |  ))",                     // as tokenizer.json
    R"(\p{N})",                                // single digits
    R"([\p{P}!-/:-@\[-`{-~])",                 // punctuation, isolated
    kGpt2Regex,
};
constexpr std::string_view kGpt4o[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)" SPW_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)" SPW_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr std::string_view kBailingMoe[] = {
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)",
};
constexpr std::string_view kSeedCoder[] = {
    SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr std::string_view kUfakzeka[] = {
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr std::string_view kLaguna[] = {R"([^\n]+|[\n]+)", kQwen2Regex};
constexpr std::string_view kExaoneMoe[] = {
    SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)",
};
constexpr std::string_view kMinicpm5[] = {
    R"(\p{N}{1,3})",
    SPW_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

#undef SPW_CONTRACTIONS

// Canonical configurations (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*).
const PreTokenizerConfig kCfgDefault{"default", kDefault};
const PreTokenizerConfig kCfgLlama3{"llama3", kLlama3, /*ignore_merges=*/true, /*add_bos=*/true};
const PreTokenizerConfig kCfgDbrx{"dbrx", kLlama3};
const PreTokenizerConfig kCfgJais2{"jais-2", kJais2};
const PreTokenizerConfig kCfgDeepseekLlm{"deepseek-llm", kDeepseekLlm};
const PreTokenizerConfig kCfgDeepseek3{"deepseek-v3", kDeepseek3};
const PreTokenizerConfig kCfgSpark25{"spark2_5", kSpark25};
const PreTokenizerConfig kCfgDeepseekCoder{"deepseek-coder", kDeepseekCoder};
const PreTokenizerConfig kCfgFalcon{"falcon", kFalcon};
const PreTokenizerConfig kCfgStarcoder{"starcoder", kStarcoder};
const PreTokenizerConfig kCfgGpt2{"gpt-2", kGpt2};
const PreTokenizerConfig kCfgQwen2{"qwen2", kQwen2};
const PreTokenizerConfig kCfgQwen35{"qwen35", kQwen35};
const PreTokenizerConfig kCfgPoro{"poro-chat", kPoro};
const PreTokenizerConfig kCfgChatGlm4{"chatglm-bpe", kLlama3, false, false, /*no_bos=*/true};
const PreTokenizerConfig kCfgViking{"viking", kViking};
const PreTokenizerConfig kCfgTekken{"tekken", kTekken, true, true};
const PreTokenizerConfig kCfgChameleon{"chameleon", kChameleon, false, true};
const PreTokenizerConfig kCfgGpt4o{"gpt-4o", kGpt4o};
const PreTokenizerConfig kCfgBailingMoe{"bailingmoe", kBailingMoe};
const PreTokenizerConfig kCfgSeedCoder{"seed-coder", kSeedCoder};
const PreTokenizerConfig kCfgUfakzeka{"ufakzeka", kUfakzeka};
const PreTokenizerConfig kCfgLaguna{"laguna", kLaguna};
const PreTokenizerConfig kCfgExaoneMoe{"exaone-moe", kExaoneMoe};
const PreTokenizerConfig kCfgMinicpm5{"minicpm5", kMinicpm5, true};

struct NameEntry {
  std::string_view name;
  const PreTokenizerConfig* config;
};
// Every tokenizer.ggml.pre value llama.cpp accepts for these types.
const NameEntry kNames[] = {
    {"default", &kCfgDefault},
    {"llama3", &kCfgLlama3},
    {"llama-v3", &kCfgLlama3},
    {"llama-bpe", &kCfgLlama3},
    {"falcon3", &kCfgLlama3},
    {"falcon-h1", &kCfgLlama3},
    {"pixtral", &kCfgLlama3},
    {"midm-2.0", &kCfgLlama3},
    {"lfm2", &kCfgLlama3},
    {"jina-v5-nano", &kCfgLlama3},
    {"dbrx", &kCfgDbrx},
    {"smaug-bpe", &kCfgDbrx},
    {"jais-2", &kCfgJais2},
    {"deepseek-llm", &kCfgDeepseekLlm},
    {"deepseek-v3", &kCfgDeepseek3},
    {"hunyuan-dense", &kCfgDeepseek3},
    {"joyai-llm", &kCfgDeepseek3},
    {"hy_v4", &kCfgDeepseek3},
    {"spark2_5", &kCfgSpark25},
    {"deepseek-coder", &kCfgDeepseekCoder},
    {"falcon", &kCfgFalcon},
    {"starcoder", &kCfgStarcoder},
    {"refact", &kCfgStarcoder},
    {"command-r", &kCfgStarcoder},
    {"smollm", &kCfgStarcoder},
    {"codeshell", &kCfgStarcoder},
    {"exaone", &kCfgStarcoder},
    {"minerva-7b", &kCfgStarcoder},
    {"mellum2", &kCfgStarcoder},
    {"gpt-2", &kCfgGpt2},
    {"phi-2", &kCfgGpt2},
    {"jina-es", &kCfgGpt2},
    {"jina-de", &kCfgGpt2},
    {"gigachat", &kCfgGpt2},
    {"jina-v2-es", &kCfgGpt2},
    {"jina-v2-de", &kCfgGpt2},
    {"a.x-4.0", &kCfgGpt2},
    {"mellum", &kCfgGpt2},
    {"modern-bert", &kCfgGpt2},
    {"mpt", &kCfgGpt2},
    {"olmo", &kCfgGpt2},
    {"jais", &kCfgGpt2},
    {"trillion", &kCfgGpt2},
    {"granite-docling", &kCfgGpt2},
    {"exaone4", &kCfgGpt2},
    // Not a llama.cpp name (its converter writes "gpt-2", "mpt" or "olmo" for GPT-NeoX
    // tokenizers); accepted because NeoX's byte-level pre-tokenizer is GPT-2's regex.
    {"gpt-neox", &kCfgGpt2},
    {"qwen2", &kCfgQwen2},
    {"deepseek-r1-qwen", &kCfgQwen2},
    {"kormo", &kCfgQwen2},
    {"f2llmv2", &kCfgQwen2},
    {"megrez", &kCfgQwen2},
    {"stablelm2", &kCfgQwen2},
    {"hunyuan", &kCfgQwen2},
    {"solar-open", &kCfgQwen2},
    {"grok-2", &kCfgQwen2},
    {"qwen35", &kCfgQwen35},
    {"poro-chat", &kCfgPoro},
    {"bloom", &kCfgPoro},
    {"gpt3-finnish", &kCfgPoro},
    {"glm4", &kCfgChatGlm4},
    {"chatglm-bpe", &kCfgChatGlm4},
    {"viking", &kCfgViking},
    {"tekken", &kCfgTekken},
    {"chameleon", &kCfgChameleon},
    {"gpt-4o", &kCfgGpt4o},
    {"llama4", &kCfgGpt4o},
    {"kanana2", &kCfgGpt4o},
    {"talkie", &kCfgGpt4o},
    {"minimax-m2", &kCfgGpt4o},
    {"bailingmoe", &kCfgBailingMoe},
    {"bailingmoe2", &kCfgBailingMoe},
    {"llada-moe", &kCfgBailingMoe},
    {"seed-coder", &kCfgSeedCoder},
    {"ufakzeka", &kCfgUfakzeka},
    {"laguna", &kCfgLaguna},
    {"exaone-moe", &kCfgExaoneMoe},
    {"minicpm5", &kCfgMinicpm5},
};

// Unicode White_Space (PropList.txt), as llama.cpp's unicode_set_whitespace.
constexpr std::string_view kWhiteSpaceItems =
    R"(\t-\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s / \S (outside and inside character classes) to the White_Space set.
std::string rewrite_whitespace_classes(std::string_view re) {
  std::string out;
  out.reserve(re.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[i + 1];
      if (e == 's' || e == 'S') {
        if (in_class) {
          // A negated \S inside a class has no simple item form; none of the regexes uses it.
          out += e == 's' ? kWhiteSpaceItems : std::string_view("\\S");
        } else {
          out += e == 's' ? "[" : "[^";
          out += kWhiteSpaceItems;
          out += ']';
        }
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  std::string source;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

const PreTokenizerConfig* PreTokenizer::find(std::string_view pre) {
  for (const NameEntry& e : kNames) {
    if (e.name == pre) return e.config;
  }
  return nullptr;
}

const PreTokenizerConfig& PreTokenizer::fallback() { return kCfgDefault; }

Expected<std::unique_ptr<PreTokenizer>> PreTokenizer::create(const PreTokenizerConfig& config) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  pt->config_ = &config;
  for (std::string_view source : config.regexes) {
    auto re = std::make_unique<Regex>();
    re->source = rewrite_whitespace_classes(source);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re->source.data()), re->source.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK,
                             &error, &error_offset, nullptr);
    if (!re->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof msg);
      return make_error("pre-tokenizer '{}': regex '{}' does not compile at offset {}: {}",
                        config.id, source, error_offset, reinterpret_cast<const char*>(msg));
    }
    // JIT when the library has it; the interpreter otherwise (same results).
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    pt->regexes_.push_back(std::move(re));
  }
  return pt;
}

namespace {

// The JIT's default stack is 32 KiB of machine stack; a regex with a repeated group (tekken,
// gpt-4o) on a long word can exceed it. Then the match is retried with a larger JIT stack.
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchState() {
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
  int match(const pcre2_code* code, std::string_view subject, size_t start, uint32_t options) {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = pcre2_match(code, s, subject.size(), start, options | PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jit_stack) {
      jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      mctx = pcre2_match_context_create(nullptr);
      if (jit_stack && mctx) {
        pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
        rc = pcre2_match(code, s, subject.size(), start, options | PCRE2_NO_UTF_CHECK, md, mctx);
      }
    }
    return rc;
  }
};

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Piece>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  std::vector<uint32_t> orig_offset;
  const std::string subject_storage = unicode::sanitize_utf8(text, orig_offset);
  const std::string_view subject = subject_storage;

  std::vector<Piece> current{{0, subject.size()}};
  std::vector<Piece> next;
  MatchState st;
  for (const auto& re : regexes_) {
    if (st.md) pcre2_match_data_free(st.md);
    st.md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (const Piece& piece : current) {
      // The regex sees only this piece, as llama.cpp's per-offset regex_iterator: lookarounds
      // and $ stop at its edges.
      const std::string_view sub = subject.substr(piece.pos, piece.n);
      size_t start = 0;      // where the next search begins
      size_t gap_start = 0;  // end of the previous match
      uint32_t options = 0;
      while (start <= sub.size()) {
        if (encode_should_stop()) return;  // stopped (encode_poll.h): no pieces
        const int rc = st.match(re->code, sub, start, options);
        if (rc < 0) {
          if (rc == PCRE2_ERROR_NOMATCH && options != 0 && start < sub.size()) {
            // No non-empty match at an empty match's end: move one character on.
            start += unicode::utf8_len(sub[start]);
            options = 0;
            continue;
          }
          break;  // no (further) match; an engine error leaves the rest as one gap
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
        const size_t m0 = ov[0], m1 = ov[1];
        if (m0 > gap_start) next.push_back({piece.pos + gap_start, m0 - gap_start});
        if (m1 > m0) next.push_back({piece.pos + m0, m1 - m0});
        gap_start = m1;
        if (m1 == m0) {
          // Empty match (a lookahead-only alternative): as std::regex_iterator, try a non-empty
          // match at the same place next, else advance.
          if (m1 == sub.size()) break;
          start = m1;
          options = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
          start = m1;
          options = 0;
        }
      }
      if (gap_start < sub.size()) next.push_back({piece.pos + gap_start, sub.size() - gap_start});
    }
    current.swap(next);
  }

  if (orig_offset.empty()) {
    pieces = std::move(current);
    return;
  }
  // Map the pieces back onto the original bytes (U+FFFD stood in for each invalid byte).
  pieces.reserve(current.size());
  for (const Piece& p : current) {
    const size_t b0 = orig_offset[p.pos];
    const size_t b1 = orig_offset[p.pos + p.n];
    if (b1 > b0) pieces.push_back({b0, b1 - b0});
  }
}

}  // namespace spw
