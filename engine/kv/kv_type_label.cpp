// kv_type_label (planner.h) on its own, so that the snapshot reader links without the planner.
#include <string>

#include "engine/gguf/ggml_types.h"
#include "engine/kv/planner.h"

namespace spw::kv {

std::string kv_type_label(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return "f32";
    case GgmlType::F16:
      return "f16";
    case GgmlType::Q8_0:
      return "q8_0";
    default:
      return type_name(static_cast<uint32_t>(t));
  }
}

}  // namespace spw::kv
