// The OpenAI-compatible server through a real HTTP client on loopback (httplib::Client): the
// response formats against the engine run directly (stories260K, greedy), stop strings and
// max_tokens, 400s and 401s, a full queue's 429, disconnects that cancel, 64 clients at once.
// Tests that need no model run on a scripted backend.
#include "app/serve/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <thread>

#include "app/serve/http.h"
#include "app/serve/serve_test_util.h"

namespace spw::app::serve {
namespace {

using nlohmann::json;
using namespace testing;

// The connection caps as high as the tests' 64 clients from one address need (the caps are
// front_door_test.cpp's), so that a 64-client test sees the queue policy alone.
ServerOptions loopback_options(const std::string& model_id = "test.gguf") {
  ServerOptions o;
  o.port = 0;
  o.model_id = model_id;
  o.limits.max_connections = 96;
  o.limits.max_per_client = 96;
  return o;
}

httplib::Result post(int port, const std::string& path, const std::string& body,
                     const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  return cli.Post(path.c_str(), headers, body, "application/json");
}

json chat_body(const std::string& user, int max_tokens, bool stream,
               const json& extra = json::object()) {
  json j = {{"model", "anything-at-all"},
            {"messages", {{{"role", "user"}, {"content", user}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"stream", stream}};
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return j;
}

void expect_error_object(const httplib::Result& res, int status, const std::string& param) {
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, status) << res->body;
  const json j = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << res->body;
  ASSERT_TRUE(j.contains("error")) << res->body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  EXPECT_TRUE(e.contains("code"));
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << res->body;
  } else {
    EXPECT_EQ(e["param"], param) << res->body;
  }
  if (status == 400) EXPECT_EQ(e["type"], "invalid_request_error");
}

// --- with the model ---------------------------------------------------------------------------

class ServeEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = stories_engine();
    if (!engine_) GTEST_SKIP() << "no " << stories_path() << " (../shared missing)";
    server_ =
        std::make_unique<Server>(loopback_options("stories260K.gguf"), engine_backend(*engine_));
    const Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.error().message;
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  CompletionResult direct_chat(const std::string& user, const Completion& c) {
    auto r = complete_chat(*engine_, {ChatMessage{ChatRole::User, user}}, c, {});
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : CompletionResult{};
  }
  const Engine* engine_ = nullptr;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

TEST_F(ServeEngine, ModelsListsTheServedModel) {
  httplib::Client cli("127.0.0.1", port_);
  const auto res = cli.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories260K.gguf");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(ServeEngine, ChatCompletionEqualsTheEngineGreedy) {
  const CompletionResult want = direct_chat("Once upon a time", greedy(24));
  ASSERT_EQ(want.completion_tokens, 24);
  const auto res =
      post(port_, "/v1/chat/completions", chat_body("Once upon a time", 24, false).dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "stories260K.gguf");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], want.text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], want.prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["usage"]["total_tokens"], want.prompt_tokens + 24);
}

TEST_F(ServeEngine, ChatStreamEqualsTheEngineGreedy) {
  const CompletionResult want = direct_chat("Once upon a time", greedy(40));
  const auto res =
      post(port_, "/v1/chat/completions",
           chat_body("Once upon a time", 40, true, {{"stream_options", {{"include_usage", true}}}})
               .dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_payloads(res->body);
  ASSERT_GE(events.size(), 4u) << res->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  std::string id;
  bool usage_seen = false;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (id.empty()) id = c["id"];
    EXPECT_EQ(c["id"], id);  // one id for the whole stream
    if (c.contains("usage")) {
      usage_seen = true;
      EXPECT_TRUE(c["choices"].empty());
      EXPECT_EQ(c["usage"]["prompt_tokens"], want.prompt_tokens);
      EXPECT_EQ(c["usage"]["completion_tokens"], 40);
      EXPECT_EQ(c["usage"]["total_tokens"], want.prompt_tokens + 40);
      continue;
    }
    const json& ch = c["choices"][0];
    if (i == 0) EXPECT_EQ(ch["delta"]["role"], "assistant");
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_TRUE(usage_seen);
  EXPECT_EQ(text, want.text);
  EXPECT_EQ(finish, "length");
}

TEST_F(ServeEngine, TextCompletionBothKindsEqualTheEngine) {
  auto want = complete_text(*engine_, "Once upon a time", greedy(30), {});
  ASSERT_TRUE(want.ok());
  const json body = {{"model", "x"},     {"prompt", "Once upon a time"},
                     {"max_tokens", 30}, {"temperature", 0},
                     {"seed", 7},        {"unknown_field", {1, 2}}};
  const auto whole = post(port_, "/v1/completions", body.dump());
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json j = json::parse(whole->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], want->text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 30);
  EXPECT_EQ(j["usage"]["total_tokens"],
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());

  json sbody = body;
  sbody["stream"] = true;
  const auto stream = post(port_, "/v1/completions", sbody.dump());
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200);
  std::string text, finish;
  const auto events = sse_payloads(stream->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, want->text);
  EXPECT_EQ(finish, "length");
}

