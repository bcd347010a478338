// The remote-endpoint client against our own server on loopback: greedy results equal the
// local engine's (streamed and whole), and the failure classes the job runner retries on
// (connection refused, 429 or 503 with Retry-After: transient; 400, 401: permanent), cancellation
// and URL parsing. Tests that need no model run the server on a scripted backend.
#include "app/remote/openai_client.h"

#include <gtest/gtest.h>

#include "app/serve/serve_test_util.h"
#include "app/serve/server.h"

namespace spw::app::remote {
namespace {

using serve::Server;
using serve::ServerOptions;
using namespace serve::testing;

ServerOptions options_on_any_port() {
  ServerOptions o;
  o.port = 0;
  o.model_id = "m.gguf";
  return o;
}

OpenAIClient client_for(int port, const std::string& suffix = "", bool stream = true,
                        const std::string& key = "") {
  RemoteOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port) + suffix;
  o.stream = stream;
  o.api_key = key;
  o.backoff_s = 0.01;
  o.max_retry_after_s = 0.01;
  auto c = OpenAIClient::create(o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return std::move(*c);
}

TEST(OpenAIClient, GreedyEqualsTheLocalEngine) {
  const Engine* engine = stories_engine();
  if (!engine) GTEST_SKIP() << "no " << stories_path() << " (../shared missing)";
  Server server(options_on_any_port(), serve::engine_backend(*engine));
  ASSERT_TRUE(server.start().ok());
  const std::vector<ChatMessage> chat = {{ChatRole::System, "You tell stories."},
                                         {ChatRole::User, "Once upon a time"}};
  auto want = complete_chat(*engine, chat, greedy(32), {});
  ASSERT_TRUE(want.ok());
  for (const bool stream : {true, false}) {
    const OpenAIClient client = client_for(server.port(), stream ? "" : "/v1/", stream);
    std::string pieces;
    RunCallbacks cb;
    cb.piece = [&](const std::string& p) { pieces += p; };
    const RemoteResult got = client.chat(chat, greedy(32), cb);
    ASSERT_TRUE(got.ok()) << got.error.message;
    EXPECT_EQ(got.attempts, 1);
    EXPECT_EQ(got.value->text, want->text) << "stream " << stream;
    EXPECT_EQ(pieces, want->text);
    EXPECT_EQ(got.value->prompt_tokens, want->prompt_tokens);
    EXPECT_EQ(got.value->completion_tokens, 32);
    EXPECT_EQ(got.value->finish_reason, "length");
  }
  // A stop string and a text prompt.
  auto want_text = complete_text(*engine, "Lily", greedy(40), {});
  ASSERT_TRUE(want_text.ok());
  const std::string stop = want_text->text.substr(12, 3);
  auto want_stop = complete_text(*engine, "Lily", greedy(40, {stop}), {});
  ASSERT_TRUE(want_stop.ok());
  const RemoteResult got = client_for(server.port()).complete("Lily", greedy(40, {stop}));
  ASSERT_TRUE(got.ok()) << got.error.message;
  EXPECT_EQ(got.value->text, want_stop->text);
  EXPECT_EQ(got.value->finish_reason, "stop");
  auto ids = client_for(server.port()).models();
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ(*ids, std::vector<std::string>{"m.gguf"});
}

TEST(OpenAIClient, ConnectionRefusedIsTransientAndNamesTheUrl) {
  int port = 0;
  {
    ScriptedBackend fake;
    Server s(options_on_any_port(), fake.backend());
    ASSERT_TRUE(s.start().ok());
    port = s.port();
  }  // stopped: nothing listens there now
  const RemoteResult r = client_for(port).chat({{ChatRole::User, "x"}}, greedy(2));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error.transient);
  EXPECT_EQ(r.error.http_status, 0);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_NE(r.error.message.find("POST http://127.0.0.1:" + std::to_string(port) +
                                 "/v1/chat/completions"),
            std::string::npos)
      << r.error.message;
  EXPECT_NE(r.error.message.find("could not connect"), std::string::npos) << r.error.message;
  EXPECT_FALSE(r.to_expected().ok());
}

TEST(OpenAIClient, BusyServerIsRetriedThenTransient) {
  ScriptedBackend fake;
  ServerOptions o = options_on_any_port();
  o.max_queue = 0;  // every request is told 429
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const RemoteResult r = client_for(server.port()).chat({{ChatRole::User, "x"}}, greedy(2));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error.transient);
  EXPECT_EQ(r.error.http_status, 429);
  EXPECT_EQ(r.error.retry_after_s, 2.0);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(server.stats().rejected_busy, 3);
  EXPECT_NE(r.error.message.find("HTTP 429"), std::string::npos) << r.error.message;
}

