// spillway-cli bench as a user runs it: the JSON contract, bad flags, and the memory bound of
// issue 4 (peak RSS <= 1.1 x model file + KV + scratch: weights stay mmap'd, never copied).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

using Result = CliResult;

fs::path tmp_dir() { return cli_test_dir("spillway-bench-test"); }

Result run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

// The default test model (~0.4 MB, context 256), written once per process.
const fs::path& tiny_model() {
  static const fs::path p = [] {
    const fs::path path = tmp_dir() / "bench-tiny.gguf";
    EXPECT_TRUE(write_test_model(TestModelSpec{}, path.string()).ok());
    return path;
  }();
  return p;
}

using test::parse_one_object;

TEST(CliBench, JsonHasEveryKeyWithPositiveNumbers) {
  const Result r = run({"bench", "-m", tiny_model().string(), "--json", "-p", "16", "-n", "8", "-r",
                        "1", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  for (const char* key :
       {"pp_tokens_per_s", "pp_tokens_per_s_min", "pp_tokens_per_s_max", "tg_tokens_per_s",
        "tg_tokens_per_s_min", "tg_tokens_per_s_max", "tg_gb_per_s", "probe_gb_per_s",
        "peak_rss_bytes", "model_bytes", "kv_bytes", "n_threads"}) {
    ASSERT_TRUE(j.contains(key)) << key << " missing in " << r.out;
    ASSERT_TRUE(j[key].is_number()) << key << " is not a number in " << r.out;
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  }
  ASSERT_TRUE(j.contains("simd") && j["simd"].is_string()) << r.out;
  EXPECT_EQ(j["n_threads"].get<int>(), 2);
  EXPECT_EQ(j["model_bytes"].get<int64_t>(), static_cast<int64_t>(fs::file_size(tiny_model())));
  // One repeat: median, min and max are the same measurement.
  EXPECT_EQ(j["pp_tokens_per_s"].get<double>(), j["pp_tokens_per_s_min"].get<double>());
  EXPECT_EQ(j["tg_tokens_per_s"].get<double>(), j["tg_tokens_per_s_max"].get<double>());
}

// The roofline: the compute probes and prefill's FLOP rate and attention share. Sane means
// within what any CPU does (a few GFLOP/s per thread at least, below 100 TFLOP/s), prefill
// below the probes' combined roof, and a share in (0, 1). Not timing: the values are only
// bounded, never compared with a target speed.
TEST(CliBench, RooflineFieldsAreSane) {
  const Result r = run({"bench", "-m", tiny_model().string(), "--json", "-p", "64", "-n", "2", "-r",
                        "1", "-t", "1", "--device", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  for (const char* key : {"peak_gflops_per_s", "peak_int8_gops_per_s", "pp_gflops_per_s",
                          "pp_attention_share", "pp_attention_gflops_per_s", "pp_flops"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " missing in " << r.out;
  }
  const double fp32 = j["peak_gflops_per_s"], int8 = j["peak_int8_gops_per_s"],
               pp = j["pp_gflops_per_s"], share = j["pp_attention_share"];
  EXPECT_GT(fp32, 0.5);
  EXPECT_LT(fp32, 1e5);
  EXPECT_GT(int8, 0.5);
  EXPECT_LT(int8, 1e5);
  EXPECT_GT(pp, 0.0);
  EXPECT_LT(pp, 2 * std::max(fp32, int8));
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 1.0);
  // Attention's own rate: positive and below the FP32 roof it runs on (twice, for noise).
  const double attn = j["pp_attention_gflops_per_s"];
  EXPECT_GT(attn, 0.0);
  EXPECT_LT(attn, 2 * fp32);
  // pp_gflops_per_s is pp_flops at the measured rate.
  const double flops = j["pp_flops"];
  EXPECT_NEAR(pp, flops * j["pp_tokens_per_s"].get<double>() / 64 / 1e9, 1e-9 * flops);
  // The default test model (n_embd 64, 2 layers, 4 heads, 2 KV heads, head_dim 16, n_ff 96,
  // n_vocab 320): per layer q 64x64 + k 64x32 + v 64x32 + o 64x64 + 3 x 64x96 = 30,720
  // multiply-adds per token; output 64 x 320 once; attention 2 x 4 x (16 + 16) per pair per
  // layer over 64 x 65 / 2 causal pairs.
  const double want = 2.0 * 2 * 30720 * 64 + 2.0 * 64 * 320 + 2.0 * 2 * 4 * 32 * (64 * 65 / 2);
  EXPECT_EQ(flops, want);
}

// A mixture of experts and phi3's fused matrices are counted as the token goes through them
// (bench crashed on both: it read attn_q and ffn_gate, which those files do not have).
TEST(CliBench, FlopsOfMixtureAndFusedLayouts) {
  TestModelSpec moe;
  moe.arch = "qwen3moe";
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  moe.n_ff_exp = 48;
  TestModelSpec phi3;
  phi3.arch = "phi3";
  // Per layer: q, k, v as for the default model (64x64 + 2 x 64x32 = 8,192) and the output
  // 64x64 = 4,096; qwen3moe: router 64x4 = 256 and 2 used experts of 3 x 64x48 = 9,216 each;
  // phi3: fused attn_qkv 64x128 = 8,192, the fused gate+up 64x192 = 12,288, down 96x64 = 6,144.
  const double moe_macs = 8192 + 4096 + 256 + 2 * 9216;
  const double phi3_macs = 8192 + 4096 + 12288 + 6144;
  for (const auto& [spec, layer_macs] : {std::pair{moe, moe_macs}, std::pair{phi3, phi3_macs}}) {
    const std::filesystem::path path = tmp_dir() / (spec.arch + "-bench.gguf");
    ASSERT_TRUE(write_test_model(spec, path.string()).ok());
    const Result r = run({"bench", "-m", path.string(), "--json", "-p", "16", "-n", "2", "-r", "1",
                          "-t", "1", "--device", "cpu"});
    ASSERT_EQ(r.exit_code, 0) << spec.arch << ": " << r.err;
    const nlohmann::json j = parse_one_object(r.out);
    const double want =
        2.0 * 2 * layer_macs * 16 + 2.0 * 64 * 320 + 2.0 * 2 * 4 * 32 * (16 * 17 / 2);
    EXPECT_EQ(j["pp_flops"].get<double>(), want) << spec.arch;
    EXPECT_GT(j["tg_tokens_per_s"].get<double>(), 0.0) << spec.arch;
  }
}

// -p up to the model's context, however long -n is (the tg test has a session of its own).
TEST(CliBench, PromptUpToTheContext) {
  const Result r =
      run({"bench", "-m", tiny_model().string(), "--json", "-p", "256", "-n", "16", "-r", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j["n_prompt"].get<int>(), 256);
  EXPECT_GT(j["pp_tokens_per_s"].get<double>(), 0.0);
}

// -d as llama-bench: each tg repeat decodes after an untimed prefill of N tokens.
TEST(CliBench, DepthIsReportedAndTgIsFinite) {
  const Result r = run({"bench", "-m", tiny_model().string(), "-d", "32", "-n", "4", "-p", "8",
                        "-r", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  ASSERT_TRUE(j.contains("depth") && j["depth"].is_number_integer()) << r.out;
  EXPECT_EQ(j["depth"].get<int>(), 32);
  ASSERT_TRUE(j.contains("tg_tokens_per_s") && j["tg_tokens_per_s"].is_number()) << r.out;
  const double tg = j["tg_tokens_per_s"].get<double>();
  EXPECT_TRUE(std::isfinite(tg)) << r.out;
  EXPECT_GT(tg, 0.0) << r.out;
}

TEST(CliBench, MinMedianMaxAreOrdered) {
  const Result r =
      run({"bench", "-m", tiny_model().string(), "--json", "-p", "8", "-n", "4", "-r", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  for (const std::string t : {"pp", "tg"}) {
    const double lo = j[t + "_tokens_per_s_min"], mid = j[t + "_tokens_per_s"],
                 hi = j[t + "_tokens_per_s_max"];
    EXPECT_LE(lo, mid) << t;
    EXPECT_LE(mid, hi) << t;
  }
}

TEST(CliBench, PlainTableAndReference) {
  Result r = run({"bench", "-m", tiny_model().string(), "-p", "8", "-n", "4", "-r", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pp8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tg4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS"), std::string::npos) << r.out;

  r = run({"bench", "-m", tiny_model().string(), "--reference", "--json", "-p", "4", "-n", "2",
           "-r", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  EXPECT_EQ(j.value("engine", ""), "reference");
  EXPECT_GT(j.value("tg_tokens_per_s", 0.0), 0.0);
  EXPECT_GT(j.value("kv_bytes", 0), 0);
}

// Values out of range exit 2 (app/cli/option_checks.h), other errors 1.
TEST(CliBench, BadFlagsExitNonZeroWithNothingOnStdout) {
  const std::string m = tiny_model().string();
  const std::vector<std::pair<std::vector<std::string>, int>> cases = {
      {{"bench", "-m", m, "-p", "0"}, 2},
      {{"bench", "-m", m, "-n", "0"}, 2},
      {{"bench", "-m", m, "-r", "0"}, 2},
      {{"bench", "-m", m, "-p", "-3"}, 2},
      {{"bench", "-m", m, "-t", "-1"}, 2},
      {{"bench", "-m", m, "-p", "300", "-n", "4"}, 1},               // 300 tokens > context 256
      {{"bench", "-m", m, "-p", "8", "-d", "200", "-n", "100"}, 1},  // depth 200 + 100 > 256
      {{"bench", "-m", m, "-p", "many"}, 2},
      {{"bench", "-m", m, "--no-such-flag"}, 1},
      {{"bench", "-p", "16"}, 1},  // no model
      {{"bench", "-m", (tmp_dir() / "missing.gguf").string(), "--json"}, 1},
  };
  for (const auto& [args, code] : cases) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, code) << line << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << line << "\nstdout: " << r.out;
    EXPECT_NE(r.err.find("error"), std::string::npos) << line << "\nstderr: " << r.err;
  }
}

// Issue 4: peak RSS during generation <= 1.1 x file size + KV + scratch.
//
// The model: F16, n_embd 1024, 4 layers, ffn 2816, vocab 8000 (~61M parameters, ~122 MB), so
// the file dominates: a dequantized F32 copy of the weights (+2x file) or a heap copy of the
// file instead of the mapping (+1x) would break the bound by far more than the slack.
//
// Scratch = 64 MiB, the sum of:
//  - the runtime, measured: spillway-cli's own peak RSS on the 0.4 MB default model is ~6 MiB
//    (binary, libstdc++/Qt Core pages touched, GGUF metadata, thread stacks); allow 32 MiB;
//  - the session's buffers for this run: ubatch activations for 16 tokens (x, h, q, k, v, attn,
//    gate, up: < 1 MiB), logits (32 KB), the per-layer norm vectors; and the bench's own (token
//    ids, timings): together a few MiB; allow 32 MiB, also covering allocator slack.
// Measured on the 250M-parameter benchmark models (tests/bench/RESULTS.md): ~11 MiB beyond the
// touched weights and KV at -p 16, and ~44 MiB more at -p 512 (the 512-token ubatch buffers);
// this test uses -p 16. The bandwidth probe's 512 MiB buffer is allocated after the peak is
// read and is not part of it.
TEST(CliBench, PeakRssWithinFileSizePlusKvPlusScratch) {
#if defined(__SANITIZE_ADDRESS__)
  // The CLI under test is built with AddressSanitizer too: its shadow memory and the larger
  // instrumented code are part of RSS, so the bound below means nothing there (the Release run
  // checks it).
  GTEST_SKIP() << "RSS bound not checked under AddressSanitizer";
#endif
  TestModelSpec spec;
  spec.weight_type = GgmlType::F16;
  spec.n_vocab = 8000;
  spec.n_embd = 1024;
  spec.n_layer = 4;
  spec.n_head = 16;
  spec.n_head_kv = 4;
  spec.head_dim = 64;
  spec.n_ff = 2816;
  spec.n_ctx = 256;
  const fs::path model = tmp_dir() / "bench-rss-f16.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const auto file_bytes = static_cast<double>(fs::file_size(model));
  ASSERT_GT(file_bytes, 100e6);

  const Result r = run({"bench", "-m", model.string(), "--json", "-p", "16", "-n", "8", "-r", "1",
                        "-t", "2", "--device", "cpu"});
  fs::remove(model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  const auto peak = j.value("peak_rss_bytes", 0.0);
  const auto kv = j.value("kv_bytes", 0.0);
  EXPECT_EQ(j.value("model_bytes", 0.0), file_bytes);
  constexpr double kScratch = 64.0 * 1024 * 1024;
  const double bound = 1.1 * file_bytes + kv + kScratch;
  EXPECT_GT(peak, 0.0);
  EXPECT_LE(peak, bound) << "peak RSS " << peak << " bytes > 1.1 x file " << file_bytes << " + KV "
                         << kv << " + scratch " << kScratch;
  // The weights were read through the mapping and count in RSS (all but the ~13% of
  // token_embd rows never looked up), so the bound above is not met vacuously.
  EXPECT_GE(peak, 0.75 * file_bytes) << "peak RSS " << peak << " is far below the model size";
  std::printf("peak RSS %.1f MiB, file %.1f MiB, KV %.1f MiB, bound %.1f MiB\n", peak / 1048576,
              file_bytes / 1048576, kv / 1048576, bound / 1048576);
}

// Issue 18: the int8 GEMM's repacked copy of a Q8_0 model replaces the mapped weights in the
// resident set (engine/cpu/packed_weights.h), so the bound above holds for it too. 8 layers of
// the shape above in Q8_0 (113 MB, ~104 MB of it the packed matrices): a second copy of the
// matrices beside the mapping would exceed the bound by ~40 MB.
TEST(CliBench, PeakRssOfRepackedQ8_0WithinFileSizePlusKvPlusScratch) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "RSS bound not checked under AddressSanitizer";
#endif
  TestModelSpec spec;
  spec.weight_type = GgmlType::Q8_0;
  spec.n_vocab = 8000;
  spec.n_embd = 1024;
  spec.n_layer = 8;
  spec.n_head = 16;
  spec.n_head_kv = 4;
  spec.head_dim = 64;
  spec.n_ff = 2816;
  spec.n_ctx = 256;
  const fs::path model = tmp_dir() / "bench-rss-q8_0.gguf";
  ASSERT_TRUE(write_test_model(spec, model.string()).ok());
  const auto file_bytes = static_cast<double>(fs::file_size(model));
  ASSERT_GT(file_bytes, 100e6);

  const Result r = run({"bench", "-m", model.string(), "--json", "-p", "16", "-n", "8", "-r", "1",
                        "-t", "2", "--device", "cpu"});
  fs::remove(model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_one_object(r.out);
  const auto peak = j.value("peak_rss_bytes", 0.0);
  const auto kv = j.value("kv_bytes", 0.0);
  constexpr double kScratch = 64.0 * 1024 * 1024;
  const double bound = 1.1 * file_bytes + kv + kScratch;
  EXPECT_LE(peak, bound) << "peak RSS " << peak << " bytes > 1.1 x file " << file_bytes << " + KV "
                         << kv << " + scratch " << kScratch;
  EXPECT_GE(peak, 0.75 * file_bytes) << "peak RSS " << peak << " is far below the model size";
  std::printf("Q8_0: peak RSS %.1f MiB, file %.1f MiB, KV %.1f MiB, bound %.1f MiB\n",
              peak / 1048576, file_bytes / 1048576, kv / 1048576, bound / 1048576);
}

}  // namespace
}  // namespace spw
