// A prompt that passes the byte bound but is slow to tokenize (megabytes of one "word" without
// spaces, stories260K's SentencePiece vocabulary) is stopped at the server's tokenize timeout and
// answered 413 with the limit and the flag; the engine is free for the next request at once.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "app/serve/http.h"
#include "app/serve/serve_test_util.h"
#include "app/serve/server.h"

namespace spw::app::serve {
namespace {

using nlohmann::json;
using namespace testing;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(ServeTokenizeTimeout, SlowPromptIs413AtTheLimitAndTheEngineGoesOn) {
  const Engine* engine = stories_engine();
  if (!engine) GTEST_SKIP() << "no " << stories_path() << " (../shared missing)";
  // 4 MiB without a space: one fragment of 4 million symbols for the merges.
  std::string word;
  word.reserve(size_t(4) << 20);
  while (word.size() < (size_t(4) << 20)) word += "onceuponatimeshewas";
  const auto t_direct = Clock::now();
  const size_t n_ids = engine->tokenizer().encode(word, true, false).size();
  const double direct_s = seconds_since(t_direct);

  ServerOptions o;
  o.port = 0;
  o.model_id = "stories260K.gguf";
  o.tokenize_timeout_ms = 100;
  ServeBackend b = engine_backend(*engine);
  // As a vocabulary with long pieces would: the byte bound lets the prompt through to the
  // tokenizer.
  b.max_token_bytes = 0;
  Server server(o, b);
  ASSERT_TRUE(server.start().ok());
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(60, 0);

  const json text = {{"prompt", word}, {"max_tokens", 2}};
  // What the same body costs without tokenizing: a server whose byte bound refuses it (400).
  double baseline_s = 0;
  {
    Server bounded(o, engine_backend(*engine));
    ASSERT_TRUE(bounded.start().ok());
    httplib::Client b_cli("127.0.0.1", bounded.port());
    b_cli.set_read_timeout(60, 0);
    const auto t0 = Clock::now();
    const auto res = b_cli.Post("/v1/completions", text.dump(), "application/json");
    baseline_s = seconds_since(t0);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
  }

  const json chat = {
      {"messages", {{{"role", "user"}, {"content", word}}}}, {"max_tokens", 2}, {"stream", true}};
  std::string took_s;
  for (const auto& [path, body] : {std::pair{"/v1/completions", text.dump()},
                                   std::pair{"/v1/chat/completions", chat.dump()}}) {
    const auto t0 = Clock::now();
    const auto res = cli.Post(path, body, "application/json");
    const double took = seconds_since(t0);
    took_s += fmt::format(" {} {:.2f} s", path, took);
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 413) << path << ": " << res->body.substr(0, 300);
    const json e = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(e.is_object()) << res->body.substr(0, 300);
    EXPECT_EQ(e["error"]["code"], "tokenize_timeout");
    const std::string m = e["error"]["message"];
    EXPECT_EQ(m.rfind("the prompt (" + std::to_string(word.size()) +
                          " bytes) took longer than 0.1 s to tokenize, the server's limit",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find("--tokenize-timeout"), std::string::npos) << m;
    // Beyond sending and parsing the 4 MiB (the byte bound's refusal): the template, the
    // encoder's setup and 0.1 s of tokenizing, far from the whole encode (loose: the machine may
    // be loaded, or the build sanitized).
    EXPECT_LT(took - baseline_s, 3.0) << path;
  }
  std::printf(
      "4 MiB prompt without spaces: the whole encode %.2f s (%zu ids); refused by the byte bound "
      "in %.2f s; with a 0.1 s tokenize timeout answered 413 in%s\n",
      direct_s, n_ids, baseline_s, took_s.c_str());
  const ServerStats s = server.stats();
  EXPECT_EQ(s.tokenize_timeouts, 2);
  EXPECT_EQ(s.completed, 0);

  // The engine is free: a normal request is answered with the engine's own greedy tokens.
  const json hi = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};
  const auto ok = cli.Post("/v1/completions", hi.dump(), "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  const auto direct = complete_text(*engine, "Once upon a time", greedy(4), {});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], direct->text);
  EXPECT_EQ(server.stats().completed, 1);
}

}  // namespace
}  // namespace spw::app::serve
