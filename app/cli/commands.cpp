#include "app/cli/commands.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/option_checks.h"
#include "app/cli/progress_out.h"
#include "app/paths.h"
#include "app/runtime/progress.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/device.h"
#include "engine/backend/reference/reference_session.h"
#include "engine/chat/chat_template.h"
#include "engine/common/huge_pages.h"
#include "engine/common/size.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/session/session.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::cli {

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

// Reads a whole regular file byte for byte. Refuses FIFOs, devices and folders (a read from
// /dev/zero would never end).
Expected<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec) return make_error("{}: cannot open: {}", path, ec.message());
  if (!std::filesystem::is_regular_file(st)) return make_error("{}: not a regular file", path);
  // Refused before it is read into RAM: a prompt file this large would not fit any context a
  // machine holds the KV of (a million tokens is about 4 MiB of text).
  constexpr uintmax_t kMaxPromptFileBytes = uintmax_t{64} << 20;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxPromptFileBytes) {
    return make_error(
        "{} is {}: a prompt file holds at most {} (a context of 131,072 tokens is "
        "about 512 KiB of text)",
        path, format_size(static_cast<int64_t>(size)),
        format_size(static_cast<int64_t>(kMaxPromptFileBytes)));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error("{}: read error: {}", path, std::strerror(errno));
  return text;
}

// ---- Paged KV cache: statistics ---------------------------------------------------------

// One --stats-json line: integer counters as integers, rates and times as numbers.
nlohmann::json stats_json(const SessionUsage& st, int64_t step, const char* phase,
                          const std::string& attention) {
  nlohmann::json j;
  j["step"] = step;
  j["phase"] = phase;
  j["attention"] = attention;
  j["n_past"] = st.n_past;
  j["window_blocks"] = st.kv.window_blocks;
  j["host_blocks"] = st.kv.host_blocks;
  j["disk_blocks"] = st.kv.disk_blocks;
  j["window_bytes"] = st.kv.window_bytes;
  j["host_bytes"] = st.kv.host_bytes;
  j["disk_bytes"] = st.kv.disk_bytes;
  j["dropped_blocks"] = st.kv.dropped_blocks;
  j["dropped_bytes"] = st.kv.dropped_bytes;
  j["window_to_host_bytes"] = st.kv.window_to_host_bytes;
  j["window_to_disk_bytes"] = st.kv.window_to_disk_bytes;
  j["cold_to_window_bytes"] = st.kv.cold_to_window_bytes;
  j["spills_pending"] = st.kv.spills_pending;
  j["host_mapped_bytes"] = st.kv.host_mapped_bytes;
  j["host_huge_page_bytes"] = st.kv.host_huge_page_bytes;
  j["prefill_tokens_computed"] = st.prefill_tokens_computed;
  j["decode_tokens"] = st.decode_tokens;
  j["prefill_tokens_per_s"] = st.prefill_tokens_per_s();
  j["decode_tokens_per_s"] = st.decode_tokens_per_s();
  j["window_attn_s"] = st.window_attn_s;
  j["cold_attn_s"] = st.cold_attn_s;
  j["merge_s"] = st.merge_s;
  j["rss_bytes"] = st.rss_bytes;
  return j;
}

