// Model discovery: the GGUF files a user already has, in the folders of the usual local
// runners, each described by the loader (app/runtime/engine.h probe_model) for Settings > Model.
//
// Where it looks (each root once; missing folders are skipped):
//   llama.cpp     $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else ~/.cache/llama.cpp
//   LM Studio     ~/.lmstudio/models, ~/.cache/lm-studio/models
//   Ollama        $OLLAMA_MODELS, else ~/.ollama/models (and the Linux service's
//                 /usr/share/ollama/.ollama/models): blobs/sha256-* files that start with the
//                 "GGUF" magic, named from manifests/<registry>/<namespace>/<model>/<tag>
//                 (JSON; the layer whose mediaType is application/vnd.ollama.image.model)
//   GPT4All       $XDG_DATA_HOME/nomic.ai/GPT4All, else ~/.local/share/nomic.ai/GPT4All
//   Hugging Face  $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
//                 ~/.cache/huggingface/hub: models--<org>--<repo>/snapshots/<rev>/**.gguf (the
//                 snapshot entries are symlinks into ../../blobs; they are followed)
// Files are *.gguf (any case) everywhere but Ollama's blobs. The same file reached twice (a
// symlink, two snapshots, two manifests) is listed once, by its canonical path.
//
// Bounded: each root is walked at most `max_depth` folders deep and at most `max_entries`
// directory entries in all, never following directory symlinks; `max_models` caps the list.
// Hitting a limit adds a note and sets `truncated`. Discovery does blocking file I/O: run it off
// the GUI thread (the Settings dialog runs it on a QThread); `cancelled` is polled per entry.
//
// Engine-free header (ui/ includes it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace spw::app {

/// Which runner's folder a model was found in.
enum class ModelSource { LlamaCpp, LmStudio, Ollama, Gpt4All, HuggingFace, Chosen };

/// "llama.cpp", "LM Studio", "Ollama", "GPT4All", "Hugging Face", "chosen file".
std::string_view model_source_name(ModelSource s);

/// The environment discovery reads, gathered once so tests can pass a fake HOME.
struct DiscoveryEnv {
  std::string home;            // $HOME; empty: no home-relative folders
  std::string xdg_cache_home;  // $XDG_CACHE_HOME (used when absolute)
  std::string xdg_data_home;   // $XDG_DATA_HOME (used when absolute)
  std::string llama_cache;     // $LLAMA_CACHE
  std::string hf_home;         // $HF_HOME
  std::string hf_hub_cache;    // $HF_HUB_CACHE
  std::string ollama_models;   // $OLLAMA_MODELS
  /// Folders outside HOME that are searched too (from_process: the Ollama Linux service's
  /// /usr/share/ollama/.ollama/models). Tests leave it empty.
  std::vector<std::string> ollama_extra_dirs;

  /// Reads the variables above from this process's environment.
  static DiscoveryEnv from_process();
};

/// Bounds of one discovery run.
struct DiscoveryLimits {
  int max_depth = 6;            // folder levels below a root (HF needs 4: models--x/snapshots/r/f)
  int64_t max_entries = 50000;  // directory entries looked at per root
  int max_models = 500;         // files listed in all
};

/// One folder that is searched.
struct ModelRoot {
  ModelSource source = ModelSource::LlamaCpp;
  std::string dir;  // absolute
};

/// One GGUF candidate, described by the loader.
struct DiscoveredModel {
  std::string path;          // as found (an HF snapshot entry, an Ollama blob): what to load
  std::string display_name;  // "llama3.2:3b" (Ollama), "org/repo: file.gguf" (HF), file name
  ModelSource source = ModelSource::LlamaCpp;
  bool supported = false;  // the loader accepts the file
  std::string error;       // the loader's message when !supported
  // From the loader (supported files); for unsupported ones only name and architecture, from
  // the GGUF header when it can be read (zero/empty otherwise):
  std::string name;                       // general.name, else the file name
  std::string architecture;               // "llama", "qwen2", ...
  int64_t file_bytes = 0;                 // size of the file (the blob a symlink points to)
  int64_t n_ctx_train = 0;                // tokens
  int64_t kv_bytes_per_token_f16 = 0;     // all layers, K + V, f16 cache
  std::vector<std::string> tensor_types;  // "Q4_K", "Q6_K", ... most bytes first
};

/// The result of a run: models sorted by source, then display name.
struct DiscoveryResult {
  std::vector<DiscoveredModel> models;
  std::vector<ModelRoot> searched;  // roots that existed and were walked
  std::vector<std::string> notes;   // limits hit, unreadable folders, bad manifests
  bool truncated = false;           // a limit stopped a walk
  bool cancelled = false;
};

/// The folders searched for `env`, in the order above (existing or not; duplicates removed).
std::vector<ModelRoot> model_search_roots(const DiscoveryEnv& env);

/// Finds the candidate files without probing them: `path`, `display_name`, `source` and
/// `file_bytes` are set, `supported` is false and `error` empty.
DiscoveryResult find_model_files(const DiscoveryEnv& env, const DiscoveryLimits& limits = {},
                                 const std::function<bool()>& cancelled = {});

/// Fills the loader's description of `m.path` into `m` (supported, or the loader's message).
void describe_model(DiscoveredModel& m);

/// A file the user picked: described as a model of source Chosen.
DiscoveredModel describe_model_file(const std::string& path);

/// find_model_files(), then describe_model() on each candidate.
DiscoveryResult discover_models(const DiscoveryEnv& env, const DiscoveryLimits& limits = {},
                                const std::function<bool()>& cancelled = {});

}  // namespace spw::app
