#include "tests/support/test_model.h"

#include <stdlib.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "engine/common/fp16.h"
#include "engine/common/parallel.h"
#include "tests/support/quant_mix.h"

namespace spw {

namespace {

constexpr int64_t kMinVocab = 260;  // 3 specials + 256 bytes + "▁"
constexpr int64_t kMaxTensorElements = int64_t{1} << 31;
constexpr const char* kSpace =
    "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

// SentencePiece token types, as tokenizer.ggml.token_type stores them.
constexpr int32_t kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokByte = 6;

// Each tensor draws from its own generator seeded with (seed, name), so a tensor's values do
// not depend on which other tensors the spec adds (tied or not, rope_freqs or not). mt19937 and
// seed_seq are specified exactly by the standard; floats are built from raw 24-bit draws rather
// than std::uniform_real_distribution, whose algorithm is implementation-defined.
class TensorRng {
 public:
  TensorRng(uint32_t seed, const std::string& name) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    std::seed_seq seq{seed, h};
    gen_.seed(seq);
  }
  /// Uniform in [-a, a).
  float uniform(float a) {
    const float u = static_cast<float>(gen_() >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    return (2.0f * u - 1.0f) * a;
  }

 private:
  std::mt19937 gen_;
};

uint32_t file_type_of(GgmlType t) {  // llama_ftype numbering (general.file_type)
  switch (t) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q4_1:
      return 3;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q5_0:
      return 8;
    case GgmlType::Q5_1:
      return 9;
    case GgmlType::Q4_K:
      return 15;  // Q4_K_M
    case GgmlType::Q5_K:
      return 17;  // Q5_K_M
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::Q2_K:
      return 10;
    case GgmlType::Q3_K:
      return 11;  // Q3_K_S: all Q3_K but output.weight
    case GgmlType::IQ4_NL:
      return 25;
    case GgmlType::IQ4_XS:
      return 30;
    case GgmlType::BF16:
      return 32;
    default:
      return 0;
  }
}

bool is_qwen(const std::string& arch) { return arch == "qwen2" || arch == "qwen3"; }

TestTensor quantized(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                     const std::vector<float>& values) {
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  assert(static_cast<int64_t>(values.size()) == ne[0] * rows);
  const size_t rb = row_size(type, ne[0]);
  TestTensor t{name, type, std::move(ne), std::vector<uint8_t>(rb * static_cast<size_t>(rows))};
  const int64_t n_in = t.ne[0];
  auto quantize_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      quantize_row(type, values.data() + r * n_in, t.data.data() + static_cast<size_t>(r) * rb,
                   n_in);
    }
  };
  // The reference K-quant quantizers search scales per block and take seconds on a 250M
  // parameter model: large tensors are split over threads by rows. Each row is quantized on
  // its own, so the bytes do not depend on the split.
  constexpr int64_t kParallelElements = int64_t{1} << 20;
  const unsigned hw = std::thread::hardware_concurrency();
  const int64_t n_threads =
      n_in * rows < kParallelElements ? 1 : std::min<int64_t>(rows, hw == 0 ? 1 : hw);
  if (n_threads <= 1) {
    quantize_rows(0, rows);
    return t;
  }
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n_threads; ++i)
    threads.emplace_back(quantize_rows, i * rows / n_threads, (i + 1) * rows / n_threads);
  quantize_rows(0, rows / n_threads);
  for (auto& th : threads) th.join();
  return t;
}

// A matrix mapping n_in -> n_out: ne = [n_in, n_out], spread weight_scale / sqrt(n_in).
TestTensor matrix(const TestModelSpec& s, const std::string& name, GgmlType type, int64_t n_in,
                  int64_t n_out) {
  TensorRng rng(s.seed, name);
  // Uniform on [-a, a) has standard deviation a / sqrt(3).
  const float a = s.weight_scale * std::sqrt(3.0f / static_cast<float>(n_in));
  std::vector<float> v(static_cast<size_t>(n_in * n_out));
  for (float& x : v) x = rng.uniform(a);
  return quantized(name, type, {n_in, n_out}, v);
}

