#include "app/serve/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "app/serve/http.h"
#include "app/serve/http_guard.h"
#include "app/serve/openai_json.h"
#include "engine/tokenizer/encode_poll.h"

namespace spw::app::serve {

ServeBackend engine_backend(const Engine& engine) {
  ServeBackend b;
  b.chat = [&engine](const std::vector<ChatMessage>& m, const Completion& c,
                     const RunCallbacks& cb) { return complete_chat(engine, m, c, cb); };
  b.text = [&engine](const std::string& p, const Completion& c, const RunCallbacks& cb) {
    return complete_text(engine, p, c, cb);
  };
  b.n_ctx = engine.settings().n_ctx > 0 ? engine.settings().n_ctx : engine.info().n_ctx_train;
  // Each token stands for at most its piece's bytes of the text it was cut from (byte-fallback
  // and special tokens included: special texts are never parsed from user text).
  const Tokenizer& tok = engine.tokenizer();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    b.max_token_bytes = std::max(b.max_token_bytes, tok.token_to_piece(id, true).size());
  }
  b.max_token_bytes = std::max<size_t>(b.max_token_bytes, 1);
  return b;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// True once the peer has closed its side (orderly FIN or reset). Pending bytes (a pipelined
// request) count as alive.
bool peer_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n > 0) return false;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// One request for the engine, shared by its connection thread and the worker.
struct Job {
  CompletionRequest req;
  int fd = -1;  // the connection's socket, polled for a close; -1: unknown
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;   // streamed text not yet written (guarded by mu)
  bool started = false;  // the engine has evaluated something or produced text (mu)
  bool done = false;     // result is set (mu)
  std::optional<Expected<CompletionResult>> result;
  std::optional<ApiError> refusal;  // set with a failed result: the answer (tokenize timeout)
};

// An engine error as the client sees it: bad prompts are the client's (400), the rest 500.
ApiError engine_error(const Error& e, bool chat) {
  const std::string& m = e.message;
  ApiError a{500, m, "server_error", "", ""};
  if (m.rfind("the prompt has ", 0) == 0 && m.find("the context holds") != std::string::npos) {
    a = ApiError{400, m, "invalid_request_error", chat ? "messages" : "prompt",
                 "context_length_exceeded"};
  } else if (m == "the prompt is empty" || m.rfind("messages:", 0) == 0) {
    a = ApiError{400, m, "invalid_request_error", chat ? "messages" : "prompt", ""};
  } else if (m.rfind("--", 0) == 0) {  // a sampler setting out of range (validate's message)
    a = ApiError{400, m, "invalid_request_error", "", ""};
  }
  return a;
}

// The answer of a job whose result is an error.
ApiError job_error(const Job& job) {
  return job.refusal ? *job.refusal : engine_error(job.result->error(), job.req.chat);
}