TEST_F(ServeEngine, StopStringsCut) {
  const CompletionResult full = direct_chat("Once upon a time", greedy(60));
  ASSERT_GT(full.text.size(), 30u);
  const std::string stop = full.text.substr(20, 4);
  const size_t cut = full.text.find(stop);
  for (const bool stream : {false, true}) {
    const auto res =
        post(port_, "/v1/chat/completions",
             chat_body("Once upon a time", 60, stream, {{"stop", {"@@never@@", stop}}}).dump());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    std::string text, finish;
    if (!stream) {
      const json j = json::parse(res->body);
      text = j["choices"][0]["message"]["content"];
      finish = j["choices"][0]["finish_reason"];
    } else {
      const auto events = sse_payloads(res->body);
      for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json c = json::parse(events[i]);
        const json& ch = c["choices"][0];
        if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      }
    }
    EXPECT_EQ(text, full.text.substr(0, cut)) << "stop '" << stop << "' stream " << stream;
    EXPECT_EQ(finish, "stop");
  }
}

TEST_F(ServeEngine, MaxTokensRespected) {
  for (const int n : {1, 5, 17}) {
    const auto res = post(port_, "/v1/chat/completions",
                          chat_body("Tell", n, false, {{"max_completion_tokens", n}}).dump());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    const json j = json::parse(res->body);
    EXPECT_EQ(j["usage"]["completion_tokens"], n);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  }
}

TEST_F(ServeEngine, SeedMakesSamplingRepeatable) {
  const auto sampled = [&](int seed) {
    const auto res =
        post(port_, "/v1/chat/completions",
             chat_body("Once", 40, false, {{"temperature", 1.2}, {"seed", seed}}).dump());
    EXPECT_TRUE(res && res->status == 200);
    return res ? json::parse(res->body)["choices"][0]["message"]["content"].get<std::string>()
               : std::string();
  };
  const std::string a = sampled(1234);
  EXPECT_EQ(sampled(1234), a);
  Completion c = greedy(40);
  c.sampling.temp = 1.2f;
  c.sampling.top_p = 1.0f;
  c.sampling.seed = 1234;
  EXPECT_EQ(direct_chat("Once", c).text, a);  // the request's sampler is the engine's
}

