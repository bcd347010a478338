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
#include "tests/support/test_model_plan.h"

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

bool is_qwen(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" || arch == "qwen2moe" || arch == "qwen3moe";
}

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

// A matrix mapping n_in -> n_out: ne = [n_in, n_out], spread weight_scale / sqrt(n_in); with
// `stack` a stack of n_expert such matrices, ne = [n_in, n_out / n_expert, n_expert] (3-D also
// for one expert, as llama.cpp's converters write it).
TestTensor matrix(const TestModelSpec& s, const std::string& name, GgmlType type, int64_t n_in,
                  int64_t n_out, int64_t n_expert = 1, bool stack = false) {
  TensorRng rng(s.seed, name);
  // Uniform on [-a, a) has standard deviation a / sqrt(3).
  const float a = s.weight_scale * std::sqrt(3.0f / static_cast<float>(n_in));
  std::vector<float> v(static_cast<size_t>(n_in * n_out));
  for (float& x : v) x = rng.uniform(a);
  if (stack || n_expert > 1) return quantized(name, type, {n_in, n_out / n_expert, n_expert}, v);
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

// Frequency divisors: 1 for the fastest-rotating quarter of the pairs, `slow` for the slowest
// quarter, a linear ramp between (Llama 3.1's rope_freqs with slow = 8; LongRoPE's long and
// short factor sets with other values).
TestTensor rope_factors(const std::string& name, int64_t n, float slow) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float t = n > 1 ? static_cast<float>(i) / static_cast<float>(n - 1) : 0.0f;
    v[static_cast<size_t>(i)] = t < 0.25f   ? 1.0f
                                : t > 0.75f ? slow
                                            : 1.0f + (slow - 1.0f) * (t - 0.25f) / 0.5f;
  }
  return quantized(name, GgmlType::F32, {n}, v);
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

std::vector<int32_t> test_prompt(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  uint32_t x = seed;
  p[0] = 1;
  for (size_t i = 1; i < p.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<int32_t>(3 + (x >> 8) % static_cast<uint32_t>(n_vocab - 3));
  }
  return p;
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
  if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim)
    return make_error("test model: n_rot {} must be even and at most head_dim {}", s.n_rot,
                      s.head_dim);
  const bool moe_arch = s.arch == "qwen2moe" || s.arch == "qwen3moe";
  if (moe_arch && s.n_expert == 0)
    return make_error("test model: {} needs experts (n_expert, n_expert_used)", s.arch);
  if (s.n_expert != 0 && !moe_arch && s.arch != "llama")
    return make_error("test model: {} has no experts (n_expert is for llama, qwen2moe, qwen3moe)",
                      s.arch);
  if (s.n_expert < 0 || s.n_expert > 512 ||
      (s.n_expert > 0 && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)) || s.n_ff_exp < 0 ||
      s.n_ff_shexp < 0) {
    return make_error(
        "test model: experts n_expert {}, n_expert_used {} (need 0 < used <= n_expert <= 512)",
        s.n_expert, s.n_expert_used);
  }
  static const char* const kScalings[] = {"", "none", "linear", "yarn", "longrope", "llama3"};
  if (std::find(std::begin(kScalings), std::end(kScalings), s.rope_scaling) == std::end(kScalings))
    return make_error("test model: unknown rope_scaling '{}'", s.rope_scaling);
  if (s.rope_factors && s.arch != "phi3")
    return make_error("test model: rope_factors (LongRoPE) is a phi3 feature");
  if (s.sliding_window < 0) return make_error("test model: sliding_window must not be negative");
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
  if (s.n_expert > 0) {
    if (auto st = check_rows("blk.N.ffn_down_exps.weight", s.layer_type("ffn_down", 0), s.ff_exp());
        !st)
      return make_error("test model: {}", st.error().message);
  }
  if (s.arch == "qwen2moe") {
    if (auto st =
            check_rows("blk.N.ffn_down_shexp.weight", s.layer_type("ffn_down", 0), s.ff_shexp());
        !st)
      return make_error("test model: {}", st.error().message);
  }
  return Status::Ok();
}

