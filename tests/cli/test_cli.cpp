// spillway-cli as a user runs it: exit codes, what goes to stdout and what to stderr.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstring>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/backend/device.h"
#include "engine/tokenizer/unicode.h"
#include "tests/support/cli_runner.h"
#include "tests/support/hostile_gguf.h"
#include "tests/support/test_model.h"
#include "tests/support/vocab_cases.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

using Result = CliResult;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-test"); }

std::string slurp(const fs::path& p) { return read_file_bytes(p.string()); }

std::string quote(const std::string& s) { return shell_quote(s); }

Result run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir());
}

fs::path shared_models() { return fs::path(SPILLWAY_SHARED_DIR) / "models"; }

fs::path write_model(const std::string& name, const TestModelSpec& spec) {
  const fs::path p = tmp_dir() / name;
  EXPECT_TRUE(write_test_model(spec, p.string()).ok());
  return p;
}

TEST(CliGenerate, StoriesGreedyMatchesReference) {
  const fs::path model = shared_models() / "stories260K.gguf",
                 ref_path = shared_models() / "stories260K.reference.json";
  if (!fs::exists(model) || !fs::exists(ref_path))
    GTEST_SKIP() << "shared test data not found at " << shared_models();
  std::ifstream in(ref_path);
  const auto ref = nlohmann::json::parse(in);

  // Plain mode: the prompt then the story on stdout.
  Result r =
      run({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "64", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time" + ref["generated_text"].get<std::string>() + "\n");

  // JSON mode with f32 KV: tokens and logits as the reference computed them.
  r = run({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "64", "--temp", "0",
           "--json", "--dump-logits", "--cache-type-k", "f32", "--cache-type-v", "f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1)
      << "stdout must be exactly one JSON line";
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], ref["prompt_tokens"]);
  EXPECT_EQ(j["generated_tokens"], ref["generated_tokens"]);
  EXPECT_EQ(j["text"], ref["generated_text"]);
  const auto logits = j["last_prompt_logits"].get<std::vector<double>>();
  const auto ref_logits = ref["last_prompt_logits"].get<std::vector<double>>();
  ASSERT_EQ(logits.size(), ref_logits.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref_logits[i]));
    max_err = std::max(max_err, std::fabs(logits[i] - ref_logits[i]));
  }
  EXPECT_LE(max_err, 1e-4 * max_ref);
  EXPECT_NE(r.err.find("Lily"), std::string::npos) << "streamed text goes to stderr in --json mode";
  // The reference forward (the oracle) gives the same tokens as the default fast path.
  Result o = run({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "64", "--temp",
                  "0", "--json", "--reference"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["generated_tokens"], ref["generated_tokens"]);
}

// stdout is valid UTF-8 whatever the model generates: the random-weight Mixtral sample emits a
// byte token that starts no UTF-8 sequence, which goes out as U+FFFD (as --json writes it).
TEST(CliGenerate, StdoutIsValidUtf8WhenTheModelEmitsStrayBytes) {
  const fs::path model = shared_models() / "refs" / "sample-mixtral-f16.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "shared test data not found at " << model;
  const Result r =
      run({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "32", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<uint32_t> offsets;
  EXPECT_EQ(unicode::sanitize_utf8(r.out, offsets), r.out) << "stdout is not valid UTF-8";
  EXPECT_NE(r.out.find("\xEF\xBF\xBD"), std::string::npos) << "the stray byte is U+FFFD";
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
}

TEST(CliGenerate, EveryArchitectureRunsAndJsonIsClean) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    TestModelSpec spec;
    spec.arch = arch;
    spec.weight_type = GgmlType::Q8_0;
    const fs::path p = write_model(std::string(arch) + "-q8.gguf", spec);
    Result r =
        run({"generate", "-m", p.string(), "-p", "the cat", "-n", "5", "--temp", "0", "--json"});
    ASSERT_EQ(r.exit_code, 0) << arch << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_tokens"][0], 1) << "BOS first";
    EXPECT_LE(j["generated_tokens"].size(), 5u);
    EXPECT_FALSE(j.contains("last_prompt_logits"));
    // Sampling with a seed is reproducible.
    Result a = run({"generate", "-m", p.string(), "-p", "a", "-n", "8", "--temp", "0.9", "--seed",
                    "7", "--json"});
    Result b = run({"generate", "-m", p.string(), "-p", "a", "-n", "8", "--temp", "0.9", "--seed",
                    "7", "--json"});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["generated_tokens"],
              nlohmann::json::parse(b.out)["generated_tokens"]);
  }
}