// A 1-D F32 vector: center + uniform(spread).
TestTensor vec(const TestModelSpec& s, const std::string& name, int64_t n, float center,
               float spread) {
  TensorRng rng(s.seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + rng.uniform(spread);
  return quantized(name, GgmlType::F32, {n}, v);
}

// Llama 3.1 style frequency divisors: 1 for the fastest-rotating quarter of the pairs, 8 for
// the slowest quarter, a linear ramp between.
TestTensor rope_factors(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float t = n > 1 ? static_cast<float>(i) / static_cast<float>(n - 1) : 0.0f;
    v[static_cast<size_t>(i)] = t < 0.25f   ? 1.0f
                                : t > 0.75f ? 8.0f
                                            : 1.0f + 7.0f * (t - 0.25f) / 0.5f;
  }
  return quantized("rope_freqs.weight", GgmlType::F32, {n}, v);
}

Status check_rows(const std::string& name, GgmlType type, int64_t row_len) {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits || !traits->supported) {
    return make_error("{}: type {} is not one of the supported types", name,
                      type_name(static_cast<uint32_t>(type)));
  }
  if (row_len % traits->block_size != 0) {
    return make_error(
        "{}: row length {} is not a multiple of the {} block size {} (K-quants need row "
        "lengths that are multiples of 256, e.g. n_embd 256, n_ff 512, n_head * head_dim 256)",
        name, row_len, traits->name, traits->block_size);
  }
  return Status::Ok();
}

}  // namespace

MixContext TestModelSpec::mix_context(int64_t layer) const {
  return {layer, n_layer, n_head_kv > 0 ? n_head / n_head_kv : 1, tied_embeddings};
}

GgmlType TestModelSpec::embd() const {
  if (const auto t = quant_mix_type(mix, "token_embd", mix_context(0))) return *t;
  return embd_type.value_or(weight_type);
}

GgmlType TestModelSpec::output() const {
  if (const auto t = quant_mix_type(mix, "output", mix_context(0))) return *t;
  return output_type.value_or(weight_type);
}

GgmlType TestModelSpec::layer_type(const std::string& role, int64_t layer) const {
  if (const auto t = quant_mix_type(mix, role, mix_context(layer))) return *t;
  return weight_type;
}

std::vector<std::string> test_model_vocab(int64_t n_vocab) {
  assert(n_vocab >= kMinVocab);
  std::vector<std::string> v = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) v.push_back(fmt::format("<0x{:02X}>", b));
  std::unordered_set<std::string> seen(v.begin(), v.end());
  auto add = [&](const std::string& s) {
    if (static_cast<int64_t>(v.size()) < n_vocab && seen.insert(s).second) v.push_back(s);
  };
  const std::string sp = kSpace;
  add(sp);
  for (char c = 'a'; c <= 'z'; ++c) add(std::string(1, c));
  // Frequent English pieces, each the concatenation of two earlier tokens, so the BPE merges
  // that build them exist.
  static const char* const kPieces[] = {
      "_t",  "he",   "_the", "_a", "in",  "er",  "an", "_s", "on",  "re",  "_w",  "at",
      "en",  "_o",   "_c",   "is", "it",  "ou",  "or", "es", "_b",  "ed",  "_f",  "ing",
      "_p",  "_m",   "_h",   "_d", "ar",  "_in", "al", "le", "_th", "_to", "_of", "nd",
      "_an", "_and", "_is",  "ll", "_l",  "_n",  "_e", "_g", "ic",  "om",  "_be", "st",
      "ion", "ro",   "ent",  "as", "_re", "ve",  "us", "_y", "_u",  "_you"};
  for (const char* p : kPieces) {
    std::string s = p;
    if (s[0] == '_') s = sp + s.substr(1);
    add(s);
  }
  // Then every lowercase string of length 1, 2, 3, ... with and without the space prefix, until
  // the vocabulary is full (the supply never runs out).
  for (int len = 1; static_cast<int64_t>(v.size()) < n_vocab; ++len) {
    std::string s(static_cast<size_t>(len), 'a');
    while (static_cast<int64_t>(v.size()) < n_vocab) {
      add(sp + s);
      add(s);
      int i = len - 1;  // odometer increment
      while (i >= 0 && s[static_cast<size_t>(i)] == 'z') s[static_cast<size_t>(i--)] = 'a';
      if (i < 0) break;
      ++s[static_cast<size_t>(i)];
    }
  }
  return v;
}

