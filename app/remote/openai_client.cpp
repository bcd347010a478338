#include "app/remote/openai_client.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/serve/http.h"
#include "app/serve/openai_json.h"

namespace spw::app::remote {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxErrorBody = 1 << 20;  // bytes of an error response kept for its message

void set_timeout(double s, const std::function<void(time_t, time_t)>& set) {
  s = std::max(s, 0.001);
  const auto sec = static_cast<time_t>(s);
  set(sec, static_cast<time_t>((s - double(sec)) * 1e6));
}

// The fields every completion request shares.
void put_settings(json& j, const RemoteOptions& o, const Completion& c) {
  j["model"] = o.model.empty() ? "default" : o.model;
  if (c.max_tokens >= 0) j["max_tokens"] = c.max_tokens;
  const SamplerParams& s = c.sampling;
  j["temperature"] = s.temp <= 0.0f ? 0.0 : double(s.temp);
  if (s.top_p < 1.0f) j["top_p"] = double(s.top_p);
  if (!c.stop.empty()) j["stop"] = c.stop;
  if (s.seed != 0xFFFFFFFFu) j["seed"] = s.seed;
  if (o.sampler_extensions) {
    j["top_k"] = s.top_k;
    j["min_p"] = double(s.min_p);
    if (s.repeat_penalty != 1.0f) {
      j["repeat_penalty"] = double(s.repeat_penalty);
      j["repeat_last_n"] = s.repeat_last_n;
    }
  }
  j["stream"] = o.stream;
  if (o.stream) j["stream_options"] = {{"include_usage", true}};
}

std::string transport_message(httplib::Error e, const RemoteOptions& o, bool* transient) {
  *transient = true;
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect (is the server running?)";
    case httplib::Error::ConnectionTimeout:
      return fmt::format("no connection within {} s", o.connect_timeout_s);
    case httplib::Error::Read:
      return fmt::format("the connection broke or no data came for {} s while reading the response",
                         o.read_timeout_s);
    case httplib::Error::Write:
      return "the connection broke while sending the request";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
      *transient = false;
      return "TLS failed: " + httplib::to_string(e);
    default:
      *transient = false;
      return httplib::to_string(e);
  }
}

