// The architectures beyond Llama/Qwen: phi3, gemma3, the MoE layouts (qwen2moe, qwen3moe,
// Mixtral). The loader reads their keys and tensors as llama.cpp does; the CPU session equals the
// float64 reference per weight type; sliding-window layers attend their window exactly on the
// tiered cache; MoE decode and prefill agree bit for bit; spilling changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/cpu/tiered_attention.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/cpu/ops.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/planner.h"
#include "engine/sampling/sampler.h"
#include "tests/support/arch_specs.h"
#include "tests/support/compare.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

std::unique_ptr<Model> load(const TempDir& dir, const TestModelSpec& spec,
                            const std::string& name = "m.gguf") {
  const std::string path = dir.file(name);
  const Status st = write_test_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.error().message;
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

struct Trace {
  std::vector<std::vector<float>> logits;  // the prompt's last position, then each decode step
  std::vector<int32_t> greedy;
  std::vector<double> route_margin;  // the reference's (ReferenceSession::last_route_margin)
};

// Prefills `prompt`, then decodes n_decode tokens: its own greedy choices, or `forced` ones (the
// reference's, so that a fast path's logits are compared on the same inputs at every step).
Trace run(Session& s, const std::vector<int32_t>& prompt, int n_decode,
          const std::vector<int32_t>* forced = nullptr) {
  Trace r;
  const Status st = s.eval(prompt, true);
  EXPECT_TRUE(st.ok()) << st.error().message;
  if (!st.ok()) return r;
  const auto* ref = dynamic_cast<const ReferenceSession*>(&s);
  r.logits.emplace_back(s.logits().begin(), s.logits().end());
  if (ref) r.route_margin.push_back(ref->last_route_margin());
  for (int i = 0; i < n_decode; ++i) {
    r.greedy.push_back(argmax(s.logits()));
    const int32_t id = forced ? (*forced)[static_cast<size_t>(i)] : r.greedy.back();
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1), true).ok());
    r.logits.emplace_back(s.logits().begin(), s.logits().end());
    if (ref) r.route_margin.push_back(ref->last_route_margin());
  }
  return r;
}

std::unique_ptr<Session> cpu_session(const Model& m, int threads = 2, int64_t ubatch = 512,
                                     kv::KvSettings kv = {}) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = KvType::F32;
  sp.n_threads = threads;
  sp.n_ctx = 1024;
  cpu::CpuSessionParams cp;
  cp.n_ubatch = ubatch;
  cp.kv = kv;
  auto s = cpu::CpuSession::create(m, sp, cp);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Session> reference(const Model& m) {
  SessionParams sp;
  sp.kv_type_k = sp.kv_type_v = KvType::F32;
  sp.n_threads = 2;
  sp.n_ctx = 1024;
  auto s = ReferenceSession::create(m, sp);
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

// ---- Loader -------------------------------------------------------------------------------

TEST(Archs, Phi3ConfigAndTensors) {
  TempDir dir;
  auto m = load(dir, arch_test_spec("phi3"));
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::Phi3);
  EXPECT_EQ(c.rope_type, RopeType::NeoX);
  EXPECT_TRUE(c.fused_qkv && c.fused_gate_up);
  EXPECT_EQ(c.n_rot, c.head_dim / 2);
  EXPECT_DOUBLE_EQ(c.attn_scale, 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  // The file's sliding window on every layer (Hugging Face's Phi-3; the peer sample agrees).
  EXPECT_EQ(c.n_swa, 8);
  EXPECT_EQ(c.layer_attn_span, std::vector<int64_t>(static_cast<size_t>(c.n_layer), 8));
  EXPECT_TRUE(c.warnings.empty());
  const LayerWeights& l = m->layers[0];
  ASSERT_NE(l.attn_qkv, nullptr);
  EXPECT_EQ(l.attn_q, nullptr);
  EXPECT_EQ(l.ffn_gate, nullptr);
  EXPECT_EQ(l.attn_qkv->ne[1], c.n_head * c.head_dim + 2 * c.n_head_kv * c.head_dim);
  EXPECT_EQ(l.ffn_up->ne[1], 2 * c.n_ff);
}

TEST(Archs, Gemma3ConfigAndTensors) {
  TempDir dir;
  auto m = load(dir, arch_test_spec("gemma3"));
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_EQ(c.ffn_act, FfnActivation::GeluTanh);
  EXPECT_TRUE(c.has_post_norms && c.has_qk_norm && c.tied_embeddings);
  EXPECT_DOUBLE_EQ(c.embd_scale, std::sqrt(64.0));
  EXPECT_EQ(c.n_swa, 8);
  const std::vector<int64_t> spans = {8, 8, 8, 8, 8, 0};  // 5 local : 1 global
  EXPECT_EQ(c.layer_attn_span, spans);
  // KV per layer: 2 KV heads x (16 + 16) x 2 bytes (f16) in each layer; a sliding layer reads at
  // most its window of positions, a global one the whole context.
  EXPECT_EQ(c.layer_kv_bytes_per_token(2), 128);
  EXPECT_EQ(c.kv_bytes_per_token(2), 6 * 128);
  EXPECT_EQ(c.layer_kv_tokens(0, 1000), 8);
  EXPECT_EQ(c.layer_kv_tokens(4, 1000), 8);
  EXPECT_EQ(c.layer_kv_tokens(5, 1000), 1000);
  EXPECT_EQ(c.layer_kv_tokens(0, 5), 5);  // a context shorter than the window
  EXPECT_EQ(m->output, m->token_embd);
  EXPECT_NE(m->layers[3].attn_post_norm, nullptr);
  EXPECT_NE(m->layers[3].ffn_post_norm, nullptr);
  // A Gemma 3 file without its window is refused.
  auto t = build_test_model(arch_test_spec("gemma3"));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->drop_key("gemma3.attention.sliding_window"));
  const std::string p = dir.file("nowindow.gguf");
  ASSERT_TRUE(t->write(p).ok());
  auto bad = Model::load(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("sliding_window"), std::string::npos) << bad.error().message;
}

