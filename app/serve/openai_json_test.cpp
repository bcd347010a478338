// The OpenAI wire format: request bodies parsed into engine terms (values, defaults, errors with
// their param) and the response objects' fields.
#include "app/serve/openai_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace spw::app::serve {
namespace {

using nlohmann::json;

CompletionRequest parse_ok(const std::string& body, bool chat = true) {
  ApiError e;
  auto r = parse_completion_request(body, chat, &e);
  EXPECT_TRUE(r.has_value()) << e.message;
  return r.value_or(CompletionRequest{});
}

ApiError parse_bad(const std::string& body, bool chat = true) {
  ApiError e;
  auto r = parse_completion_request(body, chat, &e);
  EXPECT_FALSE(r.has_value()) << body;
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_FALSE(e.message.empty());
  return e;
}

TEST(OpenAIJson, ChatRequestFieldsAndUnknownOnesIgnored) {
  const CompletionRequest r = parse_ok(R"({
    "model": "gpt-4o-whatever", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "developer", "content": "Dev note", "name": "x"}],
    "max_tokens": 17, "temperature": 0, "top_p": 0.5, "stop": ["\n\n", "END", ""], "seed": 42,
    "stream": true, "stream_options": {"include_usage": true},
    "frequency_penalty": 0.3, "logit_bias": {"50256": -100}, "user": "u1", "tools": []})");
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "gpt-4o-whatever");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, ChatRole::System);
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, ChatRole::User);
  EXPECT_EQ(r.messages[1].content, "Hello\nthere");
  EXPECT_EQ(r.messages[2].role, ChatRole::Assistant);
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, ChatRole::System);
  EXPECT_EQ(r.completion.max_tokens, 17);
  EXPECT_EQ(r.completion.sampling.temp, 0.0f);
  EXPECT_EQ(r.completion.sampling.top_p, 0.5f);
  EXPECT_EQ(r.completion.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.completion.sampling.seed, 42u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAIJson, Defaults) {
  const CompletionRequest r = parse_ok(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.completion.max_tokens, -1);
  EXPECT_EQ(r.completion.sampling.temp, 1.0f);
  EXPECT_EQ(r.completion.sampling.top_p, 1.0f);
  EXPECT_EQ(r.completion.sampling.seed, 0xFFFFFFFFu);
  EXPECT_TRUE(r.completion.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.model, "");
}

TEST(OpenAIJson, MaxCompletionTokensWinsAndNullIsAbsent) {
  const CompletionRequest r = parse_ok(
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":9,
          "temperature":null,"stop":"###"})");
  EXPECT_EQ(r.completion.max_tokens, 9);
  EXPECT_EQ(r.completion.sampling.temp, 1.0f);
  EXPECT_EQ(r.completion.stop, std::vector<std::string>{"###"});
}

TEST(OpenAIJson, TextPrompt) {
  EXPECT_EQ(parse_ok(R"({"prompt":"Once upon"})", false).prompt, "Once upon");
  EXPECT_EQ(parse_ok(R"({"prompt":["Once upon"],"max_tokens":3})", false).prompt, "Once upon");
  EXPECT_FALSE(parse_ok(R"({"prompt":"a"})", false).chat);
  EXPECT_EQ(parse_bad(R"({"prompt":[1,2,3]})", false).param, "prompt");
  EXPECT_EQ(parse_bad(R"({"prompt":["a","b"]})", false).param, "prompt");
  EXPECT_EQ(parse_bad(R"({"max_tokens":3})", false).param, "prompt");
}