TestTensor TensorPlan::materialize(const TestModelSpec& s) const {
  switch (kind) {
    case Kind::Matrix:
      return matrix(s, name, type, n_in, n_out * n_expert, n_expert, stack);
    case Kind::Router: {  // kRouterSpread times a matrix's spread, whatever weight_scale says
      TestModelSpec r = s;
      r.weight_scale = kRouterSpread;
      return matrix(r, name, type, n_in, n_out);
    }
    case Kind::Vector:
      return vec(s, name, n_in, center, spread);
    case Kind::RopeFactors:
      return rope_factors(name, n_in, center);
  }
  return {};
}

// Keys (in `m`) and the tensor list of a spec, as llama.cpp's converter writes them.
// Precondition: check_test_model_spec(s).ok().
std::vector<TensorPlan> plan_test_model(const TestModelSpec& s, TestModel& m) {
  m.gguf_version = s.gguf_version;
  m.alignment = s.alignment;
  using V = GgufWriteValue;
  const bool qwen = is_qwen(s.arch);
  const bool gemma = s.arch == "gemma3", phi = s.arch == "phi3";
  const bool moe = s.n_expert > 0;
  const bool tied = s.tied_embeddings || gemma;  // Gemma's converter writes no output.weight
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
  if (s.head_dim * s.n_head != s.n_embd || s.arch == "qwen3" || s.arch == "qwen3moe" || gemma) {
    m.set(a + "attention.key_length", V::u32(static_cast<uint32_t>(s.head_dim)));
    m.set(a + "attention.value_length", V::u32(static_cast<uint32_t>(s.head_dim)));
  }
  m.set(a + "attention.layer_norm_rms_epsilon", V::f32(qwen || gemma ? 1e-6f : 1e-5f));
  m.set(a + "rope.freq_base", V::f32(qwen || gemma ? 1000000.0f : 10000.0f));
  m.set(a + "rope.dimension_count", V::u32(static_cast<uint32_t>(s.rot())));
  if (!s.rope_scaling.empty()) m.set(a + "rope.scaling.type", V::str(s.rope_scaling));
  if (s.rope_factor > 0) m.set(a + "rope.scaling.factor", V::f32(s.rope_factor));
  if (s.rope_scale_linear > 0) m.set(a + "rope.scale_linear", V::f32(s.rope_scale_linear));
  if (s.rope_orig_ctx > 0) {
    m.set(a + "rope.scaling.original_context_length",
          V::u32(static_cast<uint32_t>(s.rope_orig_ctx)));
  }
  if (s.rope_attn_factor > 0) m.set(a + "rope.scaling.attn_factor", V::f32(s.rope_attn_factor));
  if (s.swa() > 0) m.set(a + "attention.sliding_window", V::u32(static_cast<uint32_t>(s.swa())));
  if (moe) {
    m.set(a + "expert_count", V::u32(static_cast<uint32_t>(s.n_expert)));
    m.set(a + "expert_used_count", V::u32(static_cast<uint32_t>(s.n_expert_used)));
    if (qwen) m.set(a + "expert_feed_forward_length", V::u32(static_cast<uint32_t>(s.ff_exp())));
    if (s.arch == "qwen2moe") {
      m.set(a + "expert_shared_feed_forward_length", V::u32(static_cast<uint32_t>(s.ff_shexp())));
    }
  }

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
  auto mat = [&](const std::string& name, GgmlType type, int64_t n_in, int64_t n_out,
                 int64_t n_expert = 1) {
    t.push_back({K::Matrix, name, type, n_in, n_out, n_expert});
  };
  auto vec1d = [&](const std::string& name, int64_t n, float center, float spread) {
    t.push_back({K::Vector, name, GgmlType::F32, n, 1, 1, center, spread});
  };
  auto factors = [&](const std::string& name, float slow) {
    t.push_back({K::RopeFactors, name, GgmlType::F32, s.rot() / 2, 1, 1, slow});
  };
  mat("token_embd.weight", s.embd(), s.n_embd, s.n_vocab);
  if (s.rope_freqs) factors("rope_freqs.weight", 8.0f);
  if (s.rope_factors) {  // LongRoPE: stronger divisors for the long context
    factors("rope_factors_long.weight", 6.0f);
    factors("rope_factors_short.weight", 1.5f);
  }
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    vec1d(p + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
    if (phi) {
      mat(p + "attn_qkv.weight", s.layer_type("attn_qkv", i), s.n_embd, q_dim + 2 * kv_dim);
    } else {
      mat(p + "attn_q.weight", s.layer_type("attn_q", i), s.n_embd, q_dim);
      mat(p + "attn_k.weight", s.layer_type("attn_k", i), s.n_embd, kv_dim);
      mat(p + "attn_v.weight", s.layer_type("attn_v", i), s.n_embd, kv_dim);
    }
    if (s.arch == "qwen2" || s.arch == "qwen2moe") {
      vec1d(p + "attn_q.bias", q_dim, 0.0f, 0.1f * s.weight_scale);
      vec1d(p + "attn_k.bias", kv_dim, 0.0f, 0.1f * s.weight_scale);
      vec1d(p + "attn_v.bias", kv_dim, 0.0f, 0.1f * s.weight_scale);
    }
    if (s.arch == "qwen3" || s.arch == "qwen3moe" || gemma) {
      vec1d(p + "attn_q_norm.weight", s.head_dim, 1.0f, 0.1f);
      vec1d(p + "attn_k_norm.weight", s.head_dim, 1.0f, 0.1f);
    }
    mat(p + "attn_output.weight", s.layer_type("attn_output", i), q_dim, s.n_embd);
    if (gemma) vec1d(p + "post_attention_norm.weight", s.n_embd, 1.0f, 0.1f);
    vec1d(p + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
    if (moe) {
      const int64_t n_e = s.n_expert, f = s.ff_exp();
      t.push_back({K::Router, p + "ffn_gate_inp.weight", GgmlType::F32, s.n_embd, s.n_expert});
      mat(p + "ffn_gate_exps.weight", s.layer_type("ffn_gate", i), s.n_embd, f, n_e);
      t.back().stack = true;
      mat(p + "ffn_up_exps.weight", s.layer_type("ffn_up", i), s.n_embd, f, n_e);
      t.back().stack = true;
      mat(p + "ffn_down_exps.weight", s.layer_type("ffn_down", i), f, s.n_embd, n_e);
      t.back().stack = true;
      if (s.arch == "qwen2moe") {
        const int64_t fs = s.ff_shexp();
        vec1d(p + "ffn_gate_inp_shexp.weight", s.n_embd, 0.0f, 0.5f);
        mat(p + "ffn_gate_shexp.weight", s.layer_type("ffn_gate", i), s.n_embd, fs);
        mat(p + "ffn_up_shexp.weight", s.layer_type("ffn_up", i), s.n_embd, fs);
        mat(p + "ffn_down_shexp.weight", s.layer_type("ffn_down", i), fs, s.n_embd);
      }
    } else if (phi) {
      mat(p + "ffn_up.weight", s.layer_type("ffn_up", i), s.n_embd, 2 * s.n_ff);
      mat(p + "ffn_down.weight", s.layer_type("ffn_down", i), s.n_ff, s.n_embd);
    } else {
      mat(p + "ffn_gate.weight", s.layer_type("ffn_gate", i), s.n_embd, s.n_ff);
      mat(p + "ffn_up.weight", s.layer_type("ffn_up", i), s.n_embd, s.n_ff);
      mat(p + "ffn_down.weight", s.layer_type("ffn_down", i), s.n_ff, s.n_embd);
    }
    if (gemma) vec1d(p + "post_ffw_norm.weight", s.n_embd, 1.0f, 0.1f);
  }
  vec1d("output_norm.weight", s.n_embd, 1.0f, 0.1f);
  if (!tied) mat("output.weight", s.output(), s.n_embd, s.n_vocab);
  return t;
}

Expected<TestModel> build_test_model(const TestModelSpec& s) {
  if (auto st = check_test_model_spec(s); !st) return st.error();
  TestModel m;
  for (const TensorPlan& p : plan_test_model(s, m)) m.tensors.push_back(p.materialize(s));
  return m;
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
