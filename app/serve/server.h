// The OpenAI-compatible HTTP server of `spillway-cli serve`: GET /v1/models, POST
// /v1/chat/completions and POST /v1/completions (also without the /v1 prefix, as llama.cpp's
// server accepts them), whole responses and server-sent-event streams, on one loaded engine.
//
// Threads: HTTP connections are handled by a pool of `http_threads`; requests for the engine go
// into a bounded FIFO queue drained by ONE worker thread, which runs them one at a time in
// arrival order (the engine runs one generation at a time). A full queue answers 429 with a
// Retry-After header at once; GET /health and /v1/models never wait for the engine. A client
// that goes away cancels its generation: a streamed response's write fails, and for both kinds
// the worker polls the connection's socket for an orderly close (recv MSG_PEEK) between ubatches
// and tokens, so a queued or running request of a vanished client stops within one token.
//
// Hostile clients (app/serve/http_guard.h, the front door): at most `limits.max_connections`
// connections are open at once and `limits.max_per_client` from one address, both well below the
// thread count, so a slow client never holds the last thread; past the per-client cap a
// connection gets 503 with Retry-After at once; at the total cap the connection that has waited
// longest without sending a complete request head is evicted (503) for the newcomer, which is
// refused only when every open connection has sent its head. The request head must arrive whole
// within limits.head_timeout_ms, the body within limits.body_timeout_ms (408 otherwise); an idle
// keep-alive connection is closed after limits.idle_timeout_ms. The head is parsed strictly (400
// for conflicting framing, 431 for a head too large, 405 with Allow for a method a path does not
// serve); a body past limits.max_body_bytes is refused from its Content-Length (413) before it is
// read. A prompt whose length in bytes alone proves it cannot fit the context is refused (400)
// before it is tokenized (ServeBackend::max_token_bytes); one that passes that bound but takes
// longer than tokenize_timeout_ms to tokenize (megabytes of text near the body limit, a long run
// without spaces) is stopped there and answered 413, so it holds the engine for no longer than
// that.
//
// start() sets SIGPIPE to ignored when it has its default action (a write to a vanished client
// must fail, not end the process), and (glibc) fixes the process's mmap threshold at 1 MiB so
// that big request buffers return to the system when freed.
//
// Security: loopback hosts only, unless an API key of at least 16 bytes is set; with a key every
// request needs "Authorization: Bearer KEY" (the key byte for byte, compared in constant time;
// 401 with "WWW-Authenticate: Bearer" otherwise), checked right after the request head, before
// any of the body is read. The key is held in memory, never written.
//
// The HTTP library is kept out of this header (pimpl): ui/ and the job runner can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "app/serve/http_head.h"
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
  /// The context in tokens (0: unknown). A request's max_tokens above it is clamped to it.
  int64_t n_ctx = 0;
  /// The longest text one token can stand for, in bytes (0: unknown). A prompt of B bytes has at
  /// least B / max_token_bytes tokens: one that cannot fit n_ctx by that count is refused
  /// before it is tokenized.
  size_t max_token_bytes = 0;
};
/// complete_chat and complete_text on `engine`, which must outlive the server (n_ctx and
/// max_token_bytes from its settings and vocabulary).
ServeBackend engine_backend(const Engine& engine);

struct ServerOptions {
  std::string host = "127.0.0.1";  // a name or an address; non-loopback needs api_key
  int port = 8080;                 // 0: the system picks a free port (see Server::port())
  std::string api_key;             // empty: no authentication (loopback only)
  std::string model_id;            // what /v1/models lists and responses name
  int max_queue = 8;               // requests waiting for the engine, the running one not counted
  /// Connection handlers; 0: max(max_queue + 8, 128, 2 * limits.max_connections). Set, it caps
  /// limits.max_connections at 3/4 of it.
  int http_threads = 0;
  int retry_after_s = 2;  // the Retry-After of a 429 (queue full) or 503 (connection caps)
  /// The longest a request's prompt may take to tokenize (its turn on the engine counted from
  /// its start); past it the tokenizing stops and the request is answered 413
  /// (code "tokenize_timeout").
  int tokenize_timeout_ms = 5000;
  /// Connections, deadlines and sizes (http_head.h): 64 connections, 16 per client, the head in
  /// 5 s, bodies up to 8 MiB (413 past it).
  HttpLimits limits;
  /// One line per request ("POST /v1/chat/completions 200 12+34 tokens 1.20 s") and notes;
  /// called from any thread (serialised by the server). Empty: silent.
  std::function<void(const std::string&)> log;
};

/// The shortest API key accepted for a non-loopback host, in bytes.
inline constexpr size_t kMinApiKeyBytes = 16;

/// True for "localhost", 127.0.0.0/8 and ::1 (the hosts served without an API key).
bool is_loopback_host(const std::string& host);

/// Counters since start(), for tests and the log.
struct ServerStats {
  int64_t completed = 0;             // generations that ran to "stop" or "length"
  int64_t cancelled = 0;             // generations cancelled (client gone, server stopping)
  int64_t failed = 0;                // engine errors (answered 4xx/5xx)
  int64_t rejected_busy = 0;         // answered 429: the queue was full
  int64_t bad_requests = 0;          // answered 400
  int64_t unauthorized = 0;          // answered 401
  int64_t rejected_connections = 0;  // answered 503: past the connection caps
  int64_t evicted_connections = 0;   // 503: closed at the total cap for a newcomer, no head sent
  int64_t refused_requests = 0;      // answered 4xx by the front door (401, 405, 408, 413, 431 ...)
  int64_t tokenize_timeouts = 0;     // answered 413: the prompt took too long to tokenize
  int64_t tokens_generated = 0;  // completion tokens of every generation, cancelled ones included
  int64_t open_connections = 0;  // connections admitted and open now
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
  /// SPILLWAY_API_KEY ...") or with one shorter than kMinApiKeyBytes, limits out of range, an
  /// address that cannot be bound (names host:port), started twice.
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
