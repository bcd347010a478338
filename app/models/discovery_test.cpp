// Tests of app/models/discovery: a fake HOME with a tiny GGUF in each runner's layout (llama.cpp,
// LM Studio, an Ollama blob named by its manifest, GPT4All, a Hugging Face snapshot symlink), a
// truncated file listed as unsupported with the loader's message, and the walk's limits.
#include "app/models/discovery.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "tests/support/test_model.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;

// A 64-hex-digit name as Ollama gives its blobs.
const std::string kOllamaHex = std::string(60, 'a') + "1234";
const std::string kHfBlob = std::string(40, 'b');

void write_model(const fs::path& path, const std::string& arch = "llama", uint32_t seed = 1) {
  fs::create_directories(path.parent_path());
  TestModelSpec spec;
  spec.arch = arch;
  spec.seed = seed;
  const Status st = write_test_model(spec, path.string());
  ASSERT_TRUE(st.ok()) << st.error().message;
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The fake HOME: one model per layout, a truncated file and files that are not models.
struct FakeHome {
  TempDir dir{"spillway-discovery"};
  fs::path home() const { return dir.path(); }
  DiscoveryEnv env() const {
    DiscoveryEnv e;
    e.home = dir.path();
    return e;
  }
  fs::path llama() const { return home() / ".cache/llama.cpp/tiny-llama.gguf"; }
  fs::path truncated() const { return home() / ".cache/llama.cpp/broken.gguf"; }
  fs::path lmstudio() const { return home() / ".lmstudio/models/pub/tiny-GGUF/lm.Q8.gguf"; }
  fs::path ollama_blob() const { return home() / (".ollama/models/blobs/sha256-" + kOllamaHex); }
  fs::path gpt4all() const { return home() / ".local/share/nomic.ai/GPT4All/qwen-tiny.gguf"; }
  fs::path hf_snapshot() const {
    return home() / ".cache/huggingface/hub/models--org--Tiny-GGUF/snapshots/rev1/tiny-f32.gguf";
  }

  void build() {
    write_model(llama(), "llama", 1);
    write_model(lmstudio(), "llama", 2);
    write_model(ollama_blob(), "llama", 3);
    write_model(gpt4all(), "qwen2", 4);
    // Hugging Face: the snapshot entry is a relative symlink to the blob.
    const fs::path hf_repo = home() / ".cache/huggingface/hub/models--org--Tiny-GGUF";
    write_model(hf_repo / "blobs" / kHfBlob, "llama", 5);
    fs::create_directories(hf_snapshot().parent_path());
    fs::create_symlink(fs::path("../../blobs") / kHfBlob, hf_snapshot());
    // The first half of a valid file.
    std::ifstream in(llama(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write_text(truncated(), bytes.substr(0, bytes.size() / 2));
    // Not models: a text file beside the GGUFs, Ollama's template blob (named by the manifest
    // as a template layer) and a stray non-GGUF blob.
    write_text(home() / ".cache/llama.cpp/README.txt", "not a model");
    write_text(home() / ".ollama/models/blobs/sha256-template", "{{ .Prompt }}");
    write_text(home() / ".ollama/models/blobs/sha256-stray", "junk");
    write_text(home() / ".ollama/models/manifests/registry.ollama.ai/library/tiny/latest",
               R"({"schemaVersion":2,"layers":[
                   {"mediaType":"application/vnd.ollama.image.model","digest":"sha256:)" +
                   kOllamaHex + R"(","size":1},
                   {"mediaType":"application/vnd.ollama.image.template","digest":"sha256:template"}
                 ]})");
  }
};

const DiscoveredModel* find(const DiscoveryResult& r, const fs::path& path) {
  for (const auto& m : r.models)
    if (m.path == path.string()) return &m;
  return nullptr;
}

TEST(ModelDiscovery, FindsEveryLayoutInAFakeHome) {
  FakeHome h;
  h.build();
  const DiscoveryResult r = discover_models(h.env());
  EXPECT_FALSE(r.truncated);
  EXPECT_FALSE(r.cancelled);
  ASSERT_EQ(r.models.size(), 6u);
  // Sorted by source (llama.cpp, LM Studio, Ollama, GPT4All, Hugging Face), then by name.
  EXPECT_EQ(r.models[0].path, h.truncated().string());
  EXPECT_EQ(r.models[1].path, h.llama().string());
  EXPECT_EQ(r.models[2].path, h.lmstudio().string());
  EXPECT_EQ(r.models[3].path, h.ollama_blob().string());
  EXPECT_EQ(r.models[4].path, h.gpt4all().string());
  EXPECT_EQ(r.models[5].path, h.hf_snapshot().string());

  const DiscoveredModel* llama = find(r, h.llama());
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->source, ModelSource::LlamaCpp);
  EXPECT_EQ(llama->display_name, "tiny-llama.gguf");
  EXPECT_TRUE(llama->supported) << llama->error;
  EXPECT_EQ(llama->architecture, "llama");
  EXPECT_EQ(llama->file_bytes, static_cast<int64_t>(fs::file_size(h.llama())));
  EXPECT_EQ(llama->n_ctx_train, 256);
  // 2 layers x (K + V) x 2 KV heads x head_dim 16 x 2 bytes (f16).
  EXPECT_EQ(llama->kv_bytes_per_token_f16, 2 * 2 * 2 * 16 * 2);
  ASSERT_FALSE(llama->tensor_types.empty());
  EXPECT_EQ(llama->tensor_types.front(), "F32");

  const DiscoveredModel* lm = find(r, h.lmstudio());
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(lm->source, ModelSource::LmStudio);
  EXPECT_EQ(lm->display_name, "pub/tiny-GGUF/lm.Q8.gguf");
  EXPECT_TRUE(lm->supported) << lm->error;

  const DiscoveredModel* ollama = find(r, h.ollama_blob());
  ASSERT_NE(ollama, nullptr);
  EXPECT_EQ(ollama->source, ModelSource::Ollama);
  EXPECT_EQ(ollama->display_name, "tiny:latest");
  EXPECT_TRUE(ollama->supported) << ollama->error;
  EXPECT_EQ(ollama->file_bytes, static_cast<int64_t>(fs::file_size(h.ollama_blob())));

  const DiscoveredModel* gpt = find(r, h.gpt4all());
  ASSERT_NE(gpt, nullptr);
  EXPECT_EQ(gpt->source, ModelSource::Gpt4All);
  EXPECT_TRUE(gpt->supported) << gpt->error;
  EXPECT_EQ(gpt->architecture, "qwen2");

  const DiscoveredModel* hf = find(r, h.hf_snapshot());
  ASSERT_NE(hf, nullptr);
  EXPECT_EQ(hf->source, ModelSource::HuggingFace);
  EXPECT_EQ(hf->display_name, "org/Tiny-GGUF: tiny-f32.gguf");
  EXPECT_TRUE(hf->supported) << hf->error;
  // The size is the blob's, not the symlink's.
  EXPECT_EQ(hf->file_bytes,
            static_cast<int64_t>(fs::file_size(
                h.home() / ".cache/huggingface/hub/models--org--Tiny-GGUF/blobs" / kHfBlob)));

  // The truncated file is listed, unsupported, with exactly the loader's message.
  const DiscoveredModel* broken = find(r, h.truncated());
  ASSERT_NE(broken, nullptr);
  EXPECT_FALSE(broken->supported);
  const auto probe = probe_model(h.truncated().string());
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(broken->error, probe.error().message);
  EXPECT_NE(broken->error.find("broken.gguf"), std::string::npos) << broken->error;
}

