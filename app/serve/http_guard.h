// The server's front door: every connection is read by the server itself before cpp-httplib sees
// a request, so that a slow, hostile or malformed client is answered at once with a clear error
// and can hold no more than its share of the connection threads.
//
// Per connection: admission (a cap on open connections in total and per client address), then
// per request: the whole
// request head (request line and headers) within a deadline, parsed strictly
// (parse_request_head), the API key checked right after the head and before any body is read
// (401 with WWW-Authenticate: Bearer), the method checked against the route (405 with Allow), the
// body length checked from Content-Length (413 before a byte of it is read), the body read within
// its own deadline, and only then the request handed to httplib's routing from a buffer. Bytes
// past one request (pipelining) stay buffered for the next, so pipelined requests are answered in
// order. An idle keep-alive connection is closed after HttpLimits::idle_timeout_ms.
//
// Admission: past the per-client cap a connection gets 503 with Retry-After at once. At the total
// cap the newcomer is admitted and the connection that has waited longest without a complete
// request head (a slow head, or an idle keep-alive connection) is evicted: it gets that 503 and is
// closed. So clients that trickle their heads from many addresses cannot hold every admission
// while normal clients wait; only when every open connection has sent its head (requests being
// read or answered) is the newcomer refused.
//
// Every refusal is an OpenAI error object with "Connection: close", and the connection is then
// closed (never silence, never a half-read body taken for the next request) after a short
// lingering read, so the client sees the refusal rather than a reset. A stopping server ends
// every wait of the front door within 200 ms.
//
// Linux/POSIX sockets. Includes cpp-httplib: for app/serve only (server.h stays free of it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>

#include "app/serve/http.h"
#include "app/serve/http_head.h"

namespace spw::app::serve {

/// The full response text of a refusal: status line, the refusal's headers, JSON error body
/// (openai_json.h's error_json), "Connection: close".
std::string refusal_response(const HttpRefusal& r);

/// What the front door needs to know of the server behind it.
struct FrontDoorPolicy {
  HttpLimits limits;
  std::string api_key;  // empty: no authentication
  int retry_after_s = 2;
  /// The methods served on `path`, comma-separated ("GET", "POST"), or "" for a path that is not
  /// served (then httplib answers it: 404).
  std::function<std::string(const std::string& path)> allowed_methods;
  /// A line for the log (refusals); empty: silent. Called from connection threads.
  std::function<void(const std::string&)> log;
};

/// Counters of the front door since it started.
struct FrontDoorStats {
  int64_t refused_connections = 0;  // 503: past the total or per-client cap
  int64_t evicted_connections = 0;  // 503: evicted at the total cap for a newcomer
  int64_t refused_requests = 0;     // answered by the front door with a 4xx (401 included)
  int64_t unauthorized = 0;         // 401
  int64_t timeouts = 0;             // 408: head or body not complete in time
  int64_t open_connections = 0;     // now
};

/// cpp-httplib's server with the front door in front of its routing (process_and_close_socket is
/// the library's per-connection hook; process_request its request handling from a Stream).
class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(FrontDoorPolicy policy);
  FrontDoorStats front_door_stats() const;

 private:
  // An admitted connection, for eviction (fields under mu_).
  struct Conn {
    int sock = -1;
    std::string peer;
    bool waiting_head = true;  // no complete request head since `since`
    std::chrono::steady_clock::time_point since;
    bool evicted = false;  // shut for reading by a newcomer; no longer counted in open_
  };

  bool process_and_close_socket(socket_t sock) override;
  void serve_connection(Conn& conn, bool* big_body);
  void refuse(int sock, const HttpRefusal& r, const std::string& what);
  // Marks `conn` waiting for a request head from now (true) or done waiting (false): false when
  // it has been evicted and must end.
  bool set_waiting(Conn& conn, bool waiting);
  // Evicts the connection waiting longest for its head (mu_ held): false when none waits.
  bool evict_oldest_waiting();
  // Drops `conn` from the counts (mu_ held), once.
  void forget(Conn& conn);
  // Answers an evicted connection's client (503); nothing for one that was not evicted.
  void answer_eviction(Conn& conn);

  FrontDoorPolicy policy_;
  mutable std::mutex mu_;
  std::map<std::string, int> per_client_;  // open connections by client address (mu_)
  int open_ = 0;                           // (mu_)
  std::list<Conn*> conns_;                 // admitted and not evicted (mu_)
  std::atomic<int64_t> refused_connections_{0}, refused_requests_{0}, unauthorized_{0},
      timeouts_{0}, evicted_connections_{0};
};

/// The socket of the connection whose request the calling thread is handling (inside a route
/// handler of a GuardedServer), or -1.
int current_connection_fd();

}  // namespace spw::app::serve
