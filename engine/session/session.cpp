#include "engine/session/session.h"

#include "engine/kv/kv_cache.h"

namespace spw {

Expected<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::F32;
  if (s == "f16") return KvType::F16;
  if (s == "q8_0") return KvType::Q8_0;
  return make_error("unknown KV cache type '{}' (accepted: f32, f16, q8_0)", s);
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

void set_kv_usage(SessionUsage& u, const kv::KvStats& kv) {
  u.window_blocks = kv.window_blocks;
  u.host_blocks = kv.host_blocks;
  u.disk_blocks = kv.disk_blocks;
  u.window_bytes = kv.window_bytes;
  u.host_bytes = kv.host_bytes;
  u.disk_bytes = kv.disk_bytes;
  u.window_to_host_bytes = kv.window_to_host_bytes;
  u.window_to_disk_bytes = kv.window_to_disk_bytes;
  u.cold_to_window_bytes = kv.cold_to_window_bytes;
}

SessionUsage Session::usage() const {
  SessionUsage u;
  u.n_past = n_past();
  u.n_ctx = n_ctx();
  return u;
}

GgmlType kv_ggml_type(KvType t) {
  switch (t) {
    case KvType::F32:
      return GgmlType::F32;
    case KvType::Q8_0:
      return GgmlType::Q8_0;
    case KvType::F16:
      break;
  }
  return GgmlType::F16;
}

std::string_view kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32:
      return "f32";
    case KvType::F16:
      return "f16";
    case KvType::Q8_0:
      return "q8_0";
  }
  return "unknown";
}

Status check_kv_types(const SessionParams& params, int64_t head_dim, int64_t head_dim_v) {
  const auto check = [](KvType t, std::string_view what, int64_t hd) -> Status {
    if (t == KvType::Q8_0 && hd % 32 != 0) {
      return make_error("q8_0 KV cache needs {} % 32 == 0 (this model has {} {})", what, what, hd);
    }
    return Status::Ok();
  };
  if (auto st = check(params.kv_type_k, "head_dim", head_dim); !st) return st;
  return check(params.kv_type_v, "head_dim_v", head_dim_v);
}

}  // namespace spw
