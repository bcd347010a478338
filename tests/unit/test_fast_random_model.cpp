// Fast random models (`spillway-testmodel --fast-random`): the streamed file loads, has the
// shapes and types build_test_model gives, keeps its weights at the intended spread, and runs a
// few CpuSession tokens with finite logits, for every weight type and the Q4_K_M mix.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/model/model.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Small shapes every type accepts (K-quant rows are multiples of 256).
TestModelSpec small_spec(GgmlType type) {
  TestModelSpec s;
  s.weight_type = type;
  s.n_vocab = 512;
  s.n_embd = 256;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 512;
  s.n_ctx = 64;
  return s;
}

// Root mean square of one dequantized tensor.
double rms_of(const GgufTensorInfo& t) {
  std::vector<float> row(static_cast<size_t>(t.ne[0]));
  double ss = 0;
  for (int64_t r = 0; r < t.n_rows(); ++r) {
    dequantize_row(t.type, t.data + r * t.row_bytes(), row.data(), t.ne[0]);
    for (float x : row) ss += static_cast<double>(x) * x;
  }
  return std::sqrt(ss / static_cast<double>(t.n_elements()));
}

void check_model(const TestModelSpec& spec, const std::string& label) {
  SCOPED_TRACE(label);
  TempDir dir("spillway-fast-random");
  const std::string path = dir.file("m.gguf");
  ASSERT_TRUE(write_fast_random_model(spec, path).ok());

  // Streaming writes exactly what serialize() materializes, and the same spec the same bytes.
  auto w = make_fast_random_model(spec);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(read_all(path), w->serialize());

  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const Model& m = **loaded;

  // The same tensor index as the slow builder: names, types, shapes, in order.
  auto slow = build_test_model(spec);
  ASSERT_TRUE(slow.ok());
  const auto& index = m.file().tensors();
  ASSERT_EQ(index.size(), slow->tensors.size());
  for (size_t i = 0; i < index.size(); ++i) {
    const TestTensor& t = slow->tensors[i];
    EXPECT_EQ(index[i].name, t.name);
    EXPECT_EQ(index[i].type, t.type) << t.name;
    EXPECT_EQ(index[i].n_bytes, t.data.size()) << t.name;
  }

  // Weights spread as 1/sqrt(n_in), within what the f16 rounding of d allows.
  for (const GgufTensorInfo* t : {m.layers[0].attn_q, m.layers[0].ffn_down, m.output}) {
    const double want = spec.weight_scale / std::sqrt(static_cast<double>(t->ne[0]));
    EXPECT_NEAR(rms_of(*t) / want, 1.0, 0.15) << t->name;
  }

  SessionParams sp;
  sp.n_threads = 2;
  auto s = cpu::CpuSession::create(m, sp);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::vector<int32_t> prompt = {1, 50, 300, 7};
  ASSERT_TRUE((*s)->eval(prompt, true).ok());
  for (int step = 0; step < 4; ++step) {
    const auto logits = (*s)->logits();
    ASSERT_EQ(static_cast<int64_t>(logits.size()), spec.n_vocab);
    for (size_t i = 0; i < logits.size(); ++i)
      ASSERT_TRUE(std::isfinite(logits[i])) << "step " << step << " logit " << i;
    const int32_t next = static_cast<int32_t>(100 + step);
    ASSERT_TRUE((*s)->eval(std::span<const int32_t>(&next, 1), true).ok());
  }
}

TEST(FastRandomModel, EveryWeightTypeLoadsAndRuns) {
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
        GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,
        GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    check_model(small_spec(t), type_name(static_cast<uint32_t>(t)));
  }
}

TEST(FastRandomModel, Q4KMMixLoadsAndRuns) {
  TestModelSpec s = small_spec(GgmlType::F32);
  s.mix = "q4_k_m";
  s.n_layer = 8;  // ffn_down in Q6_K on some layers and Q4_K on others
  check_model(s, "q4_k_m");
}

TEST(FastRandomModel, LowBitMixesLoadAndRun) {
  for (const char* mix : {"q2_k", "q3_k_m", "iq4_xs"}) {
    TestModelSpec s = small_spec(GgmlType::F32);
    s.mix = mix;
    s.n_layer = 8;
    check_model(s, mix);
  }
}

TEST(FastRandomModel, QwenVariantsLoadAndRun) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    TestModelSpec s = small_spec(GgmlType::Q8_0);
    s.arch = arch;
    check_model(s, arch);
  }
}

TEST(FastRandomModel, RefusesWhatTheSlowBuilderRefuses) {
  TestModelSpec s = small_spec(GgmlType::Q4_K);
  s.n_ff = 96;  // not a multiple of 256
  auto w = make_fast_random_model(s);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("ffn_down"), std::string::npos) << w.error().message;
}

}  // namespace
}  // namespace spw
