// Model discovery (see discovery.h): bounded folder walks per runner layout, then the loader's
// probe of each candidate.
#include "app/models/discovery.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "app/runtime/engine.h"
#include "engine/gguf/gguf.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kOllamaModelMediaType = "application/vnd.ollama.image.model";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_absolute(const std::string& p) { return !p.empty() && p.front() == '/'; }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_gguf_extension(const fs::path& p) { return lower(p.extension().string()) == ".gguf"; }

// True when the file starts with the 4 bytes "GGUF" (Ollama's blobs have no extension).
bool has_gguf_magic(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

int source_rank(ModelSource s) { return static_cast<int>(s); }

// One discovery run's shared state: the result, the limits and the dedupe set.
class Finder {
 public:
  Finder(const DiscoveryLimits& limits, const std::function<bool()>& cancelled)
      : limits_(limits), cancelled_(cancelled) {}

  DiscoveryResult& result() { return result_; }

  bool stopped() {
    if (stopped_) return true;
    if (cancelled_ && cancelled_()) {
      result_.cancelled = true;
      stopped_ = true;
    }
    return stopped_;
  }

  // Adds a candidate unless its canonical path is already listed. False once the list is full.
  bool add(const fs::path& path, std::string display_name, ModelSource source) {
    std::error_code ec;
    fs::path canon = fs::canonical(path, ec);
    const std::string key = ec ? path.lexically_normal().string() : canon.string();
    if (!seen_.insert(key).second) return true;
    if (static_cast<int>(result_.models.size()) >= limits_.max_models) {
      note_truncated("stopped listing models at " + std::to_string(limits_.max_models));
      stopped_ = true;
      return false;
    }
    DiscoveredModel m;
    m.path = path.string();
    m.display_name = std::move(display_name);
    m.source = source;
    const auto size = fs::file_size(path, ec);  // follows symlinks (HF blobs)
    m.file_bytes = ec ? 0 : static_cast<int64_t>(size);
    result_.models.push_back(std::move(m));
    return true;
  }

  void note(std::string text) { result_.notes.push_back(std::move(text)); }
  void note_truncated(std::string text) {
    result_.truncated = true;
    note(std::move(text));
  }

  // Walks `root` up to `max_depth` folder levels (never through directory symlinks), calling
  // on_file(entry, depth) for every regular file (symlinks to files included).
  template <typename OnFile>
  void walk(const fs::path& root, int max_depth, OnFile&& on_file) {
    std::error_code ec;
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
    if (ec) {
      note("cannot read " + root.string() + ": " + ec.message());
      return;
    }
    int64_t n_entries = 0;
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) {
        note("stopped reading " + root.string() + ": " + ec.message());
        return;
      }
      if (stopped()) return;
      if (++n_entries > limits_.max_entries) {
        note_truncated("stopped searching " + root.string() + " after " +
                       std::to_string(limits_.max_entries) + " entries");
        return;
      }
      const fs::directory_entry& e = *it;
      std::error_code sec;
      if (e.is_directory(sec) && !e.is_symlink(sec)) {
        if (it.depth() + 1 > max_depth) it.disable_recursion_pending();
        continue;
      }
      if (e.is_regular_file(sec)) on_file(e, it.depth());
      if (stopped()) return;
    }
  }

 private:
  const DiscoveryLimits& limits_;
  const std::function<bool()>& cancelled_;
  DiscoveryResult result_;
  std::set<std::string> seen_;
  bool stopped_ = false;
};

// Plain folders of .gguf files (llama.cpp, LM Studio, GPT4All): named by their file name, or
// by their path below the root for LM Studio's <publisher>/<repo>/<file> layout.
void find_plain(Finder& f, const ModelRoot& root, int max_depth) {
  const fs::path base(root.dir);
  f.walk(base, max_depth, [&](const fs::directory_entry& e, int depth) {
    if (!has_gguf_extension(e.path())) return;
    const std::string name =
        depth == 0 ? e.path().filename().string() : e.path().lexically_relative(base).string();
    f.add(e.path(), name, root.source);
  });
}