TEST(Archs, MoeConfigsTensorsAndSizes) {
  TempDir dir;
  for (const std::string name : {"mixtral", "qwen3moe", "qwen2moe"}) {
    const TestModelSpec spec = arch_test_spec(name);
    auto m = load(dir, spec, name + ".gguf");
    ASSERT_NE(m, nullptr) << name;
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.n_expert, spec.n_expert) << name;
    EXPECT_EQ(c.n_expert_used, 2);
    EXPECT_EQ(c.n_ff_exp, spec.ff_exp());
    EXPECT_EQ(c.expert_weights_norm, name != "qwen2moe");  // llama.cpp's per-arch choice
    EXPECT_EQ(c.n_ff_shexp, name == "qwen2moe" ? spec.ff_shexp() : 0);
    const LayerWeights& l = m->layers[1];
    ASSERT_NE(l.ffn_gate_exps, nullptr);
    EXPECT_EQ(l.ffn_gate, nullptr);
    EXPECT_EQ(l.ffn_down_exps->ne[2], spec.n_expert);
    EXPECT_EQ(l.ffn_gate_inp->type, GgmlType::F32);
    // Active parameters: 2 of n experts; decode bytes likewise (the planner's figure).
    const ModelSize sz = m->size();
    const int64_t exp_elems = 3 * spec.n_embd * spec.ff_exp() * spec.n_expert * spec.n_layer;
    EXPECT_EQ(sz.params - sz.active_params, exp_elems / spec.n_expert * (spec.n_expert - 2))
        << name;
    EXPECT_EQ(kv::decode_weight_bytes(*m), sz.decode_bytes);
    EXPECT_LT(sz.decode_bytes, static_cast<int64_t>(m->file().file_size()));
  }
  // A dense model: active = total.
  auto d = load(dir, arch_test_spec("llama"), "dense.gguf");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->size().params, d->size().active_params);
  // Experts on an architecture read as dense are refused, as are bad counts.
  auto t = build_test_model(arch_test_spec("mixtral"));
  ASSERT_TRUE(t.ok());
  t->set("llama.expert_used_count", GgufWriteValue::u32(5));
  ASSERT_TRUE(t->write(dir.file("bad.gguf")).ok());
  auto bad = Model::load(dir.file("bad.gguf"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("expert_used_count = 5"), std::string::npos)
      << bad.error().message;
}

