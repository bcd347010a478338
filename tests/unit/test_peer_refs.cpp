// Files of each new architecture written by another tool (the GGUF format's own Python writer),
// with a peer engine's logits (../shared/models/refs, README.md there): llama.cpp for phi3 and
// the Mixtral layout, ik_llama.cpp for gemma3 and qwen3moe. Both Spillway sessions must agree
// with the peer: logits at the prompt's last position within NMSE 1e-3, and the greedy tokens
// equal while the choice is clear (the top-1 / top-2 margin above 1e-3: the peer's at the first
// step, ours after it, as the peer's later logits are not in the file). Skipped with a message
// when the files are absent.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/sampling/sampler.h"
#include "tests/support/compare.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

struct PeerCase {
  std::string name;  // sample-<name>-f16.{gguf,json}
  KvType k, v;       // the peer's KV cache types
};

// top-1 minus top-2 of a logit vector.
float margin(std::span<const float> l) {
  std::vector<float> v(l.begin(), l.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

class PeerRefs : public ::testing::TestWithParam<PeerCase> {};

TEST_P(PeerRefs, LogitsAndGreedyTokensMatchThePeer) {
  const PeerCase& pc = GetParam();
  const fs::path dir = fs::path(SPILLWAY_SHARED_DIR) / "models" / "refs";
  const fs::path gguf = dir / ("sample-" + pc.name + "-f16.gguf");
  const fs::path js = dir / ("sample-" + pc.name + "-f16.json");
  if (!fs::exists(gguf) || !fs::exists(js))
    GTEST_SKIP() << "peer reference files not found: " << gguf << ", " << js;
  std::ifstream in(js);
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
  const auto peer_logits = ref["last_prompt_logits"].get<std::vector<float>>();
  const auto peer_tokens = ref["generated_tokens"].get<std::vector<int32_t>>();
  auto model = Model::load(gguf.string());
  ASSERT_TRUE(model.ok()) << model.error().message;

  SessionParams sp;
  sp.n_ctx = 128;
  sp.n_threads = 2;
  sp.kv_type_k = pc.k;
  sp.kv_type_v = pc.v;
  auto cpu = cpu::CpuSession::create(**model, sp);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  auto oracle = ReferenceSession::create(**model, sp);
  ASSERT_TRUE(oracle.ok());
  for (Session* s : {static_cast<Session*>(cpu->get()), static_cast<Session*>(oracle->get())}) {
    const char* who = s == cpu->get() ? "cpu" : "reference";
    ASSERT_TRUE(s->eval(prompt, true).ok());
    const std::vector<float> logits(s->logits().begin(), s->logits().end());
    ASSERT_EQ(logits.size(), peer_logits.size());
    const double e = nmse(logits, peer_logits);
    EXPECT_LE(e, 1e-3) << who;
    std::printf("[ %s %s ] NMSE vs the peer %.2e, peer margin %.4f\n", pc.name.c_str(), who, e,
                margin(peer_logits));
    size_t compared = 0;
    for (size_t i = 0; i < peer_tokens.size(); ++i) {
      const float m = i == 0 ? margin(peer_logits) : margin(s->logits());
      if (m <= 1e-3f) break;  // a near tie: the sequences may part from here
      const int32_t id = argmax(s->logits());
      EXPECT_EQ(id, peer_tokens[i]) << who << " step " << i;
      if (id != peer_tokens[i]) break;
      ++compared;
      ASSERT_TRUE(s->eval(std::span<const int32_t>(&peer_tokens[i], 1), true).ok());
    }
    EXPECT_GE(compared, 1u) << who;
    std::printf("[ %s %s ] %zu of %zu greedy tokens equal the peer's\n", pc.name.c_str(), who,
                compared, peer_tokens.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Samples, PeerRefs,
                         ::testing::Values(PeerCase{"gemma3", KvType::F32, KvType::F16},
                                           PeerCase{"phi3", KvType::F32, KvType::F32},
                                           PeerCase{"qwen3moe", KvType::F32, KvType::F16},
                                           PeerCase{"mixtral", KvType::F32, KvType::F32}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace spw