// The bytes of a request's prompt (its messages' contents for a chat).
size_t prompt_bytes(const CompletionRequest& r) {
  size_t bytes = r.prompt.size();
  for (const ChatMessage& m : r.messages) bytes += m.content.size();
  return bytes;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

// cpp-httplib 0.11 sends without MSG_NOSIGNAL: a write to a connection the peer has closed
// raises SIGPIPE, whose default action ends the process. Ignored (unless someone installed a
// handler), the write fails with EPIPE instead.
void ignore_sigpipe() {
  struct sigaction old = {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

// A prompt whose bytes alone prove that it cannot fit the context (each token spans at most
// max_token_bytes of it), refused before it is tokenized; and max_tokens clamped to the context.
std::optional<ApiError> cannot_fit(CompletionRequest& r, const ServeBackend& b) {
  if (b.n_ctx <= 0) return std::nullopt;
  if (r.completion.max_tokens > b.n_ctx) r.completion.max_tokens = int32_t(b.n_ctx);
  if (b.max_token_bytes == 0) return std::nullopt;
  const size_t bytes = prompt_bytes(r);
  const uint64_t at_least = (uint64_t(bytes) + b.max_token_bytes - 1) / b.max_token_bytes;
  if (at_least <= uint64_t(b.n_ctx)) return std::nullopt;
  return ApiError{400,
                  fmt::format("the prompt has at least {} tokens ({} bytes, at most {} bytes a "
                              "token); the context holds {}",
                              at_least, bytes, b.max_token_bytes, b.n_ctx),
                  "invalid_request_error", r.chat ? "messages" : "prompt",
                  "context_length_exceeded"};
}

// The connection threads: as many as asked, or enough for the queue and twice the connections.
int thread_count(const ServerOptions& o) {
  if (o.http_threads > 0) return o.http_threads;
  return std::max({std::max(o.max_queue, 0) + 8, 128, 2 * o.limits.max_connections});
}

// The limits as applied: with a thread count set, at most 3/4 of its threads hold connections.
HttpLimits effective_limits(const ServerOptions& o) {
  HttpLimits l = o.limits;
  if (o.http_threads > 0)
    l.max_connections = std::min(l.max_connections, std::max(1, o.http_threads * 3 / 4));
  l.max_per_client = std::min(l.max_per_client, l.max_connections);
  return l;
}

}  // namespace

struct Server::Impl {
  ServerOptions opt;
  ServeBackend backend;
  // Streamed responses whose end has not been written yet: stop() lets them write it (the
  // error event of a cut-short generation) before the connections close, for at most a second.
  // Declared before `http`, whose connection threads end them.
  std::mutex streams_mu;
  std::condition_variable streams_cv;
  int open_streams = 0;  // (streams_mu)
  void stream_ended() {
    {
      std::lock_guard<std::mutex> lock(streams_mu);
      --open_streams;
    }
    streams_cv.notify_all();
  }
  std::unique_ptr<GuardedServer> http;  // made by setup_routes
  int64_t created = unix_now();
  int port = 0;
  int listen_fd = -1;  // the listening socket (the last one httplib's socket options saw)

  std::thread listener, worker;
  std::atomic<bool> stop_flag{false};

  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::shared_ptr<Job>> queue;  // waiting jobs (qmu)
  bool accepting = false;                  // (qmu)

  std::mutex state_mu;
  std::condition_variable state_cv;
  bool started = false, stop_called = false, listener_done = false;  // (state_mu)

  mutable std::mutex stats_mu;
  ServerStats stats;
  std::mutex log_mu;
  std::set<std::string> notes_seen;  // (log_mu)

  void log(const std::string& line) {
    if (!opt.log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    opt.log(line);
  }
  // An engine note ("note: CUDA unavailable ...") comes with every session: logged once.
  void note(const std::string& line) {
    if (!opt.log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    if (notes_seen.insert(line).second) opt.log(line);
  }
  template <typename F>
  void count(F f) {
    std::lock_guard<std::mutex> lock(stats_mu);
    f(stats);
  }

  // --- the queue and the worker ---

  enum class Enqueue { Ok, Full, Stopping };
  Enqueue enqueue(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(qmu);
      if (!accepting) return Enqueue::Stopping;
      if (queue.size() >= size_t(std::max(opt.max_queue, 0))) return Enqueue::Full;
      queue.push_back(job);
    }
    qcv.notify_one();
    return Enqueue::Ok;
  }

  static void finish(Job& job, Expected<CompletionResult> r) {
    {
      std::lock_guard<std::mutex> lock(job.mu);
      job.result.emplace(std::move(r));
      job.done = true;
    }
    job.cv.notify_all();
  }

  static CompletionResult cancelled_result() {
    CompletionResult r;
    r.finish_reason = "cancelled";
    return r;
  }

  void worker_loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(qmu);
        qcv.wait(lock, [&] { return !queue.empty() || !accepting; });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      run(*job);
    }
  }

  void run(Job& job) {
    bool started = false;
    const auto mark_started = [&] {
      if (started) return;
      started = true;
      {
        std::lock_guard<std::mutex> lock(job.mu);
        job.started = true;
      }
      job.cv.notify_all();
    };
    RunCallbacks cb;
    cb.note = [this](const std::string& line) { note(line); };
    cb.piece = [&](const std::string& piece) {
      if (job.req.stream) {
        std::lock_guard<std::mutex> lock(job.mu);
        job.pending += piece;
        job.started = true;
        started = true;
      }
      job.cv.notify_all();
    };
    cb.usage = [&](const SessionUsage&) { mark_started(); };
    cb.cancelled = [&] {
      if (job.cancel.load() || stop_flag.load()) return true;
      if (job.fd >= 0 && peer_closed(job.fd)) {
        job.cancel = true;
        return true;
      }
      return false;
    };
    // The tokenizing of the prompt is bounded (polled by the encoders only, so the deadline
    // does not reach into prefill or decode).
    const Clock::time_point tokenize_end =
        Clock::now() + std::chrono::milliseconds(opt.tokenize_timeout_ms);
    bool tokenize_timed_out = false;
    EncodePoll tokenize_deadline([&] {
      if (Clock::now() < tokenize_end) return false;
      tokenize_timed_out = true;
      return true;
    });
    std::optional<Expected<CompletionResult>> r;
    try {
      if (cb.cancelled()) {
        r.emplace(cancelled_result());
      } else if (job.req.chat) {
        r.emplace(backend.chat(job.req.messages, job.req.completion, cb));
      } else {
        r.emplace(backend.text(job.req.prompt, job.req.completion, cb));
      }
    } catch (const std::exception& e) {
      r.emplace(Error{std::string("internal error: ") + e.what()});
    }
    if (tokenize_timed_out) {
      const std::string m = fmt::format(
          "the prompt ({} bytes) took longer than {} s to tokenize, the server's limit: send a "
          "shorter prompt, or raise it with --tokenize-timeout",
          prompt_bytes(job.req), opt.tokenize_timeout_ms / 1000.0);
      job.refusal = ApiError{413, m, "invalid_request_error", job.req.chat ? "messages" : "prompt",
                             "tokenize_timeout"};
      r.emplace(Error{m});
    }
    count([&](ServerStats& s) {
      if (tokenize_timed_out) {
        ++s.tokenize_timeouts;
        return;
      }
      if (!r->ok()) {
        ++s.failed;
        return;
      }
      s.tokens_generated += (*r)->completion_tokens;
      if ((*r)->finish_reason == "cancelled") {
        ++s.cancelled;
      } else {
        ++s.completed;
      }
    });
    finish(job, std::move(*r));
  }

  // --- HTTP ---

  void access_log(const httplib::Request& req, int status, const Job* job, Clock::time_point t0) {
    access_log(req.method, req.path, status, job, t0);
  }
  void access_log(const std::string& method, const std::string& path, int status, const Job* job,
                  Clock::time_point t0) {
    if (!opt.log) return;
    std::string line = fmt::format("{} {} {}", method, path, status);
    if (job && job->result && job->result->ok()) {
      const CompletionResult& r = job->result->value();
      line +=
          fmt::format(" {}+{} tokens {}", r.prompt_tokens, r.completion_tokens, r.finish_reason);
    }
    line += fmt::format(" {:.2f} s", std::chrono::duration<double>(Clock::now() - t0).count());
    log(line);
  }

  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const Clock::time_point t0 = Clock::now();
    ApiError err;
    std::optional<CompletionRequest> parsed = parse_completion_request(req.body, chat, &err);
    if (parsed) {
      if (Status st = validate(parsed->completion.sampling); !st) {
        err = ApiError{400, st.error().message, "invalid_request_error", "", ""};
        parsed.reset();
      }
    }
    if (parsed) {
      if (std::optional<ApiError> e = cannot_fit(*parsed, backend)) {
        err = *e;
        parsed.reset();
      }
    }
    if (!parsed) {
      count([](ServerStats& s) { ++s.bad_requests; });
      send_error(res, err);
      access_log(req, res.status, nullptr, t0);
      return;
    }
    auto job = std::make_shared<Job>();
    job->req = std::move(*parsed);
    job->fd = current_connection_fd();
    switch (enqueue(job)) {
      case Enqueue::Ok:
        break;
      case Enqueue::Full:
        count([](ServerStats& s) { ++s.rejected_busy; });
        res.set_header("Retry-After", std::to_string(opt.retry_after_s));
        send_error(res, ApiError{429,
                                 fmt::format("the server is busy: {} requests are waiting for the "
                                             "engine; retry after {} s",
                                             opt.max_queue, opt.retry_after_s),
                                 "server_error", "", "server_busy"});
        access_log(req, res.status, nullptr, t0);
        return;
      case Enqueue::Stopping:
        send_error(res, ApiError{503, "the server is shutting down", "server_error", "", ""});
        access_log(req, res.status, nullptr, t0);
        return;
    }
    const ResponseMeta meta{new_response_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(),
                            opt.model_id};

    // Wait for the result (whole responses) or the first sign of a running generation
    // (streams), so that a request the engine refuses (a prompt longer than the context) is
    // answered with its status rather than inside a 200 stream.
    bool done;
    {
      std::unique_lock<std::mutex> lock(job->mu);
      job->cv.wait(lock, [&] { return job->done || (job->req.stream && job->started); });
      done = job->done;  // once true, job->result no longer changes
    }
    if (done) {
      const Expected<CompletionResult>& r = *job->result;
      if (!r.ok()) {
        send_error(res, job_error(*job));
      } else if (r->finish_reason == "cancelled" && stop_flag.load()) {
        send_error(res, ApiError{503, "the server is shutting down", "server_error", "", ""});
      } else if (!job->req.stream) {
        res.status = 200;
        res.set_content(completion_json(meta, chat, *r), "application/json");
      } else {
        res.status = 200;
        bool ended = false;
        res.set_content(stream_body(*job, meta, true, &ended), "text/event-stream");
      }
      access_log(req, res.status, job.get(), t0);
      return;
    }

    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    auto first = std::make_shared<bool>(true);
    {
      std::lock_guard<std::mutex> lock(streams_mu);
      ++open_streams;
    }
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, meta, first, t0, method = req.method, path = req.path](
            size_t, httplib::DataSink& sink) -> bool {
          {
            std::unique_lock<std::mutex> lock(job->mu);
            job->cv.wait_for(lock, std::chrono::seconds(1),
                             [&] { return !job->pending.empty() || job->done; });
          }
          bool ended = false;
          const std::string out = stream_body(*job, meta, *first, &ended);
          *first = false;
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            job->cancel = true;  // the client is gone: stop its generation
            return false;
          }
          if (ended) {
            sink.done();
            access_log(method, path, 200, job.get(), t0);
          }
          return true;
        },
        [this, job](bool success) {  // the response is over: written whole, or abandoned
          if (!success) job->cancel = true;
          stream_ended();
        });
  }

  // The SSE text for what the job has produced since the last call: the role chunk first (chat),
  // a chunk with the pending text, and once the job is done its last chunk (finish_reason), the
  // usage chunk when asked for, and [DONE]. An engine error after the stream began is sent as an
  // error event.
  // `ended`: set when the text holds the end ([DONE]).
  std::string stream_body(Job& job, const ResponseMeta& meta, bool first, bool* ended) {
    const bool chat = job.req.chat;
    std::string text;
    bool done;
    {
      std::lock_guard<std::mutex> lock(job.mu);
      text.swap(job.pending);
      done = job.done;
    }
    std::string out;
    if (first && chat) out += sse_event(chunk_json(meta, true, "", true, ""));
    if (!text.empty()) out += sse_event(chunk_json(meta, chat, text, false, ""));
    if (done) {
      const Expected<CompletionResult>& r = *job.result;
      if (r.ok() && r->finish_reason == "cancelled") {
        // Cut short by the server (shutting down): an error event, never a finish_reason that
        // reads as a complete answer (a client that left reads nothing anyway).
        out += sse_event(error_json(ApiError{
            503, "the generation was cancelled before it finished (the server is shutting down)",
            "server_error", "", ""}));
      } else if (r.ok()) {
        out += sse_event(chunk_json(meta, chat, "", false, r->finish_reason));
        if (job.req.include_usage) {
          out += sse_event(usage_chunk_json(meta, chat, r->prompt_tokens, r->completion_tokens));
        }
      } else {
        out += sse_event(error_json(job_error(job)));
      }
      out += sse_event("[DONE]");
      *ended = true;
    }
    return out;
  }

  void setup_routes() {
    // Connections wait in these threads while their request is read; the front door admits
    // far fewer connections than there are threads, so a slow client never takes the last one.
    const HttpLimits lim = effective_limits(opt);
    const int threads = thread_count(opt);
    FrontDoorPolicy door;
    door.limits = lim;
    door.api_key = opt.api_key;
    door.retry_after_s = opt.retry_after_s;
    door.allowed_methods = [](const std::string& path) -> std::string {
      if (path == "/v1/models" || path == "/models" || path == "/health" ||
          path.rfind("/v1/models/", 0) == 0) {
        return "GET";
      }
      if (path == "/v1/chat/completions" || path == "/chat/completions" ||
          path == "/v1/completions" || path == "/completions") {
        return "POST";
      }
      return "";
    };
    door.log = [this](const std::string& line) { log(line); };
    http = std::make_unique<GuardedServer>(std::move(door));
    http->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http->set_write_timeout(std::max(lim.write_timeout_ms / 1000, 1));
    // httplib's default sets SO_REUSEPORT, which lets a second server share the port silently;
    // SO_REUSEADDR only allows a restart over connections in TIME_WAIT.
    http->set_socket_options([this](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });

    http->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
      // The body is JSON whatever the client calls it. `curl -d` labels it
      // application/x-www-form-urlencoded, for which httplib refuses bodies over 8 KiB (413)
      // when it reads them, after this handler: relabel it so the body limit is ours. The
      // request object is httplib's own, non-const, handed here as const.
      auto& headers = const_cast<httplib::Headers&>(req.headers);
      auto [first, last] = headers.equal_range("Content-Type");  // case-insensitive map
      for (auto it = first; it != last; ++it) {
        if (it->second.rfind("application/x-www-form-urlencoded", 0) == 0)
          it->second = "application/json";
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e{res.status, fmt::format("HTTP {} for {} {}", res.status, req.method, req.path),
                 "invalid_request_error", "", ""};
      if (res.status == 404) {
        e.message = fmt::format(
            "no such endpoint: {} {} (served: GET /v1/models, POST "
            "/v1/chat/completions, POST /v1/completions)",
            req.method, req.path);
      } else if (res.status == 413) {
        e.message = "the request body is too large";
      } else if (res.status >= 500) {
        e.type = "server_error";
      }
      res.set_content(error_json(e), "application/json");
    });
    http->set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          send_error(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
        });

    const auto models = [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(models_json(opt.model_id, created), "application/json");
    };
    http->Get("/v1/models", models);
    http->Get("/models", models);
    http->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != opt.model_id) {
        send_error(res, ApiError{404,
                                 fmt::format("the model '{}' does not exist (served: '{}')",
                                             req.matches[1].str(), opt.model_id),
                                 "invalid_request_error", "model", "model_not_found"});
        return;
      }
      res.set_content(model_json(opt.model_id, created), "application/json");
    });
    http->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    for (const char* p : {"/v1/chat/completions", "/chat/completions"}) {
      http->Post(p, [this](const httplib::Request& req, httplib::Response& res) {
        handle_completion(req, res, true);
      });
    }
    for (const char* p : {"/v1/completions", "/completions"}) {
      http->Post(p, [this](const httplib::Request& req, httplib::Response& res) {
        handle_completion(req, res, false);
      });
    }
  }
};

