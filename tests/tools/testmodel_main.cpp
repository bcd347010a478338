// spillway-testmodel: writes a random, reproducible Llama-family GGUF model for tests.
//   spillway-testmodel -o tiny.gguf --arch qwen3 --type Q4_K --n-embd 256 --n-ff 512 --head-dim 64
//   spillway-testmodel -o mixed.gguf --mix q4_k_m --n-embd 256 --n-ff 512
// Errors go to stderr with exit status 1.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "tests/support/test_model.h"

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
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3"}));
  app.add_option("--type", type, "Type of the weight matrices")
      ->check(CLI::IsMember(
          {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}));
  app.add_option("--mix", spec.mix,
                 "Quantization mix overriding --type: q4_k_m (Q4_K, with Q6_K for output.weight, "
                 "attn_v and half of ffn_down, as llama.cpp's Q4_K_M)")
      ->check(CLI::IsMember({"q4_k_m"}));
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
  app.add_option("--seed", spec.seed, "Random seed");
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

  if (auto st = spw::write_test_model(spec, out); !st) {
    std::fprintf(stderr, "spillway-testmodel: %s\n", st.error().message.c_str());
    return 1;
  }
  fmt::print("wrote {} ({} {}, {} layers, n_embd {}, n_vocab {})\n", out, spec.arch,
             spec.mix.empty() ? type : spec.mix, spec.n_layer, spec.n_embd, spec.n_vocab);
  return 0;
}