void print_stats(const SessionUsage& st, const cpu::CpuSession& cpu, int64_t n_prompt,
                 int64_t n_generated) {
  const auto ms = [](double s) { return s * 1e3; };
  const kv::TierLayout& t = cpu.cache().layout();  // the settings as applied
  std::string text;
  text += fmt::format(
      "stats: attention {}, block {} tokens, window {} recent + {} sink tokens ({} + {} whole "
      "blocks: up to {} tokens)\n",
      kv::kv_attention_name(cpu.kv_settings(), true), t.block_size, t.window_tokens, t.n_sinks,
      t.window.recent_blocks, t.window.sink_blocks, t.window.total() * t.block_size);
  text += fmt::format(
      "stats: tokens {} prompt ({} computed), {} generated; prefill {:.1f} t/s, decode {:.1f} "
      "t/s\n",
      n_prompt, st.prefill_tokens_computed, n_generated, st.prefill_tokens_per_s(),
      st.decode_tokens_per_s());
  text += fmt::format("stats: window {:>6} blocks {:>12}\n", st.kv.window_blocks,
                      format_size(st.kv.window_bytes));
  text += fmt::format("stats: host   {:>6} blocks {:>12}\n", st.kv.host_blocks,
                      format_size(st.kv.host_bytes));
  text += fmt::format("stats: disk   {:>6} blocks {:>12}\n", st.kv.disk_blocks,
                      format_size(st.kv.disk_bytes));
  if (st.kv.host_mapped_bytes > 0) {
    const kv::HostArena& arena = cpu.cache().host_arena();
    text += fmt::format(
        "stats: host arena {} mapped, {} in 2 MiB huge pages (--huge-pages {}, THP {}{})\n",
        format_size(st.kv.host_mapped_bytes), format_size(st.kv.host_huge_page_bytes),
        arena.options().huge_pages ? "on" : "off", thp_mode_name(arena.thp_mode()),
        arena.options().numa_node >= 0 ? fmt::format(", NUMA node {}", arena.options().numa_node)
                                       : std::string());
  }
  if (st.kv.dropped_blocks > 0) {
    text += fmt::format(
        "stats: dropped {:>5} blocks {:>12} (sliding-window layers keep only their window)\n",
        st.kv.dropped_blocks, format_size(st.kv.dropped_bytes));
  }
  text +=
      fmt::format("stats: moved window->host {}, window->disk {}, cold->window {}\n",
                  format_size(st.kv.window_to_host_bytes), format_size(st.kv.window_to_disk_bytes),
                  format_size(st.kv.cold_to_window_bytes));
  text += fmt::format(
      "stats: attention time (thread-seconds) window {:.3f} ms, cold {:.3f} ms, merge {:.3f} ms\n",
      ms(st.window_attn_s), ms(st.cold_attn_s), ms(st.merge_s));
  text += fmt::format("stats: RSS {}\n", format_size(st.rss_bytes));
  std::fputs(text.c_str(), stderr);
}