Server::Server(ServerOptions options, ServeBackend backend) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->backend = std::move(backend);
}

Server::~Server() { stop(); }

Status Server::start() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.state_mu);
    if (m.started) return Error{"the server is already started"};
    if (m.stop_called) return Error{"the server was stopped; make a new one"};
  }
  const ServerOptions& o = m.opt;
  if (!is_loopback_host(o.host) && o.api_key.empty()) {
    return make_error(
        "refusing to listen on {} without an API key: set SPILLWAY_API_KEY (every request must "
        "then send 'Authorization: Bearer KEY'), or listen on 127.0.0.1",
        o.host);
  }
  if (!is_loopback_host(o.host) && o.api_key.size() < kMinApiKeyBytes) {
    return make_error(
        "refusing to listen on {} with an API key of {} bytes: a key for a non-loopback address "
        "needs at least {} (e.g. openssl rand -hex 16)",
        o.host, o.api_key.size(), kMinApiKeyBytes);
  }
  const HttpLimits& l = o.limits;
  if (l.max_connections < 1 || l.max_per_client < 1 || l.max_body_bytes < 1 ||
      l.head_timeout_ms < 1 || l.body_timeout_ms < 1 || l.idle_timeout_ms < 1 ||
      l.write_timeout_ms < 1 || l.max_requests_per_connection < 1 || o.tokenize_timeout_ms < 1) {
    return Error{"the server's connection limits and tokenize timeout must be positive"};
  }
  if (o.port < 0 || o.port > 65535) return make_error("--port {}: not a port (0-65535)", o.port);
  if (!m.backend.chat || !m.backend.text) return Error{"the server has no engine"};
  // A client that goes away mid-response must not kill the process: writes then fail (EPIPE)
  // and cancel the generation instead.
  ignore_sigpipe();