TEST(Archs, OldPerExpertMixtralFilesAreRefusedWithTheReason) {
  TempDir dir;
  auto t = build_test_model(arch_test_spec("mixtral"));
  ASSERT_TRUE(t.ok());
  TestTensor e = *t->find_tensor("blk.0.ffn_norm.weight");
  e.name = "blk.0.ffn_gate.0.weight";
  t->tensors.push_back(e);
  ASSERT_TRUE(t->write(dir.file("old.gguf")).ok());
  auto m = Model::load(dir.file("old.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("one tensor per expert"), std::string::npos)
      << m.error().message;
}

// ---- Against the reference ----------------------------------------------------------------

class ArchVsReference : public ::testing::TestWithParam<std::tuple<std::string, GgmlType>> {};

// Every new architecture x F32, F16, Q8_0, Q4_K: a 40-token prompt (five times the sliding
// window) and 8 decode steps fed the reference's tokens: NMSE of the logits of the 9 steps <=
// 1e-10 (float weights) or 1e-3 (quantized: the fast path quantizes the activations too, which
// on these random models costs 2e-4 to 1.5e-3 per step), greedy tokens equal to the reference's.
TEST_P(ArchVsReference, LogitsAndGreedyTokens) {
  const auto& [name, type] = GetParam();
  TempDir dir;
  TestModelSpec spec = arch_test_spec(name, type);
  const bool float_type = type == GgmlType::F32 || type == GgmlType::F16;
  // Quantized MoE: one layer, so the router reads the (exact) embedding. Behind a quantized
  // layer the router's input carries the activations' rounding (~1e-2 relative on these random
  // models), and a top-k choice within that of a tie goes the other way at some position of
  // the context, a discrete change of its KV that every later step sees: the comparison would
  // measure near ties, not the code. Float weights run the two-layer model. (test_moe_routing.cpp
  // compares 3-layer quantized MoE with the routing made comparable.)
  if (spec.n_expert > 0 && !float_type) spec.n_layer = 1;
  auto m = load(dir, spec);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = test_prompt(40, m->config().n_vocab, 3);
  auto ref = reference(*m);
  auto fast = cpu_session(*m);
  ASSERT_NE(fast, nullptr);
  const Trace r = run(*ref, prompt, 8);
  const Trace f = run(*fast, prompt, 8, &r.greedy);  // the reference's tokens as inputs
  // NMSE of the run's logits, all steps pooled (sum of squared differences over sum of squares).
  double num = 0, den = 0, worst = 0;
  std::string steps;
  for (size_t i = 0; i < r.logits.size() && i < f.logits.size(); ++i) {
    const double e = nmse(f.logits[i], r.logits[i]);
    for (size_t j = 0; j < r.logits[i].size(); ++j) {
      const double d = static_cast<double>(f.logits[i][j]) - r.logits[i][j];
      num += d * d;
      den += static_cast<double>(r.logits[i][j]) * r.logits[i][j];
    }
    worst = std::max(worst, e);
    steps += fmt::format(" {:.1e}", e);
  }
  const double pooled = num / den;
  EXPECT_LE(pooled, float_type ? 1e-10 : 1e-3) << "per step:" << steps;
  // Greedy tokens: all equal for float weights; for quantized ones, wherever the reference's
  // choice is clear: its top-1 / top-2 margin more than 3 times the step's RMS logit difference
  // (a closer choice is a tie under the activations' rounding).
  ASSERT_EQ(f.greedy.size(), r.greedy.size());
  int compared = 0;
  for (size_t i = 0; i < r.greedy.size(); ++i) {
    std::vector<float> top(r.logits[i]);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    double ss = 0;
    for (size_t j = 0; j < top.size(); ++j) {
      const double d = static_cast<double>(f.logits[i][j]) - r.logits[i][j];
      ss += d * d;
    }
    const double rms = std::sqrt(ss / static_cast<double>(top.size()));
    if (!float_type && top[0] - top[1] <= 3 * rms) continue;
    EXPECT_EQ(f.greedy[i], r.greedy[i]) << "step " << i;
    ++compared;
  }
  EXPECT_GE(compared, float_type ? 8 : 4);
  std::printf("[ %s %s ] NMSE %.2e (worst step %.2e), %d of 8 greedy tokens compared\n",
              name.c_str(), std::string(type_name(static_cast<uint32_t>(type))).c_str(), pooled,
              worst, compared);
}

INSTANTIATE_TEST_SUITE_P(NewArchs, ArchVsReference,
                         ::testing::Combine(::testing::ValuesIn(new_test_arch_names()),
                                            ::testing::Values(GgmlType::F32, GgmlType::F16,
                                                              GgmlType::Q8_0, GgmlType::Q4_K)),
                         arch_type_test_name);

// The sliding window really bounds gemma3's local layers: a token further back than the window
// changes the logits only through the global layer. With every layer sliding (a 5-layer file)
// it cannot change them at all.
TEST(Archs, Gemma3SlidingLayersNeverSeePastTheirWindow) {
  TempDir dir;
  TestModelSpec spec = arch_test_spec("gemma3");
  spec.n_layer = 5;  // layers 0-4: all sliding
  auto m = load(dir, spec);
  ASSERT_NE(m, nullptr);
  // Each layer looks 7 positions back, so position 44 depends on the inputs at [44 - 5 x 7, 44]
  // = [9, 44] only: changing the token at position 3 must not change its logits at all.
  std::vector<int32_t> a = test_prompt(45, spec.n_vocab, 5), b = a;
  b[3] = b[3] == 300 ? 301 : 300;
  auto s1 = cpu_session(*m), s2 = cpu_session(*m);
  ASSERT_TRUE(s1->eval(a, true).ok());
  ASSERT_TRUE(s2->eval(b, true).ok());
  const std::vector<float> la(s1->logits().begin(), s1->logits().end());
  const std::vector<float> lb(s2->logits().begin(), s2->logits().end());
  EXPECT_EQ(la, lb) << "position 44 lies beyond 5 windows of position 3";
  auto r1 = reference(*m), r2 = reference(*m);
  ASSERT_TRUE(r1->eval(a, true).ok());
  ASSERT_TRUE(r2->eval(b, true).ok());
  const std::vector<float> ra(r1->logits().begin(), r1->logits().end());
  const std::vector<float> rb(r2->logits().begin(), r2->logits().end());
  EXPECT_EQ(ra, rb);
  EXPECT_LE(nmse(la, ra), 1e-10);
  // Within reach (position 19 depends on [0, 19]) the change shows: the test can fail.
  a.resize(20);
  b.resize(20);
  auto s3 = cpu_session(*m), s4 = cpu_session(*m);
  ASSERT_TRUE(s3->eval(a, true).ok());
  ASSERT_TRUE(s4->eval(b, true).ok());
  EXPECT_NE(std::vector<float>(s3->logits().begin(), s3->logits().end()),
            std::vector<float>(s4->logits().begin(), s4->logits().end()));
}

// ---- MoE: decode and prefill ---------------------------------------------------------------

// Prefill groups a ubatch's tokens by expert; decode runs the chosen experts one token at a time.
// Both sum a token's expert outputs in the router's order, so the results are bit-identical
// whatever the ubatch, and so is the thread count.
TEST(Archs, MoePrefillGroupingEqualsTokenByTokenBitForBit) {
  TempDir dir;
  for (const std::string name : {"mixtral", "qwen3moe", "qwen2moe"}) {
    auto m = load(dir, arch_test_spec(name, GgmlType::Q8_0), name + ".gguf");
    ASSERT_NE(m, nullptr);
    const std::vector<int32_t> prompt = test_prompt(24, m->config().n_vocab, 9);
    auto whole = cpu_session(*m, 2, 512);
    auto split = cpu_session(*m, 1, 5);
    auto one = cpu_session(*m, 2, 1);  // every token a decode-shaped ubatch
    const Trace a = run(*whole, prompt, 6), b = run(*split, prompt, 6), c = run(*one, prompt, 6);
    EXPECT_EQ(a.logits, b.logits) << name;
    EXPECT_EQ(a.logits, c.logits) << name;
    EXPECT_EQ(a.greedy, c.greedy);
  }
}

// A dense FFN runs its gate and up products 128 tokens at a time (cpu_ffn.cpp): a 300-token
// ubatch (three chunks of 100) gives the bits of 128-token ubatches and of one token at a time,
// for SwiGLU (llama, Q8_0 repacked and F16 not), phi3's fused gate+up and gemma3's GeGLU.
TEST(Archs, DenseFfnChunksEqualWholeUbatchesBitForBit) {
  TempDir dir;
  for (const auto& [name, type] : {std::pair{std::string("llama"), GgmlType::Q8_0},
                                   std::pair{std::string("llama"), GgmlType::F16},
                                   std::pair{std::string("phi3"), GgmlType::Q8_0},
                                   std::pair{std::string("gemma3"), GgmlType::Q8_0}}) {
    SCOPED_TRACE(name + " " + type_name(static_cast<uint32_t>(type)));
    auto m = load(dir, arch_test_spec(name, type), name + "-ffn.gguf");
    ASSERT_NE(m, nullptr);
    const std::vector<int32_t> prompt = test_prompt(300, m->config().n_vocab, 5);
    auto whole = cpu_session(*m, 2, 512);
    auto chunked = cpu_session(*m, 2, 128);
    auto one = cpu_session(*m, 1, 1);
    const Trace a = run(*whole, prompt, 3), b = run(*chunked, prompt, 3), c = run(*one, prompt, 3);
    EXPECT_EQ(a.logits, b.logits);
    EXPECT_EQ(a.logits, c.logits);
  }
}

TEST(Archs, RouterChoosesTheMostProbableExpertsAndNormalises) {
  // 2 tokens, 4 experts, top 2.
  std::vector<float> logits = {0.0f, 2.0f,  1.0f, 2.0f,  // a tie: the lower expert first
                               3.0f, -1.0f, 0.5f, 0.0f};
  std::vector<float> raw = logits;
  std::vector<int32_t> chosen(4);
  std::vector<float> w(4);
  cpu::route_experts(logits.data(), 2, 4, 2, true, 0.0f, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  const double e0 = std::exp(3.0), e2 = std::exp(0.5);
  EXPECT_NEAR(w[2], e0 / (e0 + e2), 1e-6);
  EXPECT_NEAR(w[2] + w[3], 1.0, 1e-6);
  // Without renormalisation the weights are the softmax probabilities; a scale multiplies them.
  cpu::route_experts(raw.data(), 2, 4, 2, false, 2.0f, chosen.data(), w.data());
  const double z = std::exp(3.0) + std::exp(-1.0) + std::exp(0.5) + 1.0;
  EXPECT_NEAR(w[2], 2.0 * std::exp(3.0) / z, 1e-6);
}

// ---- Sliding windows on the tiered cache ---------------------------------------------------

// The attention scheduler with a span, over a cache whose blocks sit in every tier, against a
// direct softmax over [p - span + 1, p]: blocks wholly before the span are skipped, the boundary
// block's earlier rows masked. Decode and prefill plans, block sizes around the span.
TEST(Archs, TieredAttentionSpanMatchesADirectWindowedSoftmax) {
  TempDir dir;
  const int64_t n_head = 4, n_kv = 2, hd = 32;
  for (const int64_t block : {4, 8, 16}) {
    for (const int64_t span : {5, 8, 13}) {
      kv::KvSettings ks;
      ks.block_size = block;
      ks.window_tokens = block;  // one recent block: the rest spills
      ks.n_sinks = 0;
      ks.host_budget = block * n_kv * 2 * hd * 4;  // one block
      ks.disk_budget = int64_t{16} << 20;
      ks.spill_dir = dir.path();
      kv::KvCacheConfig kc(kv::tier_config(ks, kv::WindowHome::Ram, 256));
      kc.n_layer = 1;
      kc.n_kv_heads = n_kv;
      kc.head_dim = kc.head_dim_v = hd;
      kc.type_k = kc.type_v = GgmlType::F32;
      kc.spill_dir = dir.path();
      auto cache = kv::KvCache::create(kc);
      ASSERT_TRUE(cache.ok()) << cache.error().message;
      // Keys and values: a function of (position, element).
      const auto kval = [](int64_t p, int64_t i) { return std::sin(0.37 * p + 0.11 * i); };
      const auto vval = [](int64_t p, int64_t i) { return std::cos(0.23 * p - 0.05 * i); };
      const int64_t n_pos = 60;
      std::vector<float> k(static_cast<size_t>(n_kv * hd)), v(k.size());
      for (int64_t p = 0; p < n_pos; ++p) {
        ASSERT_TRUE((*cache)->reserve(1).ok());
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = static_cast<float>(kval(p, static_cast<int64_t>(i)));
          v[i] = static_cast<float>(vval(p, static_cast<int64_t>(i)));
        }
        (*cache)->store(0, p, k.data(), v.data());
        (*cache)->commit(1);
      }
      ASSERT_TRUE((*cache)->flush().ok());
      cpu::ThreadPool pool(2);
      cpu::AttnDims d{1, n_head, n_kv, hd, hd, GgmlType::F32, GgmlType::F32, 0.0f, span};
      cpu::TieredAttention attn(d, (*cache)->layout().window, kv::KvAttention::Exact, 0);
      std::vector<kv::BlockView> views;
      for (const auto& [pos0, n] : {std::pair<int64_t, int64_t>{n_pos - 1, 1}, {n_pos - 9, 9}}) {
        // The queries' own positions are stored already; attention reads [lo, p] for each.
        std::vector<float> q(static_cast<size_t>(n * n_head * hd));
        for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(std::sin(0.7 * i));
        (*cache)->blocks(0, pos0 + n, views);
        attn.plan(pos0, n, 2);
        cpu::AttnTimes t;
        attn.run(pool, 0, q.data(), views, t);
        std::vector<float> out(static_cast<size_t>(n * n_head * hd));
        attn.finalize(pool, out.data(), t);
        double worst = 0;
        for (int64_t ti = 0; ti < n; ++ti) {
          const int64_t p = pos0 + ti, lo = std::max<int64_t>(0, p - span + 1);
          for (int64_t h = 0; h < n_head; ++h) {
            const int64_t g = h / (n_head / n_kv);
            const float* qh = &q[static_cast<size_t>((ti * n_head + h) * hd)];
            std::vector<double> s;
            double mx = -INFINITY;
            for (int64_t j = lo; j <= p; ++j) {
              double dot = 0;
              for (int64_t i = 0; i < hd; ++i)
                dot += qh[i] * static_cast<double>(static_cast<float>(kval(j, g * hd + i)));
              s.push_back(dot / std::sqrt(static_cast<double>(hd)));
              mx = std::max(mx, s.back());
            }
            double z = 0;
            for (double& x : s) z += x = std::exp(x - mx);
            for (int64_t i = 0; i < hd; ++i) {
              double o = 0;
              for (int64_t j = lo; j <= p; ++j)
                o += s[static_cast<size_t>(j - lo)] / z *
                     static_cast<double>(static_cast<float>(vval(j, g * hd + i)));
              worst = std::max(worst,
                               std::fabs(o - out[static_cast<size_t>((ti * n_head + h) * hd + i)]));
            }
          }
        }
        EXPECT_LE(worst, 2e-6) << "block " << block << " span " << span << " n " << n;
      }
      const kv::KvStats st = (*cache)->stats();
      EXPECT_GT(st.disk_blocks, 0) << "block " << block;
    }
  }
}

// Spilled (window 1 block, host + disk) equals unspilled token for token, for every new arch.
class ArchTiered : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchTiered, SpilledEqualsUnspilled) {
  TempDir dir;
  TestModelSpec spec = arch_test_spec(GetParam());
  spec.n_ctx = 2048;
  auto m = load(dir, spec);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = test_prompt(150, spec.n_vocab, 21);
  kv::KvSettings all;
  all.block_size = 16;
  all.window_tokens = 1 << 20;
  kv::KvSettings spilled;
  spilled.block_size = 16;
  spilled.window_tokens = 16;  // one recent block (+ the sink block)
  // Two blocks of the layers that spill (the global ones; sliding layers drop their old KV).
  const ModelConfig& mc = m->config();
  const int64_t n_global =
      std::count(mc.layer_attn_span.begin(), mc.layer_attn_span.end(), int64_t{0});
  spilled.host_budget = 2 * 16 * n_global * mc.layer_kv_bytes_per_token(4);
  spilled.disk_budget = int64_t{64} << 20;
  spilled.spill_dir = dir.path();
  auto a = cpu_session(*m, 2, 512, all);
  auto b = cpu_session(*m, 2, 512, spilled);
  const Trace ra = run(*a, prompt, 24), rb = run(*b, prompt, 24);
  EXPECT_EQ(rb.greedy, ra.greedy);
  EXPECT_EQ(rb.logits, ra.logits) << "same ubatches: the same arithmetic whatever the tier";
  auto* cs = dynamic_cast<cpu::CpuSession*>(b.get());
  ASSERT_TRUE(cs->flush_kv().ok());
  const ModelConfig& c = m->config();
  const bool every_layer_slides =
      std::count(c.layer_attn_span.begin(), c.layer_attn_span.end(), int64_t{0}) == 0;
  if (every_layer_slides) {  // nothing to spill: what leaves the window is dropped
    EXPECT_EQ(cs->usage().kv.disk_blocks + cs->usage().kv.host_blocks, 0);
  } else {
    EXPECT_GT(cs->usage().kv.disk_blocks, 0);
    EXPECT_GT(cs->usage().kv.host_blocks, 0);
  }
  EXPECT_EQ(cs->usage().kv.dropped_blocks > 0, c.has_swa());
  // The approximate modes run on every arch too (sliding layers inside their window).
  for (const auto mode : {kv::KvAttention::Streaming, kv::KvAttention::TopK}) {
    kv::KvSettings approx = spilled;
    approx.attention = mode;
    approx.top_k = 2;
    auto c = cpu_session(*m, 2, 512, approx);
    const Trace rc = run(*c, prompt, 4);
    EXPECT_EQ(rc.logits.size(), 5u);
  }
}

INSTANTIATE_TEST_SUITE_P(NewArchs, ArchTiered, ::testing::ValuesIn(new_test_arch_names()));

// Sliding-window layers keep only their window's KV (engine/kv/kv_cache_set.h): gemma3's five
// local layers drop every block older than their window while the global layer keeps the whole
// context, and the run is still the float64 reference's; a KV snapshot taken mid-run restores
// into a fresh session that then decodes exactly what the uninterrupted one does.
TEST(Archs, Gemma3SlidingLayersDropTheirKvExactly) {
  TempDir dir;
  TestModelSpec spec = arch_test_spec("gemma3");
  spec.n_ctx = 2048;
  auto m = load(dir, spec);
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  ASSERT_TRUE(c.has_swa());
  kv::KvSettings kv;
  kv.block_size = 4;  // the window of 8 spans 3 blocks: most of a 150-token run is dropped
  auto fast = cpu_session(*m, 2, 512, kv);
  auto ref = reference(*m);
  const std::vector<int32_t> prompt = test_prompt(150, c.n_vocab, 17);
  const Trace r = run(*ref, prompt, 6);
  const Trace f = run(*fast, prompt, 6, &r.greedy);
  EXPECT_EQ(f.greedy, r.greedy);
  for (size_t i = 0; i < r.logits.size(); ++i) {
    EXPECT_LE(nmse(f.logits[i], r.logits[i]), 1e-10) << "step " << i;
  }
  auto* cs = dynamic_cast<cpu::CpuSession*>(fast.get());
  const kv::KvCacheSet& set = cs->caches();
  ASSERT_EQ(set.n_groups(), 2);
  EXPECT_EQ(set.group_span(1), c.n_swa);
  EXPECT_EQ(static_cast<int64_t>(set.group_layers(1).size()), 5);
  const int64_t n = 156;  // 150 prompt + 6 decoded
  EXPECT_EQ(set.group(1).n_tokens(), n);
  // Blocks held by the sliding group: those of the window only ([n - 7, n) spans <= 3 blocks).
  const kv::KvStats sliding = set.group(1).stats();
  EXPECT_EQ(sliding.dropped_blocks, (n - c.n_swa) / 4);
  EXPECT_LE(sliding.window_blocks, 3 + 1);
  EXPECT_EQ(set.group(0).stats().dropped_blocks, 0);  // the global layer holds everything
  EXPECT_EQ(set.group(0).stats().window_blocks, kv::ceil_div(n, 4));

  // Snapshot mid-run, restore into a fresh session, decode on: the same tokens and logits.
  const std::string path = dir.file("gemma3.kv");
  ASSERT_TRUE(cs->save_kv(path).ok());
  auto restored = cpu_session(*m, 2, 512, kv);
  auto* rs = dynamic_cast<cpu::CpuSession*>(restored.get());
  ASSERT_TRUE(rs->load_kv(path).ok());
  EXPECT_EQ(rs->caches().group(1).first_held_block(), set.group(1).first_held_block());
  // The whole sequence again: only the last position's logits are recomputed, attending the
  // sliding layers' held blocks.
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), r.greedy.begin(), r.greedy.end());
  ASSERT_TRUE(restored->eval(history, true).ok());
  EXPECT_EQ(std::vector<float>(restored->logits().begin(), restored->logits().end()),
            std::vector<float>(fast->logits().begin(), fast->logits().end()));
  for (int i = 0; i < 4; ++i) {
    const int32_t id = argmax(fast->logits());
    ASSERT_TRUE(fast->eval(std::span<const int32_t>(&id, 1), true).ok());
    ASSERT_TRUE(restored->eval(std::span<const int32_t>(&id, 1), true).ok());
    EXPECT_EQ(std::vector<float>(restored->logits().begin(), restored->logits().end()),
              std::vector<float>(fast->logits().begin(), fast->logits().end()))
        << "step " << i;
  }
}

