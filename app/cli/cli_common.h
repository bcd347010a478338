// Helpers shared by spillway-cli commands that run a model (generate, ask): the model with its
// tokenizer, streaming UTF-8 output, the default thread count.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "engine/common/expected.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::cli {

/// Emits bytes to a stream, holding back an incomplete UTF-8 sequence at the end so a
/// multi-byte character split across byte tokens is never printed half; bytes that cannot be
/// UTF-8 (and a sequence the end cuts) are written as U+FFFD, so stdout is always valid UTF-8.
class Utf8Streamer {
 public:
  explicit Utf8Streamer(FILE* out) : out_(out) {}
  void write(const std::string& bytes);
  void finish();

 private:
  FILE* out_;
  std::string pending_;
};

/// Loads the tokenizer and prints its load-time warnings (e.g. an unknown pre-tokenizer and the
/// fallback used) to stderr, never to stdout.
Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const GgufFile& file);

/// The model with its tokenizer, checked against each other: what `generate` needs and what
/// `info` promises (a file that cannot run is an error there too).
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
Expected<LoadedModel> load_model(const std::string& path);

/// A -c longer than the model's training context: one warning line on stderr (quality degrades
/// past it), nothing otherwise.
void warn_if_past_training(int64_t n_ctx, const Model& model);

/// std::thread::hardware_concurrency(), at least 1.
int hardware_threads();
/// The threads a session runs: -t as given (0: hardware_threads()), with a warning on stderr
/// when it is more than the machine has (every extra thread only waits for a core).
int session_threads(int requested);

}  // namespace spw::cli