#ifdef __GLIBC__
  // A fixed mmap threshold: request buffers of 1 MiB and more are mapped and go back to the
  // system when freed, rather than raising glibc's threshold and staying in the heap.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  m.setup_routes();
  const std::string bind_host = o.host == "[::1]" ? "::1" : o.host;
  errno = 0;
  if (o.port == 0) {
    m.port = m.http->bind_to_any_port(bind_host);
    if (m.port < 0) m.port = 0;
  } else if (m.http->bind_to_port(bind_host, o.port)) {
    m.port = o.port;
  }
  if (m.port == 0) {
    const int e = errno;
    // httplib resolves the host with getaddrinfo and says nothing when that fails: say it.
    std::string why = e ? fmt::format(" ({})", std::strerror(e)) : std::string();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    if (const int g = ::getaddrinfo(bind_host.c_str(), nullptr, &hints, &res); g != 0) {
      why = fmt::format(
          " ('{}' is not an address or a host name this machine can resolve: {}; "
          "use --host 127.0.0.1, ::1 or an address of this machine)",
          o.host, ::gai_strerror(g));
    }
    if (res != nullptr) ::freeaddrinfo(res);
    return make_error("cannot listen on {}:{}{}", o.host, o.port, why);
  }
  // httplib 0.11 listens with a backlog of 5: a burst of clients overflows it and some see
  // resets. Listening again on the bound socket raises the backlog.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, 1024);
  {
    std::lock_guard<std::mutex> lock(m.qmu);
    m.accepting = true;
  }
  m.worker = std::thread([&m] { m.worker_loop(); });
  m.listener = std::thread([&m] {
    m.http->listen_after_bind();
    std::lock_guard<std::mutex> lock(m.state_mu);
    m.listener_done = true;
    m.state_cv.notify_all();
  });
  // stop() before the listener runs would not reach it: wait until it accepts.
  while (!m.http->is_running()) {
    {
      std::lock_guard<std::mutex> lock(m.state_mu);
      if (m.listener_done) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard<std::mutex> lock(m.state_mu);
  m.started = true;
  return Status::Ok();
}

int Server::port() const { return impl_->port; }

void Server::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.state_mu);
    if (m.stop_called) return;
    m.stop_called = true;
    if (!m.started) return;
  }
  m.stop_flag = true;
  std::deque<std::shared_ptr<Job>> waiting;
  {
    std::lock_guard<std::mutex> lock(m.qmu);
    m.accepting = false;
    waiting.swap(m.queue);
  }
  m.qcv.notify_all();
  for (const auto& job : waiting) Impl::finish(*job, Impl::cancelled_result());
  if (m.worker.joinable()) m.worker.join();  // the running generation sees stop_flag
  {
    std::unique_lock<std::mutex> lock(m.streams_mu);
    m.streams_cv.wait_for(lock, std::chrono::seconds(1), [&] { return m.open_streams <= 0; });
  }
  m.http->stop();
  if (m.listener.joinable()) m.listener.join();
}

void Server::wait() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.state_mu);
  m.state_cv.wait(lock, [&] { return !m.started || m.listener_done; });
}

ServerStats Server::stats() const {
  ServerStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mu);
    s = impl_->stats;
  }
  if (impl_->http) {
    const FrontDoorStats d = impl_->http->front_door_stats();
    s.unauthorized += d.unauthorized;
    s.rejected_connections += d.refused_connections;
    s.evicted_connections = d.evicted_connections;
    s.refused_requests += d.refused_requests;
    s.open_connections = d.open_connections;
  }
  std::lock_guard<std::mutex> lock(impl_->qmu);
  s.waiting = int64_t(impl_->queue.size());
  return s;
}

}  // namespace spw::app::serve
