#include "engine/session/session.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/kv/kv_cache.h"

namespace spw {

Expected<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::F32;
  if (s == "f16") return KvType::F16;
  if (s == "q8_0") return KvType::Q8_0;
  return make_error("unknown KV cache type '{}' (accepted: f32, f16, q8_0)", s);
}

Status check_logits_finite(std::span<const float> logits, std::string_view source,
                           std::string_view during) {
  if (std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }))
    return Status::Ok();
  return make_error(
      "{}{}the model produced non-finite logits (NaN or infinity){}; its weights or "
      "hyperparameters are broken",
      source, source.empty() ? "" : ": ", during);
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

void read_counters(const SessionCounters& c, SessionUsage& u) {
  const auto rd = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  const auto sec = [&](const std::atomic<int64_t>& a) { return static_cast<double>(rd(a)) * 1e-9; };
  u.prefill_tokens_computed = rd(c.prefill_tokens_computed);
  u.decode_tokens = rd(c.decode_tokens);
  u.prefill_s = sec(c.prefill_ns);
  u.decode_s = sec(c.decode_ns);
  u.window_attn_s = sec(c.window_attn_ns);
  u.cold_attn_s = sec(c.cold_attn_ns);
  u.merge_s = sec(c.merge_ns);
  u.query_wait_s = sec(c.query_wait_ns);
  u.query_d2h_bytes = rd(c.query_d2h_bytes);
  u.partial_h2d_bytes = rd(c.partial_h2d_bytes);
  u.prefill_stage_h2d_bytes = rd(c.prefill_stage_h2d_bytes);
  u.decode_cold_to_device_bytes = rd(c.decode_cold_to_device_bytes);
}

int64_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
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
