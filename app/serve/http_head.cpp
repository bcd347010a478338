#include "app/serve/http_head.h"

#include <algorithm>

namespace spw::app::serve {

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// RFC 9110 tchar.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

bool refuse(HttpRefusal* r, int status, std::string message, std::string code = {}) {
  if (r) *r = HttpRefusal{status, std::move(message), std::move(code), {}};
  return false;
}

// Splits `s` into lines at LF, dropping one CR before each LF.
std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string_view::npos) nl = s.size();
    std::string_view line = s.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    pos = nl + 1;
  }
  return out;
}

// Content-Length: 1*DIGIT, or a list of equal values ("5, 5"), below 2^63.
bool parse_length(std::string_view v, uint64_t* out) {
  bool have = false;
  uint64_t value = 0;
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string_view::npos) comma = v.size();
    const std::string_view item = trim(v.substr(pos, comma - pos));
    if (item.empty() || item.size() > 18) return false;
    uint64_t x = 0;
    for (char c : item) {
      if (c < '0' || c > '9') return false;
      x = x * 10 + uint64_t(c - '0');
    }
    if (have && x != value) return false;
    value = x;
    have = true;
    pos = comma + 1;
  }
  *out = value;
  return have;
}

}  // namespace

const std::string* RequestHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return &v;
  }
  return nullptr;
}

std::string RequestHead::path() const { return target.substr(0, target.find('?')); }

size_t find_head_end(std::string_view buf) {
  // Skip the empty lines a client may send before a request line (RFC 9112 §2.2).
  size_t start = 0;
  while (start < buf.size() && (buf[start] == '\r' || buf[start] == '\n')) ++start;
  for (size_t nl = buf.find('\n', start); nl != std::string_view::npos;
       nl = buf.find('\n', nl + 1)) {
    // The head ends at a line that is empty: "\n\n" or "\n\r\n".
    if (nl + 1 < buf.size() && buf[nl + 1] == '\n') return nl + 2;
    if (nl + 2 < buf.size() && buf[nl + 1] == '\r' && buf[nl + 2] == '\n') return nl + 3;
  }
  return 0;
}

