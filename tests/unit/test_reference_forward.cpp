// The reference forward pass: against llama.cpp's output for the real stories260K model (when
// ../shared is present), and on generated models for the properties any correct forward has.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/backend/reference/reference_session.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/arch_specs.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("spillway-test-ref-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::unique_ptr<Model> load_or_die(const fs::path& p) {
  auto m = Model::load(p.string());
  EXPECT_TRUE(m.ok()) << (m ? "" : m.error().message);
  return m ? std::move(*m) : nullptr;
}

std::vector<float> run_logits(const Model& m, const std::vector<int32_t>& tokens, bool one_by_one,
                              KvType kv = KvType::F32, int threads = 1) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = kv;
  sp.n_threads = threads;
  auto s = ReferenceSession::create(m, sp);
  EXPECT_TRUE(s.ok());
  if (one_by_one) {
    for (int32_t t : tokens) EXPECT_TRUE((*s)->eval(std::span<const int32_t>(&t, 1), true).ok());
  } else {
    EXPECT_TRUE((*s)->eval(tokens, true).ok());
  }
  return {(*s)->logits().begin(), (*s)->logits().end()};
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

TEST(ReferenceStories, MatchesLlamaCppReference) {
  const fs::path dir = fs::path(SPILLWAY_SHARED_DIR) / "models";
  const fs::path model_path = dir / "stories260K.gguf",
                 ref_path = dir / "stories260K.reference.json";
  if (!fs::exists(model_path) || !fs::exists(ref_path)) {
    GTEST_SKIP() << "shared test data not found at " << dir
                 << " (stories260K.gguf + reference.json)";
  }
  std::ifstream in(ref_path);
  const auto ref = nlohmann::json::parse(in);
  auto model = load_or_die(model_path);
  ASSERT_TRUE(model);
  auto tok = Tokenizer::from_gguf(model->file());
  ASSERT_TRUE(tok.ok()) << tok.error().message;

  const std::vector<int32_t> prompt = (*tok)->encode(ref["prompt"].get<std::string>(), true, false);
  ASSERT_EQ(prompt, ref["prompt_tokens"].get<std::vector<int32_t>>());

  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = KvType::F32;
  auto s = ReferenceSession::create(*model, sp);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->eval(prompt, true).ok());

  const auto ref_logits = ref["last_prompt_logits"].get<std::vector<float>>();
  const std::vector<float> logits((*s)->logits().begin(), (*s)->logits().end());
  ASSERT_EQ(logits.size(), ref_logits.size());
  size_t worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::fabs(logits[i] - ref_logits[i]) > std::fabs(logits[worst] - ref_logits[worst]))
      worst = i;
  }
  const double tol = 1e-4 * max_abs(ref_logits);
  EXPECT_LE(std::fabs(logits[worst] - ref_logits[worst]), tol)
      << "worst logit " << worst << ": " << logits[worst] << " vs reference " << ref_logits[worst];

  std::vector<int32_t> generated;
  std::string text;
  for (int i = 0; i < 64; ++i) {
    const int32_t id = argmax((*s)->logits());
    generated.push_back(id);
    text += (*tok)->token_to_piece(id);
    ASSERT_TRUE((*s)->eval(std::span<const int32_t>(&id, 1), true).ok());
  }
  EXPECT_EQ(generated, ref["generated_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(text, ref["generated_text"].get<std::string>());
}

// Every architecture x a few weight types: a batched prefill and token-by-token decode give
// the same logits (the cache holds what a batch computed), and threads change nothing.
class ReferenceArch : public ::testing::TestWithParam<std::tuple<std::string, GgmlType>> {};

TEST_P(ReferenceArch, PrefillEqualsDecodeAndThreadsAgree) {
  const auto& [arch, type] = GetParam();
  TestModelSpec spec;
  spec.arch = arch;
  spec.weight_type = type;
  const bool k_quant = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  if (k_quant) {
    spec.n_embd = 256;  // every row length a multiple of the 256-element super-block
    spec.n_ff = 256;
    spec.head_dim = 64;
  }
  spec.rope_freqs = arch == "llama";
  const fs::path p = temp_path(arch + "-" + std::to_string(static_cast<int>(type)) + ".gguf");
  ASSERT_TRUE(write_test_model(spec, p.string()).ok());
  auto model = load_or_die(p);
  ASSERT_TRUE(model);
  const std::vector<int32_t> tokens = {1, 300, 17, 299, 42, 260, 5, 301, 88};
  const auto batched = run_logits(*model, tokens, false);
  const auto stepped = run_logits(*model, tokens, true);
  const auto threaded = run_logits(*model, tokens, false, KvType::F32, 3);
  ASSERT_EQ(batched.size(), static_cast<size_t>(spec.n_vocab));
  EXPECT_LE(max_diff(batched, stepped), 1e-5 * max_abs(batched));
  EXPECT_EQ(max_diff(batched, threaded), 0.0);  // rows are independent: bit-identical
  // An f16 cache changes logits only slightly.
  const auto half = run_logits(*model, tokens, false, KvType::F16);
  EXPECT_LE(max_diff(batched, half), 2e-2 * max_abs(batched));
  EXPECT_GT(max_abs(batched), 0.0);
}

INSTANTIATE_TEST_SUITE_P(AllArchs, ReferenceArch,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3"),
                                            ::testing::Values(GgmlType::F32, GgmlType::F16,
                                                              GgmlType::Q8_0, GgmlType::Q4_K)),
                         arch_type_test_name);

