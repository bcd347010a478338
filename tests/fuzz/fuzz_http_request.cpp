// libFuzzer target: the server's request handling before the engine, on arbitrary bytes. The
// input is a request as a client sends it: the head (find_head_end, parse_request_head, the
// Bearer check) and, when the head is accepted, the rest as a JSON body for the chat and the
// text endpoint (parse_completion_request). Every input must end in a value or a refusal with a
// status and a message; a crash, a hang or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "app/serve/http_head.h"
#include "app/serve/openai_json.h"

using namespace spw::app::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  HttpLimits limits;
  limits.max_body_bytes = 1 << 20;
  const size_t end = find_head_end(in);
  if (end > in.size()) std::abort();
  if (end == 0) {
    // No complete head: the body parser still gets the bytes, as a body.
    ApiError err;
    const auto r = parse_completion_request(std::string(in), size % 2 == 0, &err);
    if (!r && (err.status != 400 || err.message.empty())) std::abort();
    return 0;
  }
  RequestHead head;
  HttpRefusal refusal;
  if (!parse_request_head(in.substr(0, end), limits, &head, &refusal)) {
    if (refusal.status < 400 || refusal.status > 505 || refusal.message.empty()) std::abort();
    return 0;
  }
  if (const std::string* auth = head.header("Authorization")) {
    (void)bearer_matches(*auth, "a-key-of-16-bytes");
  }
  const std::string body(in.substr(end, size_t(head.content_length)));
  for (bool chat : {true, false}) {
    ApiError err;
    const auto r = parse_completion_request(body, chat, &err);
    if (!r && (err.status != 400 || err.message.empty())) std::abort();
  }
  return 0;
}
