#include "app/runtime/engine_settings.h"

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/session/device.h"
#include "engine/session/session.h"

namespace spw::app {

namespace {

Status check_attention(const std::string& text) {
  KvPaging p;
  if (auto st = parse_kv_attention(text, p); !st)
    return make_error("--attention: {}", st.error().message);
  return Status::Ok();
}

}  // namespace

// ---- settings ---------------------------------------------------------------------------------

Status validate(const EngineSettings& s) {
  if (s.n_ctx < 0) return make_error("-c {} must not be negative", s.n_ctx);
  if (s.n_threads < 0) return make_error("-t {} must not be negative", s.n_threads);
  if (auto t = parse_kv_type(s.kv_type_k); !t)
    return make_error("--cache-type-k: {}", t.error().message);
  if (auto t = parse_kv_type(s.kv_type_v); !t)
    return make_error("--cache-type-v: {}", t.error().message);
  if (auto d = parse_device(s.device); !d) return make_error("--device: {}", d.error().message);
  if (s.n_ubatch < 1) return make_error("--ubatch {}: at least 1 token per step", s.n_ubatch);
  if (s.kv_block < 1)
    return make_error("--kv-block {}: a block holds at least 1 token", s.kv_block);
  if (s.kv_window < 1)
    return make_error("--kv-window {}: the window holds at least 1 token", s.kv_window);
  if (s.kv_sinks < 0) return make_error("--kv-sinks {} must not be negative", s.kv_sinks);
  if (s.disk_budget < 0) return make_error("--disk-budget {} must not be negative", s.disk_budget);
  if (s.disk_budget > 0 && s.spill_dir.empty())
    return Error{"--disk-budget needs a folder for the spill file: set the spill folder"};
  if (auto st = check_attention(s.attention); !st) return st;
  if (!s.template_name.empty()) {
    if (auto f = parse_chat_family(s.template_name); !f)
      return make_error("--template: {}", f.error().message);
  }
  return Status::Ok();
}

std::string engine_settings_to_json(const EngineSettings& s) {
  nlohmann::json j;
  j["model_path"] = s.model_path;
  j["n_ctx"] = s.n_ctx;
  j["n_threads"] = s.n_threads;
  j["kv_type_k"] = s.kv_type_k;
  j["kv_type_v"] = s.kv_type_v;
  j["device"] = s.device;
  j["n_ubatch"] = s.n_ubatch;
  j["kv_block"] = s.kv_block;
  j["kv_sinks"] = s.kv_sinks;
  j["kv_window"] = s.kv_window;
  j["host_budget"] = s.host_budget;
  j["disk_budget"] = s.disk_budget;
  j["spill_dir"] = s.spill_dir;
  j["attention"] = s.attention;
  j["template_name"] = s.template_name;
  j["use_snapshots"] = s.use_snapshots;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Expected<EngineSettings> engine_settings_from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"engine settings: not valid JSON"};
  if (!j.is_object()) return Error{"engine settings: not a JSON object"};
  EngineSettings s;
  Status bad = Status::Ok();
  const auto str = [&](const char* key, std::string& out) {
    if (!j.contains(key) || !bad) return;
    if (!j[key].is_string()) {
      bad = make_error("engine settings: '{}' must be a string", key);
      return;
    }
    out = j[key].get<std::string>();
  };
  const auto num = [&](const char* key, auto& out) {
    if (!j.contains(key) || !bad) return;
    if (!j[key].is_number_integer()) {
      bad = make_error("engine settings: '{}' must be an integer", key);
      return;
    }
    out = j[key].get<std::remove_reference_t<decltype(out)>>();
  };
  str("model_path", s.model_path);
  num("n_ctx", s.n_ctx);
  num("n_threads", s.n_threads);
  str("kv_type_k", s.kv_type_k);
  str("kv_type_v", s.kv_type_v);
  str("device", s.device);
  num("n_ubatch", s.n_ubatch);
  num("kv_block", s.kv_block);
  num("kv_sinks", s.kv_sinks);
  num("kv_window", s.kv_window);
  num("host_budget", s.host_budget);
  num("disk_budget", s.disk_budget);
  str("spill_dir", s.spill_dir);
  str("attention", s.attention);
  str("template_name", s.template_name);
  if (bad && j.contains("use_snapshots")) {
    if (!j["use_snapshots"].is_boolean())
      bad = Error{"engine settings: 'use_snapshots' must be true or false"};
    else
      s.use_snapshots = j["use_snapshots"].get<bool>();
  }
  if (!bad) return bad.error();
  return s;
}

}  // namespace spw::app
