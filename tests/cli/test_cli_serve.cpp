// spillway-cli serve, black box: the server started as a child process on a generated model
// with --port 0 (the chosen port read from its "listening on" line), spoken to over raw HTTP on
// loopback; the API key from the environment; the refusal to listen beyond loopback without
// one; a port already taken; SIGTERM ends it with exit code 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cli_runner.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-serve-test"); }

fs::path test_model() {
  static const fs::path p = [] {
    const fs::path path = tmp_dir() / "serve-model.gguf";
    EXPECT_TRUE(write_test_model(TestModelSpec{}, path.string()).ok());
    return path;
  }();
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `spillway-cli serve ...` as a child: stdout through a pipe (for the "listening on" line),
// stderr into a file. `api_key` empty: SPILLWAY_API_KEY unset in the child.
class ServeProcess {
 public:
  ServeProcess(const std::vector<std::string>& args, const std::string& api_key) {
    static int counter = 0;
    err_path_ = tmp_dir() / ("serve-stderr-" + std::to_string(++counter) + ".txt");
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      FILE* err = std::fopen(err_path_.c_str(), "w");
      if (err) dup2(fileno(err), 2);
      if (api_key.empty()) {
        unsetenv("SPILLWAY_API_KEY");
      } else {
        setenv("SPILLWAY_API_KEY", api_key.c_str(), 1);
      }
      std::vector<std::string> full = {SPILLWAY_CLI_PATH, "--data-dir",
                                       (tmp_dir() / "data").string()};
      full.insert(full.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& s : full) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }

  /// The port of the "listening on http://127.0.0.1:PORT" line; 0 when the process ended (or
  /// 60 s passed) without one.
  int wait_listening() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char c;
      if (read(out_fd_, &c, 1) != 1) return 0;
      if (c != '\n') {
        line += c;
        continue;
      }
      std::smatch m;
      static const std::regex re(R"(^listening on http://[^ ]+:([0-9]+)$)");
      if (std::regex_match(line, m, re)) return std::stoi(m[1].str());
      stdout_ += line + "\n";
      line.clear();
    }
    return 0;
  }

  /// Sends `sig` and waits (60 s at most) for the exit; the exit code, or 128 + the signal.
  int stop(int sig = SIGTERM) {
    kill(pid_, sig);
    return wait_exit();
  }
  int wait_exit() {
    int status = 0;
    for (int i = 0; i < 600; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  std::string err() const { return slurp(err_path_); }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool exited_ = false;
  fs::path err_path_;
  std::string stdout_;
};

struct HttpReply {
  int status = 0;
  std::string headers, body;
};

// One HTTP/1.1 request with "Connection: close" to 127.0.0.1:port; the reply read to EOF.
HttpReply http(int port, const std::string& method, const std::string& path,
               const std::string& body = "", const std::string& extra_headers = "") {
  HttpReply r;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return r;
  }
  std::string req =
      method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty()) {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    const ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, size_t(n));
  }
  close(fd);
  const size_t sep = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || sep == std::string::npos) return r;
  r.status = std::stoi(all.substr(9, 3));
  r.headers = all.substr(0, sep);
  r.body = all.substr(sep + 4);
  return r;
}

const std::string kChat =
    R"({"model":"gpt-x","messages":[{"role":"user","content":"Hello there"}],"max_tokens":5,"temperature":0})";