// The planner counts the sliding layers' bounded windows (what the session above holds) and
// their share of a dense model's KV.
TEST(Archs, PlanCountsGemma3SlidingKvPerLayer) {
  TempDir dir;
  TestModelSpec spec = arch_test_spec("gemma3");
  spec.n_ctx = 131072;
  auto m = load(dir, spec);
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  kv::PlanInput in;
  in.n_layer = c.n_layer;
  in.n_kv_heads = c.n_head_kv;
  in.head_dim = c.head_dim;
  in.head_dim_v = c.head_dim_v;
  in.n_ctx = 131072;
  kv::PlanInput dense = in;
  in.layer_span = c.layer_attn_span;
  auto p = kv::make_plan(in);
  auto d = kv::make_plan(dense);
  ASSERT_TRUE(p.ok() && d.ok());
  const int64_t n_global =
      std::count(c.layer_attn_span.begin(), c.layer_attn_span.end(), int64_t{0});
  EXPECT_EQ(p->sliding_layers, c.n_layer - n_global);
  EXPECT_EQ(p->host.bytes * c.n_layer, d->host.bytes * n_global);
  EXPECT_LT(p->kv_bytes * 5, d->kv_bytes);  // 1 global layer of 6: about a sixth
}

// The speed calibration's repeat_kv with a sliding span (8) shorter than a block (16): the
// sliding group holds no whole block, so its one held block, partly filled, stands for every
// block, its unwritten rows copies of the written ones (a gemma3 file failed to calibrate with
// "repeating the KV needs a whole 256-token block").
TEST(Archs, Gemma3RepeatKvWithASlidingSpanShorterThanABlock) {
  TempDir dir;
  auto m = load(dir, arch_test_spec("gemma3"));
  ASSERT_NE(m, nullptr);
  kv::KvSettings kv;
  kv.block_size = 16;
  kv.window_tokens = 32;
  auto s = cpu_session(*m, 2, 512, kv);
  ASSERT_NE(s, nullptr);
  auto* cs = dynamic_cast<cpu::CpuSession*>(s.get());
  ASSERT_TRUE(s->eval(test_prompt(40, m->config().n_vocab, 5), true).ok());
  const kv::KvCacheSet& set = cs->caches();
  ASSERT_EQ(set.n_groups(), 2);
  const kv::KvCache& sliding = set.group(1);
  ASSERT_EQ(set.group_span(1), 8);
  const int64_t first = sliding.first_held_block();
  ASSERT_EQ(first, 2);  // positions 32-39 of block 2 are the only ones held
  ASSERT_EQ(sliding.n_tokens() / 16, first) << "no whole block held";
  const auto sz = [](int64_t a) { return static_cast<size_t>(a); };
  std::vector<uint8_t> src(sz(sliding.block_bytes()));
  ASSERT_TRUE(sliding.read_block(first, src).ok());

  const Status st = cs->repeat_kv(300);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(s->n_past(), 300);
  EXPECT_EQ(set.group(0).n_tokens(), 300);
  EXPECT_EQ(sliding.n_tokens(), 300);
  EXPECT_EQ(sliding.first_held_block(), (300 - 8) / 16);
  // Every held block of the sliding group: row r of each (layer, KV head) K and V part is the
  // source block's written row r % 8.
  const kv::TierLayout& L = sliding.layout();
  std::vector<uint8_t> got(sz(sliding.block_bytes()));
  for (int64_t b = sliding.first_held_block(); b < kv::ceil_div(int64_t{300}, 16); ++b) {
    ASSERT_TRUE(sliding.read_block(b, got).ok());
    for (int64_t part = 0; part < L.block_bytes / L.layer_bytes * 2; ++part) {
      const bool is_v = part % 2 == 1;
      const int64_t row = is_v ? L.row_v : L.row_k;
      const int64_t off = part / 2 * L.layer_bytes + (is_v ? L.layer_k_bytes : 0);
      for (int64_t r = 0; r < 16; ++r) {
        EXPECT_TRUE(std::equal(got.begin() + off + r * row, got.begin() + off + (r + 1) * row,
                               src.begin() + off + (r % 8) * row))
            << "block " << b << " part " << part << " row " << r;
      }
    }
  }
  const int32_t one[1] = {7};
  ASSERT_TRUE(s->eval(one, true).ok());
  EXPECT_EQ(s->n_past(), 301);
  EXPECT_TRUE(std::all_of(s->logits().begin(), s->logits().end(),
                          [](float x) { return std::isfinite(x); }));
}
}  // namespace
}  // namespace spw