// cpp-httplib 0.11 sends without MSG_NOSIGNAL: a server that closes the connection while a
// request is being written would raise SIGPIPE and end the process. Ignored (unless someone
// installed a handler), the write fails with EPIPE and the attempt is a transient failure.
void ignore_sigpipe() {
  struct sigaction old = {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

bool transient_status(int status) {
  return status == 408 || status == 429 || (status >= 500 && status != 501);
}

// The message of an OpenAI error body, else the body's start.
std::string error_body_message(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    if (e.is_string()) return e.get<std::string>();
  }
  std::string s = body.substr(0, 200);
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// The state of one attempt: the text so far (kept across a cancelled stream), usage, the end.
struct Attempt {
  std::string text;
  int64_t chunks = 0;  // content chunks received
  std::optional<int64_t> prompt_tokens, completion_tokens;
  std::string finish_reason;
  bool done = false;           // [DONE] seen (stream) or the whole body parsed
  std::string protocol_error;  // the response is not OpenAI's format
  std::string server_error;    // an error event inside a stream
  Clock::time_point first_piece{};
  bool any_piece = false;
};

// Reads one completion object (whole or a chunk) into `a`; `piece` gets new text.
void read_choice_object(const json& j, bool chat, bool chunk, Attempt& a,
                        const std::function<void(const std::string&)>& piece) {
  if (j.contains("error") && !j["error"].is_null()) {
    a.server_error = error_body_message(j.dump());
    return;
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (u->contains("prompt_tokens") && (*u)["prompt_tokens"].is_number_integer()) {
      a.prompt_tokens = (*u)["prompt_tokens"].get<int64_t>();
    }
    if (u->contains("completion_tokens") && (*u)["completion_tokens"].is_number_integer()) {
      a.completion_tokens = (*u)["completion_tokens"].get<int64_t>();
    }
  }
  const auto ch = j.find("choices");
  if (ch == j.end() || !ch->is_array()) {
    if (!chunk) a.protocol_error = "the response has no 'choices' array";
    return;
  }
  if (ch->empty()) return;  // the usage chunk
  const json& c0 = (*ch)[0];
  if (!c0.is_object()) {
    a.protocol_error = "choices[0] is not an object";
    return;
  }
  const json* text = nullptr;
  if (chat) {
    const char* key = chunk ? "delta" : "message";
    if (const auto m = c0.find(key); m != c0.end() && m->is_object()) {
      if (const auto c = m->find("content"); c != m->end() && c->is_string()) text = &*c;
    } else if (!chunk) {
      a.protocol_error = "choices[0] has no 'message' object";
      return;
    }
  } else if (const auto t = c0.find("text"); t != c0.end() && t->is_string()) {
    text = &*t;
  }
  if (text && !text->get_ref<const std::string&>().empty()) {
    const std::string& s = text->get_ref<const std::string&>();
    if (!a.any_piece) {
      a.any_piece = true;
      a.first_piece = Clock::now();
    }
    a.text += s;
    ++a.chunks;
    if (piece) piece(s);
  }
  if (const auto f = c0.find("finish_reason"); f != c0.end() && f->is_string()) {
    a.finish_reason = f->get<std::string>();
  }
}

// Server-sent events: "data: ..." lines, events ended by a blank line.
class SseReader {
 public:
  // Feeds bytes; calls on_data(payload) per event. Returns false to stop reading.
  template <typename F>
  bool feed(const char* data, size_t n, F&& on_data) {
    for (size_t i = 0; i < n; ++i) {
      if (data[i] != '\r') buf_ += data[i];
    }
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      std::string event = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      std::string payload;
      bool has_data = false;
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        const std::string line = event.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.rfind("data:", 0) != 0) continue;  // comments, event:, id:, retry:
        std::string v = line.substr(5);
        if (!v.empty() && v[0] == ' ') v.erase(0, 1);
        if (has_data) payload += '\n';
        payload += v;
        has_data = true;
      }
      if (has_data && !on_data(payload)) return false;
    }
    return true;
  }

 private:
  std::string buf_;
};

}  // namespace

std::string api_key_from_env() {
  const char* k = std::getenv("SPILLWAY_API_KEY");
  return k ? std::string(k) : std::string();
}

Expected<CompletionResult> RemoteResult::to_expected() const {
  if (value) return *value;
  return Error{error.message};
}

Expected<OpenAIClient> OpenAIClient::create(RemoteOptions options) {
  static const std::regex re(
      R"(^(https?)://(\[[0-9A-Fa-f:.]+\]|[^/:\s?#\[\]]+)(?::(\d{1,5}))?(/[^?#\s]*)?$)",
      std::regex::icase);
  std::smatch m;
  if (!std::regex_match(options.base_url, m, re)) {
    return make_error(
        "endpoint '{}' is not a URL of the form http://HOST[:PORT][/v1] (or https://)",
        options.base_url);
  }
  if (m[3].matched) {
    const int port = std::stoi(m[3].str());
    if (port < 1 || port > 65535) {
      return make_error("endpoint '{}': port {} is not in 1-65535", options.base_url, port);
    }
  }
  if (options.max_attempts < 1) options.max_attempts = 1;
  ignore_sigpipe();
  OpenAIClient c;
  std::string scheme = m[1].str();
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), ::tolower);
  c.origin_ = scheme + "://" + m[2].str() + (m[3].matched ? ":" + m[3].str() : "");
  std::string prefix = m[4].matched ? m[4].str() : "";
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  c.prefix_ = prefix.empty() ? "/v1" : prefix;
  c.opt_ = std::move(options);
  return c;
}

