// The engine's public inference API: a Session owns one sequence's KV cache and turns token ids
// into logits. Prefill and decode are the same call (a batch of one token is a decode step).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"

namespace spw {

/// Element type of the KV cache. f32 is exact (for comparisons), f16 is the default
/// (as llama.cpp), values are rounded to f16 when written.
enum class KvType { F32, F16 };

/// "f32" | "f16" -> KvType; error text lists the accepted values.
Expected<KvType> parse_kv_type(std::string_view s);
std::string_view kv_type_name(KvType t);

struct SessionParams {
  int64_t n_ctx = 0;  // context length in tokens; 0 = the model's trained context
  int n_threads = 1;  // worker threads for matrix-vector products
  KvType kv_type_k = KvType::F16;
  KvType kv_type_v = KvType::F16;
};

/// The checks every Session::eval makes before touching its state: a non-empty batch, ids in
/// [0, n_vocab), and room for the batch: "context full: N tokens fit ..." otherwise.
Status check_batch(std::span<const int32_t> tokens, int64_t n_vocab, int64_t n_past, int64_t n_ctx);

class Session {
 public:
  virtual ~Session() = default;

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
};

}  // namespace spw
