#include "app/serve/openai_json.h"

#include <random>

#include <nlohmann/json.hpp>

namespace spw::app::serve {

namespace {

using nlohmann::json;

json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// A field's JSON type in OpenAI's words, for "must be" messages.
const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a float";
    default:
      return "an integer";
  }
}

struct Parser {
  ApiError* err;

  bool fail(const std::string& param, const std::string& message) {
    if (err) *err = ApiError{400, message, "invalid_request_error", param, ""};
    return false;
  }
  bool wrong_type(const std::string& param, const json& v, const char* want) {
    return fail(param, "'" + param + "' must be " + want + ", not " + type_name(v));
  }

  // A present, non-null field; nullptr otherwise.
  static const json* field(const json& obj, const char* key) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool number(const json& obj, const char* key, double lo, double hi, float& out) {
    const json* v = field(obj, key);
    if (!v) return true;
    if (!v->is_number()) return wrong_type(key, *v, "a number");
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) {
      return fail(key, "'" + std::string(key) + "' must be between " + json(lo).dump() + " and " +
                           json(hi).dump() + ", not " + v->dump());
    }
    out = static_cast<float>(x);
    return true;
  }

  bool integer(const json& obj, const char* key, int64_t lo, int64_t hi,
               std::optional<int64_t>& out) {
    const json* v = field(obj, key);
    if (!v) return true;
    if (!v->is_number_integer()) return wrong_type(key, *v, "an integer");
    const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v->get<int64_t>();
    if (x < lo || x > hi) {
      return fail(key, "'" + std::string(key) + "' must be between " + std::to_string(lo) +
                           " and " + std::to_string(hi) + ", not " + v->dump());
    }
    out = x;
    return true;
  }

  bool boolean(const json& obj, const char* key, bool& out) {
    const json* v = field(obj, key);
    if (!v) return true;
    if (!v->is_boolean()) return wrong_type(key, *v, "a boolean");
    out = v->get<bool>();
    return true;
  }

  // "content": a string, null, or an array of parts of which only {"type":"text"} is read.
  bool content(const json& v, const std::string& param, std::string& out) {
    if (v.is_null()) return true;
    if (v.is_string()) {
      out = v.get<std::string>();
      return true;
    }
    if (!v.is_array()) return wrong_type(param, v, "a string or an array of content parts");
    for (size_t i = 0; i < v.size(); ++i) {
      const json& part = v[i];
      const std::string p = param + "[" + std::to_string(i) + "]";
      if (!part.is_object()) return wrong_type(p, part, "an object");
      const json* type = field(part, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "text") {
        return fail(p + ".type",
                    "only text content parts are supported ('" + p + ".type' must be \"text\")");
      }
      const json* text = field(part, "text");
      if (!text || !text->is_string())
        return fail(p + ".text", "'" + p + ".text' must be a string");
      if (!out.empty()) out += "\n";
      out += text->get<std::string>();
    }
    return true;
  }

  bool messages(const json& obj, std::vector<ChatMessage>& out) {
    const auto it = obj.find("messages");
    if (it == obj.end()) return fail("messages", "'messages' is required");
    if (!it->is_array()) return wrong_type("messages", *it, "an array");
    if (it->empty()) return fail("messages", "'messages' must hold at least one message");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return wrong_type(p, m, "an object");
      const json* role = field(m, "role");
      if (!role) return fail(p + ".role", "'" + p + ".role' is required");
      if (!role->is_string()) return wrong_type(p + ".role", *role, "a string");
      const std::string r = role->get<std::string>();
      ChatMessage msg;
      if (r == "system" || r == "developer") {
        msg.role = ChatRole::System;
      } else if (r == "user") {
        msg.role = ChatRole::User;
      } else if (r == "assistant") {
        msg.role = ChatRole::Assistant;
      } else {
        return fail(p + ".role",
                    "unsupported role '" + r + "' (accepted: system, developer, user, assistant)");
      }
      const auto c = m.find("content");
      if (c == m.end() && msg.role != ChatRole::Assistant) {
        return fail(p + ".content", "'" + p + ".content' is required");
      }
      // Only an assistant's turn (one that called tools) may have no text, as the API defines.
      if (c != m.end() && c->is_null() && msg.role != ChatRole::Assistant) {
        return wrong_type(p + ".content", *c, "a string or an array of content parts");
      }
      if (c != m.end() && !content(*c, p + ".content", msg.content)) return false;
      out.push_back(std::move(msg));
    }
    return true;
  }

  bool prompt(const json& obj, std::string& out) {
    const auto it = obj.find("prompt");
    if (it == obj.end() || it->is_null()) return fail("prompt", "'prompt' is required");
    if (it->is_string()) {
      out = it->get<std::string>();
      return true;
    }
    if (it->is_array()) {
      if (it->size() == 1 && (*it)[0].is_string()) {
        out = (*it)[0].get<std::string>();
        return true;
      }
      if (!it->empty() && (*it)[0].is_number_integer()) {
        return fail("prompt", "prompts of token ids are not supported; send the text");
      }
      return fail("prompt", "'prompt' must be a string or an array of exactly one string");
    }
    return wrong_type("prompt", *it, "a string");
  }

  bool stop(const json& obj, std::vector<std::string>& out) {
    const json* v = field(obj, "stop");
    if (!v) return true;
    if (v->is_string()) {
      if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
      return true;
    }
    if (!v->is_array()) return wrong_type("stop", *v, "a string or an array of strings");
    if (v->size() > 16) return fail("stop", "'stop' holds at most 16 strings");
    for (const json& s : *v) {
      if (!s.is_string()) return fail("stop", "'stop' must be a string or an array of strings");
      if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
    }
    return true;
  }
};

}  // namespace