RemoteResult OpenAIClient::chat(const std::vector<ChatMessage>& messages, const Completion& c,
                                const RunCallbacks& cb) const {
  json j;
  json msgs = json::array();
  for (const ChatMessage& m : messages) {
    msgs.push_back({{"role", serve::role_name(m.role)}, {"content", m.content}});
  }
  j["messages"] = std::move(msgs);
  put_settings(j, opt_, c);
  return run(true, j.dump(-1, ' ', false, json::error_handler_t::replace), cb);
}

RemoteResult OpenAIClient::complete(const std::string& prompt, const Completion& c,
                                    const RunCallbacks& cb) const {
  json j;
  j["prompt"] = prompt;
  put_settings(j, opt_, c);
  return run(false, j.dump(-1, ' ', false, json::error_handler_t::replace), cb);
}

RemoteResult OpenAIClient::run(bool chat, const std::string& body, const RunCallbacks& cb) const {
  const std::string path = prefix_ + (chat ? "/chat/completions" : "/completions");
  const std::string where = "POST " + origin_ + path;
  const auto is_cancelled = [&] { return cb.cancelled && cb.cancelled(); };
  const auto cancelled_result = [](Attempt* a, Clock::time_point t0) {
    CompletionResult r;
    r.finish_reason = "cancelled";
    if (a) {
      r.text = a->text;
      r.completion_tokens = a->completion_tokens.value_or(a->chunks);
      r.prompt_tokens = a->prompt_tokens.value_or(0);
    }
    r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  };

  RemoteResult out;
  for (int attempt = 1;; ++attempt) {
    out.attempts = attempt;
    const Clock::time_point t0 = Clock::now();
    if (is_cancelled()) {
      out.value = cancelled_result(nullptr, t0);
      return out;
    }
    httplib::Client cli(origin_);
    set_timeout(opt_.connect_timeout_s,
                [&](time_t s, time_t us) { cli.set_connection_timeout(s, us); });
    set_timeout(opt_.read_timeout_s, [&](time_t s, time_t us) { cli.set_read_timeout(s, us); });
    set_timeout(opt_.read_timeout_s, [&](time_t s, time_t us) { cli.set_write_timeout(s, us); });
    cli.set_keep_alive(false);

    Attempt a;
    int status = 0;
    std::string raw;  // the whole body (not streamed) or an error body
    bool stopped_by_us = false;
    SseReader sse;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", opt_.stream ? "text/event-stream" : "application/json");
    if (!opt_.api_key.empty()) req.set_header("Authorization", "Bearer " + opt_.api_key);
    std::string retry_after;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      retry_after = r.get_header_value("Retry-After");
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (is_cancelled()) {
        stopped_by_us = true;
        return false;
      }
      if (status != 200 || !opt_.stream) {
        raw.append(data, n);
        return status == 200 || raw.size() < kMaxErrorBody;
      }
      return sse.feed(data, n, [&](const std::string& payload) {
        if (payload == "[DONE]") {
          a.done = true;
          return true;
        }
        const json j = json::parse(payload, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          a.protocol_error = "a streamed event is not a JSON object";
          return false;
        }
        read_choice_object(j, chat, true, a, cb.piece);
        if (!a.protocol_error.empty() || !a.server_error.empty()) return false;
        if (is_cancelled()) {
          stopped_by_us = true;
          return false;
        }
        return true;
      });
    };
    const httplib::Result res = cli.send(req);

    // What this attempt ended as.
    RemoteError err;
    if (stopped_by_us) {
      out.value = cancelled_result(&a, t0);
      return out;
    }
    if (!res && status == 0) {
      err.message = where + ": " + transport_message(res.error(), opt_, &err.transient);
    } else if (status != 200) {
      err.http_status = status;
      err.transient = transient_status(status);
      err.message = fmt::format("{}: HTTP {}: {}", where, status, error_body_message(raw));
      if (!retry_after.empty()) {
        char* end = nullptr;
        const double s = std::strtod(retry_after.c_str(), &end);
        if (end != retry_after.c_str() && s >= 0) err.retry_after_s = s;
      }
    } else if (!a.server_error.empty()) {
      err.http_status = status;
      err.message = where + ": the server reported an error mid-stream: " + a.server_error;
    } else if (!a.protocol_error.empty()) {
      err.http_status = status;
      err.message = where + ": not an OpenAI-compatible response: " + a.protocol_error;
    } else if (!res) {
      err.message = where + ": " + transport_message(res.error(), opt_, &err.transient);
    } else if (!opt_.stream) {
      const json j = json::parse(raw, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        err.message = where + ": not an OpenAI-compatible response: the body is not a JSON object";
      } else {
        read_choice_object(j, chat, false, a, {});
        if (!a.protocol_error.empty()) {
          err.message = where + ": not an OpenAI-compatible response: " + a.protocol_error;
        } else if (!a.server_error.empty()) {
          err.message = where + ": " + a.server_error;
        } else {
          if (cb.piece && !a.text.empty()) cb.piece(a.text);
          a.done = true;
        }
      }
      err.http_status = status;
    } else if (!a.done && a.finish_reason.empty()) {
      err.http_status = status;
      err.transient = true;
      err.message = where + ": the stream ended before its end ([DONE])";
    } else {
      a.done = true;
    }

    if (a.done && err.message.empty()) {
      CompletionResult r;
      r.text = std::move(a.text);
      r.prompt_tokens = a.prompt_tokens.value_or(0);
      r.completion_tokens = a.completion_tokens.value_or(a.chunks);
      r.finish_reason = a.finish_reason.empty() ? "stop" : a.finish_reason;
      const Clock::time_point t1 = Clock::now();
      const Clock::time_point tf = a.any_piece && opt_.stream ? a.first_piece : t1;
      r.prefill_s = std::chrono::duration<double>(tf - t0).count();
      r.decode_s = std::chrono::duration<double>(t1 - tf).count();
      out.value = std::move(r);
      return out;
    }

    // Retry a transient failure while nothing has reached the caller.
    const bool delivered = a.any_piece && opt_.stream;
    if (!err.transient || delivered || attempt >= opt_.max_attempts) {
      if (delivered && err.transient) err.message += " (after part of the answer had arrived)";
      if (attempt > 1) err.message += fmt::format(" ({} attempts)", attempt);
      out.error = std::move(err);
      return out;
    }
    double wait = err.retry_after_s >= 0
                      ? std::min(err.retry_after_s, opt_.max_retry_after_s)
                      : std::min(opt_.backoff_s * std::pow(2.0, attempt - 1), 30.0);
    const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(wait));
    while (Clock::now() < until) {
      if (is_cancelled()) {
        out.value = cancelled_result(nullptr, Clock::now());
        return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

Expected<std::vector<std::string>> OpenAIClient::models() const {
  const std::string path = prefix_ + "/models";
  httplib::Client cli(origin_);
  set_timeout(opt_.connect_timeout_s,
              [&](time_t s, time_t us) { cli.set_connection_timeout(s, us); });
  set_timeout(std::min(opt_.read_timeout_s, 60.0),
              [&](time_t s, time_t us) { cli.set_read_timeout(s, us); });
  httplib::Headers h;
  if (!opt_.api_key.empty()) h.emplace("Authorization", "Bearer " + opt_.api_key);
  const auto res = cli.Get(path.c_str(), h);
  const std::string where = "GET " + origin_ + path;
  if (!res) {
    bool transient;
    return Error{where + ": " + transport_message(res.error(), opt_, &transient)};
  }
  if (res->status != 200) {
    return make_error("{}: HTTP {}: {}", where, res->status, error_body_message(res->body));
  }
  const json j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) {
    return Error{where + ": not an OpenAI-compatible model list (no 'data' array)"};
  }
  std::vector<std::string> ids;
  for (const json& m : j["data"]) {
    if (m.is_object() && m.contains("id") && m["id"].is_string())
      ids.push_back(m["id"].get<std::string>());
  }
  return ids;
}

}  // namespace spw::app::remote
