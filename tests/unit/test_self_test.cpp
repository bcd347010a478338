// The CUDA self-test (engine/backend/self_test.h) without a GPU: its comparison runs with the
// CPU session as the "device" (passes, exactly) and with sessions that are wrong in known ways
// (each fails with its check and numbers); its cache keeps results per key; and the decision
// (gate_cuda) is taken with an injected test: auto falls back with the reason, a cached result
// spares the run, --device cuda re-tests a cached failure and stops on one. The run on a real
// device is tests/cuda's (it needs a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/device.h"
#include "engine/backend/self_test.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

Expected<std::unique_ptr<Session>> cpu_session(const Model& m, const SessionParams& sp,
                                               const kv::KvSettings& kv) {
  BackendOptions o;
  o.device = DeviceKind::Cpu;
  o.kv = kv;
  auto c = create_session(m, sp, o);
  if (!c) return c.error();
  return std::move(c->session);
}

// The CPU session with its logits changed by `edit` (n_past, window setting, logits).
class Edited final : public Session {
 public:
  using Edit = std::function<void(int64_t n_past, bool split, std::vector<float>& logits)>;
  Edited(std::unique_ptr<Session> inner, bool split, Edit edit)
      : inner_(std::move(inner)), split_(split), edit_(std::move(edit)) {}
  Status eval(std::span<const int32_t> tokens, bool want_logits) override {
    auto st = inner_->eval(tokens, want_logits);
    if (st && want_logits) {
      logits_.assign(inner_->logits().begin(), inner_->logits().end());
      edit_(inner_->n_past(), split_, logits_);
    }
    return st;
  }
  std::span<const float> logits() const override { return logits_; }
  int64_t n_past() const override { return inner_->n_past(); }
  int64_t n_ctx() const override { return inner_->n_ctx(); }
  int64_t n_vocab() const override { return inner_->n_vocab(); }

 private:
  std::unique_ptr<Session> inner_;
  bool split_;
  Edit edit_;
  std::vector<float> logits_;
};

SelfTestSessionMaker edited(Edited::Edit edit) {
  return [edit](const Model& m, const SessionParams& sp,
                const kv::KvSettings& kv) -> Expected<std::unique_ptr<Session>> {
    auto s = cpu_session(m, sp, kv);
    if (!s) return s.error();
    return std::unique_ptr<Session>(
        std::make_unique<Edited>(std::move(*s), kv.window_tokens.has_value(), edit));
  };
}

struct SelfTestModel {
  TempDir dir{"spillway-self-test"};
  fs::path path = fs::path(dir.path()) / "model.gguf";
  SelfTestModel() { EXPECT_TRUE(write_self_test_model(path).ok()); }
};

TEST(SelfTest, TheCpuAsTheDevicePassesExactly) {
  SelfTestModel m;
  const SelfTestResult r = run_self_test(m.path, cpu_session, cpu_session);
  EXPECT_TRUE(r.passed) << r.reason;
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.logits_nmse, 0.0);
  EXPECT_EQ(r.split_nmse, 0.0);
  EXPECT_EQ(r.tokens, 9);  // the prefill's token and 8 decode steps
  EXPECT_GT(r.seconds, 0.0);
}

TEST(SelfTest, WrongLogitsFailAtTheirStepWithTheNmse) {
  SelfTestModel m;
  // Every logit 10% off from decode step 3 on: NMSE 1e-2.
  const SelfTestResult r =
      run_self_test(m.path, edited([](int64_t n_past, bool, std::vector<float>& l) {
                      if (n_past >= 48 + 3)
                        for (float& x : l) x *= 1.1f;
                    }),
                    cpu_session);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.reason, "logits NMSE 1.0e-02 > 1.0e-03 at decode step 3");
  // A wrong prefill.
  const SelfTestResult p = run_self_test(
      m.path, edited([](int64_t, bool, std::vector<float>& l) { l[0] += 1e4f; }), cpu_session);
  EXPECT_FALSE(p.passed);
  EXPECT_EQ(p.reason.rfind("logits NMSE ", 0), 0u) << p.reason;
  EXPECT_NE(p.reason.find(" at the prefill's last token"), std::string::npos) << p.reason;
}