// "models--org--repo" -> "org/repo".
std::string hf_repo_name(const std::string& dir_name) {
  std::string s = dir_name.substr(std::string("models--").size());
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "--") == 0) {
      out += '/';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

void find_hf(Finder& f, const ModelRoot& root, int max_depth) {
  std::error_code ec;
  std::vector<fs::path> repos;
  for (fs::directory_iterator it(root.dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("models--", 0) == 0) repos.push_back(it->path());
  }
  std::sort(repos.begin(), repos.end());
  for (const fs::path& repo : repos) {
    if (f.stopped()) return;
    const std::string repo_name = hf_repo_name(repo.filename().string());
    std::vector<fs::path> revs;
    for (fs::directory_iterator it(repo / "snapshots",
                                   fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      if (it->is_directory()) revs.push_back(it->path());
    }
    ec.clear();
    std::sort(revs.begin(), revs.end());
    for (const fs::path& rev : revs) {
      f.walk(rev, std::max(0, max_depth - 3), [&](const fs::directory_entry& e, int) {
        if (!has_gguf_extension(e.path())) return;
        f.add(e.path(), repo_name + ": " + e.path().lexically_relative(rev).string(),
              ModelSource::HuggingFace);
      });
    }
  }
}

// Ollama: model names from the manifests, then the GGUF blobs.
void find_ollama(Finder& f, const ModelRoot& root) {
  const fs::path base(root.dir);
  std::map<std::string, std::vector<std::string>> names_by_blob;  // "sha256-..." -> names
  std::set<std::string> non_model_blobs;  // referenced only as template, params, projector...
  f.walk(base / "manifests", 4, [&](const fs::directory_entry& e, int) {
    const fs::path rel = e.path().lexically_relative(base / "manifests");
    std::vector<std::string> parts;
    for (const auto& p : rel) parts.push_back(p.string());
    std::string name;
    if (parts.size() == 4) {  // <registry>/<namespace>/<model>/<tag>
      const std::string model_tag = parts[2] + ":" + parts[3];
      if (parts[0] == "registry.ollama.ai")
        name = parts[1] == "library" ? model_tag : parts[1] + "/" + model_tag;
      else
        name = parts[0] + "/" + parts[1] + "/" + model_tag;
    } else {
      name = rel.string();
    }
    std::ifstream in(e.path());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("layers") || !j["layers"].is_array()) {
      f.note("Ollama manifest " + e.path().string() + " is not a manifest (no layers list)");
      return;
    }
    for (const auto& layer : j["layers"]) {
      if (!layer.is_object() || !layer.contains("digest") || !layer["digest"].is_string()) continue;
      std::string blob = layer["digest"].get<std::string>();  // "sha256:<hex>"
      std::replace(blob.begin(), blob.end(), ':', '-');
      const bool is_model = layer.contains("mediaType") && layer["mediaType"].is_string() &&
                            layer["mediaType"].get<std::string>() == kOllamaModelMediaType;
      if (is_model)
        names_by_blob[blob].push_back(name);
      else
        non_model_blobs.insert(blob);
    }
  });
  std::vector<fs::path> blobs;
  f.walk(base / "blobs", 0, [&](const fs::directory_entry& e, int) {
    if (e.path().filename().string().rfind("sha256", 0) == 0) blobs.push_back(e.path());
  });
  std::sort(blobs.begin(), blobs.end());
  for (const fs::path& blob : blobs) {
    if (f.stopped()) return;
    const std::string id = blob.filename().string();
    auto named = names_by_blob.find(id);
    if (named == names_by_blob.end() && non_model_blobs.count(id)) continue;
    if (!has_gguf_magic(blob)) continue;
    std::string display;
    if (named != names_by_blob.end()) {
      std::vector<std::string> names = named->second;
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      for (const auto& n : names) display += (display.empty() ? "" : ", ") + n;
    } else {
      display = id.substr(0, std::min<size_t>(id.size(), 19)) + "… (no manifest)";
    }
    if (!f.add(blob, display, ModelSource::Ollama)) return;
  }
}

}  // namespace

std::string_view model_source_name(ModelSource s) {
  switch (s) {
    case ModelSource::LlamaCpp:
      return "llama.cpp";
    case ModelSource::LmStudio:
      return "LM Studio";
    case ModelSource::Ollama:
      return "Ollama";
    case ModelSource::Gpt4All:
      return "GPT4All";
    case ModelSource::HuggingFace:
      return "Hugging Face";
    case ModelSource::Chosen:
      return "chosen file";
  }
  return "?";
}

DiscoveryEnv DiscoveryEnv::from_process() {
  DiscoveryEnv env;
  env.home = env_or_empty("HOME");
  env.xdg_cache_home = env_or_empty("XDG_CACHE_HOME");
  env.xdg_data_home = env_or_empty("XDG_DATA_HOME");
  env.llama_cache = env_or_empty("LLAMA_CACHE");
  env.hf_home = env_or_empty("HF_HOME");
  env.hf_hub_cache = env_or_empty("HF_HUB_CACHE");
  env.ollama_models = env_or_empty("OLLAMA_MODELS");
  env.ollama_extra_dirs = {"/usr/share/ollama/.ollama/models"};
  return env;
}

