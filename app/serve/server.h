// The OpenAI-compatible HTTP server of `spillway-cli serve`: GET /v1/models, POST
// /v1/chat/completions and POST /v1/completions (also without the /v1 prefix, as llama.cpp's
// server accepts them), whole responses and server-sent-event streams, on one loaded engine.
//
// Threads: HTTP connections are handled by a pool of `http_threads`; requests for the engine go
// into a bounded FIFO queue drained by ONE worker thread, which runs them one at a time in
// arrival order (the engine runs one generation at a time). A full queue answers 503 with a
// Retry-After header at once. A client that goes away cancels its generation: a streamed
// response's write fails, and for both kinds the worker polls the connection's socket for an
// orderly close (recv MSG_PEEK) between ubatches and tokens, so a queued or running request of
// a vanished client stops within one token. (cpp-httplib 0.11 gives a handler no connection
// state; the socket is found by its address pair in /proc/self/fd, Linux only. Elsewhere only
// the streamed write failure cancels.)
//
// start() sets SIGPIPE to ignored when it has its default action (a write to a vanished client
// must fail, not end the process).
//
// Security: loopback hosts only, unless an API key is set; with a key every request needs
// "Authorization: Bearer KEY" (401 otherwise). The key is held in memory, never written.
//
// The HTTP library is kept out of this header (pimpl): ui/ and the job runner can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "engine/common/expected.h"

namespace spw::app::serve {

/// What the server runs requests on: complete_chat / complete_text of one engine
/// (engine_backend), or a test double. Called on the worker thread only, one call at a time.
struct ServeBackend {
  std::function<Expected<CompletionResult>(const std::vector<ChatMessage>&, const Completion&,
                                           const RunCallbacks&)>
      chat;
  std::function<Expected<CompletionResult>(const std::string&, const Completion&,
                                           const RunCallbacks&)>
      text;
};
/// complete_chat and complete_text on `engine`, which must outlive the server.
ServeBackend engine_backend(const Engine& engine);

struct ServerOptions {
  std::string host = "127.0.0.1";  // a name or an address; non-loopback needs api_key
  int port = 8080;                 // 0: the system picks a free port (see Server::port())
  std::string api_key;             // empty: no authentication (loopback only)
  std::string model_id;            // what /v1/models lists and responses name
  int max_queue = 8;               // requests waiting for the engine, the running one not counted
  int http_threads = 0;            // connection handlers; 0: max(max_queue + 8, 128)
  int retry_after_s = 2;           // the Retry-After of a 503
  size_t max_body_bytes = size_t(64) << 20;  // larger request bodies: 413
  /// One line per request ("POST /v1/chat/completions 200 12+34 tokens 1.20 s") and notes;
  /// called from any thread (serialised by the server). Empty: silent.
  std::function<void(const std::string&)> log;
};

/// True for "localhost", 127.0.0.0/8 and ::1 (the hosts served without an API key).
bool is_loopback_host(const std::string& host);

/// Counters since start(), for tests and the log.
struct ServerStats {
  int64_t completed = 0;         // generations that ran to "stop" or "length"
  int64_t cancelled = 0;         // generations cancelled (client gone, server stopping)
  int64_t failed = 0;            // engine errors (answered 4xx/5xx)
  int64_t rejected_busy = 0;     // answered 503: the queue was full
  int64_t bad_requests = 0;      // answered 400
  int64_t unauthorized = 0;      // answered 401
  int64_t tokens_generated = 0;  // completion tokens of every generation, cancelled ones included
  int64_t waiting = 0;           // requests in the queue now (the running one not counted)
};

class Server {
 public:
  Server(ServerOptions options, ServeBackend backend);
  /// Stops (as stop()).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Checks the options, binds and starts serving on background threads. Errors: a non-loopback
  /// host without an API key ("refusing to listen on 0.0.0.0 without an API key: set
  /// SPILLWAY_API_KEY ..."), an address that cannot be bound (names host:port), started twice.
  Status start();
  /// The bound port (the chosen one when options.port was 0); 0 before start().
  int port() const;
  /// Stops accepting, cancels queued and running generations, joins every thread. Idempotent;
  /// any thread but a backend callback's.
  void stop();
  /// Blocks until stop() has been called (by another thread) and the listener has ended.
  void wait();
  ServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spw::app::serve
