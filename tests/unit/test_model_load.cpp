// Model::load on generated test models: every architecture x every supported weight type gives
// the spec's config and the right tensor views; missing tensors, wrong shapes and missing keys
// fail with a message naming them. Also pins the test-model writer itself (keys, vocabulary,
// reproducibility, spec checks).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

constexpr GgmlType kSupportedTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

bool is_k_quant(GgmlType t) {  // 256-element super-blocks: the K-quants and IQ4_XS
  return type_traits(static_cast<uint32_t>(t))->block_size == 256;
}

// A small spec for (arch, type). K-quants need every row length to be a multiple of 256, so
// those specs use n_embd 256 and n_ff 512. qwen3 gets a head_dim that differs from
// n_embd / n_head, as real Qwen3 models do.
TestModelSpec spec_for(const std::string& arch, GgmlType type) {
  TestModelSpec s;
  s.arch = arch;
  s.weight_type = type;
  s.seed = 11;
  if (is_k_quant(type)) {
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.head_dim = 64;
    if (arch == "qwen3") {
      s.n_head = 8;  // q_dim 512 != n_embd, still a multiple of 256
    }
  } else if (arch == "qwen3") {
    s.head_dim = 32;  // q_dim 128 != n_embd 64
  }
  return s;
}

Arch arch_enum(const std::string& a) {
  return a == "qwen2" ? Arch::Qwen2 : a == "qwen3" ? Arch::Qwen3 : Arch::Llama;
}

class ModelLoadArchTypeTest : public ::testing::TestWithParam<std::tuple<std::string, GgmlType>> {
 protected:
  TempDir dir_{"spillway-model"};
};

