// The fast CPU session against its oracle, the float64 reference session.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/arch_specs.h"
#include "tests/support/compare.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("spillway-test-cpu-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

struct RunResult {
  std::vector<float> prompt_logits;
  std::vector<int32_t> greedy;
};

// Prefills `prompt`, then decodes n greedy tokens.
RunResult run(Session& s, const std::vector<int32_t>& prompt, int n) {
  RunResult r;
  EXPECT_TRUE(s.eval(prompt, true).ok());
  r.prompt_logits.assign(s.logits().begin(), s.logits().end());
  for (int i = 0; i < n; ++i) {
    const int32_t id = argmax(s.logits());
    r.greedy.push_back(id);
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1), true).ok());
  }
  return r;
}

std::unique_ptr<Session> fast(const Model& m, KvType kv, int threads = 1, int64_t ubatch = 512) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = kv;
  sp.n_threads = threads;
  auto s = cpu::CpuSession::create(m, sp, cpu::CpuSessionParams{ubatch});
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

std::unique_ptr<Session> reference(const Model& m, KvType kv) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = kv;
  auto s = ReferenceSession::create(m, sp);
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

TEST(CpuSession, StoriesMatchesReferenceTokens) {
  const fs::path dir = fs::path(SPILLWAY_SHARED_DIR) / "models";
  if (!fs::exists(dir / "stories260K.gguf"))
    GTEST_SKIP() << "shared test data not found at " << dir;
  std::ifstream in(dir / "stories260K.reference.json");
  const auto ref = nlohmann::json::parse(in);
  auto model = Model::load((dir / "stories260K.gguf").string());
  ASSERT_TRUE(model.ok());
  const auto prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
  for (const KvType kv : {KvType::F32, KvType::F16}) {
    auto s = fast(**model, kv, 2);
    const RunResult r = run(*s, prompt, 64);
    EXPECT_EQ(r.greedy, ref["generated_tokens"].get<std::vector<int32_t>>()) << kv_type_name(kv);
    if (kv == KvType::F32) {
      size_t w = 0;
      const auto ref_logits = ref["last_prompt_logits"].get<std::vector<float>>();
      EXPECT_LE(rel_err(r.prompt_logits, ref_logits, &w), 1e-4) << "worst logit " << w;
    }
  }
}

// Every architecture x every supported weight type (arch_specs.h: gemma3's window, phi3's
// partial rotary, the experts): logits within the type's tolerance of the reference; ubatch
// splitting and thread count change nothing.
class CpuVsReference : public ::testing::TestWithParam<std::tuple<std::string, GgmlType>> {};

TEST_P(CpuVsReference, LogitsAgree) {
  const auto& [arch, type] = GetParam();
  const TestModelSpec spec = arch_test_spec(arch, type);
  const fs::path p =
      temp_path(arch + "-" + std::string(type_name(static_cast<uint32_t>(type))) + ".gguf");
  ASSERT_TRUE(write_test_model(spec, p.string()).ok());
  auto model = Model::load(p.string());
  ASSERT_TRUE(model.ok()) << model.error().message;
  const std::vector<int32_t> prompt = {1, 300, 17, 299, 42, 260, 5, 301, 88, 12, 270};

  auto ref = reference(**model, KvType::F32);
  const RunResult r = run(*ref, prompt, 4);
  auto f1 = fast(**model, KvType::F32, 1);
  const RunResult a = run(*f1, prompt, 4);
  // Float weights keep float activations; integer formats quantize activations to 8 bits per
  // block, which costs about 1e-2 of the logit range on these random models.
  const bool float_type = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
  const double tol = float_type ? 1e-4 : 5e-2;
  size_t w = 0;
  const double e = rel_err(a.prompt_logits, r.prompt_logits, &w),
               n = nmse(a.prompt_logits, r.prompt_logits);
  EXPECT_LE(e, tol) << "worst logit " << w;
  EXPECT_LE(n, float_type ? 1e-9 : 2e-3);
  std::printf("[ %s %s ] max rel err %.2e, NMSE %.2e\n", arch.c_str(),
              std::string(type_name(static_cast<uint32_t>(type))).c_str(), e, n);

  auto f2 = fast(**model, KvType::F32, 2, /*ubatch=*/3);  // 4 ubatches, 2 threads
  const RunResult b = run(*f2, prompt, 4);
  EXPECT_LE(rel_err(b.prompt_logits, a.prompt_logits), 1e-5);
  EXPECT_EQ(b.greedy, a.greedy);
  auto f3 = fast(**model, KvType::F32, 2);
  const RunResult c = run(*f3, prompt, 4);
  EXPECT_EQ(c.prompt_logits, a.prompt_logits) << "thread count must not change a single bit";
  EXPECT_EQ(c.greedy, a.greedy);
}

