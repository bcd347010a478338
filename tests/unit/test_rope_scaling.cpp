// RoPE scaling in every form a GGUF file states: the frequencies against the formulas of
// Hugging Face transformers (modeling_rope_utils.py, written out here independently), the keys
// read as llama.cpp reads them, and long prompts (beyond the trained context) on the CPU session
// against the float64 reference for each form.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"
#include "tests/support/compare.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

// ---- transformers' formulas --------------------------------------------------------------

// _compute_default_rope_parameters: 1 / base^(2i / dim).
std::vector<double> hf_default(double base, int64_t dim) {
  std::vector<double> f;
  for (int64_t i = 0; i < dim; i += 2)
    f.push_back(1.0 / std::pow(base, static_cast<double>(i) / static_cast<double>(dim)));
  return f;
}

// _compute_yarn_parameters (truncate = True, no mscale keys): the blend of interpolated and
// extrapolated frequencies by 1 - linear_ramp_factor(low, high, dim / 2), and the attention
// factor get_mscale(factor).
std::vector<double> hf_yarn(double base, int64_t dim, double factor, double orig, double beta_fast,
                            double beta_slow, double* attention_factor) {
  const auto find_correction_dim = [&](double num_rotations) {
    return (static_cast<double>(dim) * std::log(orig / (num_rotations * 2 * std::numbers::pi))) /
           (2 * std::log(base));
  };
  double low = std::floor(find_correction_dim(beta_fast));
  double high = std::ceil(find_correction_dim(beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const std::vector<double> extrapolation = hf_default(base, dim);
  std::vector<double> f;
  for (size_t i = 0; i < extrapolation.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    const double interpolation = extrapolation[i] / factor;
    f.push_back(interpolation * (1 - extrapolation_factor) +
                extrapolation[i] * extrapolation_factor);
  }
  *attention_factor = factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0;
  return f;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-13 * std::fabs(want[i])) << what << " pair " << i;
}

TEST(RopeScaling, FrequenciesMatchTheTransformersFormulas) {
  for (const int64_t n_rot : {16, 64, 128}) {
    for (const double base : {10000.0, 1000000.0}) {
      const std::string what = fmt::format("n_rot {} base {}", n_rot, base);
      RopeParams p;
      p.freq_base = base;
      expect_close(rope_inv_freq(n_rot, p, nullptr), hf_default(base, n_rot), what + " none");
      EXPECT_EQ(rope_mscale(p), 1.0);

      // _compute_linear_scaling_rope_parameters: inv_freq / factor.
      p.scaling = RopeScaling::Linear;
      p.freq_scale = 1.0 / 4.0;
      std::vector<double> lin = hf_default(base, n_rot);
      for (double& f : lin) f /= 4.0;
      expect_close(rope_inv_freq(n_rot, p, nullptr), lin, what + " linear");
      EXPECT_EQ(rope_mscale(p), 1.0);

      // YaRN as Qwen2.5 / Qwen3 configure it (factor 4 of 32768) and as the long-prompt tests
      // below (factor 8 of 512), with the default betas and with others.
      for (const auto& [factor, orig, fast, slow] :
           {std::tuple{4.0, 32768.0, 32.0, 1.0}, std::tuple{8.0, 512.0, 32.0, 1.0},
            std::tuple{16.0, 4096.0, 64.0, 2.0}}) {
        RopeParams y;
        y.scaling = RopeScaling::Yarn;
        y.freq_base = base;
        y.freq_scale = 1.0 / factor;
        y.ext_factor = 1.0;
        y.n_ctx_orig = static_cast<int64_t>(orig);
        y.beta_fast = fast;
        y.beta_slow = slow;
        double attention_factor = 0;
        const std::vector<double> want =
            hf_yarn(base, n_rot, factor, orig, fast, slow, &attention_factor);
        expect_close(rope_inv_freq(n_rot, y, nullptr), want,
                     what + fmt::format(" yarn x{} of {}", factor, orig));
        EXPECT_NEAR(rope_mscale(y), attention_factor, 1e-15);
      }

      // Llama 3.1 / LongRoPE: the divisors from the file: inv_freq = 1 / (f_i base^(2i/dim)),
      // LongRoPE's attention factor from rope.scaling.attn_factor.
      std::vector<float> factors(static_cast<size_t>(n_rot / 2));
      for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
      std::vector<double> div = hf_default(base, n_rot);
      for (size_t i = 0; i < div.size(); ++i) div[i] /= factors[i];
      RopeParams lr;
      lr.freq_base = base;
      lr.attn_factor = 1.19;
      expect_close(rope_inv_freq(n_rot, lr, factors.data()), div, what + " factors");
      EXPECT_DOUBLE_EQ(rope_mscale(lr), 1.19);
    }
  }
}

// ---- Keys ---------------------------------------------------------------------------------

Expected<ModelConfig> config_of(const TestModel& m, const TempDir& dir) {
  const std::string path = dir.file("m.gguf");
  if (auto st = m.write(path); !st) return st.error();
  auto f = GgufFile::open(path);
  if (!f) return f.error();
  return Model::read_config(**f);
}

TEST(RopeScaling, KeysAreReadAsLlamaCppReadsThem) {
  TempDir dir;
  using V = GgufWriteValue;
  TestModelSpec spec;
  spec.arch = "qwen2";
  {  // YaRN (a Qwen2.5 file): type, factor, original context; betas and the mix default.
    spec.rope_scaling = "yarn";
    spec.rope_factor = 4.0f;
    spec.rope_orig_ctx = 32768;
    auto c = config_of(*build_test_model(spec), dir);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->rope.scaling, RopeScaling::Yarn);
    EXPECT_DOUBLE_EQ(c->rope.freq_scale, 0.25);
    EXPECT_EQ(c->rope.ext_factor, 1.0);
    EXPECT_EQ(c->rope.n_ctx_orig, 32768);
    EXPECT_EQ(c->rope.beta_fast, 32.0);
    EXPECT_EQ(c->rope.beta_slow, 1.0);
    EXPECT_NEAR(rope_mscale(c->rope), 0.1 * std::log(4.0) + 1.0, 1e-12);
    EXPECT_TRUE(c->warnings.empty());
  }
  {  // The YaRN keys a file may set.
    auto m = build_test_model(spec);
    m->set("qwen2.rope.scaling.yarn_beta_fast", V::f32(16.0f));
    m->set("qwen2.rope.scaling.yarn_beta_slow", V::f32(2.0f));
    m->set("qwen2.rope.scaling.yarn_ext_factor", V::f32(0.5f));
    auto c = config_of(*m, dir);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->rope.beta_fast, 16.0);
    EXPECT_EQ(c->rope.beta_slow, 2.0);
    EXPECT_EQ(c->rope.ext_factor, 0.5);
  }
  spec.rope_orig_ctx = 0;
  {  // A factor without a type is linear (llama.cpp's default type); no original context key:
     // the trained one.
    spec.rope_scaling = "";
    spec.rope_factor = 2.0f;
    auto c = config_of(*build_test_model(spec), dir);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->rope.scaling, RopeScaling::Linear);
    EXPECT_DOUBLE_EQ(c->rope.freq_scale, 0.5);
    EXPECT_EQ(c->rope.ext_factor, 0.0);
    EXPECT_EQ(c->rope.n_ctx_orig, spec.n_ctx);
  }
  {  // The legacy key, read only when rope.scaling.factor is absent.
    spec.rope_factor = 0;
    spec.rope_scale_linear = 4.0f;
    auto c = config_of(*build_test_model(spec), dir);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->rope.scaling, RopeScaling::Linear);
    EXPECT_DOUBLE_EQ(c->rope.freq_scale, 0.25);
    spec.rope_factor = 2.0f;
    auto both = config_of(*build_test_model(spec), dir);
    ASSERT_TRUE(both.ok());
    EXPECT_DOUBLE_EQ(both->rope.freq_scale, 0.5);
    spec.rope_scale_linear = 0;
  }
  {  // "none" never scales, whatever the factor says.
    spec.rope_scaling = "none";
    auto c = config_of(*build_test_model(spec), dir);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->rope.scaling, RopeScaling::None);
    EXPECT_EQ(c->rope.freq_scale, 1.0);
  }
  {  // llama3 scaling without its tensor: a warning that says what happens.
    TestModelSpec l;
    l.rope_scaling = "llama3";
    l.rope_factor = 8.0f;
    auto c = config_of(*build_test_model(l), dir);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c->warnings.size(), 1u);
    EXPECT_NE(c->warnings[0].find("llama3"), std::string::npos) << c->warnings[0];
    EXPECT_NE(c->warnings[0].find("rope_freqs.weight"), std::string::npos) << c->warnings[0];
    EXPECT_EQ(c->rope.freq_scale, 1.0);  // the factor is the tensor's business, not linear
    l.rope_freqs = true;
    auto with = config_of(*build_test_model(l), dir);
    ASSERT_TRUE(with.ok());
    EXPECT_TRUE(with->warnings.empty());
    EXPECT_TRUE(with->has_rope_freqs);
  }
  {  // An unknown type is refused with the supported list.
    auto m = build_test_model(spec);
    m->set("qwen2.rope.scaling.type", V::str("dynamic"));
    auto c = config_of(*m, dir);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message.find("'dynamic'"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("yarn"), std::string::npos);
  }
  {  // Gemma 3: linear scaling on the global layers; the sliding ones keep base 10000.
    TestModelSpec g;
    g.arch = "gemma3";
    g.n_layer = 6;
    g.rope_scaling = "linear";
    g.rope_factor = 8.0f;
    auto c = config_of(*build_test_model(g), dir);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_DOUBLE_EQ(c->rope.freq_scale, 0.125);
    EXPECT_EQ(c->rope.freq_base, 1e6);
    EXPECT_EQ(c->rope_swa.freq_scale, 1.0);
    EXPECT_EQ(c->rope_swa.freq_base, 10000.0);
    EXPECT_EQ(&c->rope_of(0), &c->rope_swa);
    EXPECT_EQ(&c->rope_of(5), &c->rope);
  }
}