TEST_P(ModelLoadArchTypeTest, ConfigAndTensorsMatchTheSpec) {
  const auto& [arch, type] = GetParam();
  const TestModelSpec s = spec_for(arch, type);
  const std::string path = dir_.file("m.gguf");
  ASSERT_TRUE(write_test_model(s, path).ok());
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const Model& m = **loaded;
  const ModelConfig& c = m.config();
  const bool qwen = arch != "llama";

  EXPECT_EQ(c.arch, arch_enum(arch));
  EXPECT_EQ(c.arch_name, arch);
  EXPECT_EQ(c.name, "spillway-test-" + arch);
  EXPECT_EQ(c.n_vocab, s.n_vocab);
  EXPECT_EQ(c.n_ctx_train, s.n_ctx);
  EXPECT_EQ(c.n_embd, s.n_embd);
  EXPECT_EQ(c.n_layer, s.n_layer);
  EXPECT_EQ(c.n_ff, s.n_ff);
  EXPECT_EQ(c.n_head, s.n_head);
  EXPECT_EQ(c.n_head_kv, s.n_head_kv);
  EXPECT_EQ(c.head_dim, s.head_dim);
  EXPECT_EQ(c.head_dim_v, s.head_dim);
  EXPECT_EQ(c.n_rot, s.head_dim);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_eps), qwen ? 1e-6f : 1e-5f);
  EXPECT_EQ(c.rope.freq_base, qwen ? 1000000.0 : 10000.0);
  EXPECT_EQ(c.rope.freq_scale, 1.0);
  EXPECT_EQ(c.rope.scaling, RopeScaling::None);
  EXPECT_EQ(c.rope_type, qwen ? RopeType::NeoX : RopeType::Normal);
  EXPECT_EQ(c.has_qkv_bias, arch == "qwen2");
  EXPECT_EQ(c.has_qk_norm, arch == "qwen3");
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.has_rope_freqs);
  EXPECT_EQ(c.kv_bytes_per_token(2.0), s.n_layer * s.n_head_kv * 2 * s.head_dim * 2);

  const GgufFile& f = m.file();
  ASSERT_NE(m.token_embd, nullptr);
  EXPECT_EQ(m.token_embd, f.find_tensor("token_embd.weight"));
  EXPECT_EQ(m.token_embd->type, type);
  EXPECT_EQ(m.token_embd->ne[0], s.n_embd);
  EXPECT_EQ(m.token_embd->ne[1], s.n_vocab);
  EXPECT_EQ(m.output, f.find_tensor("output.weight"));
  ASSERT_NE(m.output, nullptr);
  EXPECT_NE(m.output, m.token_embd);
  EXPECT_EQ(m.output->type, type);
  EXPECT_EQ(m.output_norm, f.find_tensor("output_norm.weight"));
  EXPECT_EQ(m.output_norm->type, GgmlType::F32);
  EXPECT_EQ(m.rope_freqs, nullptr);

  ASSERT_EQ(static_cast<int64_t>(m.layers.size()), s.n_layer);
  for (int64_t i = 0; i < s.n_layer; ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const LayerWeights& l = m.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    auto t = [&](const char* n) { return f.find_tensor(p + n); };
    EXPECT_EQ(l.attn_norm, t("attn_norm.weight"));
    EXPECT_EQ(l.attn_q, t("attn_q.weight"));
    EXPECT_EQ(l.attn_k, t("attn_k.weight"));
    EXPECT_EQ(l.attn_v, t("attn_v.weight"));
    EXPECT_EQ(l.attn_output, t("attn_output.weight"));
    EXPECT_EQ(l.ffn_norm, t("ffn_norm.weight"));
    EXPECT_EQ(l.ffn_gate, t("ffn_gate.weight"));
    EXPECT_EQ(l.ffn_up, t("ffn_up.weight"));
    EXPECT_EQ(l.ffn_down, t("ffn_down.weight"));
    for (const GgufTensorInfo* w : {l.attn_norm, l.attn_q, l.attn_k, l.attn_v, l.attn_output,
                                    l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down}) {
      ASSERT_NE(w, nullptr);
    }
    EXPECT_EQ(l.attn_q->type, type);
    EXPECT_EQ(l.ffn_down->type, type);
    EXPECT_EQ(l.attn_norm->type, GgmlType::F32);
    EXPECT_EQ(l.attn_q->shape_string(),
              "[" + std::to_string(s.n_embd) + ", " + std::to_string(s.n_head * s.head_dim) + "]");
    EXPECT_EQ(l.attn_k->ne[1], s.n_head_kv * s.head_dim);
    EXPECT_EQ(l.attn_output->ne[0], s.n_head * s.head_dim);
    EXPECT_EQ(l.ffn_down->ne[0], s.n_ff);
    if (arch == "qwen2") {
      EXPECT_EQ(l.attn_q_bias, t("attn_q.bias"));
      EXPECT_EQ(l.attn_k_bias, t("attn_k.bias"));
      EXPECT_EQ(l.attn_v_bias, t("attn_v.bias"));
      ASSERT_NE(l.attn_q_bias, nullptr);
      EXPECT_EQ(l.attn_q_bias->ne[0], s.n_head * s.head_dim);
      EXPECT_EQ(l.attn_v_bias->type, GgmlType::F32);
    } else {
      EXPECT_EQ(l.attn_q_bias, nullptr);
      EXPECT_EQ(l.attn_k_bias, nullptr);
      EXPECT_EQ(l.attn_v_bias, nullptr);
    }
    if (arch == "qwen3") {
      EXPECT_EQ(l.attn_q_norm, t("attn_q_norm.weight"));
      EXPECT_EQ(l.attn_k_norm, t("attn_k_norm.weight"));
      ASSERT_NE(l.attn_k_norm, nullptr);
      EXPECT_EQ(l.attn_k_norm->ne[0], s.head_dim);
    } else {
      EXPECT_EQ(l.attn_q_norm, nullptr);
      EXPECT_EQ(l.attn_k_norm, nullptr);
    }
  }

  // Weights are spread ~1/sqrt(n_in): a dequantized row of attn_q stays inside the uniform
  // bound plus the type's error, and is not all zeros.
  const GgufTensorInfo* q = m.layers[0].attn_q;
  std::vector<float> row(static_cast<size_t>(q->ne[0]));
  dequantize_row(q->type, q->data, row.data(), q->ne[0]);
  const double bound = std::sqrt(3.0 / static_cast<double>(s.n_embd));
  double max_abs = 0;
  for (float x : row) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
  EXPECT_GT(max_abs, 0.3 * bound);
  EXPECT_LE(max_abs, bound * (1.0 + quant_error_bound(q->type)) + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(AllArchsAllTypes, ModelLoadArchTypeTest,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3"),
                                            ::testing::ValuesIn(kSupportedTypes)),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_" +
                                  type_name(static_cast<uint32_t>(std::get<1>(param_info.param)));
                         });