std::optional<GgmlType> parse_test_model_type(const std::string& name) {
  for (uint32_t number = 0; number < 64; ++number) {
    const auto t = static_cast<GgmlType>(number);
    if (is_supported_type(t) && type_name(number) == name) return t;
  }
  return std::nullopt;
}

Status check_test_model_spec(const TestModelSpec& s) {
  if (s.arch.empty()) return make_error("test model: arch is empty");
  if (s.gguf_version != 2 && s.gguf_version != 3) {
    return make_error("test model: GGUF version {} (2 or 3 allowed)", s.gguf_version);
  }
  if (s.alignment == 0 || (s.alignment & (s.alignment - 1)) != 0 || s.alignment > (1u << 20)) {
    return make_error("test model: alignment {} is not a power of two up to 2^20", s.alignment);
  }
  if (!s.mix.empty() && !is_quant_mix(s.mix))
    return make_error("test model: unknown mix '{}' (known: {})", s.mix, quant_mix_list());
  if (s.n_vocab < kMinVocab) {
    return make_error(
        "test model: n_vocab {} is too small (at least {}: 3 specials, 256 byte tokens and \"▁\")",
        s.n_vocab, kMinVocab);
  }
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0 ||
      s.n_ff <= 0 || s.n_ctx <= 0) {
    return make_error(
        "test model: sizes must be positive (n_embd {}, n_layer {}, n_head {}, n_head_kv {}, "
        "head_dim {}, n_ff {}, ctx {})",
        s.n_embd, s.n_layer, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.n_ctx);
  }
  constexpr int64_t kMaxSize = int64_t{1} << 24;  // keeps the products below far from overflow
  if (s.n_vocab > kMaxSize || s.n_embd > kMaxSize || s.n_ff > kMaxSize || s.head_dim > kMaxSize ||
      s.n_ctx > kMaxSize || s.n_head > 1024) {
    return make_error(
        "test model: sizes too large (n_vocab, n_embd, n_ff, head_dim, ctx at most 2^24; n_head at "
        "most 1024)");
  }
  if (s.n_head % s.n_head_kv != 0) {
    return make_error("test model: n_head {} is not a multiple of n_head_kv {}", s.n_head,
                      s.n_head_kv);
  }
  if (s.head_dim % 2 != 0)
    return make_error("test model: head_dim {} must be even (RoPE pairs)", s.head_dim);
  if (s.n_layer > 1024) return make_error("test model: n_layer {} is more than 1024", s.n_layer);
  const int64_t q_dim = s.n_head * s.head_dim;
  for (int64_t n : {s.n_vocab * s.n_embd, s.n_embd * q_dim, s.n_embd * s.n_ff}) {
    if (n > kMaxTensorElements)
      return make_error("test model: a tensor would have {} elements (at most 2^31)", n);
  }
  const std::pair<std::string, std::pair<GgmlType, int64_t>> rows[] = {
      {"token_embd.weight", {s.embd(), s.n_embd}},
      {"output.weight", {s.tied_embeddings ? s.embd() : s.output(), s.n_embd}},
  };
  for (const auto& [name, tr] : rows) {
    if (auto st = check_rows(name, tr.first, tr.second); !st)
      return make_error("test model: {}", st.error().message);
  }
  // A mix may give each layer its own types: every layer's every matrix.
  const std::pair<const char*, int64_t> roles[] = {
      {"attn_q", s.n_embd},   {"attn_k", s.n_embd}, {"attn_v", s.n_embd}, {"attn_output", q_dim},
      {"ffn_gate", s.n_embd}, {"ffn_up", s.n_embd}, {"ffn_down", s.n_ff}};
  for (int64_t l = 0; l < s.n_layer; ++l) {
    for (const auto& [role, row_len] : roles) {
      const std::string name = fmt::format("blk.{}.{}.weight", l, role);
      if (auto st = check_rows(name, s.layer_type(role, l), row_len); !st)
        return make_error("test model: {}", st.error().message);
    }
  }
  return Status::Ok();
}

