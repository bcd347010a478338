// spillway-testmodel: writes a random, reproducible GGUF model of any architecture the loader
// reads, for tests.
//   spillway-testmodel -o tiny.gguf --arch qwen3 --type Q4_K --n-embd 256 --n-ff 512 --head-dim 64
//   spillway-testmodel -o mixed.gguf --mix q4_k_m --n-embd 256 --n-ff 512
//   spillway-testmodel -o q3.gguf --type Q3_K --n-embd 256 --n-ff 512 --head-dim 64
//   spillway-testmodel -o gemma.gguf --arch gemma3 --n-layer 6 --sliding-window 16
//   spillway-testmodel -o phi.gguf --arch phi3 --n-rot 12 --rope-factors --rope-orig-ctx 128
//   spillway-testmodel -o moe.gguf --arch qwen3moe --n-expert 8 --n-expert-used 2 --n-ff-exp 64
//   spillway-testmodel -o mixtral.gguf --arch llama --n-expert 4 --n-expert-used 2
//   spillway-testmodel -o yarn.gguf --arch qwen2 --ctx 512 --rope-scaling yarn --rope-factor 8
//       --rope-orig-ctx 512
// A Llama-3-8B-shaped Q4_K_M file (~4.9 GB) of random blocks, written in seconds:
//   spillway-testmodel -o llama8b.gguf --fast-random --mix q4_k_m --n-vocab 128256 --n-embd 4096
//       --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 --ctx 8192
// Errors go to stderr with exit status 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "engine/gguf/gguf_writer.h"
#include "tests/support/quant_mix.h"
#include "tests/support/test_model.h"