bool parse_request_head(std::string_view head, const HttpLimits& limits, RequestHead* out,
                        HttpRefusal* refusal) {
  if (head.size() > limits.max_head_bytes) {
    return refuse(
        refusal, 431,
        "the request head is larger than " + std::to_string(limits.max_head_bytes) + " bytes");
  }
  while (!head.empty() && (head.front() == '\r' || head.front() == '\n')) head.remove_prefix(1);
  std::vector<std::string_view> lines = split_lines(head);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return refuse(refusal, 400, "empty request");
  RequestHead h;

  // The request line: METHOD SP target SP HTTP/1.x, nothing else.
  const std::string_view line = lines[0];
  if (line.size() > limits.max_request_line_bytes) {
    return refuse(refusal, 414,
                  "the request line is longer than " +
                      std::to_string(limits.max_request_line_bytes) + " bytes");
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return refuse(refusal, 400, "malformed request line (want: METHOD /path HTTP/1.1)");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_tchar)) {
    return refuse(refusal, 400, "malformed request method");
  }
  if (target.empty() || target.front() != '/' ||
      !std::all_of(target.begin(), target.end(),
                   [](char c) { return uint8_t(c) > 0x20 && uint8_t(c) < 0x7f; })) {
    return refuse(refusal, 400, "malformed request target (want a path starting with '/')");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return refuse(refusal, 400, "malformed HTTP version");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return refuse(refusal, 505, "HTTP version not supported (served: HTTP/1.0, HTTP/1.1)");
  }
  h.method = std::string(method);
  h.target = std::string(target);
  h.version = std::string(version);

  // Header lines: name ":" OWS value OWS.
  if (lines.size() - 1 > limits.max_header_count) {
    return refuse(refusal, 431,
                  "more than " + std::to_string(limits.max_header_count) + " request headers");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view l = lines[i];
    if (l.empty()) return refuse(refusal, 400, "malformed request head (an empty header line)");
    if (is_blank(l.front())) {
      return refuse(refusal, 400, "folded header lines are not accepted");
    }
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return refuse(refusal, 400, "malformed header line (want: Name: value)");
    }
    const std::string_view name = l.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar)) {
      return refuse(refusal, 400, "malformed header name");
    }
    const std::string_view value = trim(l.substr(colon + 1));
    if (!std::all_of(value.begin(), value.end(), [](char c) {
          return c == '\t' || (uint8_t(c) >= 0x20 && uint8_t(c) != 0x7f);
        })) {
      return refuse(refusal, 400, "control characters in the value of header " + std::string(name));
    }
    h.headers.emplace_back(std::string(name), std::string(value));
  }

  // Framing: one Content-Length (several only when equal), never with Transfer-Encoding.
  bool have_length = false, have_te = false;
  int hosts = 0;
  for (const auto& [k, v] : h.headers) {
    if (iequals(k, "Content-Length")) {
      uint64_t n = 0;
      if (!parse_length(v, &n)) return refuse(refusal, 400, "malformed Content-Length");
      if (have_length && n != h.content_length) {
        return refuse(refusal, 400, "conflicting Content-Length headers");
      }
      have_length = true;
      h.content_length = n;
    } else if (iequals(k, "Transfer-Encoding")) {
      have_te = true;
    } else if (iequals(k, "Host")) {
      ++hosts;
    } else if (iequals(k, "Content-Encoding")) {
      if (!iequals(v, "identity")) {
        return refuse(refusal, 415,
                      "compressed request bodies are not accepted (Content-Encoding: " + v + ")");
      }
    } else if (iequals(k, "Connection")) {
      for (size_t pos = 0; pos <= v.size();) {
        size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string_view opt = trim(std::string_view(v).substr(pos, comma - pos));
        if (iequals(opt, "close")) h.keep_alive = false;
        pos = comma + 1;
      }
    } else if (iequals(k, "Expect")) {
      if (!iequals(v, "100-continue")) {
        return refuse(refusal, 417, "unsupported expectation (Expect: " + v + ")");
      }
      h.expect_continue = true;
    }
  }
  if (have_te && have_length) {
    return refuse(refusal, 400, "both Content-Length and Transfer-Encoding sent");
  }
  if (have_te) {
    return refuse(refusal, 411,
                  "send the request body with a Content-Length (Transfer-Encoding "
                  "is not accepted on requests)");
  }
  if (hosts > 1) return refuse(refusal, 400, "more than one Host header");
  if (h.version == "HTTP/1.0") {
    const std::string* c = h.header("Connection");
    if (!c || !iequals(trim(*c), "keep-alive")) h.keep_alive = false;
  }
  if (h.content_length > limits.max_body_bytes) {
    return refuse(refusal, 413,
                  "the request body (" + std::to_string(h.content_length) +
                      " bytes) is larger than the limit of " +
                      std::to_string(limits.max_body_bytes) + " bytes (--max-body)",
                  "request_too_large");
  }
  if (out) *out = std::move(h);
  return true;
}

bool bearer_matches(std::string_view authorization, std::string_view key) {
  const std::string_view a = trim(authorization);
  if (a.size() < 7 || !iequals(a.substr(0, 6), "bearer") || !is_blank(a[6])) return false;
  const std::string_view token = trim(a.substr(7));
  // Same time wherever the bytes differ: every byte of the presented token is compared (with
  // the key's byte at that index modulo its length), and the length is folded in at the end.
  if (key.empty()) return false;
  unsigned diff = token.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= unsigned(uint8_t(token[i]) ^ uint8_t(key[i % key.size()]));
  }
  return diff == 0;
}

const char* status_reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

}  // namespace spw::app::serve
