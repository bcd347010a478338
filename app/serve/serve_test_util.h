// Helpers of the server and remote-client tests: the stories260K engine (when ../shared has
// it), a scripted backend whose runs can be held and counted, SSE parsing, a raw socket.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/runtime/engine.h"
#include "app/serve/server.h"

namespace spw::app::serve::testing {

/// stories260K loaded once per process for the CPU (2 threads); nullptr when ../shared lacks it
/// (tests then GTEST_SKIP with the path).
inline const Engine* stories_engine() {
  static std::unique_ptr<Engine> engine = [] {
    const std::filesystem::path p =
        std::filesystem::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf";
    std::unique_ptr<Engine> e;
    if (!std::filesystem::exists(p)) return e;
    EngineSettings s;
    s.model_path = p.string();
    s.n_threads = 2;
    s.device = "cpu";
    s.use_snapshots = false;
    auto loaded = Engine::load(s);
    EXPECT_TRUE(loaded.ok()) << (loaded.ok() ? "" : loaded.error().message);
    if (loaded) e = std::move(*loaded);
    return e;
  }();
  return engine.get();
}
inline std::string stories_path() {
  return (std::filesystem::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf").string();
}

inline Completion greedy(int32_t max_tokens, std::vector<std::string> stop = {}) {
  Completion c;
  c.max_tokens = max_tokens;
  c.sampling.temp = 0.0f;
  c.stop = std::move(stop);
  return c;
}

/// A backend that writes "t0 t1 t2 ..." (one piece per token), polls `cancelled` before each
/// token as the engine does, optionally waits at a gate before starting and sleeps per token.
/// Records every run's result.
class ScriptedBackend {
 public:
  void close_gate() {
    std::lock_guard<std::mutex> l(mu_);
    gate_open_ = false;
  }
  void open_gate() {
    {
      std::lock_guard<std::mutex> l(mu_);
      gate_open_ = true;
    }
    cv_.notify_all();
  }
  void set_token_delay(std::chrono::microseconds d) { delay_ = d; }

  /// Blocks until `n` runs have entered (or 60 s passed: false).
  bool wait_entered(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return entered_ >= n; });
  }
  /// Blocks until `n` runs have returned (or 60 s passed: false).
  bool wait_finished(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return int(results_.size()) >= n; });
  }
  std::vector<CompletionResult> results() {
    std::lock_guard<std::mutex> l(mu_);
    return results_;
  }

  ServeBackend backend() {
    ServeBackend b;
    b.chat = [this](const std::vector<ChatMessage>&, const Completion& c, const RunCallbacks& cb) {
      return run(c, cb);
    };
    b.text = [this](const std::string&, const Completion& c, const RunCallbacks& cb) {
      return run(c, cb);
    };
    return b;
  }

 private:
  Expected<CompletionResult> run(const Completion& c, const RunCallbacks& cb) {
    {
      std::unique_lock<std::mutex> l(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(l, [&] { return gate_open_; });
    }
    CompletionResult r;
    r.prompt_tokens = 3;
    r.finish_reason = "length";
    for (int32_t i = 0; c.max_tokens < 0 || i < c.max_tokens; ++i) {
      if (cb.cancelled && cb.cancelled()) {
        r.finish_reason = "cancelled";
        break;
      }
      const std::string piece = "t" + std::to_string(i) + " ";
      r.text += piece;
      ++r.completion_tokens;
      if (cb.piece) cb.piece(piece);
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      results_.push_back(r);
    }
    cv_.notify_all();
    return r;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_open_ = true;
  int entered_ = 0;
  std::vector<CompletionResult> results_;
  std::chrono::microseconds delay_{0};
};

/// The "data: " payloads of a server-sent-event body, in order ("[DONE]" included).
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

/// A TCP connection to 127.0.0.1:port (the caller closes it); -1 on failure.
inline int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// A TCP connection to 127.0.0.1:port from the loopback address `source` (e.g. "127.0.0.2", so
/// that a test's clients count as another client address); -1 on failure.
inline int connect_loopback_from(int port, const char* source) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, source, &src.sin_addr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Everything `fd` receives until the peer closes or `deadline_s` seconds pass (a deadline that
/// only detects a hang).
inline std::string read_until_close(int fd, int deadline_s = 30) {
  std::string out;
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  char buf[8192];
  while (std::chrono::steady_clock::now() < end) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.append(buf, size_t(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      break;
    }
  }
  return out;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

}  // namespace spw::app::serve::testing