namespace {

// A tensor of the model before any value is drawn: what build_test_model materializes and what
// make_fast_random_model generates while writing. One list, so both paths write the same names,
// shapes and types in the same order.
struct TensorPlan {
  enum class Kind { Matrix, Vector, RopeFactors };
  Kind kind = Kind::Matrix;
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;  // Matrix: ne = [n_in, n_out]; Vector, RopeFactors: n_in elements
  int64_t n_out = 1;
  float center = 0, spread = 0;  // Vector: center + uniform(spread)

  TestTensor materialize(const TestModelSpec& s) const {
    switch (kind) {
      case Kind::Matrix:
        return matrix(s, name, type, n_in, n_out);
      case Kind::Vector:
        return vec(s, name, n_in, center, spread);
      case Kind::RopeFactors:
        return rope_factors(n_in);
    }
    return {};
  }
};

// Keys (in `m`) and the tensor list of a spec. Precondition: check_test_model_spec(s).ok().
std::vector<TensorPlan> plan_test_model(const TestModelSpec& s, TestModel& m) {
  m.gguf_version = s.gguf_version;
  m.alignment = s.alignment;
  using V = GgufWriteValue;
  const bool qwen = is_qwen(s.arch);
  const std::string a = s.arch + ".";

  m.set("general.architecture", V::str(s.arch));
  m.set("general.name", V::str("spillway-test-" + s.arch));
  m.set("general.file_type",
        V::u32(s.mix.empty() ? file_type_of(s.weight_type) : quant_mix_file_type(s.mix)));
  m.set("general.quantization_version", V::u32(2));
  m.set(a + "context_length", V::u32(static_cast<uint32_t>(s.n_ctx)));
  m.set(a + "embedding_length", V::u32(static_cast<uint32_t>(s.n_embd)));
  m.set(a + "block_count", V::u32(static_cast<uint32_t>(s.n_layer)));
  m.set(a + "feed_forward_length", V::u32(static_cast<uint32_t>(s.n_ff)));
  m.set(a + "attention.head_count", V::u32(static_cast<uint32_t>(s.n_head)));
  m.set(a + "attention.head_count_kv", V::u32(static_cast<uint32_t>(s.n_head_kv)));
  if (s.head_dim * s.n_head != s.n_embd || s.arch == "qwen3") {
    m.set(a + "attention.key_length", V::u32(static_cast<uint32_t>(s.head_dim)));
    m.set(a + "attention.value_length", V::u32(static_cast<uint32_t>(s.head_dim)));
  }
  m.set(a + "attention.layer_norm_rms_epsilon", V::f32(qwen ? 1e-6f : 1e-5f));
  m.set(a + "rope.freq_base", V::f32(qwen ? 1000000.0f : 10000.0f));
  m.set(a + "rope.dimension_count", V::u32(static_cast<uint32_t>(s.head_dim)));

  const std::vector<std::string> vocab = test_model_vocab(s.n_vocab);
  std::vector<float> scores(vocab.size(), 0.0f);
  std::vector<int32_t> types(vocab.size(), kTokNormal);
  types[0] = kTokUnknown;
  types[1] = types[2] = kTokControl;
  for (size_t i = 3; i < 3 + 256; ++i) types[i] = kTokByte;
  for (size_t i = 3 + 256; i < vocab.size(); ++i) scores[i] = -static_cast<float>(i - (3 + 256));
  m.set("tokenizer.ggml.model", V::str("llama"));
  m.set("tokenizer.ggml.tokens", V::str_array(vocab));
  m.set("tokenizer.ggml.scores", V::f32_array(scores));
  m.set("tokenizer.ggml.token_type", V::i32_array(types));
  m.set("tokenizer.ggml.bos_token_id", V::u32(1));
  m.set("tokenizer.ggml.eos_token_id", V::u32(2));
  m.set("tokenizer.ggml.unknown_token_id", V::u32(0));
  m.set("tokenizer.ggml.add_bos_token", V::boolean(true));
  m.set("tokenizer.ggml.add_eos_token", V::boolean(false));

  const int64_t q_dim = s.n_head * s.head_dim;
  const int64_t kv_dim = s.n_head_kv * s.head_dim;
  using K = TensorPlan::Kind;
  std::vector<TensorPlan> t;
  auto mat = [&](const std::string& name, GgmlType type, int64_t n_in, int64_t n_out) {
    t.push_back({K::Matrix, name, type, n_in, n_out});
  };
  auto vec1d = [&](const std::string& name, int64_t n, float center, float spread) {
    t.push_back({K::Vector, name, GgmlType::F32, n, 1, center, spread});
  };
  mat("token_embd.weight", s.embd(), s.n_embd, s.n_vocab);
  if (s.rope_freqs)
    t.push_back({K::RopeFactors, "rope_freqs.weight", GgmlType::F32, s.head_dim / 2});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    vec1d(p + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
    mat(p + "attn_q.weight", s.layer_type("attn_q", i), s.n_embd, q_dim);
    mat(p + "attn_k.weight", s.layer_type("attn_k", i), s.n_embd, kv_dim);
    mat(p + "attn_v.weight", s.layer_type("attn_v", i), s.n_embd, kv_dim);
    if (s.arch == "qwen2") {
      vec1d(p + "attn_q.bias", q_dim, 0.0f, 0.1f * s.weight_scale);
      vec1d(p + "attn_k.bias", kv_dim, 0.0f, 0.1f * s.weight_scale);
      vec1d(p + "attn_v.bias", kv_dim, 0.0f, 0.1f * s.weight_scale);
    }
    if (s.arch == "qwen3") {
      vec1d(p + "attn_q_norm.weight", s.head_dim, 1.0f, 0.1f);
      vec1d(p + "attn_k_norm.weight", s.head_dim, 1.0f, 0.1f);
    }
    mat(p + "attn_output.weight", s.layer_type("attn_output", i), q_dim, s.n_embd);
    vec1d(p + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
    mat(p + "ffn_gate.weight", s.layer_type("ffn_gate", i), s.n_embd, s.n_ff);
    mat(p + "ffn_up.weight", s.layer_type("ffn_up", i), s.n_embd, s.n_ff);
    mat(p + "ffn_down.weight", s.layer_type("ffn_down", i), s.n_ff, s.n_embd);
  }
  vec1d("output_norm.weight", s.n_embd, 1.0f, 0.1f);
  if (!s.tied_embeddings) mat("output.weight", s.output(), s.n_embd, s.n_vocab);
  return t;
}

}  // namespace

Expected<TestModel> build_test_model(const TestModelSpec& s) {
  if (auto st = check_test_model_spec(s); !st) return st.error();
  TestModel m;
  for (const TensorPlan& p : plan_test_model(s, m)) m.tensors.push_back(p.materialize(s));
  return m;
}

// ---- Fast random models -------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void random_bytes(uint64_t& state, uint8_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = splitmix64(state);
    std::memcpy(dst + i, &x, 8);
  }
  if (i < n) {
    const uint64_t x = splitmix64(state);
    std::memcpy(dst + i, &x, n - i);
  }
}

