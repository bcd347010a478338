// A client of OpenAI-compatible servers (our `spillway-cli serve`, llama.cpp's server, vLLM):
// what a job with `--endpoint URL` runs on instead of the local engine.
//
// One call = one chat (or text) completion, streamed (server-sent events, pieces passed to
// RunCallbacks::piece as they arrive) or whole, with the same result type as the local engine
// (app/runtime/engine.h's CompletionResult). Failures are classified for the job runner's
// retry policy: transient (connection refused or reset, timeouts, HTTP 408, 429, 5xx except
// 501) or permanent (other 4xx, a response that is not OpenAI's format, a bad URL). Transient
// failures are retried here up to `max_attempts` with exponential backoff (Retry-After
// honoured) as long as no text has been delivered yet; what is left is reported, with the URL
// in the message.
//
// The API key is passed in by the caller (api_key_from_env()) and sent as a Bearer token; it is
// never stored or logged. create() sets SIGPIPE to ignored when it has its default action (the
// HTTP library's writes would otherwise end the process when a server hangs up). Thread safety: a
// client is immutable; each call opens its own connection, so calls may run on several threads at
// once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "engine/chat/chat_template.h"
#include "engine/common/expected.h"

namespace spw::app::remote {

struct RemoteOptions {
  /// "http[s]://host[:port][/prefix]"; without a prefix the API is under "/v1" (so
  /// "http://127.0.0.1:8080" and "http://127.0.0.1:8080/v1" are the same endpoint).
  std::string base_url;
  std::string api_key;  // empty: no Authorization header
  std::string model;    // the request's "model" field; empty: "default" (our server ignores it)
  double connect_timeout_s = 10;
  double read_timeout_s = 600;    // the longest wait for the next bytes (a long prefill)
  int max_attempts = 3;           // tries of a transient failure; 1: no retry
  double backoff_s = 1.0;         // the first wait between tries, doubled each time (max 30 s)
  double max_retry_after_s = 60;  // a longer Retry-After is cut to this
  bool stream = true;             // server-sent events (pieces as they come; cancellable mid-way)
  /// Send top_k, min_p and repeat_penalty (llama.cpp's and vLLM's extensions; OpenAI's own API
  /// refuses unknown fields, so turn this off there).
  bool sampler_extensions = true;
};

/// SPILLWAY_API_KEY from the environment; empty when unset.
std::string api_key_from_env();

struct RemoteError {
  std::string message;        // names the URL: "POST http://h:8080/v1/chat/completions: ..."
  bool transient = false;     // a later retry may succeed (the runner's backoff applies)
  int http_status = 0;        // 0: no HTTP response (connection failure, bad URL, ...)
  double retry_after_s = -1;  // the server's Retry-After; < 0: none
};

/// The outcome of a call: `value` on success (finish_reason "cancelled" when
/// RunCallbacks::cancelled stopped it, with the text so far), else `error`.
struct RemoteResult {
  std::optional<CompletionResult> value;
  RemoteError error;
  int attempts = 0;  // HTTP requests made (1 + retries)
  bool ok() const { return value.has_value(); }
  /// value, or Error{error.message}.
  Expected<CompletionResult> to_expected() const;
};

class OpenAIClient {
 public:
  /// Checks the URL. Errors: not http:// or https://, no host, a bad port.
  static Expected<OpenAIClient> create(RemoteOptions options);

  /// POST {prefix}/chat/completions with the messages and the completion's settings
  /// (max_tokens when >= 0, temperature (0 when greedy), top_p, stop, seed unless random).
  /// usage comes from the server (streams ask for stream_options.include_usage; a server that
  /// sends no usage leaves prompt_tokens 0 and counts one token per streamed chunk).
  /// prefill_s: the time to the first piece; decode_s: the rest.
  RemoteResult chat(const std::vector<ChatMessage>& messages, const Completion& c,
                    const RunCallbacks& cb = {}) const;
  /// POST {prefix}/completions with a text prompt; as chat().
  RemoteResult complete(const std::string& prompt, const Completion& c,
                        const RunCallbacks& cb = {}) const;
  /// GET {prefix}/models: the ids listed.
  Expected<std::vector<std::string>> models() const;

  /// "http://host:port" and "/v1" as parsed.
  const std::string& origin() const { return origin_; }
  const std::string& prefix() const { return prefix_; }
  const RemoteOptions& options() const { return opt_; }

 private:
  OpenAIClient() = default;
  RemoteResult run(bool chat, const std::string& body, const RunCallbacks& cb) const;
  RemoteOptions opt_;
  std::string origin_, prefix_;
};

}  // namespace spw::app::remote
