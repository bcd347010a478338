#include "app/cli/commands.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/reference_session.h"
#include "engine/session/device.h"
#include "engine/session/session.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::cli {

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

// Emits bytes to a stream, holding back an incomplete UTF-8 sequence at the end so a
// multi-byte character split across byte tokens is never printed half.
class Utf8Streamer {
 public:
  explicit Utf8Streamer(FILE* out) : out_(out) {}
  void write(const std::string& bytes) {
    pending_ += bytes;
    size_t cut = complete_prefix(pending_);
    if (cut > 0) {
      std::fwrite(pending_.data(), 1, cut, out_);
      std::fflush(out_);
      pending_.erase(0, cut);
    }
  }
  void finish() {
    if (!pending_.empty()) std::fwrite(pending_.data(), 1, pending_.size(), out_);
    pending_.clear();
    std::fflush(out_);
  }

 private:
  // Length of the longest prefix that does not end inside a UTF-8 sequence that could still
  // be completed by more bytes.
  static size_t complete_prefix(const std::string& s) {
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
      const auto c = static_cast<unsigned char>(s[n - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
      size_t need = 1;
      if ((c & 0xE0) == 0xC0)
        need = 2;
      else if ((c & 0xF0) == 0xE0)
        need = 3;
      else if ((c & 0xF8) == 0xF0)
        need = 4;
      return need > back ? n - back : n;
    }
    return n;
  }
  FILE* out_;
  std::string pending_;
};

// Reads a whole regular file byte for byte. Refuses FIFOs, devices and folders (a read from
// /dev/zero would never end).
Expected<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec) return make_error("{}: cannot open: {}", path, ec.message());
  if (!std::filesystem::is_regular_file(st)) return make_error("{}: not a regular file", path);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error("{}: read error: {}", path, std::strerror(errno));
  return text;
}