TEST(ModelDiscovery, FindWithoutProbingListsCandidatesOnly) {
  FakeHome h;
  h.build();
  const DiscoveryResult r = find_model_files(h.env());
  ASSERT_EQ(r.models.size(), 6u);
  for (const auto& m : r.models) {
    EXPECT_FALSE(m.supported) << m.path;
    EXPECT_TRUE(m.error.empty()) << m.path;
    EXPECT_GT(m.file_bytes, 0) << m.path;
  }
  // Every root of the fake HOME that exists was walked.
  EXPECT_EQ(r.searched.size(), 5u);
}

TEST(ModelDiscovery, SameFileTwiceIsListedOnce) {
  FakeHome h;
  write_model(h.llama());
  fs::create_directories(h.home() / ".lmstudio/models");
  fs::create_symlink(h.llama(), h.home() / ".lmstudio/models/link.gguf");
  const DiscoveryResult r = find_model_files(h.env());
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].path, h.llama().string());
}

TEST(ModelDiscovery, OllamaBlobWithoutManifestIsNamedByItsDigest) {
  FakeHome h;
  write_model(h.ollama_blob());
  const DiscoveryResult r = discover_models(h.env());
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].display_name.rfind("sha256-aaaa", 0), 0u) << r.models[0].display_name;
  EXPECT_NE(r.models[0].display_name.find("no manifest"), std::string::npos);
  EXPECT_TRUE(r.models[0].supported) << r.models[0].error;
}

TEST(ModelDiscovery, OllamaNamesFromOtherNamespacesAndRegistries) {
  FakeHome h;
  write_model(h.ollama_blob());
  const std::string manifest = R"({"layers":[{"mediaType":"application/vnd.ollama.image.model",)"
                               R"("digest":"sha256:)" +
                               kOllamaHex + R"("}]})";
  const fs::path m = h.home() / ".ollama/models/manifests";
  write_text(m / "registry.ollama.ai/someone/tiny/q8", manifest);
  write_text(m / "hf.co/org/tiny-GGUF/Q8_0", manifest);
  write_text(m / "registry.ollama.ai/library/broken/latest", "{not json");
  const DiscoveryResult r = find_model_files(h.env());
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].display_name, "hf.co/org/tiny-GGUF:Q8_0, someone/tiny:q8");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("broken/latest"), std::string::npos) << r.notes[0];
}

