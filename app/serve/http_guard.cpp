#include "app/serve/http_guard.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "app/serve/openai_json.h"

namespace spw::app::serve {

namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_connection_fd = -1;

// A request body at least this large leaves the heap with free pages to give back afterwards.
constexpr size_t kTrimAfterBytes = size_t(1) << 20;
// A refused connection is read (and dropped) for at most this long and this much before close.
constexpr int kLingerMs = 1000;
constexpr size_t kLingerBytes = size_t(1) << 20;

std::string numeric_host(const sockaddr_storage& a, socklen_t len, int* port) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {};
  }
  if (port) *port = std::atoi(serv);
  return host;
}

int ms_left(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return d.count() < 0 ? 0 : int(d.count());
}

// Waits until `sock` can be read (or written) or the deadline passes: false on timeout or error.
bool wait_socket(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Appends what `sock` has to `buf` (at most `max` bytes), waiting until `deadline`. The wait is
// cut into slices so that a stopping server (`listen_sock` closed) ends it: Closed then.
enum class Read { Data, Closed, Timeout };
Read read_some(int sock, std::string& buf, size_t max, Clock::time_point deadline,
               const std::atomic<int>& listen_sock) {
  for (;;) {
    if (listen_sock.load() == INVALID_SOCKET) return Read::Closed;
    const int left = ms_left(deadline);
    if (wait_socket(sock, POLLIN, std::min(left, 200))) break;
    if (left <= 200) return Read::Timeout;
  }
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::recv(sock, chunk, std::min(sizeof chunk, max), 0);
    if (n > 0) {
      buf.append(chunk, size_t(n));
      return Read::Data;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Read::Timeout;
    return Read::Closed;
  }
}

bool send_all(int sock, std::string_view s, int timeout_ms) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!s.empty()) {
    if (!wait_socket(sock, POLLOUT, ms_left(deadline))) return false;
    const ssize_t n = ::send(sock, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(size_t(n));
  }
  return true;
}

// The one request httplib reads (a canonical head and the body, from memory), writing its
// response to the socket. The rest of the connection stays with the front door.
class BufferedRequestStream final : public httplib::Stream {
 public:
  BufferedRequestStream(int sock, std::string request, int write_timeout_ms)
      : sock_(sock), data_(std::move(request)), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override { return pos_ < data_.size(); }
  bool is_writable() const override { return wait_socket(sock_, POLLOUT, write_timeout_ms_); }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, data_.size() - pos_);
    std::copy_n(data_.data() + pos_, n, ptr);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      ip = numeric_host(a, len, &port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      ip = numeric_host(a, len, &port);
    }
  }
  socket_t socket() const override { return sock_; }

 private:
  int sock_;
  std::string data_;
  size_t pos_ = 0;
  int write_timeout_ms_;
};

// The head httplib parses: the request line and headers as sent, framing headers rewritten
// (one Content-Length, no Expect), CRLF line ends.
std::string canonical_head(const RequestHead& h) {
  std::string s = h.method + " " + h.target + " " + h.version + "\r\n";
  for (const auto& [k, v] : h.headers) {
    std::string lk = k;
    for (char& c : lk) c = char(std::tolower(uint8_t(c)));
    if (lk == "content-length" || lk == "expect" || lk == "transfer-encoding") continue;
    s += k + ": " + v + "\r\n";
  }
  if (h.content_length > 0 || h.method == "POST" || h.method == "PUT") {
    s += "Content-Length: " + std::to_string(h.content_length) + "\r\n";
  }
  s += "\r\n";
  return s;
}

}  // namespace

std::string refusal_response(const HttpRefusal& r) {
  const std::string body = error_json(ApiError{
      r.status, r.message, r.status >= 500 ? "server_error" : "invalid_request_error", "", r.code});
  std::string s = fmt::format("HTTP/1.1 {} {}\r\n", r.status, status_reason(r.status));
  for (const auto& [k, v] : r.headers) s += k + ": " + v + "\r\n";
  s += fmt::format(
      "Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
      body.size());
  s += body;
  return s;
}

int current_connection_fd() { return t_connection_fd; }

GuardedServer::GuardedServer(FrontDoorPolicy policy) : policy_(std::move(policy)) {
  set_payload_max_length(policy_.limits.max_body_bytes);
  set_keep_alive_max_count(size_t(std::max(policy_.limits.max_requests_per_connection, 1)));
  set_keep_alive_timeout(std::max(policy_.limits.idle_timeout_ms / 1000, 1));
}

FrontDoorStats GuardedServer::front_door_stats() const {
  FrontDoorStats s;
  s.refused_connections = refused_connections_.load();
  s.refused_requests = refused_requests_.load();
  s.unauthorized = unauthorized_.load();
  s.timeouts = timeouts_.load();
  s.evicted_connections = evicted_connections_.load();
  std::lock_guard<std::mutex> lock(mu_);
  s.open_connections = open_;
  return s;
}