// Loads the tokenizer and prints its load-time warnings (e.g. an unknown pre-tokenizer and the
// fallback used) to stderr, never to stdout.
Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const GgufFile& file) {
  auto tok = Tokenizer::from_gguf(file);
  if (tok) {
    for (const std::string& w : (*tok)->warnings())
      std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  return tok;
}

// The model with its tokenizer, checked against each other: what `generate` needs and what
// `info` promises (a file that cannot run is an error there too).
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Expected<LoadedModel> load_model(const std::string& path) {
  auto model = Model::load(path);
  if (!model) return model.error();
  auto tok = load_tokenizer((*model)->file());
  if (!tok) return tok.error();
  if ((*tok)->n_vocab() != (*model)->config().n_vocab) {
    return make_error("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", path,
                      (*tok)->n_vocab(), (*model)->config().n_vocab);
  }
  return LoadedModel{std::move(*model), std::move(*tok)};
}

bool all_finite(std::span<const float> v) {
  for (const float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace

int run_info(const InfoArgs& a) {
  auto file = GgufFile::open(a.model);
  if (!file) return fail(file.error());
  const GgufFile& f = **file;
  auto config = Model::read_config(f);
  if (!config) return fail(config.error());
  const ModelConfig& c = *config;

  std::map<std::string, int> type_counts;
  uint64_t tensor_bytes = 0;
  for (const auto& t : f.tensors()) {
    ++type_counts[type_name(static_cast<uint32_t>(t.type))];
    tensor_bytes += t.n_bytes;
  }
  // Full validation (shapes, supported types, tokenizer): a file that will not run is an error
  // here too.
  auto loaded = load_model(a.model);
  if (!loaded) return fail(loaded.error());
  const char* rope = c.rope_type == RopeType::Normal ? "normal" : "neox";

  if (a.json) {
    nlohmann::json j;
    j["file"] = a.model;
    j["file_size"] = f.file_size();
    j["gguf_version"] = f.version();
    j["architecture"] = c.arch_name;
    j["name"] = c.name;
    j["n_vocab"] = c.n_vocab;
    j["n_ctx_train"] = c.n_ctx_train;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_ff"] = c.n_ff;
    j["n_head"] = c.n_head;
    j["n_head_kv"] = c.n_head_kv;
    j["head_dim"] = c.head_dim;
    j["head_dim_v"] = c.head_dim_v;
    j["n_rot"] = c.n_rot;
    j["rope_type"] = rope;
    j["rope_freq_base"] = c.rope_freq_base;
    j["rope_freq_scale"] = c.rope_freq_scale;
    j["rms_eps"] = c.rms_eps;
    j["qkv_bias"] = c.has_qkv_bias;
    j["qk_norm"] = c.has_qk_norm;
    j["tied_embeddings"] = c.tied_embeddings;
    j["rope_freqs"] = c.has_rope_freqs;
    j["n_tensors"] = f.tensors().size();
    j["tensor_bytes"] = tensor_bytes;
    j["tensor_types"] = type_counts;
    j["kv_bytes_per_token"] = {{"f16", c.kv_bytes_per_token(2)}, {"f32", c.kv_bytes_per_token(4)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string types;
  for (const auto& [name, n] : type_counts)
    types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, n);
  fmt::print("file              {} ({} bytes, GGUF v{})\n", a.model, f.file_size(), f.version());
  fmt::print("architecture      {}{}\n", c.arch_name, c.name.empty() ? "" : " (" + c.name + ")");
  fmt::print("vocabulary        {} tokens\n", c.n_vocab);
  fmt::print("context (trained) {} tokens\n", c.n_ctx_train);
  fmt::print("layers            {}\n", c.n_layer);
  fmt::print("n_embd            {}\n", c.n_embd);
  fmt::print("n_ff              {}\n", c.n_ff);
  fmt::print("heads             {} query, {} KV (GQA {}:1), head_dim {}\n", c.n_head, c.n_head_kv,
             c.n_head / c.n_head_kv, c.head_dim);
  fmt::print("RoPE              {}, base {:g}, dims {}{}{}\n", rope, c.rope_freq_base, c.n_rot,
             c.rope_freq_scale != 1.0 ? fmt::format(", linear scale {}", c.rope_freq_scale) : "",
             c.has_rope_freqs ? ", rope_freqs" : "");
  fmt::print("RMSNorm eps       {:g}\n", c.rms_eps);
  fmt::print("features          {}{}{}\n", c.has_qkv_bias ? "QKV bias; " : "",
             c.has_qk_norm ? "QK-norm; " : "",
             c.tied_embeddings ? "tied embeddings" : "separate output matrix");
  fmt::print("tensors           {} ({} bytes): {}\n", f.tensors().size(), tensor_bytes, types);
  fmt::print("KV per token      {} bytes f16, {} bytes f32\n", c.kv_bytes_per_token(2),
             c.kv_bytes_per_token(4));
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  std::string text = a.prompt;
  if (!a.has_prompt) {
    auto content = read_text_file(a.file);
    if (!content) return fail(content.error());
    text = std::move(*content);
  }
  // Only the tokenizer metadata is used: works on vocabulary-only files of any architecture.
  auto file = GgufFile::open(a.model);
  if (!file) return fail(file.error());
  auto tok = load_tokenizer(**file);
  if (!tok) return fail(tok.error());
  const std::vector<int32_t> ids = (*tok)->encode(text, !a.no_bos, a.parse_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? " " : "", ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_chat_template(const ChatTemplateArgs& a) {
  // Only the tokenizer metadata is used: works on vocabulary-only files of any architecture.
  auto file = GgufFile::open(a.model);
  if (!file) return fail(file.error());
  auto tmpl = read_chat_template(**file);
  if (!tmpl) return fail(tmpl.error());
  const std::optional<std::string_view> text =
      *tmpl ? std::optional<std::string_view>(**tmpl) : std::nullopt;
  auto choice = select_chat_template(text, a.template_name);
  if (!choice) return fail(choice.error());
  auto tok = load_tokenizer(**file);
  if (!tok) return fail(tok.error());
  if (!choice->warning.empty()) std::fprintf(stderr, "warning: %s\n", choice->warning.c_str());

  std::vector<ChatMessage> messages;
  if (a.has_system) messages.push_back({ChatRole::System, a.system});
  messages.push_back({ChatRole::User, a.user});
  const std::string prompt = segments_text(render_chat(choice->family, messages, true));
  const std::vector<int32_t> ids = tokenize_chat(**tok, choice->family, messages, true);
  std::string line = "ids:";
  for (const int32_t id : ids) line += fmt::format(" {}", id);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::printf("\n%s\n", line.c_str());
  return 0;
}

int run_generate(const GenerateArgs& a) {
  if (auto st = validate(a.sampling); !st) return fail(st.error());
  if (a.dump_logits && !a.json)
    return fail(Error{"--dump-logits needs --json (the logits go into the JSON object)"});
  if (a.n_ctx < 0) return fail(make_error("-c {} must not be negative", a.n_ctx));
  if (a.n_threads < 0) return fail(make_error("-t {} must not be negative", a.n_threads));
  if (a.n_predict < -1) {
    return fail(make_error("-n {}: use a count, 0, or -1 (until the end of text)", a.n_predict));
  }
  std::string prompt_text = a.prompt;
  if (!a.prompt_file.empty()) {
    auto content = read_text_file(a.prompt_file);
    if (!content) return fail(content.error());
    prompt_text = std::move(*content);
  }
  auto kt = parse_kv_type(a.cache_type_k);
  if (!kt) return fail(make_error("--cache-type-k: {}", kt.error().message));
  auto vt = parse_kv_type(a.cache_type_v);
  if (!vt) return fail(make_error("--cache-type-v: {}", vt.error().message));
  auto device = parse_device(a.device);
  if (!device) return fail(make_error("--device: {}", device.error().message));
  if (a.reference && *device == DeviceKind::Cuda) {
    return fail(
        Error{"--reference runs the float64 oracle on the CPU; it cannot be combined with --device "
              "cuda"});
  }

  auto loaded = load_model(a.model);
  if (!loaded) return fail(loaded.error());
  const Model& model = *loaded->model;
  const Tokenizer& tk = *loaded->tokenizer;
  if (a.n_ctx > model.config().n_ctx_train) {
    std::fprintf(stderr,
                 "warning: -c %lld is longer than the %lld tokens the model was trained on; "
                 "quality degrades past that\n",
                 static_cast<long long>(a.n_ctx),
                 static_cast<long long>(model.config().n_ctx_train));
  }

  SessionParams sp;
  sp.n_ctx = a.n_ctx;
  sp.n_threads = a.n_threads > 0 ? a.n_threads : hardware_threads();
  sp.kv_type_k = *kt;
  sp.kv_type_v = *vt;
  // The fast path on the chosen device by default; --reference selects the float64 oracle.
  std::unique_ptr<Session> session;
  if (a.reference) {
    auto r = ReferenceSession::create(model, sp);
    if (!r) return fail(r.error());
    session = std::move(*r);
  } else {
    BackendOptions opts;
    opts.device = *device;
    auto choice = create_session(model, sp, opts);
    if (!choice) return fail(choice.error());
    if (!choice->note.empty()) std::fprintf(stderr, "note: %s\n", choice->note.c_str());
    session = std::move(choice->session);
  }
  Session& s = *session;

  const std::vector<int32_t> prompt = tk.encode(prompt_text, true, a.parse_special);
  if (prompt.empty())
    return fail(Error{"the prompt is empty and the vocabulary adds no BOS token"});
  if (static_cast<int64_t>(prompt.size()) > s.n_ctx()) {
    return fail(
        make_error("context full: the prompt has {} tokens but the context holds {} (use -c)",
                   prompt.size(), s.n_ctx()));
  }
  if (auto st = s.eval(prompt, true); !st) return fail(st.error());
  const Error non_finite{
      fmt::format("{}: the model produced non-finite logits (NaN or infinity); its weights or "
                  "hyperparameters are broken",
                  a.model)};
  if (!all_finite(s.logits())) return fail(non_finite);
  const std::vector<float> prompt_logits(s.logits().begin(), s.logits().end());

  Sampler sampler(a.sampling);
  std::vector<int32_t> history = prompt, generated;
  std::string text;
  Utf8Streamer stream(a.json ? stderr : stdout);
  if (!a.json) stream.write(prompt_text);  // the continuation reads as text only after its prompt
  for (int32_t i = 0; a.n_predict < 0 || i < a.n_predict; ++i) {
    const int32_t id = sampler.sample(s.logits(), history);
    if (tk.is_eog(id)) break;
    generated.push_back(id);
    history.push_back(id);
    const std::string piece = tk.token_to_piece(id);
    text += piece;
    stream.write(piece);
    if (a.n_predict >= 0 && i + 1 == a.n_predict) break;  // no forward pass for logits never used
    if (s.n_past() >= s.n_ctx()) {
      stream.finish();
      std::fprintf(stderr, "\n[stopped: context full at %lld tokens]\n",
                   static_cast<long long>(s.n_ctx()));
      break;
    }
    const int32_t one[1] = {id};
    if (auto st = s.eval(one, true); !st) {
      stream.finish();
      return fail(st.error());
    }
    if (!all_finite(s.logits())) {
      stream.finish();
      return fail(non_finite);
    }
  }
  stream.finish();
  if (!a.json) {
    std::printf("\n");
    return 0;
  }
  std::fprintf(stderr, "\n");
  nlohmann::json j;
  j["prompt_tokens"] = prompt;
  j["generated_tokens"] = generated;
  j["text"] = text;
  if (a.dump_logits) j["last_prompt_logits"] = prompt_logits;
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace spw::cli