// The f16 scale fields of one block type. Random codes average to `mid` (Q4_1, Q5_1, Q4_K,
// Q5_K; 0 for the others); the min field cancels it so weights average to zero:
// m = -mid * d for Q4_1/Q5_1 (y = d*q + m), dmin = mid * d for Q4_K/Q5_K (y = d*sc*q - dmin*mn,
// where sc and mn share one distribution).
struct BlockScales {
  size_t d_at = 0;      // byte offset of d in the block
  int min_at = -1;      // byte offset of m / dmin; -1: none
  float min_per_d = 0;  // m / d or dmin / d
};

BlockScales block_scales(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
      return {0, 2, -7.5f};
    case GgmlType::Q5_1:
      return {0, 2, -15.5f};
    case GgmlType::Q4_K:
      return {0, 2, 7.5f};
    case GgmlType::Q5_K:
      return {0, 2, 15.5f};
    case GgmlType::Q6_K:
      return {offsetof(BlockQ6_K, d), -1, 0};
    case GgmlType::Q2_K:  // codes 0..3 times scales 0..15 average 11.25, mins 0..15 7.5
      return {offsetof(BlockQ2_K, d), static_cast<int>(offsetof(BlockQ2_K, dmin)), 1.5f};
    case GgmlType::Q3_K:  // signed scales and codes: about zero on their own
      return {offsetof(BlockQ3_K, d), -1, 0};
    default:  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first, no min
      return {0, -1, 0};
  }
}

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Random code bytes with the scale fields set from `d`: the block's bytes for any d.
void fill_blocks(GgmlType t, float d, uint64_t& state, uint8_t* row, size_t row_bytes) {
  const auto traits = type_traits(static_cast<uint32_t>(t));
  const size_t bs = static_cast<size_t>(traits->type_size);
  const BlockScales sc = block_scales(t);
  const uint16_t d_bits = fp32_to_fp16(d);
  const uint16_t m_bits = fp32_to_fp16(sc.min_per_d * fp16_to_fp32(d_bits));
  random_bytes(state, row, row_bytes);
  for (size_t b = 0; b < row_bytes; b += bs) {
    std::memcpy(row + b + sc.d_at, &d_bits, 2);
    if (sc.min_at >= 0) std::memcpy(row + b + static_cast<size_t>(sc.min_at), &m_bits, 2);
  }
}

