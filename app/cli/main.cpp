// spillway-cli: the headless front end. Links no Widgets and needs no display.
// Flags follow llama.cpp's conventions (-m, -p, -n, -c, -t, --temp, ...). Global options such as
// --data-dir are accepted anywhere on the line.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "app/cli/ask.h"
#include "app/cli/bench.h"
#include "app/cli/commands.h"
#include "app/cli/ingest_docs.h"
#include "app/cli/jobs.h"
#include "app/cli/option_checks.h"
#include "app/cli/plan.h"
#include "app/cli/serve.h"
#include "app/paths.h"
#include "app/version.h"
#include "engine/chat/chat_template.h"
#include "engine/kv/spill_file.h"

namespace {

// SIGINT/SIGTERM/SIGHUP: remove this process's spill files, then die of the signal as before
// (so a shell still sees 130/143/129). Without it an interrupted run leaves its spill file for
// the next start to clean.
extern "C" void remove_spill_files_and_reraise(int sig) {
  spw::kv::unlink_spill_files_for_signal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_signal_cleanup() {
  struct sigaction sa = {};
  sa.sa_handler = remove_spill_files_and_reraise;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    // A signal the parent set to be ignored (nohup, background jobs) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

// "--save-kv ''" would otherwise be taken as "not given".
const CLI::Validator non_empty_path(
    [](std::string& s) {
      return s.empty() ? std::string("an empty path names no file") : std::string();
    },
    "FILE");

// The first argument after `search` that starts with '-' and is not one of its options (nor
// --data-dir and its value); nullptr when there is none.
const char* dash_query(int argc, char** argv, const CLI::App& search) {
  bool after = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return nullptr;
    if (!after) {
      after = arg == "search";
      continue;
    }
    if (arg == "--data-dir") {
      ++i;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    const CLI::Option* known = nullptr;
    for (const CLI::Option* o : search.get_options())
      if (o->check_name(name)) known = o;
    if (known == nullptr) return argv[i];
    // The value of a known option ("--limit -1") is that option's, not a query.
    if (arg.find('=') == std::string::npos && known->get_type_size() > 0) ++i;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  install_signal_cleanup();
  using namespace spw::cli;
  CLI::App app{"spillway-cli: local long-document analysis with GGUF models (headless)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(spw::app::version()));
  // An option given twice takes the last value, as most command lines do (CLI11's default
  // refuses it with "--n-predict: At Most 1 required but received 2" although -n was typed).
  // Subcommands copy these defaults when they are created below.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string data_dir;
  app.add_option("--data-dir", data_dir, "Folder for the library, settings and caches")
      ->configurable(false);

  InfoArgs info;
  auto* c_info =
      app.add_subcommand("info", "Architecture, hyperparameters, tensor types, KV bytes per token");
  c_info->add_option("-m,--model", info.model, "GGUF file")->required();
  c_info->add_flag("--json", info.json, "One JSON object on stdout");

  TokenizeArgs tok;
  auto* c_tok =
      app.add_subcommand("tokenize", "Print the token ids of a text (one line, space separated)");
  c_tok->add_option("-m,--model", tok.model, "GGUF file (a vocabulary-only file is enough)")
      ->required();
  auto* o_p = c_tok->add_option("-p,--prompt", tok.prompt, "Text to tokenize");
  auto* o_f = c_tok->add_option("-f,--file", tok.file, "Read the text from a file, byte for byte");
  o_p->excludes(o_f);
  c_tok->add_flag("--no-bos", tok.no_bos, "Add no special tokens at all (no BOS, no EOS)");
  c_tok->add_flag("--parse-special", tok.parse_special,
                  "Recognise special-token texts such as <s> in the input");

  GenerateArgs gen;
  auto* c_gen = app.add_subcommand("generate", "Generate text from a prompt");
  c_gen->add_option("-m,--model", gen.model, "GGUF file")->required();
  auto* o_gp = c_gen->add_option("-p,--prompt", gen.prompt, "Prompt text");
  auto* o_gf = c_gen->add_option("-f,--file", gen.prompt_file, "Read the prompt from a file");
  o_gp->excludes(o_gf);
  c_gen
      ->add_option("-n,--n-predict", gen.n_predict,
                   "Tokens to generate (-1: until end of text or the context is full)")
      ->capture_default_str()
      ->check(count_or_unlimited("-n", kMaxInt));
  add_ctx_option(*c_gen, gen.n_ctx);
  add_threads_option(*c_gen, gen.n_threads);
  add_sampling_options(*c_gen, gen.sampling);
  add_kv_type_options(*c_gen, gen.cache_type_k, gen.cache_type_v);
  c_gen->add_flag("--json", gen.json, "Stream text to stderr; print one JSON object on stdout");
  c_gen->add_flag("--dump-logits", gen.dump_logits,
                  "Include the last prompt position's logits in the JSON");
  c_gen->add_flag(
      "--reference", gen.reference,
      "Use the float64 reference forward pass (the oracle; slow, CPU only) instead of the fast "
      "path");
  add_device_option(*c_gen, gen.device);
  c_gen->add_flag("--parse-special", gen.parse_special,
                  "Recognise special-token texts in the prompt");
  add_kv_options(*c_gen, gen.kv);
  c_gen->add_flag("--stats", gen.stats,
                  "KV tiers, bytes moved, attention times and speed on stderr at the end");
  c_gen->add_option("--stats-json", gen.stats_json, "Write one JSON object per step to FILE")
      ->check(non_empty_path);
  c_gen
      ->add_option("--progress-json", gen.progress_json,
                   "Write one JSON object per progress event (prefill, decode) to FILE")
      ->check(non_empty_path);
  c_gen->add_option("--save-kv", gen.save_kv, "Save the prompt's KV cache to FILE")
      ->check(non_empty_path);
  c_gen->add_option("--load-kv", gen.load_kv,
                    "Reuse the KV snapshot in FILE for the prompt's matching start");

  ChatTemplateArgs chat;
  auto* c_chat = app.add_subcommand(
      "chat-template", "Render a system/user prompt with the model's chat template; print its ids");
  c_chat->footer(
      "Output (stdout): the rendered prompt (with the assistant generation prompt, without BOS),\n"
      "a newline, then one line \"ids: ID ID ...\" with the prompt's token ids (exactly one BOS\n"
      "when the template or the tokenizer wants one). Warnings (an unrecognised template, so\n"
      "ChatML) go to stderr. A model without tokenizer.chat_template uses 'plain': the texts\n"
      "joined with blank lines.\n");
  c_chat->add_option("-m,--model", chat.model, "GGUF file (a vocabulary-only file is enough)")
      ->required();
  auto* o_sys = c_chat->add_option("--system", chat.system, "System message");
  c_chat->add_option("--user", chat.user, "User message")->required();
  c_chat->add_option("--template", chat.template_name,
                     "Template to use instead of the detected one: " + spw::chat_family_names());

  BenchArgs bench;
  auto* c_bench = app.add_subcommand(
      "bench", "Prompt-processing and generation speed, bandwidth and peak memory (llama-bench)");
  c_bench->add_option("-m,--model", bench.model, "GGUF file")->required();
  add_bench_count_options(*c_bench, bench);
  c_bench->add_flag("--reference", bench.reference,
                    "Time the float64 reference forward pass (CPU only) instead of the fast path");
  add_device_option(*c_bench, bench.device);
  c_bench->add_flag("--json", bench.json, "One JSON object on stdout");
  add_kv_options(*c_bench, bench.kv);
  add_depth_option(*c_bench, bench.depth);

  PlanArgs plan;
  auto* c_plan = app.add_subcommand(
      "plan", "Where a context's KV goes (window, RAM, disk), whether it fits, predicted speed");
  c_plan->add_option("-m,--model", plan.model, "GGUF file")->required();
  add_ctx_option(*c_plan, plan.n_ctx);
  c_plan
      ->add_option("--vram", plan.vram, "GPU memory for weights + window, e.g. 24G (none: no GPU)")
      ->check(size_at_least("--vram", 0));
  add_kv_type_options(*c_plan, plan.cache_type_k, plan.cache_type_v);
  add_kv_layout_options(*c_plan, plan.kv, /*plan_aliases=*/true);
  c_plan->add_flag("--json", plan.json, "One JSON object on stdout");
  add_threads_option(*c_plan, plan.n_threads,
                     "CPU threads the predicted speed is for (default: all cores)");
  c_plan->add_flag("--no-calibrate", plan.no_calibrate,
                   "Predict from memory bandwidth only: no measured speed profile (calibrating "
                   "takes seconds on first use; the profile is cached per model and machine)");

  AskArgs ask;
  auto* c_ask = add_ask_command(app, ask);

  IngestArgs ingest;
  auto* c_ingest = add_ingest_command(app, ingest);
  DocsArgs docs;
  auto* c_docs = add_docs_command(app, docs);
  JobsArgs jobs;
  auto* c_jobs = add_jobs_command(app, jobs);
  ServeArgs serve;
  auto* c_serve = add_serve_command(app, serve);

  // Global options may follow the subcommand: let each subcommand hand unknown options back.
  for (auto* sub :
       {c_info, c_tok, c_gen, c_chat, c_bench, c_plan, c_ask, c_ingest, c_docs, c_jobs, c_serve})
    sub->fallthrough();

  // A clear message for a mistyped command (CLI11 would only say a subcommand is required).
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--data-dir") {
      ++i;
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    bool known = false;
    for (auto* sub :
         {c_info, c_tok, c_gen, c_chat, c_bench, c_plan, c_ask, c_ingest, c_docs, c_jobs, c_serve})
      known |= sub->check_name(std::string(arg));
    if (!known) {
      std::fprintf(stderr,
                   "error: unknown command '%s' (commands: info, tokenize, generate, "
                   "chat-template, bench, plan, ask, ingest, docs, jobs, serve)\n",
                   argv[i]);
      return 1;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `docs search -foo`: a query that starts with '-' reads as an option; say how to pass it.
    if (docs.search->parsed() && e.get_exit_code() != 0) {
      if (const char* query = dash_query(argc, argv, *docs.search)) {
        std::fprintf(stderr,
                     "error: '%s' reads as an option of docs search; to search for words that "
                     "start with '-', put -- before the query: spillway-cli docs search -- %s\n",
                     query, query);
        return 1;
      }
    }
    return report_parse_error(app, e);
  }
  if (app.count("--data-dir") > 0 && data_dir.empty()) {
    std::fprintf(stderr, "error: --data-dir needs a folder, not an empty string\n");
    return 1;
  }
  // The commands that only read a model (info, tokenize, chat-template) or plan need no data
  // folder of their own: they run where it cannot be created or written (a read-only HOME or
  // --data-dir). The others create it here, or say which folder is not writable.
  // The library's reading commands (and `docs remove`, which frees space) check an existing
  // library themselves: they open it read-only, so a read-only folder or a full disk is fine.
  const bool library_reader =
      *c_docs ||
      (*c_jobs && (jobs.self->got_subcommand("list") || jobs.self->got_subcommand("show")));
  const bool reads_only = *c_info || *c_tok || *c_chat || *c_plan || library_reader;
  if (!data_dir.empty() && !reads_only) {
    spw::app::PathOverrides o;
    o.data_dir = data_dir;
    if (auto paths = spw::app::prepare_paths(o); !paths) {
      std::fprintf(stderr, "error: %s\n", paths.error().message.c_str());
      return 1;
    }
  }
  auto run_command = [&]() -> int {
    try {
      if (*c_info) return run_info(info);
      if (*c_tok) {
        tok.has_prompt = o_p->count() > 0;
        if (!tok.has_prompt && o_f->count() == 0) {
          std::fprintf(stderr, "error: tokenize needs -p TEXT or --file PATH\n");
          return 1;
        }
        return run_tokenize(tok);
      }
      if (*c_gen) {
        if (o_gp->count() == 0 && o_gf->count() == 0) {
          std::fprintf(stderr, "error: generate needs -p TEXT or -f FILE\n");
          return 1;
        }
        gen.kv.default_spill_dir = default_spill_dir(data_dir);
        return run_generate(gen);
      }
      if (*c_chat) {
        chat.has_system = o_sys->count() > 0;
        if (c_chat->count("--template") > 0 && chat.template_name.empty()) {
          std::fprintf(stderr, "error: --template needs a name (%s)\n",
                       spw::chat_family_names().c_str());
          return 1;
        }
        return run_chat_template(chat);
      }
      if (*c_ask) {
        ask.data_dir = data_dir;
        ask.kv.default_spill_dir = default_spill_dir(data_dir);
        return run_ask(ask);
      }
      if (*c_ingest) {
        ingest.data_dir = data_dir;
        return run_ingest(ingest);
      }
      if (*c_docs) {
        docs.data_dir = data_dir;
        return run_docs(docs);
      }
      if (*c_jobs) {
        jobs.data_dir = data_dir;
        return run_jobs(jobs);
      }
      if (*c_serve) {
        serve.data_dir = data_dir;
        return run_serve(serve);
      }
      if (*c_bench) {
        bench.kv.default_spill_dir = default_spill_dir(data_dir);
        return run_bench(bench);
      }
      if (*c_plan) {
        plan.data_dir = data_dir;
        plan.kv.default_spill_dir = default_spill_dir(data_dir);
        return run_plan(plan);
      }
    } catch (
        const std::exception& e) {  // allocation failure and the like: still exit 1, never a signal
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    return 1;
  };
  const int rc = run_command();
  // A result that could not be written (a full disk, a closed pipe) is a failure, not exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
    return 1;
  }
  return rc;
}
