// spillway-cli subcommands. Each returns the process exit code: 0 on success, 1 on any error
// (the message already printed to stderr). stdout carries only the command's result.
#pragma once

#include <cstdint>
#include <string>

#include "app/cli/kv_options.h"
#include "engine/sampling/sampler.h"

namespace spw::cli {

/// The app cache folder (the disk tier's default spill folder) for a --data-dir (empty: the
/// XDG default); empty when none can be found ($HOME unset).
std::string default_spill_dir(const std::string& data_dir);

struct InfoArgs {
  std::string model;
  bool json = false;
};
int run_info(const InfoArgs& a);

struct TokenizeArgs {
  std::string model;
  std::string prompt;  // -p
  std::string file;    // --file (read byte for byte)
  bool has_prompt = false;
  bool no_bos = false;  // no special tokens at all (no BOS, no EOS)
  bool parse_special = false;
};
int run_tokenize(const TokenizeArgs& a);

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_file;  // -f/--file: the prompt read from a file (long documents)
  int32_t n_predict = 128;  // -n; < 0: until EOS or the context is full
  int64_t n_ctx = 0;        // -c; 0: the model's trained context
  int n_threads = 0;        // -t; 0: all cores
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  bool json = false;
  bool dump_logits = false;
  bool parse_special = false;
  bool reference = false;  // --reference: the float64 reference forward instead of the fast path
  std::string device = "auto";  // --device auto | cpu | cuda (the fast path's backend)
  SamplerParams sampling;
  KvArgs kv;                  // the paged KV cache
  bool stats = false;         // --stats: a summary on stderr at the end
  std::string stats_json;     // --stats-json FILE: one JSON object per step (line)
  std::string progress_json;  // --progress-json FILE: one progress event per line
  std::string save_kv;        // --save-kv FILE: the prompt's KV, written after the prompt
  std::string load_kv;        // --load-kv FILE: reuse a snapshot whose tokens start the prompt
};
/// generate: errors as the options' (a bad --device lists the accepted values; --reference
/// with --device cuda is refused: the reference runs on the CPU only). Under --device auto a
/// fallback to the CPU prints one line "note: CUDA unavailable (...); running on the CPU" to
/// stderr. The paged KV cache's flags run on both sessions (CUDA: the window on the GPU) except
/// the approximate --attention modes; those and --stats, --stats-json, --save-kv and --load-kv
/// need the CPU session: auto picks it (with a note), --device cuda and --reference refuse them.
/// A context that fills up during generation (n_ctx, or the window and budgets) stops it with
/// "[stopped: context full: ...]" on stderr, exit 0 with what was generated.
int run_generate(const GenerateArgs& a);

/// chat-template: renders a system + user conversation with the model's chat template (or the
/// one named by --template) and its generation prompt. stdout: the rendered prompt, a newline,
/// then "ids: " and the token ids separated by spaces, and a newline. A template warning (an
/// unrecognised template, so ChatML) goes to stderr as "warning: ...".
struct ChatTemplateArgs {
  std::string model;
  std::string system;  // --system
  bool has_system = false;
  std::string user;           // --user
  std::string template_name;  // --template; empty: detect from tokenizer.chat_template
};
int run_chat_template(const ChatTemplateArgs& a);

}  // namespace spw::cli
