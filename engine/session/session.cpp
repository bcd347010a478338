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

std::string_view kv_type_name(KvType t) { return t == KvType::F32 ? "f32" : "f16"; }

}  // namespace spw
