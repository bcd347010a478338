#include "app/cli/cli_common.h"

#include <thread>

namespace spw::cli {

namespace {

// Length of the longest prefix that does not end inside a UTF-8 sequence that could still
// be completed by more bytes.
size_t complete_prefix(const std::string& s) {
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

}  // namespace

void Utf8Streamer::write(const std::string& bytes) {
  pending_ += bytes;
  size_t cut = complete_prefix(pending_);
  if (cut > 0) {
    std::fwrite(pending_.data(), 1, cut, out_);
    std::fflush(out_);
    pending_.erase(0, cut);
  }
}

void Utf8Streamer::finish() {
  if (!pending_.empty()) std::fwrite(pending_.data(), 1, pending_.size(), out_);
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

void warn_if_past_training(int64_t n_ctx, const Model& model) {
  if (n_ctx <= model.config().n_ctx_train) return;
  std::fprintf(stderr,
               "warning: -c %lld is longer than the %lld tokens the model was trained on; "
               "quality degrades past that\n",
               static_cast<long long>(n_ctx), static_cast<long long>(model.config().n_ctx_train));
}

}  // namespace spw::cli