// ---- Long prompts -------------------------------------------------------------------------

struct LongCase {
  std::string name;
  TestModelSpec spec;
};

std::vector<LongCase> long_cases() {
  std::vector<LongCase> v;
  TestModelSpec base;
  base.n_ctx = 512;  // trained context; the prompt runs 8x past it
  base.n_layer = 2;
  {
    LongCase c{"yarn", base};
    c.spec.arch = "qwen2";
    c.spec.rope_scaling = "yarn";
    c.spec.rope_factor = 8.0f;
    c.spec.rope_orig_ctx = 512;
    v.push_back(c);
  }
  {
    LongCase c{"linear_factor_only", base};
    c.spec.rope_factor = 8.0f;  // no type: linear
    v.push_back(c);
  }
  {
    LongCase c{"linear_legacy_key", base};
    c.spec.arch = "qwen3";
    c.spec.rope_scaling = "linear";
    c.spec.rope_scale_linear = 8.0f;
    v.push_back(c);
  }
  {
    LongCase c{"llama3_rope_freqs", base};
    c.spec.rope_freqs = true;
    v.push_back(c);
  }
  {
    LongCase c{"longrope", base};
    c.spec.arch = "phi3";
    c.spec.n_ctx = 8192;  // Phi-3's converter: the long context trained, the original below
    c.spec.rope_orig_ctx = 512;
    c.spec.rope_factors = true;
    c.spec.rope_attn_factor = 1.2f;
    c.spec.n_rot = 8;  // partial rotary too
    v.push_back(c);
  }
  return v;
}

