#include "engine/session/session.h"

namespace spw {

Expected<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::F32;
  if (s == "f16") return KvType::F16;
  if (s == "q8_0") {
    return make_error(
        "KV cache type 'q8_0' is not available yet (it arrives with the tiered KV cache); use f16 "
        "or f32");
  }
  return make_error("unknown KV cache type '{}' (accepted: f32, f16)", s);
}

Status check_batch(std::span<const int32_t> tokens, int64_t n_vocab, int64_t n_past,
                   int64_t n_ctx) {
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens == 0) return make_error("eval: empty batch");
  for (const int32_t id : tokens) {
    if (id < 0 || id >= n_vocab)
      return make_error("token id {} is out of range [0, {})", id, n_vocab);
  }
  if (n_past + n_tokens > n_ctx) {
    return make_error("context full: {} tokens fit in the context ({} used, {} more requested)",
                      n_ctx, n_past, n_tokens);
  }
  return Status::Ok();
}

std::string_view kv_type_name(KvType t) { return t == KvType::F32 ? "f32" : "f16"; }

}  // namespace spw