void GuardedServer::refuse(int sock, const HttpRefusal& r, const std::string& what) {
  if (r.status == 408) ++timeouts_;
  if (r.status == 401) ++unauthorized_;
  if (r.status < 500) ++refused_requests_;
  if (policy_.log && !what.empty())
    policy_.log(fmt::format("{} {} ({})", what, r.status, r.message));
  // Best effort and short: a client that does not read its refusal is not waited for.
  if (!send_all(sock, refusal_response(r), std::min(policy_.limits.write_timeout_ms, 2000))) return;
  // A lingering close: what the client is still sending (the rest of a head or body) is read
  // and dropped for a moment, so that closing over unread bytes does not reset the connection
  // and destroy the refusal before the client has read it.
  ::shutdown(sock, SHUT_WR);
  const auto end = Clock::now() + std::chrono::milliseconds(kLingerMs);
  std::string sink;
  for (size_t dropped = 0; dropped < kLingerBytes;) {
    sink.clear();
    if (read_some(sock, sink, 65536, end, svr_sock_) != Read::Data) break;
    dropped += sink.size();
  }
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  Conn conn;
  conn.sock = sock;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    conn.peer = numeric_host(a, len, nullptr);
  }
  const HttpLimits& lim = policy_.limits;
  bool admitted = false;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto mine = per_client_.find(conn.peer);
    if (mine != per_client_.end() && mine->second >= lim.max_per_client) {
      why = fmt::format("this client has {} connections open, the limit per client",
                        lim.max_per_client);
    } else if (open_ >= lim.max_connections && !evict_oldest_waiting()) {
      why = fmt::format("the server has {} connections open, its limit", lim.max_connections);
    } else {
      ++per_client_[conn.peer];
      ++open_;
      conn.since = Clock::now();
      conns_.push_back(&conn);
      admitted = true;
    }
  }
  if (!admitted) {
    ++refused_connections_;
    HttpRefusal r{503,
                  why + fmt::format("; retry after {} s", policy_.retry_after_s),
                  "too_many_connections",
                  {{"Retry-After", std::to_string(policy_.retry_after_s)}}};
    // Not refuse(): no log line and no lingering per connection of a flood. What the client
    // has sent already is dropped first, so that the close does not reset the connection over it.
    send_all(sock, refusal_response(r), 200);
    char drop[16384];
    for (int i = 0; i < 4 && ::recv(sock, drop, sizeof drop, MSG_DONTWAIT) > 0; ++i) {
    }
  } else {
    t_connection_fd = sock;
    bool big_body = false;
    serve_connection(conn, &big_body);
    t_connection_fd = -1;
#ifdef __GLIBC__
    // The heap of a big body (its buffers and its parse, all freed now) goes back to the
    // system, so a run of large bodies does not leave the server's memory at its peak.
    if (big_body) ::malloc_trim(0);
#endif
    std::lock_guard<std::mutex> lock(mu_);
    forget(conn);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

bool GuardedServer::evict_oldest_waiting() {
  Conn* oldest = nullptr;
  for (Conn* c : conns_) {
    if (c->waiting_head && (!oldest || c->since < oldest->since)) oldest = c;
  }
  if (!oldest) return false;
  forget(*oldest);
  oldest->evicted = true;
  // Its thread wakes from its read (end of stream) and answers the eviction.
  ::shutdown(oldest->sock, SHUT_RD);
  ++evicted_connections_;
  return true;
}

void GuardedServer::forget(Conn& conn) {
  if (conn.evicted) return;
  conns_.remove(&conn);
  --open_;
  if (const auto it = per_client_.find(conn.peer); it != per_client_.end() && --it->second <= 0) {
    per_client_.erase(it);
  }
}

bool GuardedServer::set_waiting(Conn& conn, bool waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  if (conn.evicted) return false;
  conn.waiting_head = waiting;
  if (waiting) conn.since = Clock::now();
  return true;
}

// An evicted connection's answer, best effort and short (it is one of a flood, or idle).
void GuardedServer::answer_eviction(Conn& conn) {
  Clock::time_point since;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!conn.evicted) return;
    since = conn.since;
  }
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
  const HttpRefusal r{
      503,
      fmt::format("the server has {} connections open, its limit, and this one had sent no "
                  "complete request for {} ms: it was closed for a newer one; retry after {} s",
                  policy_.limits.max_connections, waited, policy_.retry_after_s),
      "too_many_connections",
      {{"Retry-After", std::to_string(policy_.retry_after_s)}}};
  send_all(conn.sock, refusal_response(r), 200);
}