INSTANTIATE_TEST_SUITE_P(
    AllArchsAllTypes, CpuVsReference,
    ::testing::Combine(::testing::ValuesIn(test_arch_names()),
                       ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16,
                                         GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                         GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                                         GgmlType::Q5_K, GgmlType::Q6_K)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             type_name(static_cast<uint32_t>(std::get<1>(info.param)));
    });

TEST(CpuSession, ContextFullAndBadTokensLeaveTheSessionUnchanged) {
  TestModelSpec spec;
  spec.n_ctx = 8;
  const fs::path p = temp_path("ctx8.gguf");
  ASSERT_TRUE(write_test_model(spec, p.string()).ok());
  auto model = Model::load(p.string());
  ASSERT_TRUE(model.ok());
  auto s = fast(**model, KvType::F16);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(spec.n_vocab)};
  EXPECT_FALSE(s->eval(bad, true).ok());
  EXPECT_EQ(s->n_past(), 0);
  const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6}, three = {7, 8, 9};
  ASSERT_TRUE(s->eval(six, true).ok());
  auto st = s->eval(three, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context full"), std::string::npos);
  EXPECT_EQ(s->n_past(), 6);
}

// The progress hook: called after every ubatch with tokens done of the call; returning false
// stops the prompt before its next ubatch with "cancelled", keeping the ubatches that ran; a
// later eval continues from there, and usage() counts what was computed.
TEST(CpuSession, EvalProgressReportsUbatchesAndCancels) {
  TestModelSpec spec;
  const fs::path p = temp_path("progress.gguf");
  ASSERT_TRUE(write_test_model(spec, p.string()).ok());
  auto model = Model::load(p.string());
  ASSERT_TRUE(model.ok());
  auto s = fast(**model, KvType::F16, 1, /*ubatch=*/4);
  std::vector<std::pair<int64_t, int64_t>> calls;
  s->set_eval_progress([&](int64_t done, int64_t total) {
    calls.emplace_back(done, total);
    return true;
  });
  const std::vector<int32_t> ten = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  ASSERT_TRUE(s->eval(ten, true).ok());
  const std::vector<std::pair<int64_t, int64_t>> want = {{4, 10}, {8, 10}, {10, 10}};
  EXPECT_EQ(calls, want);
  SessionUsage u = s->usage();
  EXPECT_EQ(u.n_past, 10);
  EXPECT_EQ(u.prefill_tokens_computed, 10);
  EXPECT_EQ(u.kv.window_blocks, 1);  // 10 tokens in one 256-token block
  EXPECT_FALSE(u.gpu);

  // Cancel after the first ubatch of the next prompt.
  s->set_eval_progress([](int64_t done, int64_t) { return done < 4; });
  auto st = s->eval(ten, true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "cancelled");
  EXPECT_EQ(s->n_past(), 14);
  // Returning false after the last ubatch changes nothing; without a hook all runs.
  s->set_eval_progress([](int64_t, int64_t) { return false; });
  const std::vector<int32_t> two = {3, 4};
  EXPECT_TRUE(s->eval(two, true).ok());
  s->set_eval_progress({});
  EXPECT_TRUE(s->eval(ten, true).ok());
  EXPECT_EQ(s->usage().n_past, 26);
  EXPECT_EQ(s->usage().prefill_tokens_computed, 26);
}

}  // namespace
}  // namespace spw