// NeoX RoPE pairs (i, i + d/2); normal RoPE pairs (2i, 2i+1). Permuting the rows of attn_q and
// attn_k inside each head (row 2i <- i, row 2i+1 <- i + d/2) turns one into the other, which is
// exactly what llama.cpp's converter does for Llama. So a qwen2 model with zero biases and the
// llama model with permuted Q/K rows must produce the same logits.
TEST(ReferenceRope, NeoxEqualsNormalWithPermutedRows) {
  TestModelSpec spec;
  spec.arch = "qwen2";
  auto qwen = build_test_model(spec);
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  for (int l = 0; l < spec.n_layer; ++l) {
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      TestTensor* t = qwen->find_tensor("blk." + std::to_string(l) + "." + b);
      ASSERT_NE(t, nullptr);
      std::fill(t->data.begin(), t->data.end(), 0);  // F32 zeros
    }
  }
  TestModel llama = *qwen;
  for (int l = 0; l < spec.n_layer; ++l) {
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      ASSERT_TRUE(llama.drop_tensor("blk." + std::to_string(l) + "." + b));
    }
    for (const char* w : {"attn_q.weight", "attn_k.weight"}) {
      TestTensor* t = llama.find_tensor("blk." + std::to_string(l) + "." + w);
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(t->type, GgmlType::F32);
      const size_t row = static_cast<size_t>(t->ne[0]) * sizeof(float);
      const int64_t hd = spec.head_dim, half = hd / 2, n_heads = t->ne[1] / hd;
      std::vector<uint8_t> out(t->data.size());
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          std::memcpy(&out[(h * hd + 2 * i) * row], &t->data[(h * hd + i) * row], row);
          std::memcpy(&out[(h * hd + 2 * i + 1) * row], &t->data[(h * hd + i + half) * row], row);
        }
      }
      t->data = std::move(out);
    }
  }
  // Rename the qwen2.* hyperparameters to llama.*.
  std::vector<std::pair<std::string, GgufWriteValue>> kv;
  for (auto& [k, v] : llama.kv) {
    std::string key = k;
    if (key.rfind("qwen2.", 0) == 0) key = "llama." + key.substr(6);
    kv.emplace_back(key, v);
  }
  llama.kv = kv;
  llama.set("general.architecture", GgufWriteValue::str("llama"));

  const fs::path pq = temp_path("neox-qwen2.gguf"), pl = temp_path("neox-llama.gguf");
  ASSERT_TRUE(qwen->write(pq.string()).ok());
  ASSERT_TRUE(llama.write(pl.string()).ok());
  auto mq = load_or_die(pq);
  auto ml = load_or_die(pl);
  ASSERT_TRUE(mq && ml);
  ASSERT_EQ(mq->config().rope_type, RopeType::NeoX);
  ASSERT_EQ(ml->config().rope_type, RopeType::Normal);
  const std::vector<int32_t> tokens = {1, 270, 280, 290, 300, 310, 3, 4};
  const auto a = run_logits(*mq, tokens, false), b = run_logits(*ml, tokens, false);
  EXPECT_LE(max_diff(a, b), 1e-5 * max_abs(a));
}

TEST(ReferenceSession, RefusesOutOfRangeTokensAndFullContext) {
  TestModelSpec spec;
  spec.n_ctx = 8;
  const fs::path p = temp_path("ctx8.gguf");
  ASSERT_TRUE(write_test_model(spec, p.string()).ok());
  auto model = load_or_die(p);
  ASSERT_TRUE(model);
  auto s = ReferenceSession::create(*model, SessionParams{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->n_ctx(), 8);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(spec.n_vocab)};
  auto st = (*s)->eval(bad, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("out of range"), std::string::npos);
  EXPECT_EQ((*s)->n_past(), 0);  // unchanged on error
  const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE((*s)->eval(six, true).ok());
  const std::vector<int32_t> three = {7, 8, 9};
  st = (*s)->eval(three, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context full"), std::string::npos) << st.error().message;
  EXPECT_EQ((*s)->n_past(), 6);
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(argmax(logits), 1);
  SamplerParams p;
  p.temp = 0;
  p.repeat_penalty = 1.5f;  // ignored by greedy
  Sampler s(p);
  const std::vector<int32_t> history = {1, 1, 1};
  EXPECT_EQ(s.sample(logits, history), 1);
}

TEST(Sampler, SeededDrawsRepeatAndRespectTopK) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i % 7);
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> ha, hb;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.sample(logits, ha), y = b.sample(logits, hb);
    EXPECT_EQ(x, y);
    // top-3 by (logit desc, id asc): the three lowest ids with logit 6: 6, 13, 20.
    EXPECT_TRUE(x == 6 || x == 13 || x == 20) << x;
  }
  p.min_p =
      0.5f;  // with top_k off, only logit-6 tokens have p >= 0.5 * p_max... (p ratio e^-1 < 0.5)
  p.top_k = 0;
  Sampler c(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(logits[static_cast<size_t>(c.sample(logits, {}))], 6.0f);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  const std::vector<float> logits = {3.0f, 2.9f, -5.0f};
  SamplerParams p;
  p.temp = 0.01f;  // near-greedy but through the full chain
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 2.0f;
  p.seed = 1;
  Sampler s(p);
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(s.sample(logits, history), 1);  // 3.0 / 2 = 1.5 < 2.9
  EXPECT_FALSE(validate(SamplerParams{.temp = 1, .top_k = 0, .top_p = 0.0f}).ok());
}

}  // namespace
}  // namespace spw
