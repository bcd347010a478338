// The engine's public inference API: a Session owns one sequence's KV cache and turns token ids
// into logits. Prefill and decode are the same call (a batch of one token is a decode step).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"
#include "engine/session/usage.h"

namespace spw {

/// Element type of the KV cache. f32 is exact (for comparisons), f16 is the default
/// (as llama.cpp), values are rounded to f16 when written. q8_0 stores each head's row as
/// ggml Q8_0 blocks (32 int8 and one f16 scale: 8.5 bits per value), so it needs head_dim
/// (and head_dim_v) to be a multiple of 32; sessions refuse other models at create().
enum class KvType { F32, F16, Q8_0 };

/// "f32" | "f16" | "q8_0" -> KvType; error text lists the accepted values.
Expected<KvType> parse_kv_type(std::string_view s);
std::string_view kv_type_name(KvType t);
/// The cache element type: GgmlType::F32, F16 or Q8_0.
GgmlType kv_ggml_type(KvType t);

struct SessionParams {
  int64_t n_ctx = 0;  // context length in tokens; 0 = the model's trained context
  int n_threads = 1;  // worker threads for matrix-vector products
  KvType kv_type_k = KvType::F16;
  KvType kv_type_v = KvType::F16;
};

/// The KV types' demands on a model's shape, checked by every Session's create(): q8_0 K needs
/// head_dim % 32 == 0, q8_0 V head_dim_v % 32 == 0. Error: "q8_0 KV cache needs head_dim % 32
/// == 0 (this model has head_dim 8)".
Status check_kv_types(const SessionParams& params, int64_t head_dim, int64_t head_dim_v);

/// The checks every Session::eval makes before touching its state: a non-empty batch, ids in
/// [0, n_vocab), and room for the batch: "context full: N tokens fit ..." otherwise.
Status check_batch(std::span<const int32_t> tokens, int64_t n_vocab, int64_t n_past, int64_t n_ctx);

/// Progress of one eval() call, reported after each ubatch it commits (a decode step is one
/// ubatch): `done` of `total` tokens of this call. Return false to stop: eval() then returns the
/// error "cancelled" before its next ubatch (the ubatches already run stay committed; n_past()
/// says how many positions). Returning false after the last ubatch changes nothing. Runs on the
/// thread that called eval(), so it may read the session (usage()).
using EvalProgress = std::function<bool(int64_t done, int64_t total)>;

/// Ok when every logit is finite; otherwise "[source: ]the model produced non-finite logits (NaN
/// or infinity)[during]; its weights or hyperparameters are broken". A file with NaN or infinite
/// scales or garbage blocks runs at full speed and gives such logits: the app, the CLI and bench
/// refuse it with this error. `source` (e.g. the file's path) and `during` (e.g. " in the pp
/// test") may be empty.
Status check_logits_finite(std::span<const float> logits, std::string_view source = {},
                           std::string_view during = {});

class Session {
 public:
  virtual ~Session() = default;

  /// Installs (or, with an empty function, removes) the progress callback of later eval()s.
  void set_eval_progress(EvalProgress progress) { progress_ = std::move(progress); }
  /// The progress callback installed now (empty when none): to wrap it for one eval().
  const EvalProgress& eval_progress() const { return progress_; }

  /// The session's counters now (usage.h). The base fills n_past and n_ctx; the CPU and CUDA
  /// sessions the rest. Any thread (the counters are atomics; n_past may be a step behind).
  virtual SessionUsage usage() const;

  /// Appends `tokens` at positions [n_past, n_past + tokens.size()) and runs the forward pass.
  /// When `want_logits`, logits() afterwards holds the last token's logits [n_vocab].
  /// Errors: token id out of range; "context full: N tokens fit" when the batch does not fit.
  /// On error the session is unchanged.
  virtual Status eval(std::span<const int32_t> tokens, bool want_logits) = 0;

  /// Logits of the last evaluated token, [n_vocab], valid after eval(..., true).
  virtual std::span<const float> logits() const = 0;

  virtual int64_t n_past() const = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;

 protected:
  /// For the backends' ubatch loops: reports progress; false when eval() must stop.
  bool report_progress(int64_t done, int64_t total) const {
    return !progress_ || progress_(done, total) || done >= total;
  }

 private:
  EvalProgress progress_;
};

}  // namespace spw