// Standard deviation of the dequantized weights of random blocks with d = 1, measured once
// per type (deterministic: a fixed seed).
double unit_std(GgmlType t) {
  constexpr int64_t kN = 8192;  // a multiple of every block size
  std::vector<uint8_t> bytes(row_size(t, kN));
  uint64_t state = 12345;
  fill_blocks(t, 1.0f, state, bytes.data(), bytes.size());
  std::vector<float> y(kN);
  dequantize_row(t, bytes.data(), y.data(), kN);
  double ss = 0;
  for (float v : y) ss += static_cast<double>(v) * v;
  return std::sqrt(ss / kN);
}

uint64_t row_seed(uint64_t tensor_seed, int64_t row) {
  return tensor_seed ^ static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull;
}

// Rows are independent, so a chunk is filled on several threads (up to 16): writing to the
// page cache is faster than one thread draws random bytes.
int fill_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 16u));
}

// Rows of a random matrix: standard deviation `stddev`, mean about 0. Row r draws from its
// own generator seeded with (tensor_seed, r), so any split into chunks or threads gives the
// same bytes.
GgufWriter::RowFill random_rows(GgmlType t, int64_t n_in, double stddev, uint64_t tensor_seed) {
  const size_t rb = row_size(t, n_in);
  if (is_float_type(t)) {
    const float a = static_cast<float>(stddev * std::sqrt(3.0));  // uniform on [-a, a)
    return [t, n_in, rb, a, tensor_seed](int64_t row0, int64_t n_rows, uint8_t* dst) {
      parallel_for(n_rows, fill_threads(), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          uint64_t state = row_seed(tensor_seed, row0 + r);
          uint8_t* out = dst + static_cast<size_t>(r) * rb;
          for (int64_t i = 0; i < n_in; ++i) {
            const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
            const float x = (2.0f * u - 1.0f) * a;
            if (t == GgmlType::F32) {
              std::memcpy(out + 4 * i, &x, 4);
            } else {
              const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
              std::memcpy(out + 2 * i, &h, 2);
            }
          }
        }
      });
    };
  }
  const float d = static_cast<float>(stddev / unit_std(t));
  return [t, rb, d, tensor_seed](int64_t row0, int64_t n_rows, uint8_t* dst) {
    parallel_for(n_rows, fill_threads(), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        uint64_t state = row_seed(tensor_seed, row0 + r);
        fill_blocks(t, d, state, dst + static_cast<size_t>(r) * rb, rb);
      }
    });
  };
}