TEST(CliServe, ServesAGeneratedModel) {
  ServeProcess p(
      {"serve", "-m", test_model().string(), "--port", "0", "-t", "1", "--device", "cpu"}, "");
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.err();

  const HttpReply models = http(port, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json m = json::parse(models.body);
  EXPECT_EQ(m["data"][0]["id"], "serve-model.gguf");

  const HttpReply chat = http(port, "POST", "/v1/chat/completions", kChat);
  ASSERT_EQ(chat.status, 200) << chat.body;
  const json c = json::parse(chat.body);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["model"], "serve-model.gguf");
  const int64_t n = c["usage"]["completion_tokens"];
  EXPECT_GE(n, 0);
  EXPECT_LE(n, 5);
  EXPECT_EQ(c["usage"]["total_tokens"], c["usage"]["prompt_tokens"].get<int64_t>() + n);
  EXPECT_EQ(c["choices"][0]["finish_reason"], n == 5 ? "length" : "stop");
  // Greedy: the same request gives the same text.
  const HttpReply again = http(port, "POST", "/v1/chat/completions", kChat);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(json::parse(again.body)["choices"][0]["message"]["content"],
            c["choices"][0]["message"]["content"]);

  const HttpReply bad = http(port, "POST", "/v1/chat/completions", "{oops");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["type"], "invalid_request_error");
  // More than one choice: 400 saying that n is 1 here, naming the value sent.
  const HttpReply n3 = http(port, "POST", "/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"hi"}],"n":3})");
  EXPECT_EQ(n3.status, 400) << n3.body;
  const json n3e = json::parse(n3.body, nullptr, false);
  EXPECT_EQ(n3e["error"]["param"], "n") << n3.body;
  EXPECT_EQ(n3e["error"]["message"],
            "'n' must be 1 (this server generates one choice per request), got 3")
      << n3.body;

  EXPECT_EQ(p.stop(SIGTERM), 0) << p.err();
  const std::string err = p.err();
  EXPECT_NE(err.find("POST /v1/chat/completions 200"), std::string::npos) << err;
  EXPECT_NE(err.find("stopping (SIGTERM)"), std::string::npos) << err;
}

TEST(CliServe, RefusesNonLoopbackWithoutKey) {
  unsetenv("SPILLWAY_API_KEY");
  const CliResult r = run_cli(
      SPILLWAY_CLI_PATH, {"serve", "-m", test_model().string(), "--host", "0.0.0.0", "--port", "0"},
      tmp_dir());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("error: refusing to listen on 0.0.0.0 without an API key: set "
                       "SPILLWAY_API_KEY"),
            std::string::npos)
      << r.err;
}

TEST(CliServe, ApiKeyFromTheEnvironment) {
  ServeProcess p({"serve", "-m", test_model().string(), "--host", "0.0.0.0", "--port", "0", "-t",
                  "1", "--device", "cpu"},
                 "test-key-123-abcdefgh");
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.err();
  const HttpReply none = http(port, "POST", "/v1/chat/completions", kChat);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(json::parse(none.body)["error"]["code"], "invalid_api_key");
  const HttpReply wrong = http(port, "GET", "/v1/models", "", "Authorization: Bearer nope\r\n");
  EXPECT_EQ(wrong.status, 401);
  const HttpReply right = http(port, "POST", "/v1/chat/completions", kChat,
                               "Authorization: Bearer test-key-123-abcdefgh\r\n");
  EXPECT_EQ(right.status, 200) << right.body;
  EXPECT_EQ(p.stop(SIGINT), 0);
  EXPECT_EQ(p.err().find("test-key-123"), std::string::npos);  // the key is never printed
}

TEST(CliServe, RefusesAShortKeyOffLoopback) {
  const fs::path dir = tmp_dir();
  setenv("SPILLWAY_API_KEY", "short-key", 1);
  const CliResult r =
      run_cli(SPILLWAY_CLI_PATH,
              {"serve", "-m", test_model().string(), "--host", "0.0.0.0", "--port", "0"}, dir);
  unsetenv("SPILLWAY_API_KEY");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: refusing to listen on 0.0.0.0 with an API key of 9 bytes: a key "
                       "for a non-loopback address needs at least 16"),
            std::string::npos)
      << r.err;
}

