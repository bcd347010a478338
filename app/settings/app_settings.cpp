// The user's settings as one JSON row of the library's settings table (see app_settings.h).
#include "app/settings/app_settings.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/common/size.h"

namespace spw::app {
namespace {

constexpr std::array<std::string_view, 3> kThemes = {"system", "light", "dark"};

bool is_theme(const std::string& t) {
  return std::find(kThemes.begin(), kThemes.end(), t) != kThemes.end();
}

std::string trim_lower(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

Status check_folder(const std::string& dir, const char* what) {
  if (!dir.empty() && dir.front() != '/')
    return make_error("{}: '{}' is not an absolute path", what, dir);
  return Status::Ok();
}

}  // namespace

bool operator==(const AppSettings& a, const AppSettings& b) {
  return a.engine == b.engine && a.data_dir == b.data_dir && a.cache_dir == b.cache_dir &&
         a.theme == b.theme && a.snapshot_budget == b.snapshot_budget;
}

Status validate(const AppSettings& s) {
  if (auto st = validate(s.engine); !st) return st;
  if (!is_theme(s.theme))
    return make_error("theme: '{}' is not one of system, light, dark", s.theme);
  if (auto st = check_folder(s.data_dir, "data folder"); !st) return st;
  if (auto st = check_folder(s.cache_dir, "cache folder"); !st) return st;
  if (s.snapshot_budget < 0)
    return make_error("snapshot budget: {} must not be negative", s.snapshot_budget);
  return Status::Ok();
}

std::string app_settings_to_json(const AppSettings& s) {
  nlohmann::json j;
  j["engine"] = nlohmann::json::parse(engine_settings_to_json(s.engine));
  j["data_dir"] = s.data_dir;
  j["cache_dir"] = s.cache_dir;
  j["theme"] = s.theme;
  j["snapshot_budget"] = s.snapshot_budget;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Expected<AppSettings> app_settings_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"settings: not valid JSON"};
  if (!j.is_object()) return Error{"settings: not a JSON object"};
  AppSettings s;
  if (j.contains("engine")) {
    auto e = engine_settings_from_json(j["engine"].dump());
    if (!e) return e.error();
    s.engine = std::move(*e);
  }
  for (auto [key, out] : {std::pair<const char*, std::string*>{"data_dir", &s.data_dir},
                          {"cache_dir", &s.cache_dir},
                          {"theme", &s.theme}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return make_error("settings: '{}' must be a string", key);
    *out = j[key].get<std::string>();
  }
  if (j.contains("snapshot_budget")) {
    if (!j["snapshot_budget"].is_number_integer())
      return Error{"settings: 'snapshot_budget' must be an integer (bytes)"};
    s.snapshot_budget = j["snapshot_budget"].get<int64_t>();
  }
  return s;
}

Expected<AppSettings> load_app_settings(Library& lib) {
  auto row = lib.setting(kAppSettingsKey);
  if (!row) return row.error();
  if (!row->has_value()) {
    AppSettings defaults;  // nothing stored yet
    return defaults;
  }
  auto s = app_settings_from_json(**row);
  if (!s) return make_error("stored settings ('{}'): {}", kAppSettingsKey, s.error().message);
  return s;
}

Status save_app_settings(Library& lib, const AppSettings& s) {
  return lib.set_setting(kAppSettingsKey, app_settings_to_json(s));
}

Expected<int64_t> parse_budget(std::string_view text, int64_t empty_value) {
  const std::string t = trim_lower(text);
  if (t.empty() || t == "none" || t == "nolimit" || (t == "0" && empty_value == 0))
    return empty_value;
  return parse_size(text);
}

std::string format_budget(int64_t bytes, std::string_view empty_text, bool zero_is_empty) {
  if (bytes < 0 || (bytes == 0 && zero_is_empty)) return std::string(empty_text);
  constexpr std::array<std::pair<int64_t, const char*>, 4> kUnits = {{{int64_t{1} << 40, "TiB"},
                                                                      {int64_t{1} << 30, "GiB"},
                                                                      {int64_t{1} << 20, "MiB"},
                                                                      {int64_t{1} << 10, "KiB"}}};
  for (const auto& [unit, name] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + " " + name;
  }
  return std::to_string(bytes);
}

}  // namespace spw::app
