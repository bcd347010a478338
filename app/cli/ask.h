// spillway-cli ask: a question about a document of the library (--doc ID) or a PDF (ingested
// first, or found by its hash), answered by a model with the whole document in context
// (app/ask/ask.h). stdout: the answer as it streams, then its citations, each verified or not;
// with --json exactly one JSON object. Token counts, snapshot reuse, map-reduce progress and
// notes go to stderr.
#pragma once

#include <cstdint>
#include <string>

#include "app/cli/kv_options.h"
#include "engine/sampling/sampler.h"

namespace CLI {
class App;
}

namespace spw::cli {

struct AskArgs {
  std::string model;
  int64_t doc_id = -1;      // --doc; -1: not given
  std::string file;         // FILE.pdf (positional)
  std::string question;     // -q
  int32_t n_predict = 256;  // -n; -1: until the end of text or a full context
  int64_t n_ctx = 0;        // -c; 0: the model's trained context
  int n_threads = 0;        // -t; 0: all cores
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  std::string device = "auto";
  std::string template_name;  // --template: override the detected chat template
  SamplerParams sampling;     // temp defaults to 0 (greedy) for ask
  KvArgs kv;
  bool map_reduce = false;   // --map-reduce
  bool no_snapshot = false;  // --no-snapshot: neither restore nor save the document's KV
  bool json = false;
  bool continue_parts = false;  // --continue: continue the earlier answer / its finished parts
  std::string snapshot_budget;  // --snapshot-budget SIZE; empty: the settings', else the default
  // Prefill checkpoints (app/ask/ask.h AskParams): every N tokens or S seconds; hidden flags
  // --checkpoint-tokens / --checkpoint-seconds (tests make them small).
  int64_t checkpoint_tokens = 8192;
  double checkpoint_seconds = 60;
  std::string progress_json;  // --progress-json FILE: one progress event per line
  std::string password;       // FILE.pdf: --password
  bool ocr = false;           // FILE.pdf: --ocr
  std::string data_dir;       // the global --data-dir (empty: XDG folders)
};

/// Adds the `ask` subcommand and its options to `app`.
CLI::App* add_ask_command(CLI::App& app, AskArgs& a);

/// Errors (stderr "error: ...", exit 1): neither or both of --doc and FILE, an empty question,
/// an unknown document id, a document without text (all pages scanned: never answered), a
/// model that does not load, a prompt longer than the context without --map-reduce (with the
/// numbers), a page too long for any map-reduce part, bad generation or KV flags.
int run_ask(const AskArgs& a);

}  // namespace spw::cli