TEST(CliGenerate, ContextTooSmallAndBadOptionsExitOne) {
  TestModelSpec spec;
  const fs::path p = write_model("small.gguf", spec);
  Result r = run({"generate", "-m", p.string(), "-p", "the cat sat on the mat", "-c", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("context full"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "no half result on stdout";
  r = run({"generate", "-m", p.string(), "-p", "x", "--cache-type-k", "q3"});
  EXPECT_EQ(r.exit_code, 2) << "not a KV type: refused while parsing";
  EXPECT_NE(r.err.find("q3"), std::string::npos) << r.err;
  r = run({"generate", "-m", p.string(), "-p", "x", "--top-p", "0"});
  EXPECT_EQ(r.exit_code, 2) << "a value out of range";
  r = run({"generate", "-p", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model"), std::string::npos) << r.err;
  r = run({"frobnicate"});
  EXPECT_EQ(r.exit_code, 1);
  r = run({"generate", "-m", (tmp_dir() / "missing.gguf").string(), "-p", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
  // A prompt file too large for any context is refused before it is read (a sparse 100 MiB).
  const fs::path big = tmp_dir() / "big-prompt.txt";
  std::ofstream(big).close();
  fs::resize_file(big, std::uintmax_t{100} << 20);
  for (const std::vector<std::string> cmd :
       {std::vector<std::string>{"generate", "-m", p.string(), "-f", big.string()},
        std::vector<std::string>{"tokenize", "-m", p.string(), "--file", big.string()}}) {
    r = run(cmd);
    EXPECT_EQ(r.exit_code, 1) << cmd[0];
    EXPECT_NE(r.err.find("is 100.0 MiB: a prompt file holds at most 64.0 MiB"), std::string::npos)
        << r.err;
  }
  fs::remove(big);
  // A value that is not a number names the option, the value and what it takes.
  r = run({"generate", "-m", p.string(), "-p", "x", "--temp", "abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: --temp must be a number at least 0, got 'abc'"), std::string::npos)
      << r.err;
  r = run({"generate", "-m", p.string(), "-p", "x", "--seed", "abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: -s must be -1 (a random seed) or 0..4294967295, got 'abc'\n"),
            std::string::npos)
      << r.err;
  // More threads than CPUs runs, with a warning that says what helps.
  r = run({"generate", "-m", p.string(), "-p", "x", "-n", "1", "-t", "1000"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: -t 1000 is more threads than the"), std::string::npos) << r.err;
}

// --device on the commands that run a model: an unknown device is a refused value (exit 2), a
// device that conflicts with another option an error (exit 1). The probe is asked in this process
// too: the assertions about a machine without a usable GPU skip, saying so, where one is usable.
TEST(CliDevice, BadValuesExitTwoAndConflictsOne) {
  const fs::path p = write_model("device.gguf", TestModelSpec{});
  for (const char* cmd : {"generate", "bench"}) {
    std::vector<std::string> args = {cmd, "-m", p.string(), "--device", "gpu"};
    if (std::string(cmd) == "generate") args.insert(args.end(), {"-p", "the cat"});
    Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << cmd << ": a refused value, refused while parsing";
    EXPECT_TRUE(r.out.empty()) << cmd << ": " << r.out;
    for (const char* word : {"--device", "'gpu'", "auto", "cpu", "cuda"})
      EXPECT_NE(r.err.find(word), std::string::npos) << cmd << " lacks " << word << ": " << r.err;

    args = {cmd, "-m", p.string(), "--reference", "--device", "cuda"};
    if (std::string(cmd) == "generate") args.insert(args.end(), {"-p", "the cat"});
    r = run(args);
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_NE(r.err.find("--reference"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << cmd << ": " << r.err;
  }
}

TEST(CliDevice, CpuAndAutoGiveTheSameTokens) {
  const fs::path p = write_model("device-q8.gguf", [] {
    TestModelSpec spec;
    spec.weight_type = GgmlType::Q8_0;
    return spec;
  }());
  const std::vector<std::string> base = {"generate", "-m", p.string(), "-p", "the cat sat",
                                         "-n",       "6",  "--temp",   "0",  "--json"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--device", "cpu"});
  const Result cpu = run(args);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.err.find("note:"), std::string::npos)
      << "an explicit cpu needs no note: " << cpu.err;
  const Result aut = run(base);  // auto is the default
  ASSERT_EQ(aut.exit_code, 0) << aut.err;
  ASSERT_EQ(std::count(aut.out.begin(), aut.out.end(), '\n'), 1) << "one JSON line: " << aut.out;
  const CudaProbe probe = probe_cuda();
  if (probe.usable) GTEST_SKIP() << "a CUDA device is usable here (" << probe.name << ")";
  EXPECT_EQ(nlohmann::json::parse(aut.out)["generated_tokens"],
            nlohmann::json::parse(cpu.out)["generated_tokens"]);
  const std::string note = "note: CUDA unavailable (" + probe.reason + "); running on the CPU\n";
  EXPECT_NE(aut.err.find(note), std::string::npos) << aut.err;
  EXPECT_EQ(aut.err.find("note:"), aut.err.rfind("note:")) << "one note line: " << aut.err;
}

TEST(CliDevice, CudaWithoutAUsableGpuExitsOne) {
  const CudaProbe probe = probe_cuda();
  if (probe.usable) GTEST_SKIP() << "a CUDA device is usable here (" << probe.name << ")";
  const fs::path p = write_model("device-cuda.gguf", TestModelSpec{});
  Result r = run({"generate", "-m", p.string(), "-p", "the cat", "-n", "3", "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << "no half result on stdout: " << r.out;
  EXPECT_NE(r.err.find("error: --device cuda: " + probe.reason), std::string::npos) << r.err;
  r = run({"bench", "-m", p.string(), "-p", "8", "-n", "4", "-r", "1", "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
}

TEST(CliDevice, BenchJsonNamesDeviceAndBackend) {
  const fs::path p = write_model("device-bench.gguf", TestModelSpec{});
  Result r = run({"bench", "-m", p.string(), "--json", "-p", "8", "-n", "4", "-r", "1", "-t", "2",
                  "--device", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.value("device", ""), "cpu");
  EXPECT_EQ(j.value("backend", "").rfind("cpu (", 0), 0u) << j.dump();
  EXPECT_NE(j.value("backend", "").find("2 threads"), std::string::npos) << j.dump();

  r = run({"bench", "-m", p.string(), "--json", "-p", "8", "-n", "4", "-r", "2"});  // auto
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);  // exactly one object: the note went to stderr
  const CudaProbe probe = probe_cuda();
  EXPECT_EQ(j.value("device", ""), probe.usable ? "cuda" : "cpu") << j.dump();
  if (!probe.usable) {
    EXPECT_NE(r.err.find("note: CUDA unavailable ("), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("note:"), r.err.rfind("note:")) << "one note for all repeats: " << r.err;
  }

  // The table says where it ran.
  r = run({"bench", "-m", p.string(), "-p", "8", "-n", "4", "-r", "1", "--device", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("device     cpu: cpu ("), std::string::npos) << r.out;
}

TEST(CliInfo, ReportsHyperparametersAsJson) {
  TestModelSpec spec;
  spec.arch = "qwen3";
  spec.n_head = 4;
  spec.n_head_kv = 1;
  spec.head_dim = 32;
  const fs::path p = write_model("info-qwen3.gguf", spec);
  // --data-dir is global: accepted after the subcommand too.
  Result r =
      run({"info", "-m", p.string(), "--json", "--data-dir", (tmp_dir() / "info-data").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "qwen3");
  EXPECT_EQ(j["n_layer"], spec.n_layer);
  EXPECT_EQ(j["n_head_kv"], 1);
  EXPECT_EQ(j["head_dim"], 32);
  EXPECT_EQ(j["rope_type"], "neox");
  EXPECT_EQ(j["qk_norm"], true);
  // 2 (K,V) x n_layer x n_head_kv x head_dim x 2 bytes
  EXPECT_EQ(j["kv_bytes_per_token"]["f16"], 2 * spec.n_layer * 1 * 32 * 2);
  EXPECT_EQ(j["file_size"], fs::file_size(p));
  // A read-only command creates no data folder (it needs none).
  EXPECT_FALSE(fs::exists(tmp_dir() / "info-data"));
  r = run({"info", "-m", p.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen3"), std::string::npos);
}

// The low-bit types open: `info` counts them per type (the q3_k_m mix: Q3_K, Q4_K, Q5_K, Q6_K;
// an IQ4_XS file), `generate` runs; a type still refused is named with the supported list.
TEST(CliInfo, LowBitTypesOpenAndRefusedTypesListTheSupportedOnes) {
  TestModelSpec q3;
  q3.mix = "q3_k_m";
  q3.n_embd = 256;
  q3.n_ff = 512;
  q3.head_dim = 64;
  q3.n_layer = 3;
  const fs::path p3 = write_model("info-q3_k_m.gguf", q3);
  Result r = run({"info", "-m", p3.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Per layer: attn_q, attn_k, ffn_gate, ffn_up in Q3_K; attn_output and (layers >= 2) attn_v
  // and (layers >= n_layer / 16 = 0) ffn_down in Q4_K; attn_v of layers 0, 1 in Q5_K; plus
  // token_embd (Q3_K) and output (Q6_K); norms in F32.
  const auto types = nlohmann::json::parse(r.out)["tensor_types"];
  EXPECT_EQ(types["Q3_K"], 4 * 3 + 1);
  EXPECT_EQ(types["Q4_K"], 3 + 1 + 3);
  EXPECT_EQ(types["Q5_K"], 2);
  EXPECT_EQ(types["Q6_K"], 1);
  r = run({"generate", "-m", p3.string(), "-p", "abc", "-n", "3", "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  TestModelSpec xs = q3;
  xs.mix.clear();
  xs.weight_type = GgmlType::IQ4_XS;
  const fs::path px = write_model("info-iq4_xs.gguf", xs);
  r = run({"info", "-m", px.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("IQ4_XS x" + std::to_string(7 * 3 + 2)), std::string::npos) << r.out;

  const fs::path pr = tmp_dir() / "refused-iq2_xxs.gguf";
  ASSERT_TRUE(write_bytes(pr.string(), hostile_refused_type_iq2_xxs()));
  r = run({"info", "-m", pr.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'blk.0.attn_q.weight' has type IQ2_XXS"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"), std::string::npos) << r.err;
}

// A mixture of experts: total and active parameters (2 of 8 experts), the experts line, and the
// decode bytes the planner uses; a gemma3 file: its sliding window; a YaRN file: its scaling.
TEST(CliInfo, ReportsExpertsWindowsAndScaling) {
  TestModelSpec moe;
  moe.arch = "qwen3moe";
  moe.n_expert = 8;
  moe.n_expert_used = 2;
  moe.n_ff_exp = 32;
  const fs::path p = write_model("info-qwen3moe.gguf", moe);
  Result r = run({"info", "-m", p.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_expert"], 8);
  EXPECT_EQ(j["n_expert_used"], 2);
  const int64_t experts = 3 * moe.n_embd * 32 * 8 * moe.n_layer;  // gate, up, down stacks
  EXPECT_EQ(j["params"].get<int64_t>() - j["active_params"].get<int64_t>(), experts / 8 * 6);
  EXPECT_LT(j["decode_weight_bytes"].get<int64_t>(), j["file_size"].get<int64_t>());
  r = run({"info", "-m", p.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("experts           2 used of 8 (n_ff_exp 32)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" active per token"), std::string::npos) << r.out;

  TestModelSpec g;
  g.arch = "gemma3";
  g.n_layer = 6;
  g.sliding_window = 8;
  const fs::path gp = write_model("info-gemma3.gguf", g);
  r = run({"info", "-m", gp.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sliding window 8 on 5 of 6 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sliding layers base 10000"), std::string::npos) << r.out;
  // Per-layer KV (2 KV heads x (16 + 16) x 2 bytes = 128 per token and layer; context 256): the
  // global layer reads 32 KiB, each sliding layer its window, 8 x 128 bytes.
  EXPECT_NE(r.out.find("KV per layer      128 bytes/token f16 in each of 6 layers"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("KV at trained ctx 256 tokens, f16: 32.0 KiB per global layer (1), "
                       "1.0 KiB per sliding layer (0-4: window 8); 37.0 KiB in all (sliding "
                       "layers drop their KV past the window; with CUDA the cache keeps every "
                       "position in every layer: 192.0 KiB)"),
            std::string::npos)
      << r.out;
  r = run({"info", "-m", gp.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto gj = nlohmann::json::parse(r.out);
  ASSERT_EQ(gj["kv_layers"].size(), 6u);
  EXPECT_EQ(gj["kv_layers"][0]["attn_span"], 8);
  EXPECT_EQ(gj["kv_layers"][0]["tokens_read_at_n_ctx_train"], 8);
  EXPECT_EQ(gj["kv_layers"][5]["attn_span"], 0);
  EXPECT_EQ(gj["kv_layers"][5]["tokens_read_at_n_ctx_train"], 256);
  EXPECT_EQ(gj["kv_layers"][5]["bytes_per_token_f16"], 128);
  EXPECT_EQ(gj["kv_bytes_at_n_ctx_train_f16"]["read"], 5 * 8 * 128 + 256 * 128);
  EXPECT_EQ(gj["kv_bytes_at_n_ctx_train_f16"]["kept_cpu"], 5 * 8 * 128 + 256 * 128);
  EXPECT_EQ(gj["kv_bytes_at_n_ctx_train_f16"]["kept_cuda"], 6 * 256 * 128);

  TestModelSpec y;
  y.arch = "qwen2";
  y.rope_scaling = "yarn";
  y.rope_factor = 4.0f;
  y.rope_orig_ctx = 64;
  r = run({"info", "-m", write_model("info-yarn.gguf", y).string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("YaRN x4 of 64 tokens"), std::string::npos) << r.out;
}

TEST(CliTokenize, SharedVocabulariesMatchReferenceIds) {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"}) {
    const fs::path vocab = shared_models() / name;
    if (!fs::exists(vocab)) GTEST_SKIP() << "shared test data not found at " << vocab;
    // " Hello world" -> the reference pair of lines in the .inp/.out files is checked by the
    // tokenizer's unit test; here: the command's output format and --no-bos.
    Result with = run({"tokenize", "-m", vocab.string(), "-p", "Hello world"});
    Result without = run({"tokenize", "-m", vocab.string(), "-p", "Hello world", "--no-bos"});
    ASSERT_EQ(with.exit_code, 0) << with.err;
    ASSERT_EQ(without.exit_code, 0) << without.err;
    EXPECT_EQ(with.out, "1 " + without.out) << name;
    EXPECT_EQ(without.out, "15043 3186\n") << name;
  }
}

TEST(CliTokenize, FileIsReadByteForByte) {
  TestModelSpec spec;
  const fs::path p = write_model("tok.gguf", spec);
  const fs::path empty = tmp_dir() / "empty.txt", spaces = tmp_dir() / "spaces.txt";
  std::ofstream(empty, std::ios::binary).close();
  { std::ofstream(spaces, std::ios::binary) << "  \n"; }
  Result r = run({"tokenize", "-m", p.string(), "--file", empty.string(), "--no-bos"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
  r = run({"tokenize", "-m", p.string(), "--file", empty.string()});
  EXPECT_EQ(r.out, "1\n");
  Result f = run({"tokenize", "-m", p.string(), "--file", spaces.string(), "--no-bos"});
  Result q = run({"tokenize", "-m", p.string(), "-p", "  \n", "--no-bos"});
  EXPECT_EQ(f.exit_code, 0);
  EXPECT_EQ(f.out, q.out);
  EXPECT_NE(f.out, "\n") << "whitespace is not trimmed";
  r = run({"tokenize", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  r = run({"tokenize", "-m", p.string(), "--file", (tmp_dir() / "nope.txt").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope.txt"), std::string::npos);
}

// Hostile files: every command exits 1 with a message naming the problem; never a signal,
// never a half result on stdout.
TEST(CliHostile, BadFilesFailCleanly) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"truncated.gguf", hostile_truncated(hostile_base_model().size() - 100), "ends at byte"},
      {"truncated-header.gguf", hostile_truncated(30), "truncated"},
      {"magic.gguf", hostile_bad_magic(), "magic"},
      {"v1.gguf", hostile_version(1), "version 1"},
      {"v99.gguf", hostile_version(99), "99"},
      {"type77.gguf", hostile_unknown_tensor_type(77), "77"},
      {"iq2_xxs.gguf", hostile_refused_type_iq2_xxs(), "IQ2_XXS"},
      {"arch.gguf", hostile_unknown_arch(), "mamba9"},
      {"misaligned.gguf", hostile_misaligned_offset(), "alignment"},
      {"align0.gguf", hostile_alignment(0), "power of two"},
      {"kvcount.gguf", hostile_kv_count(uint64_t{1} << 62), "count"},
      {"arraycount.gguf", hostile_array_count(uint64_t{1} << 60), "count"},
      {"keylen.gguf", hostile_key_length(uint64_t{1} << 63), "length"},
      {"empty.gguf", hostile_empty(), "empty"},
  };
  for (const auto& c : cases) {
    const fs::path p = tmp_dir() / c.name;
    ASSERT_TRUE(write_bytes(p.string(), c.bytes));
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"info", "-m", p.string()},
          std::vector<std::string>{"generate", "-m", p.string(), "-p", "x", "-n", "2"}}) {
      Result r = run(args);
      EXPECT_EQ(r.exit_code, 1) << c.name << " " << args[0] << ": " << r.err;
      EXPECT_TRUE(r.out.empty()) << c.name << " " << args[0] << " printed: " << r.out;
      EXPECT_NE(r.err.find(c.expect), std::string::npos)
          << c.name << " " << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find(c.name), std::string::npos) << "the message names the file: " << r.err;
    }
  }
}

// chat-template: the rendered prompt, a newline, then "ids: ..." (README, --help).
TEST(CliChatTemplate, StoriesUsesPlainTemplate) {
  const fs::path model = shared_models() / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "shared test data not found at " << shared_models();
  Result r = run(
      {"chat-template", "-m", model.string(), "--system", "You are terse.", "--user", "Hi there"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "You are terse.\n\nHi there\n"
            "ids: 1 410 452 277 261 276 259 285 372 426 13 13 440 417 383\n");
  EXPECT_EQ(r.err, "") << "no template is not a warning: stories260K is a plain model";
  // The ids are those of the joined text with BOS, as `tokenize` gives them.
  Result t = run({"tokenize", "-m", model.string(), "-p", "You are terse.\n\nHi there"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(r.out.substr(r.out.find("ids: ") + 5), t.out);
  // Without --system: the user text alone.
  r = run({"chat-template", "-m", model.string(), "--user", "Hi there"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hi there\nids: 1 320 417 383\n");
}

TEST(CliChatTemplate, OverrideUnknownTemplateAndErrors) {
  TestModelSpec spec;
  TestModel m = *build_test_model(spec);
  m.tensors.clear();  // vocabulary only: the command reads nothing else
  m.set("tokenizer.chat_template", GgufWriteValue::str("{{ messages[0]['content'] }} ?"));
  const fs::path p = tmp_dir() / "chat-unknown.gguf";
  ASSERT_TRUE(m.write(p.string()).ok());

  // Unrecognised template: ChatML, and a warning on stderr.
  Result r = run({"chat-template", "-m", p.string(), "--system", "S", "--user", "U"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string chatml =
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
      "<|im_start|>assistant\n\n";
  EXPECT_EQ(r.out.substr(0, chatml.size()), chatml) << r.out;
  EXPECT_EQ(r.out.rfind("ids: 1 ", chatml.size()), chatml.size()) << "the test vocab adds BOS";
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 7);
  EXPECT_NE(r.err.find("warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ChatML"), std::string::npos) << r.err;

  // --template replaces detection, and the warning goes away.
  r = run({"chat-template", "-m", p.string(), "--user", "U", "--template", "llama3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find("ids: ")),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n\n");
  EXPECT_EQ(r.err, "");

  // An unknown --template name: exit 1, the known names on stderr, nothing on stdout.
  r = run({"chat-template", "-m", p.string(), "--user", "U", "--template", "vicuna"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("vicuna"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chatml"), std::string::npos) << r.err;
  // --user is required; a missing file is named.
  r = run({"chat-template", "-m", p.string(), "--system", "S"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  r = run({"chat-template", "-m", (tmp_dir() / "absent.gguf").string(), "--user", "U"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("absent.gguf"), std::string::npos) << r.err;
}

// --parse-special with a prompt that starts with the BOS text while the vocabulary adds one: two
// BOS tokens, as given (as llama.cpp keeps them), and one warning on stderr; tokenize the same.
// Without --parse-special "<s>" is text: one BOS, no warning.
TEST(CliGenerate, APromptStartingWithBosIsWarnedOnce) {
  const fs::path p = write_model("bos.gguf", TestModelSpec{});
  const std::string warning = "warning: the prompt already starts with BOS ('<s>')";
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  Result r = run({"generate", "-m", p.string(), "-p", "<s>ab", "--parse-special", "-n", "1",
                  "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["prompt_tokens"].size(), 3u);
  EXPECT_EQ(j["prompt_tokens"][0], 1);
  EXPECT_EQ(j["prompt_tokens"][1], 1);
  EXPECT_EQ(count(r.err, warning), 1u) << r.err;
  Result t = run({"tokenize", "-m", p.string(), "-p", "<s>ab", "--parse-special"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.rfind("1 1 ", 0), 0u) << t.out;
  EXPECT_EQ(count(t.err, warning), 1u) << t.err;
  Result text = run({"generate", "-m", p.string(), "-p", "<s>ab", "-n", "1", "--json"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(nlohmann::json::parse(text.out)["prompt_tokens"][1], 1);
  EXPECT_EQ(count(text.err, warning), 0u) << text.err;
}

}  // namespace
}  // namespace spw

namespace spw {
namespace {

// Inputs a tester found that once hung, read forever or exited 0 on failure.
TEST(CliRobustness, SpecialFilesCommandsAndOutputErrors) {
  TestModelSpec spec;
  const fs::path p = write_model("robust.gguf", spec);
  const fs::path fifo = tmp_dir() / "fifo.gguf";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result r = run({"info", "-m", fifo.string()});  // must not block opening a FIFO
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  r = run({"tokenize", "-m", p.string(), "--file", "/dev/zero"});  // must not read forever
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  r = run({"tokenize", "-m", p.string(), "--file", tmp_dir().string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  r = run({"frob", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown command 'frob'"), std::string::npos) << r.err;
  r = run({"--data-dir", "", "info", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  r = run({"generate", "-m", p.string(), "-p", "x", "-n", "-5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-n must be -1 (until the end of text) or 1..2147483647, got -5"),
            std::string::npos)
      << r.err;
  r = run({"generate", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("-p TEXT or -f FILE"), std::string::npos) << r.err;
  // A prompt from a file tokenizes exactly as the same prompt on the command line.
  const fs::path prompt = tmp_dir() / "prompt.txt";
  { std::ofstream(prompt, std::ios::binary) << "the cat"; }
  Result a = run(
      {"generate", "-m", p.string(), "-f", prompt.string(), "-n", "3", "--temp", "0", "--json"});
  Result b =
      run({"generate", "-m", p.string(), "-p", "the cat", "-n", "3", "--temp", "0", "--json"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  // stdout that cannot be written is a failure.
  const std::string cmd =
      quote(SPILLWAY_CLI_PATH) + " info -m " + quote(p.string()) + " >/dev/full 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

TEST(CliRobustness, FilesThatContradictThemselvesAreRefused) {
  // block_count says 1 but blocks 0 and 1 are present.
  TestModelSpec spec;
  auto m = build_test_model(spec);
  ASSERT_TRUE(m.ok());
  m->set("llama.block_count", GgufWriteValue::u32(1));
  fs::path p = tmp_dir() / "blocks.gguf";
  ASSERT_TRUE(m->write(p.string()).ok());
  Result r = run({"info", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("blk.1."), std::string::npos) << r.err;
  // A NaN RMSNorm epsilon.
  m = build_test_model(spec);
  m->set("llama.attention.layer_norm_rms_epsilon", GgufWriteValue::f32(std::nanf("")));
  p = tmp_dir() / "eps.gguf";
  ASSERT_TRUE(m->write(p.string()).ok());
  r = run({"generate", "-m", p.string(), "-p", "x", "-n", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("layer_norm_rms_epsilon"), std::string::npos) << r.err;
  // NaN weights: no silent garbage, an error naming the problem.
  m = build_test_model(spec);
  TestTensor* t = m->find_tensor("output_norm.weight");
  ASSERT_NE(t, nullptr);
  const float nan = std::nanf("");
  std::memcpy(t->data.data(), &nan, sizeof nan);
  p = tmp_dir() / "nan.gguf";
  ASSERT_TRUE(m->write(p.string()).ok());
  r = run({"generate", "-m", p.string(), "-p", "x", "-n", "2", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("non-finite"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // bench refuses it too: the speeds of a broken file mean nothing.
  r = run({"bench", "-m", p.string(), "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("non-finite logits (NaN or infinity) in the pp test"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // A vocabulary that does not match the embedding rows: info refuses it as generate does.
  m = build_test_model(spec);
  m->set("tokenizer.ggml.bos_token_id", GgufWriteValue::u32(99999));
  p = tmp_dir() / "bos.gguf";
  ASSERT_TRUE(m->write(p.string()).ok());
  r = run({"info", "-m", p.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bos_token_id"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spw

namespace spw {
namespace {

// Issue 3's "done": `spillway-cli tokenize --no-bos` on the Llama 3 vocabulary prints the .out ids
// for every test string (each string passed byte for byte through --file).
TEST(CliTokenize, Llama3VocabularyMatchesEveryReferenceLine) {
  const fs::path vocab = shared_models() / "ggml-vocab-llama-bpe.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "shared test data not found at " << vocab;
  const std::vector<std::string> cases =
      split_vocab_inputs(read_file_bytes(vocab.string() + ".inp"));
  std::vector<std::string> lines;
  for (const auto& ids : read_vocab_outputs(vocab.string() + ".out")) lines.push_back(ids_str(ids));
  ASSERT_EQ(cases.size(), lines.size());
  const fs::path f = tmp_dir() / "case.txt";
  for (size_t i = 0; i < cases.size(); ++i) {
    { std::ofstream(f, std::ios::binary) << cases[i]; }
    Result r = run({"tokenize", "-m", vocab.string(), "--file", f.string(), "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, lines[i] + "\n") << "case " << i << ": '" << cases[i] << "'";
    EXPECT_TRUE(r.err.empty()) << r.err;  // llama-bpe is a known pre-tokenizer: no warning
  }
}

// An option given twice takes the last value (as most command lines do), for a subcommand's
// options and for ones added by the ingest/docs/ask commands alike.
TEST(CliGenerate, RepeatedOptionTakesTheLastValue) {
  TestModelSpec spec;
  const fs::path p = write_model("repeat.gguf", spec);
  Result r = run({"generate", "-m", p.string(), "-p", "the cat", "-n", "9", "--temp", "0", "-n",
                  "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_LE(j["generated_tokens"].size(), 3u);  // fewer only at an end-of-text token
}

// Commands that only read a model, or plan, run where the data folder cannot be created or
// written (sysfs takes no new folders, not even root's); the library's commands say which
// folder it is.
TEST(CliDataDir, ReadOnlyCommandsRunWithoutAWritableDataFolder) {
  if (!fs::is_directory("/sys")) GTEST_SKIP() << "no /sys on this machine";
  const fs::path p = write_model("read-only-data.gguf", TestModelSpec{});
  const std::string ro = "/sys/spillway-data";
  for (const std::vector<std::string>& cmd : {
           std::vector<std::string>{"info", "-m", p.string()},
           std::vector<std::string>{"tokenize", "-m", p.string(), "-p", "the cat"},
           std::vector<std::string>{"chat-template", "-m", p.string(), "--user", "hi"},
           std::vector<std::string>{"plan", "-m", p.string(), "-c", "64", "--no-calibrate"},
       }) {
    std::vector<std::string> args = cmd;
    args.insert(args.end(), {"--data-dir", ro});
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 0) << cmd[0] << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << cmd[0];
  }
  const Result docs = run({"docs", "list", "--data-dir", ro});
  EXPECT_EQ(docs.exit_code, 1);
  EXPECT_NE(docs.err.find("error: cannot create the data folder '" + ro + "': "), std::string::npos)
      << docs.err;
}

}  // namespace
}  // namespace spw