struct LongRun {
  std::vector<std::vector<float>> logits;  // last prompt position, then each decode step
  std::vector<int32_t> greedy;
};

LongRun run_long(Session& s, const std::vector<int32_t>& prompt, int n_decode) {
  LongRun r;
  EXPECT_TRUE(s.eval(prompt, true).ok());
  r.logits.emplace_back(s.logits().begin(), s.logits().end());
  for (int i = 0; i < n_decode; ++i) {
    const int32_t id = argmax(s.logits());
    r.greedy.push_back(id);
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1), true).ok());
    r.logits.emplace_back(s.logits().begin(), s.logits().end());
  }
  return r;
}

class RopeLongPrompt : public ::testing::TestWithParam<LongCase> {};

// 4,100 tokens, 8x the trained (or original) context: the CPU session equals the float64
// reference (NMSE <= 1e-10 at the prompt's end and at each decode step, greedy tokens equal),
// and the scaling really acts: the same weights without it give other logits.
TEST_P(RopeLongPrompt, CpuMatchesTheReferencePastTheTrainedContext) {
  const LongCase& lc = GetParam();
  TempDir dir;
  const std::string path = dir.file(lc.name + ".gguf");
  ASSERT_TRUE(write_test_model(lc.spec, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  constexpr int64_t kPrompt = 4100, kCtx = 4160;
  const std::vector<int32_t> prompt = test_prompt(kPrompt, lc.spec.n_vocab, 11);
  SessionParams sp;
  sp.n_ctx = kCtx;
  sp.n_threads = 2;
  sp.kv_type_k = sp.kv_type_v = KvType::F32;
  auto ref = ReferenceSession::create(**model, sp);
  ASSERT_TRUE(ref.ok());
  auto fast = cpu::CpuSession::create(**model, sp);
  ASSERT_TRUE(fast.ok()) << fast.error().message;
  const LongRun r = run_long(**ref, prompt, 4);
  const LongRun f = run_long(**fast, prompt, 4);
  EXPECT_EQ(f.greedy, r.greedy);
  for (size_t i = 0; i < r.logits.size(); ++i) {
    const double e = nmse(f.logits[i], r.logits[i]);
    EXPECT_LE(e, 1e-10) << lc.name << " step " << i;
    if (i == 0)
      std::printf("[ %s ] NMSE at position %lld: %.2e\n", lc.name.c_str(),
                  static_cast<long long>(kPrompt - 1), e);
  }

  // The same weights, scaling removed.
  auto m = build_test_model(lc.spec);
  ASSERT_TRUE(m.ok());
  const std::string a = (lc.spec.arch) + ".";
  for (const char* k : {"rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
                        "rope.scaling.attn_factor", "rope.scaling.original_context_length"}) {
    m->drop_key(a + k);
  }
  m->drop_tensor("rope_freqs.weight");
  m->drop_tensor("rope_factors_long.weight");
  m->drop_tensor("rope_factors_short.weight");
  const std::string plain_path = dir.file("plain.gguf");
  ASSERT_TRUE(m->write(plain_path).ok());
  auto plain = Model::load(plain_path);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  auto fp = cpu::CpuSession::create(**plain, sp);
  ASSERT_TRUE(fp.ok());
  ASSERT_TRUE((*fp)->eval(prompt, true).ok());
  const std::vector<float> unscaled((*fp)->logits().begin(), (*fp)->logits().end());
  EXPECT_GT(nmse(unscaled, r.logits[0]), 1e-4) << "the scaling must change the logits";
}

INSTANTIATE_TEST_SUITE_P(Forms, RopeLongPrompt, ::testing::ValuesIn(long_cases()),
                         [](const auto& info) { return info.param.name; });

// LongRoPE's factor set follows the session's context, as llama.cpp chooses it.
TEST(RopeScaling, LongRopeChoosesTheFactorsByContext) {
  TempDir dir;
  TestModelSpec spec = long_cases().back().spec;
  const std::string path = dir.file("phi.gguf");
  ASSERT_TRUE(write_test_model(spec, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const Model& m = **model;
  EXPECT_EQ(m.rope_factors(512), m.rope_factors_short);
  EXPECT_EQ(m.rope_factors(513), m.rope_factors_long);
  EXPECT_EQ(m.rope_factors(8192), m.rope_factors_long);
  EXPECT_NE(m.rope_factors_long, m.rope_factors_short);
  EXPECT_DOUBLE_EQ(rope_mscale(m.config().rope), static_cast<double>(1.2f));
}

}  // namespace
}  // namespace spw