std::string error_json(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", null_or(e.param)},
              {"code", null_or(e.code)}}}};
  return j.dump();
}

std::optional<CompletionRequest> parse_completion_request(const std::string& body, bool chat,
                                                          ApiError* error) {
  Parser p{error};
  // Nesting deeper than any request needs is refused while parsing (the parse stops there).
  struct TooDeep {};
  const json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  json j;
  try {
    j = json::parse(body, depth_guard);
  } catch (const TooDeep&) {
    p.fail("",
           "the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return std::nullopt;
  } catch (const json::parse_error& e) {
    p.fail("", "the request body is not valid JSON (at byte " + std::to_string(e.byte) + ")");
    return std::nullopt;
  } catch (const json::exception&) {
    // out_of_range 406: a number past the range of a double ("1e999").
    p.fail("", "the request body is not valid JSON (a number out of range)");
    return std::nullopt;
  }
  if (!j.is_object()) {
    p.fail("", std::string("the request body must be a JSON object, not ") + type_name(j));
    return std::nullopt;
  }
  CompletionRequest r;
  r.chat = chat;
  // OpenAI's defaults; top_k and min_p keep the engine's (llama.cpp's server does the same).
  r.completion.max_tokens = -1;
  r.completion.sampling.temp = 1.0f;
  r.completion.sampling.top_p = 1.0f;

  if (const json* m = Parser::field(j, "model")) {
    if (!m->is_string()) {
      p.wrong_type("model", *m, "a string");
      return std::nullopt;
    }
    r.model = m->get<std::string>();
  }
  if (chat ? !p.messages(j, r.messages) : !p.prompt(j, r.prompt)) return std::nullopt;

  std::optional<int64_t> max_tokens, max_completion_tokens, n, seed, top_k;
  float top_p = r.completion.sampling.top_p;
  SamplerParams& s = r.completion.sampling;
  if (!p.integer(j, "max_tokens", 0, INT32_MAX, max_tokens) ||
      !p.integer(j, "max_completion_tokens", 0, INT32_MAX, max_completion_tokens) ||
      !p.integer(j, "n", INT64_MIN, INT64_MAX, n) ||
      !p.integer(j, "seed", INT64_MIN, INT64_MAX, seed) ||
      !p.integer(j, "top_k", 0, INT32_MAX, top_k) || !p.number(j, "temperature", 0, 2, s.temp) ||
      !p.number(j, "top_p", 0, 1, top_p) || !p.number(j, "min_p", 0, 1, s.min_p) ||
      !p.number(j, "repeat_penalty", 1e-6, 100, s.repeat_penalty) ||
      !p.stop(j, r.completion.stop) || !p.boolean(j, "stream", r.stream)) {
    return std::nullopt;
  }
  if (n && *n != 1) {
    p.fail("n", "'n' must be 1 (this server generates one choice per request), got " +
                    std::to_string(*n));
    return std::nullopt;
  }
  if (max_completion_tokens) {
    r.completion.max_tokens = static_cast<int32_t>(*max_completion_tokens);
  } else if (max_tokens) {
    r.completion.max_tokens = static_cast<int32_t>(*max_tokens);
  }
  if (top_p <= 0.0f) {
    s.temp = 0.0f;  // top_p 0 keeps only the most likely token: greedy
  } else {
    s.top_p = top_p;
  }
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  if (seed) {
    s.seed = static_cast<uint32_t>(static_cast<uint64_t>(*seed));
    if (s.seed == 0xFFFFFFFFu) s.seed = 0xFFFFFFFEu;  // 0xFFFFFFFF means "random" to the sampler
  }
  if (const json* so = Parser::field(j, "stream_options")) {
    if (!so->is_object()) {
      p.wrong_type("stream_options", *so, "an object");
      return std::nullopt;
    }
    if (!p.boolean(*so, "include_usage", r.include_usage)) {
      if (error) error->param = "stream_options.include_usage";
      return std::nullopt;
    }
  }
  return r;
}

std::string new_response_id(const std::string& prefix) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

namespace {

std::string wire_finish(const std::string& finish_reason) {
  return finish_reason == "cancelled" ? "stop" : finish_reason;
}

json usage_object(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::string completion_json(const ResponseMeta& meta, bool chat, const CompletionResult& r) {
  json j = head(meta, chat ? "chat.completion" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", wire_finish(r.finish_reason)}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  } else {
    choice["text"] = r.text;
  }
  choice["logprobs"] = nullptr;
  j["choices"] = json::array({choice});
  j["usage"] = usage_object(r.prompt_tokens, r.completion_tokens);
  // The generated text is bytes from the model: invalid UTF-8 is replaced, never an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string chunk_json(const ResponseMeta& meta, bool chat, const std::string& text,
                       bool role_delta, const std::string& finish_reason) {
  json j = head(meta, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  if (chat) {
    json delta = json::object();
    if (role_delta) delta["role"] = "assistant";
    if (!text.empty() || role_delta) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["finish_reason"] =
      finish_reason.empty() ? json(nullptr) : json(wire_finish(finish_reason));
  j["choices"] = json::array({choice});
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string usage_chunk_json(const ResponseMeta& meta, bool chat, int64_t prompt_tokens,
                             int64_t completion_tokens) {
  json j = head(meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_object(prompt_tokens, completion_tokens);
  return j.dump();
}

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

std::string model_json(const std::string& model_id, int64_t created) {
  json j = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "spillway"}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string models_json(const std::string& model_id, int64_t created) {
  json j = {{"object", "list"},
            {"data", json::array({json::parse(model_json(model_id, created))})}};
  return j.dump();
}

const char* role_name(ChatRole role) {
  switch (role) {
    case ChatRole::System:
      return "system";
    case ChatRole::Assistant:
      return "assistant";
    default:
      return "user";
  }
}

}  // namespace spw::app::serve