TEST(OpenAIJson, Errors) {
  EXPECT_EQ(parse_bad("{bad json").param, "");
  EXPECT_EQ(parse_bad("[1,2]").param, "");
  EXPECT_EQ(parse_bad(R"({"messages":"hello"})").param, "messages");
  EXPECT_EQ(parse_bad(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(parse_bad(R"({"model":"m"})").param, "messages");
  const ApiError t =
      parse_bad(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})");
  EXPECT_EQ(t.param, "temperature");
  EXPECT_EQ(t.message, "'temperature' must be a number, not a string");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"temperature":3})").param,
            "temperature");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})").param,
            "max_tokens");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-2})").param,
            "max_tokens");
  const ApiError n3 = parse_bad(R"({"messages":[{"role":"user","content":"x"}],"n":3})");
  EXPECT_EQ(n3.param, "n");
  EXPECT_EQ(n3.message, "'n' must be 1 (this server generates one choice per request), got 3");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"n":0})").message,
            "'n' must be 1 (this server generates one choice per request), got 0");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"n":"2"})").message,
            "'n' must be an integer, not a string");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})").param, "stop");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})").param,
            "stream");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"tool","content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(parse_bad(R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  // A user's or system's content of null or of another type: 400 naming the field.
  const ApiError null_content =
      parse_bad(R"({"messages":[{"role":"system","content":"x"},{"role":"user","content":null}]})");
  EXPECT_EQ(null_content.param, "messages[1].content");
  EXPECT_EQ(null_content.message,
            "'messages[1].content' must be a string or an array of content parts, not null");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":42}]})").message,
            "'messages[0].content' must be a string or an array of content parts, not an integer");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":{"text":"x"}}]})").param,
            "messages[0].content");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(parse_bad(R"({"messages":[{"role":"user","content":"x"}],"model":5})").param, "model");
  EXPECT_EQ(
      parse_bad(
          R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}})")
          .param,
      "stream_options.include_usage");
}

// Found by tests/fuzz (corpus/http_request/regress-number-overflow.txt): a number past a
// double's range made the parser throw out_of_range, which the server answered 500.
TEST(OpenAIJson, MalformedJsonNamesWhereAndDepthIsBounded) {
  EXPECT_EQ(parse_bad("41e2041e").message,
            "the request body is not valid JSON (a number out of range)");
  EXPECT_EQ(
      parse_bad(R"({"messages":[{"role":"user","content":"x"}],"temperature":1e999})").message,
      "the request body is not valid JSON (a number out of range)");
  EXPECT_EQ(parse_bad("{bad json").message, "the request body is not valid JSON (at byte 2)");
  EXPECT_EQ(parse_bad(std::string(100000, '[')).message,
            "the request body nests JSON deeper than 32 levels");
  const std::string deep_ok = std::string(31, '[') + std::string(31, ']');
  EXPECT_EQ(
      parse_bad(R"({"messages":[{"role":"user","content":"x"}],"stop":)" + deep_ok + "}").param,
      "stop");  // 32 levels parse; the field's type is what is wrong
}

TEST(OpenAIJson, ErrorObject) {
  const json j =
      json::parse(error_json(ApiError{400, "bad thing", "invalid_request_error", "", ""}));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad thing");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  const json k = json::parse(error_json(ApiError{401, "no", "invalid_request_error", "p", "c"}));
  EXPECT_EQ(k["error"]["param"], "p");
  EXPECT_EQ(k["error"]["code"], "c");
}

TEST(OpenAIJson, ResponseObjects) {
  const ResponseMeta meta{"chatcmpl-abc", 1700000000, "m.gguf"};
  CompletionResult r;
  r.text = "Hi \xff there";  // invalid UTF-8 from a model must not throw
  r.prompt_tokens = 7;
  r.completion_tokens = 3;
  r.finish_reason = "length";
  const json c = json::parse(completion_json(meta, true, r));
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["id"], "chatcmpl-abc");
  EXPECT_EQ(c["created"], 1700000000);
  EXPECT_EQ(c["model"], "m.gguf");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 10);
  const json t = json::parse(completion_json(meta, false, r));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_TRUE(t["choices"][0]["text"].is_string());

  const json first = json::parse(chunk_json(meta, true, "", true, ""));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json mid = json::parse(chunk_json(meta, true, "abc", false, ""));
  EXPECT_EQ(mid["choices"][0]["delta"]["content"], "abc");
  EXPECT_FALSE(mid["choices"][0]["delta"].contains("role"));
  const json last = json::parse(chunk_json(meta, true, "", false, "cancelled"));
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json u = json::parse(usage_chunk_json(meta, false, 4, 5));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 9);
  EXPECT_EQ(sse_event("x"), "data: x\n\n");

  const json m = json::parse(models_json("m.gguf", 5));
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "m.gguf");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(new_response_id("cmpl-").size(), 5u + 24u);
}

}  // namespace
}  // namespace spw::app::serve