std::vector<ModelRoot> model_search_roots(const DiscoveryEnv& env) {
  std::vector<ModelRoot> roots;
  const bool have_home = is_absolute(env.home);
  const fs::path home(env.home);
  const fs::path cache =
      is_absolute(env.xdg_cache_home) ? fs::path(env.xdg_cache_home) : home / ".cache";
  const fs::path data =
      is_absolute(env.xdg_data_home) ? fs::path(env.xdg_data_home) : home / ".local" / "share";
  const bool have_cache = have_home || is_absolute(env.xdg_cache_home);
  const bool have_data = have_home || is_absolute(env.xdg_data_home);
  auto push = [&](ModelSource s, const fs::path& p) {
    const std::string d = p.lexically_normal().string();
    for (const auto& r : roots)
      if (r.dir == d) return;
    roots.push_back({s, d});
  };

  if (is_absolute(env.llama_cache))
    push(ModelSource::LlamaCpp, env.llama_cache);
  else if (have_cache)
    push(ModelSource::LlamaCpp, cache / "llama.cpp");
  if (have_home) push(ModelSource::LmStudio, home / ".lmstudio" / "models");
  if (have_cache) push(ModelSource::LmStudio, cache / "lm-studio" / "models");
  if (is_absolute(env.ollama_models))
    push(ModelSource::Ollama, env.ollama_models);
  else if (have_home)
    push(ModelSource::Ollama, home / ".ollama" / "models");
  for (const auto& d : env.ollama_extra_dirs)
    if (is_absolute(d)) push(ModelSource::Ollama, d);
  if (have_data) push(ModelSource::Gpt4All, data / "nomic.ai" / "GPT4All");
  if (is_absolute(env.hf_hub_cache))
    push(ModelSource::HuggingFace, env.hf_hub_cache);
  else if (is_absolute(env.hf_home))
    push(ModelSource::HuggingFace, fs::path(env.hf_home) / "hub");
  else if (have_cache)
    push(ModelSource::HuggingFace, cache / "huggingface" / "hub");
  return roots;
}

DiscoveryResult find_model_files(const DiscoveryEnv& env, const DiscoveryLimits& limits,
                                 const std::function<bool()>& cancelled) {
  Finder f(limits, cancelled);
  for (const ModelRoot& root : model_search_roots(env)) {
    if (f.stopped()) break;
    std::error_code ec;
    if (!fs::is_directory(root.dir, ec)) continue;
    f.result().searched.push_back(root);
    switch (root.source) {
      case ModelSource::Ollama:
        find_ollama(f, root);
        break;
      case ModelSource::HuggingFace:
        find_hf(f, root, limits.max_depth);
        break;
      default:
        find_plain(f, root, limits.max_depth);
        break;
    }
  }
  DiscoveryResult out = std::move(f.result());
  std::stable_sort(out.models.begin(), out.models.end(),
                   [](const DiscoveredModel& a, const DiscoveredModel& b) {
                     if (a.source != b.source) return source_rank(a.source) < source_rank(b.source);
                     return a.display_name < b.display_name;
                   });
  return out;
}

void describe_model(DiscoveredModel& m) {
  auto info = probe_model(m.path);
  if (!info.ok()) {
    m.supported = false;
    m.error = info.error().message;
    m.name = fs::path(m.path).filename().string();
    // What the header says, when it is readable (an unknown architecture, a refused type).
    if (auto f = GgufFile::open(m.path); f.ok()) {
      if (auto a = (*f)->get_string("general.architecture", ""); a.ok()) m.architecture = *a;
      if (auto n = (*f)->get_string("general.name", ""); n.ok() && !n->empty()) m.name = *n;
    }
    return;
  }
  m.supported = true;
  m.error.clear();
  m.name = info->name;
  m.architecture = info->architecture;
  if (info->file_bytes > 0) m.file_bytes = info->file_bytes;
  m.n_ctx_train = info->n_ctx_train;
  m.kv_bytes_per_token_f16 = info->kv_bytes_per_token_f16;
  m.tensor_types = info->tensor_types;
}

DiscoveredModel describe_model_file(const std::string& path) {
  DiscoveredModel m;
  m.path = path;
  m.display_name = fs::path(path).filename().string();
  m.source = ModelSource::Chosen;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  m.file_bytes = ec ? 0 : static_cast<int64_t>(size);
  describe_model(m);
  return m;
}

DiscoveryResult discover_models(const DiscoveryEnv& env, const DiscoveryLimits& limits,
                                const std::function<bool()>& cancelled) {
  DiscoveryResult r = find_model_files(env, limits, cancelled);
  for (DiscoveredModel& m : r.models) {
    if (cancelled && cancelled()) {
      r.cancelled = true;
      break;
    }
    describe_model(m);
  }
  return r;
}

}  // namespace spw::app
