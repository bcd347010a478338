// The front door's request-head parser and key check (http_head.h) on literal heads: what is
// accepted, and the status and message of each refusal.
#include "app/serve/http_head.h"

#include <gtest/gtest.h>

#include <string>

namespace spw::app::serve {
namespace {

struct Parsed {
  bool ok = false;
  RequestHead head;
  HttpRefusal refusal;
};

Parsed parse(const std::string& text, const HttpLimits& limits = {}) {
  Parsed p;
  p.ok = parse_request_head(text, limits, &p.head, &p.refusal);
  return p;
}

TEST(HttpHead, FindsTheEndOfAHead) {
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY"), 27u);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\n\nBODY"), 16u);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: a\r\n"), 0u);
  EXPECT_EQ(find_head_end("\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 22u);  // leading empty lines
  EXPECT_EQ(find_head_end(""), 0u);
}

TEST(HttpHead, ParsesARequest) {
  const Parsed p = parse(
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length:  12 \r\n"
      "Authorization: Bearer %41b\r\nExpect: 100-continue\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.method, "POST");
  EXPECT_EQ(p.head.target, "/v1/completions?x=1");
  EXPECT_EQ(p.head.path(), "/v1/completions");
  EXPECT_EQ(p.head.version, "HTTP/1.1");
  EXPECT_EQ(p.head.content_length, 12u);
  EXPECT_TRUE(p.head.keep_alive);
  EXPECT_TRUE(p.head.expect_continue);
  ASSERT_NE(p.head.header("authorization"), nullptr);
  EXPECT_EQ(*p.head.header("AUTHORIZATION"), "Bearer %41b");  // never decoded
  EXPECT_EQ(p.head.header("X-None"), nullptr);
}

TEST(HttpHead, ConnectionAndVersion) {
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").head.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.1\n\n").ok);  // bare LF line ends
}

TEST(HttpHead, FramingConflictsAre400) {
  const Parsed two = parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
  EXPECT_FALSE(two.ok);
  EXPECT_EQ(two.refusal.status, 400);
  EXPECT_EQ(two.refusal.message, "conflicting Content-Length headers");
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n").refusal.status, 400);
  // Equal duplicates are one length.
  const Parsed same = parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
  EXPECT_TRUE(same.ok);
  EXPECT_EQ(same.head.content_length, 5u);
  const Parsed both =
      parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(both.refusal.status, 400);
  EXPECT_EQ(both.refusal.message, "both Content-Length and Transfer-Encoding sent");
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").refusal.status, 411);
  for (const char* bad : {"-1", "1e3", "0x10", "", "12 34", "99999999999999999999"}) {
    const Parsed p = parse(std::string("POST / HTTP/1.1\r\nContent-Length: ") + bad + "\r\n\r\n");
    EXPECT_EQ(p.refusal.status, 400) << bad;
    EXPECT_EQ(p.refusal.message, "malformed Content-Length") << bad;
  }
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").refusal.status, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Encoding: gzip\r\n\r\n").refusal.status, 415);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nExpect: magic\r\n\r\n").refusal.status, 417);
}

TEST(HttpHead, MalformedHeadsAre400) {
  for (const char* bad : {
           "GET\r\n\r\n",                                // one part
           "GET /\r\n\r\n",                              // two parts
           "GET  / HTTP/1.1\r\n\r\n",                    // two spaces
           "GET / HTTP/1.1 x\r\n\r\n",                   // four parts
           "G(T / HTTP/1.1\r\n\r\n",                     // not a token
           "GET x HTTP/1.1\r\n\r\n",                     // not origin form
           "GET / HTTX/1.1\r\n\r\n",                     // not HTTP
           "GET / HTTP/1.1\r\nNo colon\r\n\r\n",         // header without ':'
           "GET / HTTP/1.1\r\nName : v\r\n\r\n",         // space before ':'
           "GET / HTTP/1.1\r\n: v\r\n\r\n",              // empty name
           "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",  // obs-fold
           "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",         // control character
       }) {
    const Parsed p = parse(bad);
    EXPECT_FALSE(p.ok) << bad;
    EXPECT_EQ(p.refusal.status, 400) << bad;
    EXPECT_FALSE(p.refusal.message.empty()) << bad;
  }
  EXPECT_EQ(parse("GET / HTTP/2.0\r\n\r\n").refusal.status, 505);
}

TEST(HttpHead, LimitsAre413And414And431) {
  HttpLimits lim;
  lim.max_body_bytes = 1000;
  const Parsed big = parse("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", lim);
  EXPECT_EQ(big.refusal.status, 413);
  EXPECT_EQ(big.refusal.message,
            "the request body (1001 bytes) is larger than the limit of 1000 bytes (--max-body)");
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", lim).ok);

  const std::string long_target =
      "GET /" + std::string(lim.max_request_line_bytes, 'a') + " HTTP/1.1\r\n\r\n";
  EXPECT_EQ(parse(long_target, lim).refusal.status, 414);

  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= lim.max_header_count; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse(many + "\r\n", lim).refusal.status, 431);

  const std::string huge =
      "GET / HTTP/1.1\r\nX: " + std::string(lim.max_head_bytes, 'v') + "\r\n\r\n";
  const Parsed h = parse(huge, lim);
  EXPECT_EQ(h.refusal.status, 431);
  EXPECT_NE(h.refusal.message.find(std::to_string(lim.max_head_bytes)), std::string::npos);
}

TEST(HttpHead, BearerComparedExactlyAsSent) {
  EXPECT_TRUE(bearer_matches("Bearer abc", "abc"));
  EXPECT_TRUE(bearer_matches("bearer   abc", "abc"));   // scheme case, several spaces
  EXPECT_FALSE(bearer_matches("Bearer %61bc", "abc"));  // no percent-decoding
  EXPECT_TRUE(bearer_matches("Bearer k%41y", "k%41y"));
  EXPECT_FALSE(bearer_matches("Bearer kAy", "k%41y"));
  EXPECT_FALSE(bearer_matches("Bearer abcd", "abc"));
  EXPECT_FALSE(bearer_matches("Bearer ab", "abc"));
  EXPECT_FALSE(bearer_matches("Bearer abd", "abc"));
  EXPECT_FALSE(bearer_matches("Basic abc", "abc"));
  EXPECT_FALSE(bearer_matches("Bearerabc", "abc"));
  EXPECT_FALSE(bearer_matches("Bearer ", "abc"));
  EXPECT_FALSE(bearer_matches("abc", "abc"));
  EXPECT_FALSE(bearer_matches("Bearer abc", ""));
}

}  // namespace
}  // namespace spw::app::serve