TEST_F(ServeEngine, PromptLongerThanTheContextIs400) {
  std::string lng;
  for (int i = 0; i < 800; ++i) lng += "word" + std::to_string(i) + " ";  // stories260K: n_ctx 512
  for (const bool stream : {false, true}) {
    const auto res = post(port_, "/v1/chat/completions", chat_body(lng, 4, stream).dump());
    expect_error_object(res, 400, "messages");
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "context_length_exceeded");
  }
  // The server goes on.
  const auto ok = post(port_, "/v1/chat/completions", chat_body("Hi", 3, false).dump());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(ServeEngineDisconnect, StreamingClientThatLeavesCancelsTheEngine) {
  const Engine* engine = stories_engine();
  if (!engine) GTEST_SKIP() << "no " << stories_path() << " (../shared missing)";
  // The engine as served, each piece slowed by 1 ms so that a whole run (480 tokens) lasts far
  // longer than the hang-up takes to be noticed.
  ServeBackend slow = engine_backend(*engine);
  const auto inner = slow.chat;
  slow.chat = [inner](const std::vector<ChatMessage>& m, const Completion& c,
                      const RunCallbacks& cb) {
    RunCallbacks slowed = cb;
    slowed.piece = [&cb](const std::string& p) {
      if (cb.piece) cb.piece(p);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    return inner(m, c, slowed);
  };
  Server server(loopback_options("stories260K.gguf"), slow);
  ASSERT_TRUE(server.start().ok());
  {
    httplib::Client cli("127.0.0.1", server.port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.set_header("Content-Type", "application/json");
    req.body = chat_body("Once", 480, true).dump();
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++chunks;
      return false;  // hang up after the first chunk
    };
    EXPECT_FALSE(cli.send(req));
    EXPECT_EQ(chunks, 1);
  }
  for (int tries = 0; server.stats().cancelled + server.stats().completed < 1 && tries < 6000;
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const ServerStats s = server.stats();
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_LT(s.tokens_generated, 240);  // << max_tokens 480
  const auto next = post(server.port(), "/v1/chat/completions", chat_body("Once", 4, false).dump());
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(json::parse(next->body)["usage"]["completion_tokens"], 4);
}

TEST_F(ServeEngine, SixtyFourClientsAllAnsweredOr429) {
  std::vector<std::thread> threads;
  std::vector<int> status(64, -1);
  std::vector<std::string> retry_after(64), bodies(64);
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      const auto res = post(port_, i % 2 ? "/v1/completions" : "/v1/chat/completions",
                            i % 2 ? json({{"prompt", "Once"},
                                          {"max_tokens", 24},
                                          {"temperature", 0},
                                          {"stream", i % 4 == 1}})
                                        .dump()
                                  : chat_body("Once", 24, i % 4 == 2).dump());
      if (!res) {
        bodies[i] = httplib::to_string(res.error());
        return;
      }
      status[i] = res->status;
      retry_after[i] = res->get_header_value("Retry-After");
      bodies[i] = res->body;
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(status[i] == 200 || status[i] == 429)
        << "client " << i << ": " << status[i] << " " << bodies[i];
    if (status[i] == 200) ++ok;
    if (status[i] == 429) {
      ++busy;
      EXPECT_EQ(retry_after[i], "2");
      EXPECT_EQ(json::parse(bodies[i])["error"]["code"], "server_busy");
    }
  }
  EXPECT_EQ(ok + busy, 64);
  EXPECT_GE(ok, 1);
  const ServerStats s = server_->stats();
  EXPECT_EQ(s.rejected_busy, busy);
  EXPECT_EQ(s.completed, ok);
  EXPECT_EQ(s.tokens_generated, 24 * ok);
  httplib::Client cli("127.0.0.1", port_);
  const auto after = cli.Get("/v1/models");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

// --- with the scripted backend -----------------------------------------------------------------

TEST(Serve, BadRequestsAre400) {
  ScriptedBackend fake;
  Server server(loopback_options(), fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  expect_error_object(post(port, "/v1/chat/completions", "{not json"), 400, "");
  expect_error_object(post(port, "/v1/chat/completions", R"({"messages":"hi"})"), 400, "messages");
  expect_error_object(post(port, "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})"),
                      400, "temperature");
  expect_error_object(post(port, "/v1/completions", R"({"prompt":7})"), 400, "prompt");
  expect_error_object(post(port, "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"x"}],"top_k":-1})"),
                      400, "top_k");
  {
    httplib::Client cli("127.0.0.1", port);
    const auto res = cli.Get("/v1/nothing");
    expect_error_object(res, 404, "");
  }
  EXPECT_EQ(server.stats().bad_requests, 5);
  EXPECT_TRUE(fake.results().empty());  // nothing reached the engine
}

TEST(Serve, ApiKeyRequiredWhenSet) {
  ScriptedBackend fake;
  ServerOptions o = loopback_options();
  o.api_key = "s3cret-key";
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  const std::string body = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})";
  expect_error_object(post(port, "/v1/chat/completions", body), 401, "");
  expect_error_object(post(port, "/v1/chat/completions", body, {{"Authorization", "Bearer wrong"}}),
                      401, "");
  expect_error_object(
      post(port, "/v1/chat/completions", body, {{"Authorization", "Bearer s3cret-key-longer"}}),
      401, "");
  httplib::Client cli("127.0.0.1", port);
  const auto models = cli.Get("/v1/models");
  expect_error_object(models, 401, "");
  EXPECT_EQ(json::parse(models->body)["error"]["code"], "invalid_api_key");
  const auto ok =
      post(port, "/v1/chat/completions", body, {{"Authorization", "Bearer s3cret-key"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["message"]["content"], "t0 t1 ");
  EXPECT_EQ(server.stats().unauthorized, 4);
}

TEST(Serve, RefusesNonLoopbackWithoutKey) {
  ScriptedBackend fake;
  ServerOptions o = loopback_options();
  o.host = "0.0.0.0";
  Server server(o, fake.backend());
  const Status st = server.start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("refusing to listen on 0.0.0.0 without an API key"),
            std::string::npos);
  EXPECT_NE(st.error().message.find("SPILLWAY_API_KEY"), std::string::npos);
  EXPECT_EQ(server.port(), 0);

  o.api_key = "a-key-of-16-byte";
  Server keyed(o, fake.backend());
  const Status st2 = keyed.start();
  EXPECT_TRUE(st2.ok()) << st2.error().message;

  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.3.2.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("::"));
  EXPECT_FALSE(is_loopback_host("192.168.1.10"));
}

TEST(Serve, FullQueueAnswers429WithRetryAfter) {
  ScriptedBackend fake;
  fake.close_gate();
  ServerOptions o = loopback_options();
  o.max_queue = 2;
  o.http_threads = 8;
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  const std::string body = R"({"prompt":"x","max_tokens":3})";
  std::vector<int> status(3, -1);
  std::vector<std::thread> held;
  held.emplace_back([&] { status[0] = post(port, "/v1/completions", body)->status; });
  ASSERT_TRUE(fake.wait_entered(1));  // running, held at the gate
  for (int i = 1; i < 3; ++i) {
    held.emplace_back([&, i] { status[i] = post(port, "/v1/completions", body)->status; });
  }
  for (int tries = 0; server.stats().waiting < 2 && tries < 6000; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(server.stats().waiting, 2);
  const auto busy = post(port, "/v1/completions", body);
  expect_error_object(busy, 429, "");
  EXPECT_EQ(json::parse(busy->body)["error"]["code"], "server_busy");
  EXPECT_EQ(busy->get_header_value("Retry-After"), "2");
  fake.open_gate();
  for (auto& t : held) t.join();
  EXPECT_EQ(status, (std::vector<int>{200, 200, 200}));
  EXPECT_EQ(server.stats().rejected_busy, 1);
  EXPECT_EQ(server.stats().completed, 3);
}

TEST(Serve, StreamingClientThatLeavesCancelsItsGeneration) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(500));
  Server server(loopback_options(), fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  const int max_tokens = 1000000;
  {
    httplib::Client cli("127.0.0.1", port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.set_header("Content-Type", "application/json");
    req.body = json({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"max_tokens", max_tokens},
                     {"stream", true}})
                   .dump();
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++chunks;
      return false;  // close after the first chunk
    };
    const auto res = cli.send(req);
    EXPECT_FALSE(res);  // we hung up
    EXPECT_EQ(chunks, 1);
  }
  ASSERT_TRUE(fake.wait_finished(1));
  const CompletionResult r = fake.results()[0];
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LT(r.completion_tokens, 5000);  // << max_tokens
  for (int tries = 0; server.stats().cancelled < 1 && tries < 6000; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server.stats().cancelled, 1);

  // The next request is served.
  const auto next = post(port, "/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(json::parse(next->body)["choices"][0]["message"]["content"], "t0 t1 ");
}

TEST(Serve, WaitingClientThatLeavesCancelsItsGeneration) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(500));
  Server server(loopback_options(), fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  const std::string body = R"({"prompt":"x","max_tokens":1000000})";
  const int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(fake.wait_entered(1));
  close(fd);  // a whole-response client gives up while its answer is being generated
  ASSERT_TRUE(fake.wait_finished(1));
  const CompletionResult r = fake.results()[0];
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LT(r.completion_tokens, 100000);
  const auto next = post(port, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

TEST(Serve, StopCancelsRunningAndQueuedWork) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(500));
  auto server = std::make_unique<Server>(loopback_options(), fake.backend());
  ASSERT_TRUE(server->start().ok());
  const int port = server->port();
  std::vector<int> status(3, -1);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      const auto res = post(port, "/v1/completions", R"({"prompt":"x","max_tokens":1000000})");
      if (res) status[i] = res->status;
    });
    if (i == 0) ASSERT_TRUE(fake.wait_entered(1));
  }
  for (int tries = 0; server->stats().waiting < 2 && tries < 6000; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server->stop();
  for (auto& t : clients) t.join();
  EXPECT_EQ(status, (std::vector<int>{503, 503, 503}));
  ASSERT_EQ(fake.results().size(), 1u);  // the queued two never ran
  EXPECT_EQ(fake.results()[0].finish_reason, "cancelled");
}