TEST(SelfTest, AWrongSplitAttentionStepFails) {
  SelfTestModel m;
  const SelfTestResult r =
      run_self_test(m.path, edited([](int64_t, bool split, std::vector<float>& l) {
                      if (split)
                        for (float& x : l) x = -x;
                    }),
                    cpu_session);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.reason,
            "split attention: logits NMSE 4.0e+00 > 1.0e-03 at the decode step after 48 tokens "
            "(window 16, blocks of 16)");
}

TEST(SelfTest, ADifferentGreedyTokenFails) {
  SelfTestModel m;
  // The device's top logit pushed below the CPU's second: a small NMSE, another token.
  const SelfTestResult r =
      run_self_test(m.path, edited([](int64_t n_past, bool, std::vector<float>& l) {
                      if (n_past != 48) return;
                      const auto top = std::max_element(l.begin(), l.end());
                      float second = -1e30f;
                      for (auto it = l.begin(); it != l.end(); ++it)
                        if (it != top) second = std::max(second, *it);
                      *top = second - 0.02f;
                    }),
                    cpu_session);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.reason.rfind("greedy token 0 is ", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find(" on the device, "), std::string::npos) << r.reason;
}

TEST(SelfTest, ASessionThatCannotBeMadeIsTheReason) {
  SelfTestModel m;
  const SelfTestResult r = run_self_test(
      m.path,
      [](const Model&, const SessionParams&, const kv::KvSettings&)
          -> Expected<std::unique_ptr<Session>> { return Error{"out of device memory"}; },
      cpu_session);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.reason, "cannot create the device session: out of device memory");
  const SelfTestResult missing = run_self_test(m.path.string() + ".none", cpu_session, cpu_session);
  EXPECT_FALSE(missing.passed);
  EXPECT_EQ(missing.reason.rfind("cannot load the test model: ", 0), 0u) << missing.reason;
}

TEST(SelfTestCache, KeepsEachKeysResult) {
  TempDir dir;
  const fs::path f = self_test_file(dir.path());
  EXPECT_EQ(f, fs::path(dir.path()) / "cuda-self-test.json");
  EXPECT_FALSE(read_self_test(f, "a").has_value());  // no file
  SelfTestResult pass;
  pass.passed = true;
  pass.logits_nmse = 2.5e-7;
  pass.split_nmse = 1e-8;
  pass.tokens = 9;
  pass.seconds = 1.5;
  SelfTestResult fail;
  fail.reason = "logits NMSE 1.0e-02 > 1.0e-03 at decode step 3";
  ASSERT_TRUE(write_self_test(f, "a", pass).ok());
  ASSERT_TRUE(write_self_test(f, "b", fail).ok());
  EXPECT_EQ(read_self_test(f, "a"), pass);
  EXPECT_EQ(read_self_test(f, "b"), fail);
  EXPECT_FALSE(read_self_test(f, "c").has_value());
  // A damaged file is no result, and the next write replaces it.
  { std::ofstream(f) << "{\"format\": 1, \"results\": [tru"; }
  EXPECT_FALSE(read_self_test(f, "a").has_value());
  ASSERT_TRUE(write_self_test(f, "a", fail).ok());
  EXPECT_EQ(read_self_test(f, "a"), fail);
  // A folder that takes no files: the error names the file.
  auto st = write_self_test("/proc/spillway-self-test/cuda-self-test.json", "a", pass);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("cannot write the CUDA self-test's result to /proc/"),
            std::string::npos)
      << st.error().message;
}

TEST(SelfTestCache, TheKeyNamesDeviceDriverAndBuild) {
  CudaProbe p;
  p.name = "NVIDIA H200";
  p.sm_major = 9;
  p.sm_minor = 0;
  p.driver_version = 12040;
  p.runtime_version = 12020;
  EXPECT_EQ(self_test_key(p, "exe 1 bytes"),
            "NVIDIA H200|sm_90|driver 12040|runtime 12020|exe 1 bytes");
  const std::string b = build_identity();
  EXPECT_EQ(b.rfind("exe ", 0), 0u) << b;
  EXPECT_EQ(build_identity(), b);
}

