// The user's settings: the engine settings (app/runtime/engine.h EngineSettings), the data and
// cache folders and the theme, stored as one JSON object in the library's settings table under
// kAppSettingsKey:
//   {"engine": {<engine_settings_to_json>}, "data_dir": "", "cache_dir": "", "theme": "system",
//    "snapshot_budget": 0}
// Missing keys keep their defaults and unknown keys are ignored, so older and newer Spillways
// read each other's settings. Budgets are bytes (host_budget < 0: no limit; disk_budget 0: no
// disk tier); sizes are shown and typed as the CLI's (K, M, G, T are powers of 1024).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "app/runtime/engine_settings.h"
#include "app/store/library.h"
#include "engine/common/expected.h"

namespace spw::app {

/// The settings table key that holds the JSON object.
inline constexpr const char* kAppSettingsKey = "app_settings";

/// The user's settings with their defaults.
struct AppSettings {
  EngineSettings engine;
  std::string data_dir;          // empty: the default data folder (app/paths.h)
  std::string cache_dir;         // empty: the default cache folder
  std::string theme = "system";  // system | light | dark
  /// Bytes of saved document KV kept in the cache folder's snapshots (least recently used files
  /// removed first); 0: the default, 4 GiB at most a tenth of the free space
  /// (app/runtime/snapshot_budget.h).
  int64_t snapshot_budget = 0;
};

/// Field-by-field equality (tests, "did anything change").
bool operator==(const AppSettings& a, const AppSettings& b);

/// validate(engine), then the theme ("theme: 'x' is not one of system, light, dark") and the
/// folders (relative paths are refused: "data folder: 'x' is not an absolute path"), then the
/// snapshot budget ("snapshot budget: -1 must not be negative").
Status validate(const AppSettings& s);

/// The JSON object text described above (every field written).
std::string app_settings_to_json(const AppSettings& s);
/// Parses it. Errors: not JSON, not an object, a field of the wrong type (named, as
/// "settings: 'theme' must be a string" or the engine's message for an "engine" field).
Expected<AppSettings> app_settings_from_json(const std::string& json);

/// The stored settings, or the defaults when none are stored. Errors: the database's, or the
/// stored text does not parse (the message names the key; the row is left as it is).
Expected<AppSettings> load_app_settings(Library& lib);
/// Stores the settings (one row, replaced). Does not validate: callers validate first.
Status save_app_settings(Library& lib, const AppSettings& s);

/// A budget as typed: "" or "none"/"no limit" -> `empty_value`; else a size as parse_size reads
/// it ("8G", "512 MiB", "1.5GiB", "4096"). Errors name the text.
Expected<int64_t> parse_budget(std::string_view text, int64_t empty_value);
/// A budget for display: `empty_text` when bytes < 0 (host) or == 0 where `zero_is_empty`;
/// whole units where exact ("8 GiB", "512 MiB"), else one decimal.
std::string format_budget(int64_t bytes, std::string_view empty_text, bool zero_is_empty);

}  // namespace spw::app