// Writes one JSON object per line to a file; the first write error is kept for the end.
class StatsWriter {
 public:
  ~StatsWriter() {
    if (f_) std::fclose(f_);
  }
  Status open(const std::string& path) {
    f_ = std::fopen(path.c_str(), "w");
    if (!f_) return make_error("--stats-json {}: cannot open: {}", path, std::strerror(errno));
    path_ = path;
    return Status::Ok();
  }
  bool enabled() const { return f_ != nullptr; }
  void write(const nlohmann::json& j) {
    if (!f_) return;
    const std::string line =
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (std::fputs(line.c_str(), f_) < 0 || std::fflush(f_) != 0) ok_ = false;
  }
  Status close() {
    if (!f_) return Status::Ok();
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok_ || !closed) return make_error("--stats-json {}: write error", path_);
    return Status::Ok();
  }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  bool ok_ = true;
};

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string default_spill_dir(const std::string& data_dir) {
  app::PathOverrides o;
  o.data_dir = data_dir;
  auto paths = app::resolve_paths(o, app::PathEnv::from_process());
  return paths ? paths->cache_dir.string() : std::string();
}

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
  const ModelSize size = loaded->model->size();
  int64_t n_swa_layers = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) n_swa_layers += c.attn_span(il) > 0 ? 1 : 0;
  // KV per layer at the trained context, f16: what each layer's attention can read (a sliding
  // layer only its window; what the CPU engine keeps) against the whole context everywhere
  // (what the CUDA backend keeps).
  const int64_t layer_f16 = c.layer_kv_bytes_per_token(2);
  int64_t kv_needed_f16 = 0;
  for (int64_t il = 0; il < c.n_layer; ++il)
    kv_needed_f16 += c.layer_kv_tokens(il, c.n_ctx_train) * layer_f16;

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
    j["rope_freq_base"] = c.rope.freq_base;
    j["rope_freq_scale"] = c.rope.freq_scale;
    j["rope_scaling"] = rope_scaling_name(c.rope.scaling);
    j["rope_n_ctx_orig"] = c.rope.n_ctx_orig;
    j["rope_factors"] = c.has_rope_factors;
    j["sliding_window"] = c.n_swa;
    j["sliding_window_layers"] = n_swa_layers;
    j["n_expert"] = c.n_expert;
    j["n_expert_used"] = c.n_expert_used;
    j["n_ff_exp"] = c.n_ff_exp;
    j["params"] = size.params;
    j["active_params"] = size.active_params;
    j["decode_weight_bytes"] = size.decode_bytes;
    j["rms_eps"] = c.rms_eps;
    j["qkv_bias"] = c.has_qkv_bias;
    j["qk_norm"] = c.has_qk_norm;
    j["tied_embeddings"] = c.tied_embeddings;
    j["rope_freqs"] = c.has_rope_freqs;
    j["n_tensors"] = f.tensors().size();
    j["tensor_bytes"] = tensor_bytes;
    j["tensor_types"] = type_counts;
    j["kv_bytes_per_token"] = {{"f16", c.kv_bytes_per_token(2)}, {"f32", c.kv_bytes_per_token(4)}};
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t il = 0; il < c.n_layer; ++il) {
      layers.push_back({{"layer", il},
                        {"attn_span", c.attn_span(il)},
                        {"bytes_per_token_f16", layer_f16},
                        {"tokens_read_at_n_ctx_train", c.layer_kv_tokens(il, c.n_ctx_train)}});
    }
    j["kv_layers"] = layers;
    // The CPU engine drops a sliding layer's KV past its window (to a block); the CUDA backend
    // keeps every position in every layer (one layer group on the GPU).
    j["kv_bytes_at_n_ctx_train_f16"] = {{"read", kv_needed_f16},
                                        {"kept_cpu", kv_needed_f16},
                                        {"kept_cuda", c.kv_bytes_per_token(2) * c.n_ctx_train}};
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
  std::string scaling;
  if (c.rope.scaling == RopeScaling::Yarn) {
    scaling = fmt::format(", YaRN x{:g} of {} tokens", 1.0 / c.rope.freq_scale, c.rope.n_ctx_orig);
  } else if (c.rope.freq_scale != 1.0) {
    scaling = fmt::format(", linear scale {:g}", c.rope.freq_scale);
  }
  fmt::print("RoPE              {}, base {:g}, dims {}{}{}{}{}\n", rope, c.rope.freq_base, c.n_rot,
             scaling, c.has_rope_freqs ? ", rope_freqs" : "",
             c.has_rope_factors ? ", LongRoPE factors" : "",
             c.rope_swa.freq_base != c.rope.freq_base
                 ? fmt::format("; sliding layers base {:g}", c.rope_swa.freq_base)
                 : "");
  if (c.n_swa > 0) {
    if (n_swa_layers < c.n_layer) {
      fmt::print("attention         sliding window {} on {} of {} layers, the others global\n",
                 c.n_swa, n_swa_layers, c.n_layer);
    } else {
      fmt::print("attention         sliding window {} on every layer ({})\n", c.n_swa, c.n_layer);
    }
  }
  if (c.is_moe()) {
    fmt::print("experts           {} used of {} (n_ff_exp {}{})\n", c.n_expert_used, c.n_expert,
               c.n_ff_exp,
               c.n_ff_shexp > 0 ? fmt::format(", shared expert n_ff {}", c.n_ff_shexp) : "");
  }
  fmt::print("parameters        {} total, {} active per token\n", size.params, size.active_params);
  fmt::print("RMSNorm eps       {:g}\n", c.rms_eps);
  fmt::print("features          {}{}{}{}{}{}\n", c.has_qkv_bias ? "QKV bias; " : "",
             c.has_qk_norm ? "QK-norm; " : "", c.fused_qkv ? "fused QKV; " : "",
             c.has_post_norms ? "post-norms; " : "",
             c.ffn_act == FfnActivation::GeluTanh ? "GeGLU; " : "",
             c.tied_embeddings ? "tied embeddings" : "separate output matrix");
  fmt::print("tensors           {} ({} bytes): {}\n", f.tensors().size(), tensor_bytes, types);
  fmt::print("KV per token      {} bytes f16, {} bytes f32\n", c.kv_bytes_per_token(2),
             c.kv_bytes_per_token(4));
  fmt::print("KV per layer      {} bytes/token f16 in each of {} layers\n", layer_f16, c.n_layer);
  if (n_swa_layers > 0) {
    // Name the sliding layers compactly: "0-4, 6-10" for gemma3's 5 local : 1 global.
    std::string ranges;
    for (int64_t il = 0; il < c.n_layer;) {
      if (c.attn_span(il) == 0) {
        ++il;
        continue;
      }
      int64_t end = il;
      while (end + 1 < c.n_layer && c.attn_span(end + 1) > 0) ++end;
      ranges += fmt::format("{}{}", ranges.empty() ? "" : ", ",
                            end == il ? fmt::format("{}", il) : fmt::format("{}-{}", il, end));
      il = end + 1;
    }
    const int64_t n_global = c.n_layer - n_swa_layers;
    fmt::print(
        "KV at trained ctx {} tokens, f16: {}{} per sliding layer ({}: window {}); {} in all "
        "(sliding layers drop their KV past the window; with CUDA the cache keeps every "
        "position in every layer: {})\n",
        c.n_ctx_train,
        n_global > 0 ? fmt::format("{} per global layer ({}), ",
                                   format_size(c.n_ctx_train * layer_f16), n_global)
                     : "",
        format_size(std::min(c.n_swa, c.n_ctx_train) * layer_f16), ranges, c.n_swa,
        format_size(kv_needed_f16), format_size(c.kv_bytes_per_token(2) * c.n_ctx_train));
  } else {
    fmt::print("KV at trained ctx {} tokens, f16: {} per layer, {} in all\n", c.n_ctx_train,
               format_size(c.n_ctx_train * layer_f16),
               format_size(c.kv_bytes_per_token(2) * c.n_ctx_train));
  }
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
  if (doubled_bos(**tok, ids))
    std::fprintf(stderr, "warning: %s\n", doubled_bos_warning(**tok).c_str());
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
  if (auto st = check_ubatch_fits(a.kv, a.n_ctx); !st) return bad_value(st.error());
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
  auto kv_settings = make_kv_settings(a.kv);
  if (!kv_settings) return fail(kv_settings.error());
  // Features of the CPU session's paged KV cache: the reference and CUDA sessions have none.
  const bool wants_cpu_session =
      a.stats || !a.stats_json.empty() || !a.save_kv.empty() || !a.load_kv.empty();
  if (a.reference && (wants_cpu_session || kv_settings_given(*kv_settings))) {
    return fail(Error{
        "--reference keeps a contiguous KV cache; the paged KV options (--kv-*, --host-budget, "
        "--disk-budget, --attention, --stats, --stats-json, --save-kv, --load-kv) need the fast "
        "CPU session"});
  }
  if (wants_cpu_session && *device == DeviceKind::Cuda) {
    return fail(Error{
        "--device cuda: --stats, --stats-json, --save-kv and --load-kv are not wired to the "
        "CUDA session yet (its KV window is on the GPU; the CPU session has them); use --device "
        "cpu or auto"});
  }
  if (a.stats_json == "-") {
    return fail(
        Error{"--stats-json -: stdout carries the generated text; give a file (e.g. /dev/stderr)"});
  }
  if (!a.stats_json.empty()) {  // one file cannot be both the step log and a snapshot
    for (const std::string* kv_file : {&a.save_kv, &a.load_kv}) {
      std::error_code e1, e2;
      if (!kv_file->empty() && std::filesystem::weakly_canonical(*kv_file, e1) ==
                                   std::filesystem::weakly_canonical(a.stats_json, e2)) {
        return fail(make_error("--stats-json {} is also the {} file; give them different paths",
                               a.stats_json, kv_file == &a.save_kv ? "--save-kv" : "--load-kv"));
      }
    }
  }
  // Checked before the prefill, which can take an hour: the snapshot is written after it.
  if (!a.save_kv.empty()) {
    if (auto st = check_output_writable("--save-kv", a.save_kv); !st) return fail(st.error());
  }
  StatsWriter stats_out;
  if (!a.stats_json.empty()) {
    if (auto st = stats_out.open(a.stats_json); !st) return fail(st.error());
  }
  auto progress_out = ProgressOutput::open(a.progress_json);
  if (!progress_out) return fail(progress_out.error());
  app::AnswerProgress progress((*progress_out)->sink());

  auto loaded = load_model(a.model);
  if (!loaded) return fail(loaded.error());
  progress.set_prefill_cost(app::model_prefill_cost(*loaded->model));
  const Model& model = *loaded->model;
  const Tokenizer& tk = *loaded->tokenizer;
  warn_if_past_training(a.n_ctx, model);

  SessionParams sp;
  sp.n_ctx = a.n_ctx;
  sp.n_threads = session_threads(a.n_threads);
  sp.kv_type_k = *kt;
  sp.kv_type_v = *vt;
  // Without -c: the trained context if its KV fits this machine's default budgets.
  auto context = choose_context_or_note(model, sp, *kv_settings, a.kv);
  if (!context) return fail(context.error());
  sp.n_ctx = context->n_ctx;
  if (auto st = check_ubatch_fits(a.kv, sp.n_ctx, a.n_ctx > 0); !st) return bad_value(st.error());
  // The fast path on the chosen device by default; --reference selects the float64 oracle.
  std::unique_ptr<Session> session;
  if (a.reference) {
    auto r = ReferenceSession::create(model, sp);
    if (!r) return fail(r.error());
    session = std::move(*r);
  } else {
    BackendOptions opts;
    opts.device = *device;
    opts.n_ubatch = a.kv.n_ubatch;
    opts.kv = context->kv;
    opts.cache_dir = a.kv.default_spill_dir;  // the cache folder: the CUDA self-test's result
    if (wants_cpu_session && *device == DeviceKind::Auto) {
      opts.device = DeviceKind::Cpu;
      const CudaProbe probe = probe_cuda();
      if (probe.usable) {
        std::fprintf(stderr,
                     "note: --stats, --stats-json, --save-kv and --load-kv run on the CPU "
                     "session for now; running on the CPU\n");
      } else {  // the note auto gives everywhere else
        std::fprintf(stderr, "note: CUDA unavailable (%s); running on the CPU\n",
                     probe.reason.c_str());
      }
    }
    auto choice = create_session(model, sp, opts);
    if (!choice) return fail(choice.error());
    if (!choice->note.empty()) std::fprintf(stderr, "note: %s\n", choice->note.c_str());
    session = std::move(choice->session);
  }
  Session& s = *session;
  // The paged cache's session (stats, snapshots), when that is what runs.
  auto* const cpu = dynamic_cast<cpu::CpuSession*>(session.get());
  if (wants_cpu_session && cpu == nullptr)
    return fail(Error{"--stats, --stats-json, --save-kv and --load-kv need the CPU session"});
  const bool budget_limited =
      cpu != nullptr && cpu->cache().max_tokens() < cpu->cache().config().n_ctx;
  const std::string attention = cpu ? kv::kv_attention_name(cpu->kv_settings()) : "exact";
  if (cpu && cpu->kv_settings().attention != kv::KvAttention::Exact) {
    std::fprintf(stderr, "note: attention %s: an approximation of exact attention\n",
                 kv::kv_attention_name(cpu->kv_settings(), true).c_str());
  }

  // The CPU session turns running out of memory into errors with its numbers; the reference
  // session's contiguous cache grows with use and gets them here.
  const auto eval = [&](std::span<const int32_t> tokens, bool want_logits) -> Status {
    try {
      return s.eval(tokens, want_logits);
    } catch (const std::bad_alloc&) {
      return make_error(
          "out of memory evaluating {} tokens at position {} of {} (the reference session's "
          "contiguous KV cache and float64 activations grow with the context); a shorter prompt "
          "or -c",
          tokens.size(), s.n_past(), s.n_ctx());
    }
  };
  const std::vector<int32_t> prompt = tk.encode(prompt_text, true, a.parse_special);
  // Kept as given, as llama.cpp does, and said once.
  if (doubled_bos(tk, prompt))
    std::fprintf(stderr, "warning: %s\n", doubled_bos_warning(tk).c_str());
  if (prompt.empty())
    return fail(Error{"the prompt is empty and the vocabulary adds no BOS token"});
  // A prompt too long for the window and budgets gets the session's message (which names them).
  if (static_cast<int64_t>(prompt.size()) > s.n_ctx() && !budget_limited) {
    return fail(
        make_error("context full: the prompt has {} tokens but the context holds {} (use -c)",
                   prompt.size(), s.n_ctx()));
  }
  progress.prompt_begin(static_cast<int64_t>(prompt.size()), a.n_predict);
  if (!a.load_kv.empty()) {
    if (auto st = cpu->load_kv(a.load_kv); !st) return fail(st.error());
    const std::span<const int32_t> saved = cpu->tokens();
    if (saved.size() > prompt.size() || !std::equal(saved.begin(), saved.end(), prompt.begin())) {
      std::fprintf(stderr,
                   "note: --load-kv %s: the prompt does not start with the snapshot's %zu tokens; "
                   "computing it from the start\n",
                   a.load_kv.c_str(), saved.size());
    } else {
      std::fprintf(stderr, "note: --load-kv %s: restored %zu of the prompt's %zu tokens\n",
                   a.load_kv.c_str(), saved.size(), prompt.size());
      progress.prompt_restored(static_cast<int64_t>(saved.size()));
    }
  }
  s.set_eval_progress(progress.prefill_hook({}, static_cast<int64_t>(prompt.size())));
  const Status prefilled = eval(prompt, true);
  s.set_eval_progress({});
  if (!prefilled) return fail(prefilled.error());
  progress.prefill_done();
  if (!a.save_kv.empty()) {
    if (auto st = cpu->save_kv(a.save_kv); !st) return fail(st.error());
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(a.save_kv, ec);
    std::fprintf(stderr, "note: --save-kv %s: %zu prompt tokens, %s\n", a.save_kv.c_str(),
                 prompt.size(),
                 ec ? "size unknown" : spw::format_size(static_cast<int64_t>(bytes)).c_str());
  }
  int64_t step = 0;
  if (cpu) stats_out.write(stats_json(cpu->usage(), step++, "prefill", attention));
  if (auto st = check_logits_finite(s.logits(), a.model); !st) return fail(st.error());
  const std::vector<float> prompt_logits(s.logits().begin(), s.logits().end());

  Sampler sampler(a.sampling);
  std::vector<int32_t> history = prompt, generated;
  std::string text;
  Utf8Streamer stream(a.json ? stderr : stdout);
  (*progress_out)->interrupt();
  if (!a.json) {  // the continuation reads as text only after its prompt
    stream.write(prompt_text);
    (*progress_out)->wrote(prompt_text.ends_with('\n'), /*generated=*/true);
  }
  for (int32_t i = 0; a.n_predict < 0 || i < a.n_predict; ++i) {
    const int32_t id = sampler.sample(s.logits(), history);
    if (tk.is_eog(id)) break;
    generated.push_back(id);
    history.push_back(id);
    const std::string piece = tk.token_to_piece(id);
    text += piece;
    (*progress_out)->interrupt();
    stream.write(piece);
    (*progress_out)->wrote(piece.ends_with('\n'), /*generated=*/true);
    progress.decode_at(static_cast<int64_t>(generated.size()));
    if (a.n_predict >= 0 && i + 1 == a.n_predict) break;  // no forward pass for logits never used
    // An error after some text: the text's line ends first, so the error starts its own.
    const auto fail_mid_text = [&](const Error& e) {
      stream.finish();
      if (!a.json) {
        std::printf("\n");
        std::fflush(stdout);
      }
      return fail(e);
    };
    const int32_t one[1] = {id};
    if (auto st = eval(one, true); !st) {
      // A full context (n_ctx, or the window and budgets) ends the generation, not the run.
      if (starts_with(st.error().message, "context full")) {
        stream.finish();
        std::fprintf(stderr, "\n[stopped: %s]\n", st.error().message.c_str());
        break;
      }
      return fail_mid_text(st.error());
    }
    if (cpu) stats_out.write(stats_json(cpu->usage(), step++, "decode", attention));
    if (auto st = check_logits_finite(s.logits(), a.model); !st) return fail_mid_text(st.error());
  }
  stream.finish();
  (*progress_out)->finish();
  if (auto st = stats_out.close(); !st) return fail(st.error());
  if (a.stats && cpu) {
    (void)cpu->flush_kv();  // the spills in flight land, so the tiers are final
    if (!a.json) std::fflush(stdout);
    std::fprintf(stderr, "\n");
    print_stats(cpu->usage(), *cpu, static_cast<int64_t>(prompt.size()),
                static_cast<int64_t>(generated.size()));
  }
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