// --max-body and the prompt that cannot fit, on the generated model (context 64 tokens here).
TEST(CliServe, BodyLimitAndAPromptThatCannotFit) {
  ServeProcess p({"serve", "-m", test_model().string(), "--port", "0", "-t", "1", "--device", "cpu",
                  "-c", "64", "--max-body", "4KiB"},
                 "");
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.err();
  const std::string big = R"({"prompt":")" + std::string(5000, 'a') + R"("})";
  const HttpReply too_big = http(port, "POST", "/v1/completions", big);
  EXPECT_EQ(too_big.status, 413) << too_big.body;
  EXPECT_EQ(json::parse(too_big.body)["error"]["message"],
            "the request body (5013 bytes) is larger than the limit of 4096 bytes (--max-body)");
  // 3,000 bytes are far more than 64 tokens of this vocabulary, refused before tokenizing.
  const std::string long_prompt = R"({"prompt":")" + std::string(3000, 'a') + R"("})";
  const HttpReply no_fit = http(port, "POST", "/v1/completions", long_prompt);
  EXPECT_EQ(no_fit.status, 400) << no_fit.body;
  const json e = json::parse(no_fit.body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["message"].get<std::string>().rfind("the prompt has at least ", 0), 0u) << e;
  EXPECT_NE(e["message"].get<std::string>().find("the context holds 64"), std::string::npos);
  const HttpReply bad_flag = http(port, "GET", "/v1/completions");
  EXPECT_EQ(bad_flag.status, 405);
  EXPECT_EQ(p.stop(), 0) << p.err();
  const CliResult flag = run_cli(
      SPILLWAY_CLI_PATH,
      {"serve", "-m", test_model().string(), "--port", "0", "--max-body", "lots"}, tmp_dir());
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("error: --max-body: invalid size 'lots'"), std::string::npos) << flag.err;
}

TEST(CliServe, PortInUse) {
  ServeProcess first({"serve", "-m", test_model().string(), "--port", "0", "-t", "1"}, "");
  const int port = first.wait_listening();
  ASSERT_GT(port, 0) << first.err();
  const CliResult r = run_cli(
      SPILLWAY_CLI_PATH,
      {"serve", "-m", test_model().string(), "--port", std::to_string(port), "-t", "1"}, tmp_dir());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(first.stop(), 0);
}

TEST(CliServe, BadFlags) {
  const CliResult model =
      run_cli(SPILLWAY_CLI_PATH,
              {"serve", "-m", (tmp_dir() / "missing.gguf").string(), "--port", "0"}, tmp_dir());
  EXPECT_EQ(model.exit_code, 1);
  EXPECT_NE(model.err.find("missing.gguf"), std::string::npos) << model.err;
  const CliResult kv = run_cli(
      SPILLWAY_CLI_PATH,
      {"serve", "-m", test_model().string(), "--port", "0", "--cache-type-k", "q9"}, tmp_dir());
  EXPECT_EQ(kv.exit_code, 2);
  EXPECT_NE(kv.err.find("--cache-type-k"), std::string::npos) << kv.err;
  const CliResult port = run_cli(
      SPILLWAY_CLI_PATH, {"serve", "-m", test_model().string(), "--port", "70000"}, tmp_dir());
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_NE(port.err.find("error: --port must be 0..65535, got 70000"), std::string::npos)
      << port.err;
  // A queue of 0 would answer every request 503: refused.
  const CliResult queue =
      run_cli(SPILLWAY_CLI_PATH,
              {"serve", "-m", test_model().string(), "--port", "0", "--max-queue", "0"}, tmp_dir());
  EXPECT_EQ(queue.exit_code, 2);
  EXPECT_NE(queue.err.find("error: --max-queue must be 1..2147483647, got 0"), std::string::npos)
      << queue.err;
  // No time to tokenize would refuse every prompt.
  const CliResult tokenize = run_cli(
      SPILLWAY_CLI_PATH,
      {"serve", "-m", test_model().string(), "--port", "0", "--tokenize-timeout", "0"}, tmp_dir());
  EXPECT_EQ(tokenize.exit_code, 2);
  EXPECT_NE(tokenize.err.find("--tokenize-timeout must be in (0, 3600], got 0"), std::string::npos)
      << tokenize.err;
}

}  // namespace
}  // namespace spw
