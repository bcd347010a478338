// Backend choice (engine/backend/device.h): --device parsing, the CPU session it gives, and the
// fallback with its reason on a machine without a usable CUDA device (checks that only hold
// there skip, saying so, where a GPU is usable).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/device.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

std::unique_ptr<Model> load_test_model(const TempDir& dir, const TestModelSpec& spec) {
  const std::string path = dir.file("model.gguf");
  EXPECT_TRUE(write_test_model(spec, path).ok());
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> prompt_logits(Session& s) {
  const std::vector<int32_t> prompt = {1, 300, 17, 299, 42, 260, 5, 301, 88, 12, 270};
  EXPECT_TRUE(s.eval(prompt, true).ok());
  return {s.logits().begin(), s.logits().end()};
}

TEST(Device, ParseAcceptsTheThreeNamesAndRefusesOthers) {
  for (const DeviceKind d : {DeviceKind::Auto, DeviceKind::Cpu, DeviceKind::Cuda}) {
    auto p = parse_device(device_name(d));
    ASSERT_TRUE(p.ok()) << device_name(d);
    EXPECT_EQ(*p, d);
  }
  for (const char* bad : {"gpu", "", "CUDA", "cpu ", "cuda:0"}) {
    auto p = parse_device(bad);
    ASSERT_FALSE(p.ok()) << "'" << bad << "' accepted";
    const std::string& msg = p.error().message;
    EXPECT_NE(msg.find("auto"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
  }
}

TEST(Device, ProbeIsConsistent) {
  const CudaProbe p = probe_cuda();
  if (p.usable) {
    EXPECT_TRUE(cuda_built());
    EXPECT_GE(p.index, 0);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_bytes, 0);
  } else {
    EXPECT_FALSE(p.reason.empty());
    if (!cuda_built()) EXPECT_NE(p.reason.find("no CUDA backend"), std::string::npos) << p.reason;
  }
}

TEST(Device, CpuChoiceEqualsCpuSessionDirectly) {
  TempDir dir;
  auto model = load_test_model(dir, TestModelSpec{});
  ASSERT_NE(model, nullptr);
  SessionParams sp;
  sp.n_threads = 2;
  sp.kv_type_k = sp.kv_type_v = KvType::F32;
  BackendOptions opts;
  opts.device = DeviceKind::Cpu;
  opts.n_ubatch = 4;  // the choice's ubatch reaches the session: 3 ubatches for 11 tokens
  auto choice = create_session(*model, sp, opts);
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->device, DeviceKind::Cpu);
  EXPECT_TRUE(choice->note.empty()) << choice->note;
  EXPECT_EQ(choice->backend.rfind("cpu (", 0), 0u) << choice->backend;
  EXPECT_NE(choice->backend.find("2 threads"), std::string::npos) << choice->backend;
  auto direct = cpu::CpuSession::create(*model, sp, cpu::CpuSessionParams{4});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(prompt_logits(*choice->session), prompt_logits(**direct));
}

TEST(Device, AutoFallsBackToTheCpuWithTheReason) {
  const CudaProbe probe = probe_cuda();
  if (probe.usable) GTEST_SKIP() << "a CUDA device is usable here (" << probe.name << ")";
  TempDir dir;
  auto model = load_test_model(dir, TestModelSpec{});
  ASSERT_NE(model, nullptr);
  auto choice = create_session(*model, SessionParams{}, BackendOptions{});
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->device, DeviceKind::Cpu);
  ASSERT_FALSE(choice->note.empty());
  EXPECT_NE(choice->note.find(probe.reason), std::string::npos) << choice->note;
  EXPECT_NE(choice->note.find("running on the CPU"), std::string::npos) << choice->note;
  ASSERT_NE(choice->session, nullptr);
  EXPECT_EQ(prompt_logits(*choice->session).size(), static_cast<size_t>(model->config().n_vocab));
}

TEST(Device, CudaWithoutADeviceIsAnErrorNotAFallback) {
  const CudaProbe probe = probe_cuda();
  if (probe.usable) GTEST_SKIP() << "a CUDA device is usable here (" << probe.name << ")";
  TempDir dir;
  auto model = load_test_model(dir, TestModelSpec{});
  ASSERT_NE(model, nullptr);
  BackendOptions opts;
  opts.device = DeviceKind::Cuda;
  auto choice = create_session(*model, SessionParams{}, opts);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().message.rfind("--device cuda:", 0), 0u) << choice.error().message;
  EXPECT_NE(choice.error().message.find(probe.reason), std::string::npos) << choice.error().message;
}

TEST(Device, ParameterErrorsComeFromTheSessionOnEveryDevice) {
  TempDir dir;
  auto model = load_test_model(dir, TestModelSpec{});
  ASSERT_NE(model, nullptr);
  SessionParams sp;
  sp.n_ctx = -1;
  for (const DeviceKind d : {DeviceKind::Auto, DeviceKind::Cpu}) {
    BackendOptions opts;
    opts.device = d;
    auto choice = create_session(*model, sp, opts);
    ASSERT_FALSE(choice.ok()) << device_name(d);
    EXPECT_NE(choice.error().message.find("negative"), std::string::npos) << choice.error().message;
  }
}

}  // namespace
}  // namespace spw
