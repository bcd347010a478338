#include "app/cli/cli_common.h"

#include <string_view>
#include <thread>
#include <vector>

#include "engine/tokenizer/unicode.h"

namespace spw::cli {

void Utf8Streamer::write(const std::string& bytes) {
  pending_ += bytes;
  size_t cut = unicode::complete_utf8_prefix(pending_);
  if (cut > 0) {
    // Bytes that start no well-formed sequence (a random model's stray continuation bytes, a
    // lead byte the next piece did not continue) go out as U+FFFD, as --json writes them.
    std::vector<uint32_t> unused;
    const std::string text =
        unicode::sanitize_utf8(std::string_view(pending_).substr(0, cut), unused);
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
    pending_.erase(0, cut);
  }
}

void Utf8Streamer::finish() {
  if (!pending_.empty()) {
    std::vector<uint32_t> unused;  // a sequence cut by the end of the answer: U+FFFD
    const std::string text = unicode::sanitize_utf8(pending_, unused);
    std::fwrite(text.data(), 1, text.size(), out_);
  }
  pending_.clear();
  std::fflush(out_);
}

Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const GgufFile& file) {
  auto tok = Tokenizer::from_gguf(file);
  if (tok) {
    for (const std::string& w : (*tok)->warnings())
      std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  return tok;
}

Expected<LoadedModel> load_model(const std::string& path) {
  auto model = Model::load(path);
  if (!model) return model.error();
  for (const std::string& w : (*model)->config().warnings)
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  auto tok = load_tokenizer((*model)->file());
  if (!tok) return tok.error();
  if ((*tok)->n_vocab() != (*model)->config().n_vocab) {
    return make_error("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", path,
                      (*tok)->n_vocab(), (*model)->config().n_vocab);
  }
  return LoadedModel{std::move(*model), std::move(*tok)};
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int session_threads(int requested) {
  const int hw = hardware_threads();
  if (requested <= 0) return hw;
  if (requested > hw) {
    std::fprintf(stderr,
                 "warning: -t %d is more threads than the %d CPUs here; it runs no faster than "
                 "-t %d\n",
                 requested, hw, hw);
  }
  return requested;
}

void warn_if_past_training(int64_t n_ctx, const Model& model) {
  if (n_ctx <= model.config().n_ctx_train) return;
  std::fprintf(stderr,
               "warning: -c %lld is longer than the %lld tokens the model was trained on; "
               "quality degrades past that\n",
               static_cast<long long>(n_ctx), static_cast<long long>(model.config().n_ctx_train));
}

}  // namespace spw::cli