class ModelLoadTest : public ::testing::Test {
 protected:
  std::string write(const TestModel& m, const std::string& name) {
    const std::string path = dir_.file(name);
    EXPECT_TRUE(m.write(path).ok());
    return path;
  }
  // Model::load fails with a message starting with the path and containing every phrase.
  void expect_load_error(const std::string& path, const std::vector<std::string>& phrases) {
    auto m = Model::load(path);
    ASSERT_FALSE(m.ok()) << path << " loaded";
    const std::string& msg = m.error().message;
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    for (const auto& p : phrases)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
  TempDir dir_{"spillway-model"};
};

TEST_F(ModelLoadTest, TiedEmbeddingsUseTokenEmbd) {
  TestModelSpec s;
  s.tied_embeddings = true;
  const std::string path = dir_.file("tied.gguf");
  ASSERT_TRUE(write_test_model(s, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->config().tied_embeddings);
  EXPECT_EQ((*m)->file().find_tensor("output.weight"), nullptr);
  EXPECT_EQ((*m)->output, (*m)->token_embd);
}

TEST_F(ModelLoadTest, RopeFreqsTensor) {
  TestModelSpec s;
  s.rope_freqs = true;
  const std::string path = dir_.file("rope.gguf");
  ASSERT_TRUE(write_test_model(s, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->config().has_rope_freqs);
  const GgufTensorInfo* r = (*m)->rope_freqs;
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, GgmlType::F32);
  EXPECT_EQ(r->shape_string(), "[" + std::to_string(s.head_dim / 2) + "]");
  std::vector<float> v(static_cast<size_t>(r->ne[0]));
  std::memcpy(v.data(), r->data, v.size() * sizeof(float));
  EXPECT_EQ(v.front(), 1.0f);
  EXPECT_EQ(v.back(), 8.0f);
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
}

TEST_F(ModelLoadTest, MixedTypesLikeQ4_K_M) {
  TestModelSpec s = spec_for("llama", GgmlType::Q4_K);
  s.n_layer = 1;
  s.embd_type = GgmlType::Q8_0;
  s.output_type = GgmlType::Q6_K;
  const std::string path = dir_.file("mixed.gguf");
  ASSERT_TRUE(write_test_model(s, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->token_embd->type, GgmlType::Q8_0);
  EXPECT_EQ((*m)->output->type, GgmlType::Q6_K);
  EXPECT_EQ((*m)->layers[0].ffn_up->type, GgmlType::Q4_K);
  auto ft = (*m)->file().get_int("general.file_type");
  ASSERT_TRUE(ft.ok());
  EXPECT_EQ(*ft, 15);  // MOSTLY_Q4_K_M
}

// The mixes give each tensor the type llama.cpp's llama_tensor_get_type gives it (dense llama,
// no imatrix; q4_k_m's attn_v excepted), and general.file_type its llama_ftype.
TEST_F(ModelLoadTest, MixesGiveEachTensorLlamaCppsType) {
  TestModelSpec s = spec_for("llama", GgmlType::Q4_K);
  s.n_layer = 16;
  s.n_head_kv = 1;  // n_gqa 4: q2_k and iq4_xs raise attn_v
  struct Want {
    const char* mix;
    int64_t file_type;
    GgmlType embd, output, attn_q, attn_output, attn_v0, attn_v2, ffn_down0, ffn_down1, ffn_up;
  };
  using G = GgmlType;
  const Want wants[] = {
      {"q2_k", 10, G::Q2_K, G::Q6_K, G::Q2_K, G::Q3_K, G::Q4_K, G::Q4_K, G::Q3_K, G::Q3_K, G::Q2_K},
      {"q3_k_s", 11, G::Q3_K, G::Q6_K, G::Q3_K, G::Q3_K, G::Q3_K, G::Q3_K, G::Q3_K, G::Q3_K,
       G::Q3_K},
      // attn_v: the first two Q5_K; ffn_down: the first n_layer / 16 = 1 layer Q5_K.
      {"q3_k_m", 12, G::Q3_K, G::Q6_K, G::Q3_K, G::Q4_K, G::Q5_K, G::Q4_K, G::Q5_K, G::Q4_K,
       G::Q3_K},
      {"q3_k_l", 13, G::Q3_K, G::Q6_K, G::Q3_K, G::Q5_K, G::Q5_K, G::Q5_K, G::Q5_K, G::Q5_K,
       G::Q3_K},
      // attn_v: Q6_K in every layer, the test models' historical rule (quant_mix.h); llama.cpp
      // gives it Q6_K in use_more_bits() layers only.
      {"q4_k_m", 15, G::Q4_K, G::Q6_K, G::Q4_K, G::Q4_K, G::Q6_K, G::Q6_K, G::Q6_K, G::Q6_K,
       G::Q4_K},
      // ffn_down: the first n_layer / 8 = 2 layers Q5_K.
      {"iq4_nl", 25, G::IQ4_NL, G::Q6_K, G::IQ4_NL, G::IQ4_NL, G::Q5_K, G::Q5_K, G::Q5_K, G::Q5_K,
       G::IQ4_NL},
      {"iq4_xs", 30, G::IQ4_XS, G::Q6_K, G::IQ4_XS, G::IQ4_XS, G::Q5_K, G::Q5_K, G::Q5_K, G::Q5_K,
       G::IQ4_XS},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.mix);
    s.mix = w.mix;
    const std::string path = dir_.file(std::string(w.mix) + ".gguf");
    ASSERT_TRUE(write_test_model(s, path).ok());
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const Model& mm = **m;
    EXPECT_EQ(mm.token_embd->type, w.embd);
    EXPECT_EQ(mm.output->type, w.output);
    EXPECT_EQ(mm.layers[5].attn_q->type, w.attn_q);
    EXPECT_EQ(mm.layers[5].attn_output->type, w.attn_output);
    EXPECT_EQ(mm.layers[0].attn_v->type, w.attn_v0);
    EXPECT_EQ(mm.layers[2].attn_v->type, w.attn_v2);
    EXPECT_EQ(mm.layers[0].ffn_down->type, w.ffn_down0);
    EXPECT_EQ(mm.layers[1].ffn_down->type, w.ffn_down1);
    EXPECT_EQ(mm.layers[5].ffn_up->type, w.ffn_up);
    auto ft = mm.file().get_int("general.file_type");
    ASSERT_TRUE(ft.ok());
    EXPECT_EQ(*ft, w.file_type);
  }
  // n_gqa 2: q2_k's attn_v is Q3_K; iq4_xs's stays IQ4_XS. Tied: token_embd takes output's Q6_K.
  s.n_head_kv = 2;
  s.tied_embeddings = true;
  s.mix = "q2_k";
  EXPECT_EQ(s.layer_type("attn_v", 3), GgmlType::Q3_K);
  EXPECT_EQ(s.embd(), GgmlType::Q6_K);
  s.mix = "iq4_xs";
  EXPECT_EQ(s.layer_type("attn_v", 3), GgmlType::IQ4_XS);
}

TEST_F(ModelLoadTest, MissingTensorIsNamed) {
  auto tm = build_test_model(TestModelSpec{});
  ASSERT_TRUE(tm.ok());
  ASSERT_TRUE(tm->drop_tensor("blk.1.ffn_up.weight"));
  expect_load_error(write(*tm, "missing.gguf"), {"'blk.1.ffn_up.weight'", "missing"});
}

TEST_F(ModelLoadTest, MissingQwenExtrasAreNamed) {
  auto q2 = build_test_model(spec_for("qwen2", GgmlType::F32));
  ASSERT_TRUE(q2.ok());
  ASSERT_TRUE(q2->drop_tensor("blk.0.attn_v.bias"));
  expect_load_error(write(*q2, "q2.gguf"), {"'blk.0.attn_v.bias'", "missing"});
  auto q3 = build_test_model(spec_for("qwen3", GgmlType::F32));
  ASSERT_TRUE(q3.ok());
  ASSERT_TRUE(q3->drop_tensor("blk.1.attn_q_norm.weight"));
  expect_load_error(write(*q3, "q3.gguf"), {"'blk.1.attn_q_norm.weight'", "missing"});
}

TEST_F(ModelLoadTest, WrongShapeNamesTensorAndBothShapes) {
  const TestModelSpec s;
  auto tm = build_test_model(s);
  ASSERT_TRUE(tm.ok());
  TestTensor* k = tm->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->ne, (std::vector<int64_t>{64, 32}));
  k->ne = {64, 64};
  k->data.resize(64 * 64 * sizeof(float));
  expect_load_error(write(*tm, "shape.gguf"),
                    {"'blk.0.attn_k.weight'", "has shape [64, 64]", "expected [64, 32]"});

  // A 1-D norm written as 2-D.
  auto tm2 = build_test_model(s);
  ASSERT_TRUE(tm2.ok());
  TestTensor* n = tm2->find_tensor("output_norm.weight");
  n->ne = {32, 2};
  expect_load_error(write(*tm2, "shape2.gguf"),
                    {"'output_norm.weight'", "[32, 2]", "expected [64]"});
}

TEST_F(ModelLoadTest, MissingKeyIsNamed) {
  auto tm = build_test_model(TestModelSpec{});
  ASSERT_TRUE(tm.ok());
  ASSERT_TRUE(tm->drop_key("llama.block_count"));
  expect_load_error(write(*tm, "nokey.gguf"), {"llama.block_count"});
}

TEST_F(ModelLoadTest, OptionalKeysDefault) {
  // Without head_count_kv, key_length and rope.dimension_count the loader derives them.
  auto tm = build_test_model(TestModelSpec{});
  ASSERT_TRUE(tm.ok());
  ASSERT_TRUE(tm->drop_key("llama.rope.dimension_count"));
  ASSERT_FALSE(tm->drop_key("llama.attention.key_length"));  // never written for llama defaults
  const std::string path = write(*tm, "defaults.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->config().head_dim, 16);
  EXPECT_EQ((*m)->config().n_rot, 16);
}

// ---- The test-model writer itself -------------------------------------------------------------

TEST(ModelLoadTestModel, KeysSpelledAsRealFiles) {
  TempDir dir("spillway-model");
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    const TestModelSpec s = spec_for(arch, GgmlType::F32);
    const std::string path = dir.file(arch + ".gguf");
    ASSERT_TRUE(write_test_model(s, path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const GgufFile& g = **f;
    EXPECT_EQ(*g.get_string("general.architecture"), arch);
    for (const char* k :
         {"context_length", "embedding_length", "block_count", "feed_forward_length",
          "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
          "rope.freq_base", "rope.dimension_count"}) {
      EXPECT_NE(g.find(arch + "." + k), nullptr) << k;
    }
    EXPECT_EQ(g.find(arch + ".attention.head_count")->type, GgufType::UINT32);
    EXPECT_EQ(g.find(arch + ".attention.layer_norm_rms_epsilon")->type, GgufType::FLOAT32);
    EXPECT_EQ(g.find(arch + ".attention.key_length") != nullptr, arch == "qwen3");
    EXPECT_EQ(*g.get_int(arch + ".attention.head_count_kv"), s.n_head_kv);
    EXPECT_EQ(*g.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(*g.get_int("tokenizer.ggml.bos_token_id"), 1);
    EXPECT_EQ(*g.get_int("tokenizer.ggml.eos_token_id"), 2);
    EXPECT_EQ(*g.get_int("tokenizer.ggml.unknown_token_id"), 0);
    auto tokens = g.get_array("tokenizer.ggml.tokens", GgufType::STRING);
    auto scores = g.get_array("tokenizer.ggml.scores", GgufType::FLOAT32);
    auto types = g.get_array("tokenizer.ggml.token_type", GgufType::INT32);
    ASSERT_TRUE(tokens.ok() && scores.ok() && types.ok());
    ASSERT_NE(*tokens, nullptr);
    ASSERT_NE(*scores, nullptr);
    ASSERT_NE(*types, nullptr);
    ASSERT_EQ(static_cast<int64_t>((*tokens)->items.size()), s.n_vocab);
    ASSERT_EQ((*scores)->items.size(), (*tokens)->items.size());
    ASSERT_EQ((*types)->items.size(), (*tokens)->items.size());
    EXPECT_EQ((*tokens)->items[0].as_string(), "<unk>");
    EXPECT_EQ((*types)->items[0].as_int(), 2);
    EXPECT_EQ((*types)->items[1].as_int(), 3);
    EXPECT_EQ((*tokens)->items[3 + 0x41].as_string(), "<0x41>");
    EXPECT_EQ((*types)->items[3 + 0x41].as_int(), 6);
    EXPECT_EQ((*tokens)->items[259].as_string(), "\xE2\x96\x81");
    EXPECT_EQ((*types)->items[259].as_int(), 1);
    EXPECT_EQ(g.find_tensor("token_embd.weight")->ne[1], s.n_vocab);
  }
}

TEST(ModelLoadTestModel, VocabularyIsDistinctWithDecreasingScores) {
  for (int64_t n : {260, 320, 1000, 5000}) {
    const auto v = test_model_vocab(n);
    ASSERT_EQ(static_cast<int64_t>(v.size()), n);
    EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), v.size()) << n;
  }
  const auto v = test_model_vocab(320);
  EXPECT_EQ(v[1], "<s>");
  EXPECT_EQ(v[2], "</s>");
  EXPECT_EQ(v[3 + 255], "<0xFF>");
  EXPECT_EQ(v[260], "a");
  EXPECT_NE(std::find(v.begin(), v.end(), "\xE2\x96\x81the"), v.end());
  EXPECT_NE(std::find(v.begin(), v.end(), "he"), v.end());
  // Scores strictly decrease over the normal tokens so BPE merges have no ties.
  auto tm = build_test_model(TestModelSpec{});
  ASSERT_TRUE(tm.ok());
  const GgufWriteValue* scores = nullptr;
  for (const auto& [k, val] : tm->kv) {
    if (k == "tokenizer.ggml.scores") scores = &val;
  }
  ASSERT_NE(scores, nullptr);
  const auto& items = std::get<std::vector<GgufWriteValue>>(scores->v);
  for (size_t i = 260; i < items.size(); ++i) {
    EXPECT_LT(std::get<double>(items[i].v), std::get<double>(items[i - 1].v)) << i;
  }
}

TEST(ModelLoadTestModel, ReproducibleBytes) {
  TestModelSpec s;
  const auto a = make_test_model(s).serialize();
  EXPECT_EQ(a, make_test_model(s).serialize());
  s.seed = 2;
  EXPECT_NE(a, make_test_model(s).serialize());
  // A tensor's values depend on (seed, name) only: tying the embeddings leaves token_embd alone.
  TestModelSpec untied, tied;
  tied.tied_embeddings = true;
  auto mu = build_test_model(untied);
  auto mt = build_test_model(tied);
  ASSERT_TRUE(mu.ok() && mt.ok());
  EXPECT_EQ(mu->find_tensor("token_embd.weight")->data, mt->find_tensor("token_embd.weight")->data);
  EXPECT_EQ(mt->find_tensor("output.weight"), nullptr);
  EXPECT_NE(mu->find_tensor("token_embd.weight")->data, mu->find_tensor("output.weight")->data);
}

TEST(ModelLoadTestModel, SpecChecksNameTheRule) {
  auto expect_bad = [](const TestModelSpec& s, const std::vector<std::string>& phrases) {
    const Status st = check_test_model_spec(s);
    ASSERT_FALSE(st.ok());
    for (const auto& p : phrases) {
      EXPECT_NE(st.error().message.find(p), std::string::npos)
          << "missing '" << p << "' in: " << st.error().message;
    }
    auto m = build_test_model(s);
    EXPECT_FALSE(m.ok());
    TempDir dir("spillway-model");
    EXPECT_FALSE(write_test_model(s, dir.file("x.gguf")).ok());
  };
  TestModelSpec s;
  s.weight_type = GgmlType::Q4_K;  // n_embd 64 is not a multiple of 256
  expect_bad(s, {"row length 64", "Q4_K", "256"});
  s.n_embd = 256;
  s.n_head = 4;
  s.head_dim = 64;  // n_ff 96 still is not
  expect_bad(s, {"ffn_down", "row length 96", "Q4_K block size 256"});
  TestModelSpec v;
  v.n_vocab = 100;
  expect_bad(v, {"n_vocab 100"});
  TestModelSpec h;
  h.n_head_kv = 3;
  expect_bad(h, {"n_head 4", "n_head_kv 3"});
  TestModelSpec o;
  o.head_dim = 15;
  expect_bad(o, {"head_dim 15"});
  TestModelSpec r = spec_for("llama", GgmlType::Q4_K);
  r.weight_type = GgmlType::IQ2_XXS;  // rows fit its 256-blocks; the type itself is refused
  expect_bad(r, {"IQ2_XXS", "not one of the supported types"});
  TestModelSpec mix;
  mix.mix = "q5_k_m";
  expect_bad(mix, {"unknown mix 'q5_k_m'", "q3_k_m", "iq4_xs"});
  TestModelSpec ver;
  ver.gguf_version = 1;
  expect_bad(ver, {"version 1"});
  TestModelSpec al;
  al.alignment = 48;
  expect_bad(al, {"alignment 48"});
  EXPECT_TRUE(check_test_model_spec(spec_for("qwen3", GgmlType::Q6_K)).ok());
}

TEST(ModelLoadTestModel, ParseType) {
  EXPECT_EQ(parse_test_model_type("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(parse_test_model_type("BF16"), GgmlType::BF16);
  EXPECT_EQ(parse_test_model_type("Q2_K"), GgmlType::Q2_K);
  EXPECT_EQ(parse_test_model_type("Q3_K"), GgmlType::Q3_K);
  EXPECT_EQ(parse_test_model_type("IQ4_NL"), GgmlType::IQ4_NL);
  EXPECT_EQ(parse_test_model_type("IQ4_XS"), GgmlType::IQ4_XS);
  EXPECT_EQ(parse_test_model_type("IQ2_XXS"), std::nullopt);  // known, not supported
  EXPECT_EQ(parse_test_model_type("q4_k"), std::nullopt);
}

}  // namespace
}  // namespace spw
