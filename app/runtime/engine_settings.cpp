#include "app/runtime/engine_settings.h"

#include <nlohmann/json.hpp>

#include "engine/backend/device.h"
#include "engine/chat/chat_template.h"
#include "engine/common/numa.h"
#include "engine/session/session.h"

namespace spw::app {

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
  if (auto st = kv::validate(s.kv); !st) return st;
  if (!s.template_name.empty()) {
    if (auto f = parse_chat_family(s.template_name); !f)
      return make_error("--template: {}", f.error().message);
  }
  return Status::Ok();
}

std::string kv_window_text(const EngineSettings& s) { return kv::kv_window_name(s.kv); }

Status set_kv_window(EngineSettings& s, const std::string& text) {
  return kv::parse_kv_window(text, s.kv);
}

std::string attention_text(const EngineSettings& s) { return kv::kv_attention_name(s.kv); }

Status set_attention(EngineSettings& s, const std::string& text) {
  if (auto st = kv::parse_kv_attention(text, s.kv); !st)
    return make_error("--attention: {}", st.error().message);
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
  j["kv_block"] = s.kv.block_size;
  j["kv_sinks"] = s.kv.n_sinks;
  if (s.kv.window_tokens) {
    j["kv_window"] = *s.kv.window_tokens;
  } else {
    j["kv_window"] = "auto";
  }
  j["host_budget"] = s.kv.host_budget;
  j["disk_budget"] = s.kv.disk_budget;
  j["spill_dir"] = s.kv.spill_dir;
  j["attention"] = kv::kv_attention_name(s.kv);
  j["template_name"] = s.template_name;
  j["use_snapshots"] = s.use_snapshots;
  // The host arena's page settings: written only where they differ from the default, so a file
  // written before they existed reads back and writes out byte for byte as it was.
  if (!s.kv.huge_pages) j["huge_pages"] = false;
  if (!(s.kv.numa == NumaSetting{})) j["numa_node"] = numa_setting_name(s.kv.numa);
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
  const auto flag = [&](const char* key, bool& out) {
    if (!j.contains(key) || !bad) return;
    if (!j[key].is_boolean()) {
      bad = make_error("engine settings: '{}' must be true or false", key);
      return;
    }
    out = j[key].get<bool>();
  };
  str("model_path", s.model_path);
  num("n_ctx", s.n_ctx);
  num("n_threads", s.n_threads);
  str("kv_type_k", s.kv_type_k);
  str("kv_type_v", s.kv_type_v);
  str("device", s.device);
  num("n_ubatch", s.n_ubatch);
  num("kv_block", s.kv.block_size);
  num("kv_sinks", s.kv.n_sinks);
  if (bad && j.contains("kv_window")) {  // a number of tokens, or "auto"
    const nlohmann::json& w = j["kv_window"];
    if (w.is_number_integer()) {
      s.kv.window_tokens = w.get<int64_t>();
    } else if (!(w.is_string() && w.get<std::string>() == "auto")) {
      bad = Error{"engine settings: 'kv_window' must be an integer or \"auto\""};
    }
  }
  num("host_budget", s.kv.host_budget);
  num("disk_budget", s.kv.disk_budget);
  str("spill_dir", s.kv.spill_dir);
  std::string attention = "exact";
  str("attention", attention);
  if (bad) {
    if (auto st = kv::parse_kv_attention(attention, s.kv); !st)
      bad = make_error("engine settings: 'attention': {}", st.error().message);
  }
  str("template_name", s.template_name);
  flag("use_snapshots", s.use_snapshots);
  flag("huge_pages", s.kv.huge_pages);
  if (bad && j.contains("numa_node")) {  // "auto" | "off" | a node number, as --numa-node
    const nlohmann::json& n = j["numa_node"];
    std::string text;
    if (n.is_string()) text = n.get<std::string>();
    if (n.is_number_integer()) text = std::to_string(n.get<int64_t>());
    auto numa = parse_numa_setting(text);
    if (text.empty() || !numa)
      bad = Error{"engine settings: 'numa_node' must be \"auto\", \"off\" or a node number"};
    else
      s.kv.numa = *numa;
  }
  if (!bad) return bad.error();
  return s;
}

}  // namespace spw::app
