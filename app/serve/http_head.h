// Strict parsing of an HTTP/1.1 request head for the server's front door (http_guard.h): the
// limits, the parsed head, the refusal a bad head gets, and the Bearer key check. Pure functions
// of their inputs (no sockets, no HTTP library), so that a fuzzer can drive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spw::app::serve {

/// The front door's limits. Times in milliseconds, sizes in bytes.
struct HttpLimits {
  int max_connections = 64;       // open connections in all; more: 503 at once
  int max_per_client = 16;        // open connections from one client address; more: 503 at once
  size_t max_head_bytes = 16384;  // request line + headers; more: 431
  size_t max_request_line_bytes = 8192;     // more: 414
  size_t max_header_count = 100;            // more: 431
  size_t max_body_bytes = size_t(8) << 20;  // Content-Length above it: 413
  int head_timeout_ms = 5000;   // the whole head, from its first byte (or from accept); then 408
  int body_timeout_ms = 60000;  // the whole body, from the end of the head; then 408
  int idle_timeout_ms = 5000;   // a keep-alive connection waiting for its next request; then closed
  int write_timeout_ms =
      60000;  // one write to a client that does not read; then the connection ends
  int max_requests_per_connection = 100;  // then "Connection: close"
};

/// A request line and its headers as sent. Header values are trimmed of surrounding blanks and
/// never percent-decoded.
struct RequestHead {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // origin form: "/v1/models?x=1"
  std::string version;                                       // "HTTP/1.1" or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  uint64_t content_length = 0;                               // bytes of body (0 when absent)
  bool keep_alive = true;        // false: "Connection: close", or HTTP/1.0 without keep-alive
  bool expect_continue = false;  // "Expect: 100-continue"

  /// The first value of header `name` (ASCII case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
  /// The path of the target (before any '?').
  std::string path() const;
};

/// A request the front door answers itself: the HTTP status, the message of its JSON error body,
/// its OpenAI error code (empty: null) and any extra response headers.
struct HttpRefusal {
  int status = 400;
  std::string message;
  std::string code;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The offset just past the empty line that ends a request head in `buf` (CRLF or bare LF line
/// ends), or 0 when the head is not complete yet.
size_t find_head_end(std::string_view buf);

/// Parses a complete request head (as find_head_end delimits it; leading empty lines are
/// skipped). Strict: a request line of exactly three parts with an origin-form target and
/// HTTP/1.0 or HTTP/1.1 (another version: 505); header names of token characters with the colon
/// right after them; no folded lines, no control characters; Content-Length all digits, and
/// several only when they agree; Transfer-Encoding with Content-Length: 400; Transfer-Encoding
/// alone: 411 (request bodies need a Content-Length); a Content-Encoding other than identity: 415;
/// two Host headers: 400. Limits: a request line past limits.max_request_line_bytes: 414; more
/// than limits.max_header_count headers or a head past limits.max_head_bytes: 431;
/// Content-Length past limits.max_body_bytes: 413 (names the limit). Returns false with
/// `*refusal` set when the request is refused.
bool parse_request_head(std::string_view head, const HttpLimits& limits, RequestHead* out,
                        HttpRefusal* refusal);

/// True when `authorization` is "Bearer KEY" (scheme case-insensitive, one or more spaces) with
/// KEY byte for byte `key` (as sent: no decoding). The comparison takes the same time wherever
/// the bytes differ (it depends on the presented length only).
bool bearer_matches(std::string_view authorization, std::string_view key);

/// The reason phrase of an HTTP status ("Payload Too Large"); "Error" for unknown ones.
const char* status_reason(int status);

}  // namespace spw::app::serve
