// The CUDA self-test on a real device (engine/backend/self_test.h): the CUDA session reproduces
// the CPU one on the generated tiny model, and create_session runs the test once and keeps its
// result in the cache folder. Skips without a usable CUDA device. (The comparison, the cache and
// the decision are tested without a GPU in tests/unit/test_self_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/backend/cuda/cuda_session.h"
#include "engine/backend/device.h"
#include "engine/backend/self_test.h"
#include "tests/cuda/cuda_test.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

SelfTestSessionMaker maker(DeviceKind d) {
  return [d](const Model& m, const SessionParams& sp,
             const kv::KvSettings& kv) -> Expected<std::unique_ptr<Session>> {
    if (d == DeviceKind::Cuda) {
      // The session itself, without the gate (create_session) this test is part of.
      cuda::CudaSessionParams cp;
      cp.device = probe_cuda().index;
      cp.kv = kv;
      auto s = cuda::CudaSession::create(m, sp, cp);
      if (!s) return s.error();
      return std::unique_ptr<Session>(std::move(*s));
    }
    BackendOptions o;
    o.device = DeviceKind::Cpu;
    o.kv = kv;
    auto c = create_session(m, sp, o);
    if (!c) return c.error();
    return std::move(c->session);
  };
}

TEST(CudaSelfTest, TheDeviceReproducesTheCpu) {
  SPW_SKIP_WITHOUT_CUDA();
  TempDir dir;
  const fs::path model = fs::path(dir.path()) / "self-test.gguf";
  ASSERT_TRUE(write_self_test_model(model).ok());
  const SelfTestResult r = run_self_test(model, maker(DeviceKind::Cuda), maker(DeviceKind::Cpu));
  EXPECT_TRUE(r.passed) << r.reason;
  EXPECT_LE(r.logits_nmse, kSelfTestMaxNmse);
  EXPECT_LE(r.split_nmse, kSelfTestMaxNmse);
  EXPECT_EQ(r.tokens, 9);
  std::printf("self-test: logits NMSE %.2e, split NMSE %.2e, %.2f s\n", r.logits_nmse, r.split_nmse,
              r.seconds);
}

TEST(CudaSelfTest, AutoRunsItOnceAndKeepsTheResult) {
  SPW_SKIP_WITHOUT_CUDA();
  TempDir dir;
  TestModelSpec spec;
  const std::string path = dir.file("model.gguf");
  ASSERT_TRUE(write_test_model(spec, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  BackendOptions o;
  o.cache_dir = dir.path();
  auto c = create_session(**model, SessionParams{}, o);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const fs::path file = self_test_file(dir.path());
  const auto kept = read_self_test(file, self_test_key(probe_cuda(), build_identity()));
  ASSERT_TRUE(kept.has_value()) << file;
  EXPECT_EQ(c->device, kept->passed ? DeviceKind::Cuda : DeviceKind::Cpu) << c->note;
  EXPECT_TRUE(kept->passed) << kept->reason;
}

}  // namespace
}  // namespace spw