// curl -d labels its JSON application/x-www-form-urlencoded; a body past httplib's 8 KiB form
// limit is still read as JSON, and a lowercase "bearer" is accepted.
TEST(Serve, LargeBodyLabelledAsAFormIsReadAsJson) {
  ScriptedBackend fake;
  ServerOptions o = loopback_options();
  o.api_key = "k";
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(20000, 'a') +
                           R"("}],"max_tokens":2})";
  httplib::Client cli("127.0.0.1", server.port());
  const auto res = cli.Post("/v1/chat/completions", {{"Authorization", "bearer k"}}, body,
                            "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["message"]["content"], "t0 t1 ");
}

// A stream that the server cuts short (stop) ends with an error event, never with a
// finish_reason that reads as a whole answer.
TEST(Serve, StreamCutShortByStopEndsWithAnError) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(500));
  auto server = std::make_unique<Server>(loopback_options(), fake.backend());
  ASSERT_TRUE(server->start().ok());
  const int port = server->port();
  std::string received;
  std::thread client([&] {
    httplib::Client cli("127.0.0.1", port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1000000,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      received.append(data, n);
      return true;
    };
    (void)cli.send(req);
  });
  ASSERT_TRUE(fake.wait_entered(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->stop();
  client.join();
  EXPECT_NE(received.find("\"error\""), std::string::npos) << received.substr(0, 400);
  EXPECT_EQ(received.find("\"finish_reason\":\"stop\""), std::string::npos);
  EXPECT_EQ(received.find("\"finish_reason\":\"length\""), std::string::npos);
}

TEST(Serve, SixtyFourClientsOnAScriptedEngine) {
  ScriptedBackend fake;
  fake.set_token_delay(std::chrono::microseconds(200));
  ServerOptions o = loopback_options();
  o.max_queue = 4;
  Server server(o, fake.backend());
  ASSERT_TRUE(server.start().ok());
  const int port = server.port();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, busy{0}, other{0};
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      const auto res = post(port, "/v1/chat/completions",
                            json({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                  {"max_tokens", 50},
                                  {"stream", i % 2 == 0}})
                                .dump());
      if (res && res->status == 200) {
        ++ok;
      } else if (res && res->status == 429 && res->get_header_value("Retry-After") == "2") {
        ++busy;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok + busy, 64);
  EXPECT_GE(ok.load(), 1);
  EXPECT_EQ(server.stats().completed, ok.load());
  EXPECT_EQ(server.stats().rejected_busy, busy.load());
  httplib::Client cli("127.0.0.1", port);
  const auto after = cli.Get("/v1/models");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

}  // namespace
}  // namespace spw::app::serve