uint64_t tensor_seed(uint32_t seed, const std::string& name) {  // FNV-1a 64 over name
  uint64_t h = 14695981039346656037ull ^ (uint64_t{seed} * 0x9E3779B97F4A7C15ull);
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Expected<GgufWriter> make_fast_random_model(const TestModelSpec& s) {
  if (auto st = check_test_model_spec(s); !st) return st.error();
  TestModel m;
  const std::vector<TensorPlan> plan = plan_test_model(s, m);
  GgufWriter w = m.to_writer();  // the keys
  for (const TensorPlan& p : plan) {
    if (p.kind != TensorPlan::Kind::Matrix) {  // 1-D: small, the same values as build_test_model
      TestTensor t = p.materialize(s);
      w.add_tensor(t.name, t.type, std::move(t.ne), std::move(t.data));
      continue;
    }
    const double stddev = s.weight_scale / std::sqrt(static_cast<double>(p.n_in));
    w.add_tensor_generated(p.name, p.type, {p.n_in, p.n_out},
                           random_rows(p.type, p.n_in, stddev, tensor_seed(s.seed, p.name)));
  }
  return w;
}

Status write_fast_random_model(const TestModelSpec& spec, const std::string& path) {
  auto w = make_fast_random_model(spec);
  if (!w) return w.error();
  return w->write(path);
}

TestTensor* TestModel::find_tensor(const std::string& name) {
  for (auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool TestModel::drop_tensor(const std::string& name) {
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    if (it->name == name) {
      tensors.erase(it);
      return true;
    }
  }
  return false;
}

void TestModel::set(const std::string& key, GgufWriteValue value) {
  for (auto& [k, v] : kv) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv.emplace_back(key, std::move(value));
}

bool TestModel::drop_key(const std::string& key) {
  for (auto it = kv.begin(); it != kv.end(); ++it) {
    if (it->first == key) {
      kv.erase(it);
      return true;
    }
  }
  return false;
}

GgufWriter TestModel::to_writer() const {
  GgufWriter w(gguf_version, alignment);
  for (const auto& [k, v] : kv) w.set(k, v);
  for (const auto& t : tensors) w.add_tensor(t.name, t.type, t.ne, t.data);
  return w;
}

GgufWriter make_test_model(const TestModelSpec& spec) {
  auto m = build_test_model(spec);
  assert(m.ok() && "make_test_model: invalid spec; call check_test_model_spec first");
  if (!m) return GgufWriter(3, 32);  // NDEBUG builds: an empty model, which Model::load rejects
  return m->to_writer();
}

Status write_test_model(const TestModelSpec& spec, const std::string& path) {
  auto m = build_test_model(spec);
  if (!m) return m.error();
  return m->write(path);
}

TempDir::TempDir(const std::string& prefix) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    // Tests then fail on their first write, naming this path.
    tmpl = (base / (prefix + "-unavailable")).string();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace spw