TEST(OpenAIClient, ClientErrorsArePermanentAndNotRetried) {
  ScriptedBackend fake;
  ServerOptions o = options_on_any_port();
  o.api_key = "right";
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const RemoteResult no_key = client_for(server.port()).chat({{ChatRole::User, "x"}}, greedy(2));
  ASSERT_FALSE(no_key.ok());
  EXPECT_FALSE(no_key.error.transient);
  EXPECT_EQ(no_key.error.http_status, 401);
  EXPECT_EQ(no_key.attempts, 1);
  EXPECT_NE(no_key.error.message.find("missing API key"), std::string::npos)
      << no_key.error.message;

  const OpenAIClient keyed = client_for(server.port(), "", true, "right");
  const RemoteResult empty = keyed.chat({}, greedy(2));  // no messages: the server's 400
  ASSERT_FALSE(empty.ok());
  EXPECT_FALSE(empty.error.transient);
  EXPECT_EQ(empty.error.http_status, 400);
  EXPECT_EQ(empty.attempts, 1);
  EXPECT_NE(empty.error.message.find("'messages' must hold at least one message"),
            std::string::npos)
      << empty.error.message;

  const RemoteResult ok = keyed.chat({{ChatRole::User, "x"}}, greedy(3));
  ASSERT_TRUE(ok.ok()) << ok.error.message;
  EXPECT_EQ(ok.value->text, "t0 t1 t2 ");
}

TEST(OpenAIClient, CancelStopsAStreamMidWay) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(500));
  Server server(options_on_any_port(), fake.backend());
  ASSERT_TRUE(server.start().ok());
  int pieces = 0;
  RunCallbacks cb;
  cb.piece = [&](const std::string&) { ++pieces; };
  cb.cancelled = [&] { return pieces >= 3; };
  const RemoteResult r =
      client_for(server.port()).chat({{ChatRole::User, "x"}}, greedy(1000000), cb);
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value->finish_reason, "cancelled");
  EXPECT_GE(pieces, 3);
  EXPECT_EQ(r.value->text.rfind("t0 t1 t2 ", 0), 0u);
  // Our hang-up cancels the server's generation too.
  ASSERT_TRUE(fake.wait_finished(1));
  EXPECT_EQ(fake.results()[0].finish_reason, "cancelled");
  EXPECT_LT(fake.results()[0].completion_tokens, 100000);
}

TEST(OpenAIClient, Urls) {
  const auto a = OpenAIClient::create({.base_url = "http://127.0.0.1:8080"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->origin(), "http://127.0.0.1:8080");
  EXPECT_EQ(a->prefix(), "/v1");
  const auto b = OpenAIClient::create({.base_url = "HTTPS://gpu-box/openai/v1/"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->origin(), "https://gpu-box");
  EXPECT_EQ(b->prefix(), "/openai/v1");
  const auto c = OpenAIClient::create({.base_url = "http://[::1]:9000/v1"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->origin(), "http://[::1]:9000");
  for (const char* bad : {"ftp://host", "127.0.0.1:8080", "http://", "http://h:99999", ""}) {
    const auto e = OpenAIClient::create({.base_url = bad});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.error().message.find("endpoint '"), std::string::npos) << e.error().message;
  }
}

}  // namespace
}  // namespace spw::app::remote