TEST(ModelDiscovery, WalkStopsAtTheEntryLimitWithANote) {
  FakeHome h;
  const fs::path dir = h.home() / ".cache/llama.cpp";
  for (int i = 0; i < 30; ++i) write_text(dir / ("f" + std::to_string(i) + ".txt"), "x");
  DiscoveryLimits limits;
  limits.max_entries = 10;
  const DiscoveryResult r = find_model_files(h.env(), limits);
  EXPECT_TRUE(r.truncated);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("after 10 entries"), std::string::npos) << r.notes[0];
}

TEST(ModelDiscovery, WalkStopsAtTheDepthLimit) {
  FakeHome h;
  const fs::path shallow = h.home() / ".cache/llama.cpp/a/shallow.gguf";
  const fs::path deep = h.home() / ".cache/llama.cpp/a/b/c/d/deep.gguf";
  write_text(shallow, "GGUF");
  write_text(deep, "GGUF");
  DiscoveryLimits limits;
  limits.max_depth = 2;
  DiscoveryResult r = find_model_files(h.env(), limits);
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].path, shallow.string());
  limits.max_depth = 6;
  r = find_model_files(h.env(), limits);
  EXPECT_EQ(r.models.size(), 2u);
}

TEST(ModelDiscovery, DirectorySymlinkLoopsAreNotFollowed) {
  FakeHome h;
  write_model(h.llama());
  // ~/.cache/llama.cpp/loop -> ~/.cache/llama.cpp, and a link to the whole HOME.
  fs::create_directory_symlink(h.llama().parent_path(), h.llama().parent_path() / "loop");
  fs::create_directory_symlink(h.home(), h.llama().parent_path() / "home");
  const DiscoveryResult r = find_model_files(h.env());
  EXPECT_FALSE(r.truncated);
  ASSERT_EQ(r.models.size(), 1u);
  EXPECT_EQ(r.models[0].path, h.llama().string());
}

TEST(ModelDiscovery, ModelCountLimit) {
  FakeHome h;
  for (int i = 0; i < 5; ++i)
    write_text(h.home() / ".cache/llama.cpp" / ("m" + std::to_string(i) + ".gguf"), "GGUF");
  DiscoveryLimits limits;
  limits.max_models = 3;
  const DiscoveryResult r = find_model_files(h.env(), limits);
  EXPECT_EQ(r.models.size(), 3u);
  EXPECT_TRUE(r.truncated);
}

TEST(ModelDiscovery, CancelStopsTheRun) {
  FakeHome h;
  h.build();
  std::atomic<int> polls{0};
  const DiscoveryResult r = discover_models(h.env(), {}, [&] { return ++polls > 1; });
  EXPECT_TRUE(r.cancelled);
  EXPECT_LT(r.models.size(), 6u);
}

TEST(ModelDiscovery, RootsFollowTheEnvironment) {
  DiscoveryEnv env;
  env.home = "/h";
  std::vector<ModelRoot> roots = model_search_roots(env);
  std::vector<std::string> dirs;
  for (const auto& r : roots) dirs.push_back(r.dir);
  EXPECT_EQ(dirs, (std::vector<std::string>{"/h/.cache/llama.cpp", "/h/.lmstudio/models",
                                            "/h/.cache/lm-studio/models", "/h/.ollama/models",
                                            "/h/.local/share/nomic.ai/GPT4All",
                                            "/h/.cache/huggingface/hub"}));

  env.llama_cache = "/llama";
  env.hf_home = "/hf";
  env.ollama_models = "/ollama";
  env.xdg_cache_home = "/xc";
  env.xdg_data_home = "relative/ignored";
  roots = model_search_roots(env);
  dirs.clear();
  for (const auto& r : roots) dirs.push_back(r.dir);
  EXPECT_EQ(dirs,
            (std::vector<std::string>{"/llama", "/h/.lmstudio/models", "/xc/lm-studio/models",
                                      "/ollama", "/h/.local/share/nomic.ai/GPT4All", "/hf/hub"}));

  env = {};
  EXPECT_TRUE(model_search_roots(env).empty());
}

TEST(ModelDiscovery, UnsupportedArchitectureKeepsItsHeaderName) {
  FakeHome h;
  write_model(h.llama(), "mamba");
  const DiscoveredModel m = describe_model_file(h.llama().string());
  EXPECT_FALSE(m.supported);
  EXPECT_EQ(m.architecture, "mamba");
  EXPECT_EQ(m.error, probe_model(h.llama().string()).error().message);
  EXPECT_NE(m.error.find("mamba"), std::string::npos) << m.error;
}

TEST(ModelDiscovery, ChosenFileIsDescribed) {
  FakeHome h;
  write_model(h.llama());
  DiscoveredModel m = describe_model_file(h.llama().string());
  EXPECT_EQ(m.source, ModelSource::Chosen);
  EXPECT_TRUE(m.supported) << m.error;
  m = describe_model_file((h.home() / "missing.gguf").string());
  EXPECT_FALSE(m.supported);
  EXPECT_NE(m.error.find("missing.gguf"), std::string::npos) << m.error;
}

}  // namespace
}  // namespace spw::app