struct Gate {
  TempDir dir;
  int runs = 0;
  SelfTestResult next;
  CudaGateInput input(bool required) {
    CudaGateInput in;
    in.required = required;
    in.device = "NVIDIA H200 (sm_90)";
    in.cache = self_test_file(dir.path());
    in.key = "k";
    in.run = [this] {
      ++runs;
      return next;
    };
    return in;
  }
};

SelfTestResult failing() {
  SelfTestResult r;
  r.reason = "logits NMSE 3.0e-01 > 1.0e-03 at the prefill's last token";
  return r;
}

TEST(CudaGate, AutoUsesCudaAfterAPassAndRemembersIt) {
  Gate g;
  g.next.passed = true;
  auto first = gate_cuda(g.input(false));
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(first->use_cuda);
  EXPECT_TRUE(first->ran);
  EXPECT_EQ(first->note, "");
  EXPECT_EQ(g.runs, 1);
  ASSERT_TRUE(read_self_test(self_test_file(g.dir.path()), "k").has_value());
  // The cached pass decides: no second run, even if the test would fail now.
  g.next = failing();
  auto second = gate_cuda(g.input(false));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->use_cuda);
  EXPECT_FALSE(second->ran);
  EXPECT_EQ(g.runs, 1);
  // Another key (a new driver or build) tests again.
  CudaGateInput other = g.input(false);
  other.key = "k2";
  auto third = gate_cuda(other);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->use_cuda);
  EXPECT_EQ(g.runs, 2);
}

TEST(CudaGate, AutoFallsBackToTheCpuWithTheReason) {
  Gate g;
  g.next = failing();
  auto r = gate_cuda(g.input(false));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->use_cuda);
  const std::string file = self_test_file(g.dir.path()).string();
  EXPECT_EQ(r->note,
            "CUDA self-test failed on NVIDIA H200 (sm_90): logits NMSE 3.0e-01 > 1.0e-03 at the "
            "prefill's last token; running on the CPU (result kept in " +
                file + ": delete it to test again)");
  // The cached failure decides for auto: not run again.
  g.next.passed = true;
  auto again = gate_cuda(g.input(false));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->use_cuda);
  EXPECT_FALSE(again->ran);
  EXPECT_EQ(again->note, r->note);
  EXPECT_EQ(g.runs, 1);
}

TEST(CudaGate, DeviceCudaRetestsAFailureAndStopsOnOne) {
  Gate g;
  g.next = failing();
  auto r = gate_cuda(g.input(true));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "--device cuda: the CUDA self-test failed on NVIDIA H200 (sm_90): logits NMSE 3.0e-01 "
            "> 1.0e-03 at the prefill's last token; use --device cpu or auto");
  EXPECT_EQ(g.runs, 1);
  // A cached failure is tested again for --device cuda; a pass now is used and kept.
  g.next.passed = true;
  g.next.reason.clear();
  auto now = gate_cuda(g.input(true));
  ASSERT_TRUE(now.ok()) << now.error().message;
  EXPECT_TRUE(now->use_cuda);
  EXPECT_TRUE(now->ran);
  EXPECT_EQ(g.runs, 2);
  EXPECT_TRUE(read_self_test(self_test_file(g.dir.path()), "k")->passed);
}

TEST(CudaGate, WithoutACacheTheTestRunsAndAFailedWriteIsSaid) {
  Gate g;
  g.next.passed = true;
  CudaGateInput in = g.input(false);
  in.cache.clear();
  EXPECT_TRUE(gate_cuda(in)->use_cuda);
  EXPECT_TRUE(gate_cuda(in)->use_cuda);
  EXPECT_EQ(g.runs, 2);
  in.cache = "/proc/spillway-self-test/cuda-self-test.json";
  auto r = gate_cuda(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->use_cuda);
  EXPECT_NE(r->note.find("cannot write the CUDA self-test's result to /proc/"), std::string::npos)
      << r->note;
}

}  // namespace
}  // namespace spw
