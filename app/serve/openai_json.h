// The OpenAI wire format as the server speaks it (and the remote client reads it): request
// bodies of /v1/chat/completions and /v1/completions parsed into engine terms, and the response
// objects (whole and streamed chunks), the model list and the error object written back.
//
// Parsing follows what OpenAI clients send: unknown fields are ignored (SDKs add extras), the
// `model` field may name anything, `null` counts as absent. A malformed body or a field of the
// wrong type or range is an ApiError (HTTP 400, type "invalid_request_error", `param` naming the
// field). No HTTP here: app/serve/server.h carries these over the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "engine/chat/chat_template.h"

namespace spw::app::serve {

/// An error as OpenAI reports it: {"error":{"message","type","param","code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // | "authentication_error" | "server_error" | ...
  std::string param;                           // the offending field; empty: null
  std::string code;                            // e.g. "context_length_exceeded"; empty: null
};
/// The JSON object text of `e` (one line).
std::string error_json(const ApiError& e);

/// A completion request in engine terms. Defaults are OpenAI's where the engine has the knob:
/// temperature 1, top_p 1, no token limit (max_tokens -1: until the end of text or the context);
/// top_k 40, min_p 0.05 and repeat_penalty 1 as llama.cpp's server (these three are accepted as
/// extensions). seed absent: a random seed.
struct CompletionRequest {
  bool chat = true;                   // /v1/chat/completions (messages) or /v1/completions (prompt)
  std::vector<ChatMessage> messages;  // chat: in order; "developer" is read as "system"
  std::string prompt;                 // text: the one prompt string
  std::string model;                  // as sent (echoed back); empty when absent
  Completion completion;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
};

/// Nesting depth of JSON a request body may have (objects and arrays); deeper: 400.
inline constexpr int kMaxJsonDepth = 32;

/// Parses a request body. `chat`: the chat endpoint's body (messages), else the text one
/// (prompt: a string or an array of exactly one string). Errors (all status 400): not JSON (the
/// message names the byte offset), nested deeper than kMaxJsonDepth, not an object, a required
/// field missing, a field of the wrong type ("temperature must be a
/// number", param "temperature"), out of range (temperature in [0, 2], top_p in (0, 1],
/// max_tokens >= 0, n == 1, at most 16 stop strings; empty stop strings are dropped), an unknown
/// role, a content part that is not text.
std::optional<CompletionRequest> parse_completion_request(const std::string& body, bool chat,
                                                          ApiError* error);

/// What a response needs besides the result: ids and the clock.
struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model's id (or the request's model field)
};

/// A fresh response id with `prefix` ("chatcmpl-", "cmpl-"): 24 random alphanumerics.
std::string new_response_id(const std::string& prefix);

/// The whole (non-streamed) response: object "chat.completion" (choices[0].message) or
/// "text_completion" (choices[0].text), with usage {prompt_tokens, completion_tokens,
/// total_tokens}. A "cancelled" finish is reported as "stop".
std::string completion_json(const ResponseMeta& meta, bool chat, const CompletionResult& r);

/// One streamed chunk: object "chat.completion.chunk" (choices[0].delta) or "text_completion"
/// (choices[0].text). `role_delta` puts {"role":"assistant"} in the chat delta (the first chunk);
/// `finish_reason` empty: null. The result is the JSON text, without the SSE framing.
std::string chunk_json(const ResponseMeta& meta, bool chat, const std::string& text,
                       bool role_delta, const std::string& finish_reason);
/// The usage chunk of stream_options.include_usage: choices [] and usage.
std::string usage_chunk_json(const ResponseMeta& meta, bool chat, int64_t prompt_tokens,
                             int64_t completion_tokens);
/// One server-sent event: "data: " + payload + "\n\n".
std::string sse_event(const std::string& payload);

/// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by"}]}.
std::string models_json(const std::string& model_id, int64_t created);
/// GET /v1/models/{id}: the one model object.
std::string model_json(const std::string& model_id, int64_t created);

/// The OpenAI role name ("system", "user", "assistant").
const char* role_name(ChatRole role);

}  // namespace spw::app::serve
