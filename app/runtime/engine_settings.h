// The engine settings a user sets. The KV cache's are the engine's own settings struct
// (kv::KvSettings, engine/kv/tier_policy.h: plain values, no engine machinery), carried as they
// are to the session; the rest are text in the CLI's spellings. ui/ reads and writes them through
// this header (app/settings/app_settings.h), never through engine/ directly; the helpers below
// give it the KV settings' text forms. The engine runtime (app/runtime/engine.h) reads them.
#pragma once

#include <cstdint>
#include <string>

#include "engine/common/expected.h"
#include "engine/kv/tier_policy.h"

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
  /// Block, sinks, window (auto by default), host and disk budgets (bytes), spill folder
  /// (empty: the cache folder, filled in by the app), attention mode.
  kv::KvSettings kv;
  std::string template_name;  // empty: the GGUF's chat template
  bool use_snapshots = true;  // save/restore document KV (CPU session)

  bool operator==(const EngineSettings&) const = default;
};

/// The KV window and attention mode as text ("auto" | "4096"; "exact" | "streaming" |
/// "topk:8") and back; errors name the CLI option ("--kv-window: ...").
std::string kv_window_text(const EngineSettings& s);
Status set_kv_window(EngineSettings& s, const std::string& text);
std::string attention_text(const EngineSettings& s);
Status set_attention(EngineSettings& s, const std::string& text);

/// Checks every field (the messages name the field as the CLI option: "--cache-type-k: ...").
Status validate(const EngineSettings& s);
/// JSON object text with every field (the KV settings flat, as kv_block, kv_sinks, kv_window (a
/// number, or "auto"), host_budget, disk_budget, spill_dir, attention (text); huge_pages (false)
/// and numa_node ("off" or a node number) only where not the default); from_json ignores
/// unknown keys and keeps defaults for missing ones, so files written before auto existed read
/// back as they were. Errors: not JSON, a field of the wrong type (named).
std::string engine_settings_to_json(const EngineSettings& s);
Expected<EngineSettings> engine_settings_from_json(const std::string& json);

}  // namespace spw::app