void GuardedServer::serve_connection(Conn& conn, bool* big_body) {
  const int sock = conn.sock;
  const std::string& peer = conn.peer;
  const HttpLimits& lim = policy_.limits;
  std::string buf;  // bytes read and not yet consumed (a pipelined request's, too)
  *big_body = false;
  for (int n_req = 0; n_req < std::max(lim.max_requests_per_connection, 1); ++n_req) {
    // The next request's first byte: the head deadline runs from accept for the first request,
    // from its first byte for later ones (an idle keep-alive connection is closed quietly).
    Clock::time_point deadline;
    if (n_req == 0) {
      deadline = Clock::now() + std::chrono::milliseconds(lim.head_timeout_ms);
    } else {
      if (!set_waiting(conn, true)) return answer_eviction(conn);
      if (buf.empty()) {
        const auto idle_end = Clock::now() + std::chrono::milliseconds(lim.idle_timeout_ms);
        const Read r = read_some(sock, buf, lim.max_head_bytes + 1, idle_end, svr_sock_);
        if (r == Read::Closed) return answer_eviction(conn);
        if (r != Read::Data) return;
      }
      deadline = Clock::now() + std::chrono::milliseconds(lim.head_timeout_ms);
    }
    size_t head_end = find_head_end(buf);
    while (head_end == 0) {
      if (buf.size() > lim.max_head_bytes) {
        refuse(sock,
               {431,
                fmt::format("the request head is larger than {} bytes", lim.max_head_bytes),
                "",
                {}},
               peer);
        return;
      }
      const Read r = read_some(sock, buf, lim.max_head_bytes + 1 - buf.size(), deadline, svr_sock_);
      if (r == Read::Closed) return answer_eviction(conn);
      if (r == Read::Timeout) {
        if (buf.empty()) return;  // nothing sent: closed quietly
        refuse(sock,
               {408,
                fmt::format("the request head did not arrive within {} ms", lim.head_timeout_ms),
                "",
                {}},
               peer);
        return;
      }
      head_end = find_head_end(buf);
    }
    // The head is here: no longer a candidate for eviction (unless it was evicted just now).
    if (!set_waiting(conn, false)) return answer_eviction(conn);

    RequestHead head;
    HttpRefusal refusal;
    if (!parse_request_head(std::string_view(buf).substr(0, head_end), lim, &head, &refusal)) {
      refuse(sock, refusal, peer);
      return;
    }
    buf.erase(0, head_end);

    // The key before anything else of the request is read or looked at.
    if (!policy_.api_key.empty()) {
      const std::string* auth = head.header("Authorization");
      if (!auth || !bearer_matches(*auth, policy_.api_key)) {
        refuse(sock,
               {401,
                auth ? "incorrect API key"
                     : "missing API key: send the header 'Authorization: Bearer KEY'",
                "invalid_api_key",
                {{"WWW-Authenticate", "Bearer"}}},
               fmt::format("{} {} {}", peer, head.method, head.path()));
        return;
      }
    }
    if (policy_.allowed_methods) {
      const std::string allow = policy_.allowed_methods(head.path());
      const bool head_of_get = head.method == "HEAD" && allow.find("GET") != std::string::npos;
      if (!allow.empty() && !head_of_get &&
          ("," + allow + ",").find("," + head.method + ",") == std::string::npos) {
        refuse(
            sock,
            {405,
             fmt::format("{} is not served on {} (allowed: {})", head.method, head.path(), allow),
             "",
             {{"Allow", allow}}},
            peer);
        return;
      }
    }

    // The body: exactly Content-Length bytes, within its deadline.
    if (head.expect_continue && head.content_length > buf.size()) {
      if (!send_all(sock, "HTTP/1.1 100 Continue\r\n\r\n", lim.write_timeout_ms)) return;
    }
    const size_t body_len = size_t(head.content_length);
    const auto body_deadline = Clock::now() + std::chrono::milliseconds(lim.body_timeout_ms);
    while (buf.size() < body_len) {
      const Read r = read_some(sock, buf, body_len - buf.size(), body_deadline, svr_sock_);
      if (r == Read::Closed) return;
      if (r == Read::Timeout) {
        refuse(sock,
               {408,
                fmt::format("the request body ({} bytes) did not arrive within {} ms", body_len,
                            lim.body_timeout_ms),
                "",
                {}},
               peer);
        return;
      }
    }
    std::string request = canonical_head(head);
    request.append(buf, 0, body_len);
    buf.erase(0, body_len);

    const bool last = !head.keep_alive || n_req + 1 >= lim.max_requests_per_connection;
    bool connection_closed = false;
    bool ok;
    {
      BufferedRequestStream strm(sock, std::move(request), lim.write_timeout_ms);
      ok = process_request(strm, last, connection_closed, nullptr);
    }
    if (body_len >= kTrimAfterBytes) {
      *big_body = true;
      buf.shrink_to_fit();  // a big body's capacity is not kept for the next request
    }
    if (!ok || connection_closed || last) return;
  }
}

}  // namespace spw::app::serve
