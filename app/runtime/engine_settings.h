// The engine settings a user sets, as plain values (no engine types: ui/ includes this through
// app/settings/app_settings.h). The engine runtime (app/runtime/engine.h) reads them.
#pragma once

#include <cstdint>
#include <string>

#include "engine/common/expected.h"

namespace spw::app {

/// The engine settings a user sets (Settings dialog, CLI flags, a job's row). Text values take
/// the CLI's spellings ("f16", "auto", "exact", "topk:8").
struct EngineSettings {
  std::string model_path;
  int64_t n_ctx = 0;              // tokens; 0: the model's trained context
  int n_threads = 0;              // 0: every hardware thread
  std::string kv_type_k = "f16";  // f32 | f16 | q8_0
  std::string kv_type_v = "f16";
  std::string device = "auto";  // auto | cpu | cuda
  int64_t n_ubatch = 512;
  int64_t kv_block = 256, kv_sinks = 4, kv_window = 4096;  // tokens
  int64_t host_budget = -1;                                // bytes; < 0: no limit
  int64_t disk_budget = 0;                                 // bytes; 0: no disk tier
  std::string spill_dir;                                   // empty: the cache folder
  std::string attention = "exact";                         // exact | streaming | topk:K
  std::string template_name;                               // empty: the GGUF's chat template
  bool use_snapshots = true;                               // save/restore document KV (CPU session)
};

/// Checks every field (the messages name the field as the CLI option: "--cache-type-k: ...").
Status validate(const EngineSettings& s);
/// JSON object text with every field; from_json ignores unknown keys and keeps defaults for
/// missing ones. Errors: not JSON, a field of the wrong type (named).
std::string engine_settings_to_json(const EngineSettings& s);
Expected<EngineSettings> engine_settings_from_json(const std::string& json);

}  // namespace spw::app