namespace {

// The temporary files an interrupted write would leave (the path as given and, for a symlink,
// as resolved): removed by the SIGINT/SIGTERM/SIGHUP handler. Fixed buffers: the handler may
// only call async-signal-safe functions.
char g_tmp_paths[2][4096];

extern "C" void remove_temp_and_exit(int sig) {
  for (const char* p : g_tmp_paths)
    if (p[0] != '\0') ::unlink(p);
  ::_exit(128 + sig);
}

void remove_temp_on_signals(const std::string& out) {
  std::error_code ec;
  const std::string resolved = std::filesystem::weakly_canonical(out, ec).string();
  const std::string paths[2] = {spw::GgufWriter::temp_path_for(out),
                                ec ? std::string() : spw::GgufWriter::temp_path_for(resolved)};
  for (int i = 0; i < 2; ++i) {
    if (paths[i].size() < sizeof g_tmp_paths[i])
      std::snprintf(g_tmp_paths[i], sizeof g_tmp_paths[i], "%s", paths[i].c_str());
  }
  struct sigaction sa = {};
  sa.sa_handler = remove_temp_and_exit;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  spw::TestModelSpec spec;
  std::string out;
  std::string type = "F32";
  int64_t n_vocab = spec.n_vocab, n_embd = spec.n_embd, n_layer = spec.n_layer,
          n_head = spec.n_head, n_head_kv = spec.n_head_kv, head_dim = spec.head_dim,
          n_ff = spec.n_ff, n_ctx = spec.n_ctx;

  CLI::App app{"Writes a random, reproducible Llama-family GGUF test model"};
  app.add_option("-o,--output", out, "Output .gguf path")->required();
  app.add_option("--arch", spec.arch, "Architecture")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "phi3", "gemma3"}));
  std::vector<std::string> type_names;
  for (uint32_t number = 0; number < 64; ++number) {
    if (spw::is_supported_type(static_cast<spw::GgmlType>(number)))
      type_names.push_back(spw::type_name(number));
  }
  app.add_option("--type", type, "Type of the weight matrices")->check(CLI::IsMember(type_names));
  app.add_option("--mix", spec.mix,
                 "Quantization mix overriding --type, the types llama.cpp gives each tensor of "
                 "such a file: q4_k_m (Q4_K, with Q6_K for output.weight, attn_v and half of "
                 "ffn_down), q3_k_m (Q3_K, with Q6_K for output.weight and Q4_K/Q5_K for "
                 "attn_v, attn_output and ffn_down), q2_k, q3_k_s, q3_k_l, iq4_nl, iq4_xs")
      ->check(CLI::IsMember(spw::quant_mix_names()));
  app.add_option("--n-vocab", n_vocab, "Vocabulary size (at least 260)");
  app.add_option("--n-embd", n_embd, "Embedding length");
  app.add_option("--n-layer", n_layer, "Number of blocks");
  app.add_option("--n-head", n_head, "Query heads");
  app.add_option("--n-head-kv", n_head_kv, "Key/value heads");
  CLI::Option* head_dim_opt =
      app.add_option("--head-dim", head_dim, "Head dimension (default n_embd / n_head)");
  app.add_option("--n-ff", n_ff, "Feed-forward length");
  app.add_option("--ctx", n_ctx, "Training context length");
  app.add_flag("--tied", spec.tied_embeddings, "Omit output.weight (tied embeddings)");
  app.add_flag("--rope-freqs", spec.rope_freqs, "Add rope_freqs.weight (Llama 3.1 style)");
  app.add_option("--n-rot", spec.n_rot, "RoPE dimensions (default head_dim; fewer: partial)");
  app.add_option("--n-expert", spec.n_expert, "Experts (llama: the Mixtral layout)");
  app.add_option("--n-expert-used", spec.n_expert_used, "Experts used per token");
  app.add_option("--n-ff-exp", spec.n_ff_exp, "Experts' feed-forward length (default n_ff)");
  app.add_option("--n-ff-shexp", spec.n_ff_shexp,
                 "qwen2moe shared expert's feed-forward length (default n_ff)");
  app.add_option("--sliding-window", spec.sliding_window,
                 "attention.sliding_window (gemma3 default 16)");
  app.add_option("--rope-scaling", spec.rope_scaling, "rope.scaling.type")
      ->check(CLI::IsMember({"none", "linear", "yarn", "longrope", "llama3"}));
  app.add_option("--rope-factor", spec.rope_factor, "rope.scaling.factor");
  app.add_option("--rope-scale-linear", spec.rope_scale_linear, "The legacy rope.scale_linear");
  app.add_option("--rope-orig-ctx", spec.rope_orig_ctx, "rope.scaling.original_context_length");
  app.add_option("--rope-attn-factor", spec.rope_attn_factor, "rope.scaling.attn_factor");
  app.add_flag("--rope-factors", spec.rope_factors,
               "phi3: add rope_factors_long/short.weight (LongRoPE)");
  app.add_option("--seed", spec.seed, "Random seed");
  bool fast_random = false;
  app.add_flag("--fast-random", fast_random,
               "Fill matrices with random blocks (scales set so weights keep a 1/sqrt(n_in) "
               "spread) while streaming them to the file: for large speed-test models");
  app.add_option("--version", spec.gguf_version, "GGUF version")->check(CLI::IsMember({2, 3}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "spillway-testmodel: %s\n", e.what());
    return 1;
  }

  const auto t = spw::parse_test_model_type(type);
  if (!t) {
    std::fprintf(stderr, "spillway-testmodel: unknown type '%s'\n", type.c_str());
    return 1;
  }
  spec.weight_type = *t;
  spec.n_vocab = n_vocab;
  spec.n_embd = n_embd;
  spec.n_layer = n_layer;
  spec.n_head = n_head;
  spec.n_head_kv = n_head_kv;
  spec.head_dim = head_dim_opt->count() > 0 || n_head <= 0 ? head_dim : n_embd / n_head;
  spec.n_ff = n_ff;
  spec.n_ctx = n_ctx;

  const auto t0 = std::chrono::steady_clock::now();
  remove_temp_on_signals(out);
  const spw::Status st =
      fast_random ? spw::write_fast_random_model(spec, out) : spw::write_test_model(spec, out);
  if (!st) {
    std::fprintf(stderr, "spillway-testmodel: %s\n", st.error().message.c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(out, ec);
  fmt::print("wrote {} ({} {}{}, {} layers, n_embd {}, n_vocab {})", out, spec.arch,
             spec.mix.empty() ? type : spec.mix, fast_random ? ", fast random" : "", spec.n_layer,
             spec.n_embd, spec.n_vocab);
  if (fast_random && !ec) {
    fmt::print(": {} bytes in {:.2f} s ({:.0f} MB/s)", bytes, secs,
               secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0.0);
  }
  fmt::print("\n");
  return 0;
}
