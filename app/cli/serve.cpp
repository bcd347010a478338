#include "app/cli/serve.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/cli/option_checks.h"
#include "app/remote/openai_client.h"
#include "app/runtime/engine.h"
#include "app/serve/server.h"
#include "engine/common/size.h"

namespace spw::cli {

CLI::App* add_serve_command(CLI::App& app, ServeArgs& a) {
  auto* c = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models)");
  c->add_option("-m,--model", a.model, "GGUF file")->required();
  c->add_option("--host", a.host,
                "Address to listen on (not loopback: needs SPILLWAY_API_KEY in the environment)")
      ->capture_default_str();
  c->add_option("--port", a.port, "TCP port (0: any free port, printed)")
      ->capture_default_str()
      ->check(int_range("--port", 0, 65535));
  add_ctx_option(*c, a.n_ctx);
  add_threads_option(*c, a.n_threads);
  add_kv_type_options(*c, a.cache_type_k, a.cache_type_v);
  add_device_option(*c, a.device, "auto | cpu | cuda");
  c->add_option("--template", a.template_name, "Chat template (default: the model's)");
  c->add_option("--alias", a.alias, "Model id to serve (default: the model's file name)");
  c->add_option("--max-queue", a.max_queue,
                "Requests that may wait for the engine; more are answered 503")
      ->capture_default_str()
      ->check(int_range("--max-queue", 1, kMaxInt));
  c->add_option("--max-body", a.max_body,
                "Largest request body (e.g. 512KiB, 8MiB); larger ones are answered 413")
      ->capture_default_str()
      ->check(size_at_least("--max-body", 1));
  c->add_option("--max-connections", a.max_connections,
                "Open connections at most; more are answered 503 at once")
      ->capture_default_str()
      ->check(int_range("--max-connections", 1, kMaxInt));
  c->add_option("--max-client-connections", a.max_client_connections,
                "Open connections from one client address at most; more are answered 503")
      ->capture_default_str()
      ->check(int_range("--max-client-connections", 1, kMaxInt));
  c->add_option("--header-timeout", a.header_timeout_s,
                "Seconds a request's line and headers may take to arrive (then 408)")
      ->capture_default_str()
      ->check(real_range("--header-timeout", 0, true, 3600, false));
  c->add_option("--tokenize-timeout", a.tokenize_timeout_s,
                "Seconds a request's prompt may take to tokenize (then 413)")
      ->capture_default_str()
      ->check(real_range("--tokenize-timeout", 0, true, 3600, false));
  add_kv_options(*c, a.kv);
  return c;
}

namespace {

// SIGINT/SIGTERM end the server cleanly: the handler (whichever thread gets the signal) writes
// the signal's number to a pipe that run_serve reads.
int g_stop_pipe[2] = {-1, -1};

extern "C" void serve_stop_signal(int sig) {
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_stop_pipe[1], &c, 1);
}

bool install_stop_signals() {
  if (::pipe(g_stop_pipe) != 0) return false;
  struct sigaction sa = {};
  sa.sa_handler = serve_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old = {};
    // A signal the parent set to be ignored (nohup, background jobs) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
  return true;
}

int wait_for_stop_signal() {
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(g_stop_pipe[0], &c, 1);
    if (n == 1) return c;
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

}  // namespace

int run_serve(ServeArgs& a) {
  const std::string api_key = app::remote::api_key_from_env();
  if (!app::serve::is_loopback_host(a.host) && api_key.empty()) {
    std::fprintf(stderr,
                 "error: refusing to listen on %s without an API key: set SPILLWAY_API_KEY "
                 "(every request must then send 'Authorization: Bearer KEY'), or listen on "
                 "127.0.0.1\n",
                 a.host.c_str());
    return 1;
  }
  if (!app::serve::is_loopback_host(a.host) && api_key.size() < app::serve::kMinApiKeyBytes) {
    std::fprintf(stderr,
                 "error: refusing to listen on %s with an API key of %zu bytes: a key for a "
                 "non-loopback address needs at least %zu (e.g. openssl rand -hex 16)\n",
                 a.host.c_str(), api_key.size(), app::serve::kMinApiKeyBytes);
    return 1;
  }
  const Expected<int64_t> max_body = parse_size(a.max_body);
  if (!max_body || *max_body < 1) {
    std::fprintf(stderr, "error: --max-body %s: %s\n", a.max_body.c_str(),
                 max_body ? "must be at least 1 byte" : max_body.error().message.c_str());
    return 1;
  }
  if (a.max_connections < 1 || a.max_client_connections < 1) {
    std::fprintf(stderr,
                 "error: --max-connections and --max-client-connections must be at least "
                 "1\n");
    return 1;
  }
  if (!(a.header_timeout_s > 0 && a.header_timeout_s <= 3600)) {
    std::fprintf(stderr, "error: --header-timeout %g: must be in (0, 3600] seconds\n",
                 a.header_timeout_s);
    return 1;
  }
  if (!(a.tokenize_timeout_s > 0 && a.tokenize_timeout_s <= 3600)) {
    std::fprintf(stderr, "error: --tokenize-timeout %g: must be in (0, 3600] seconds\n",
                 a.tokenize_timeout_s);
    return 1;
  }
  if (a.port < 0 || a.port > 65535) {
    std::fprintf(stderr, "error: --port %d: not a port (0-65535)\n", a.port);
    return 1;
  }
  if (a.max_queue < 1) {
    std::fprintf(stderr,
                 "error: --max-queue %d: at least 1 request must be able to wait for the engine\n",
                 a.max_queue);
    return 1;
  }
  if (auto st = check_ubatch_fits(a.kv, a.n_ctx); !st) return bad_value(st.error());
  if (a.kv.default_spill_dir.empty()) a.kv.default_spill_dir = default_spill_dir(a.data_dir);
  auto kv_settings = make_kv_settings(a.kv);
  if (!kv_settings) {
    std::fprintf(stderr, "error: %s\n", kv_settings.error().message.c_str());
    return 1;
  }
  app::EngineSettings s;
  s.model_path = a.model;
  s.n_ctx = a.n_ctx;
  s.n_threads = session_threads(a.n_threads);
  s.kv_type_k = a.cache_type_k;
  s.kv_type_v = a.cache_type_v;
  s.device = a.device;
  s.n_ubatch = a.kv.n_ubatch;
  s.kv = *kv_settings;
  s.template_name = a.template_name;
  s.use_snapshots = false;
  if (Status st = app::validate(s); !st) {
    std::fprintf(stderr, "error: %s\n", st.error().message.c_str());
    return 1;
  }
  auto engine = app::Engine::load(
      s, [](const std::string& note) { std::fprintf(stderr, "%s\n", note.c_str()); });
  if (!engine) {
    std::fprintf(stderr, "error: %s\n", engine.error().message.c_str());
    return 1;
  }

  app::serve::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.api_key = api_key;
  o.model_id = a.alias.empty() ? std::filesystem::path(a.model).filename().string() : a.alias;
  o.max_queue = a.max_queue;
  o.limits.max_body_bytes = size_t(*max_body);
  o.limits.max_connections = a.max_connections;
  o.limits.max_per_client = a.max_client_connections;
  o.limits.head_timeout_ms = std::max(1, int(a.header_timeout_s * 1000));
  o.tokenize_timeout_ms = std::max(1, int(a.tokenize_timeout_s * 1000));
  o.log = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  if (!install_stop_signals()) {
    std::fprintf(stderr, "error: cannot create a pipe: %s\n", std::strerror(errno));
    return 1;
  }
  app::serve::Server server(o, app::serve::engine_backend(**engine));
  if (Status st = server.start(); !st) {
    std::fprintf(stderr, "error: %s\n", st.error().message.c_str());
    return 1;
  }
  const bool v6 = a.host.find(':') != std::string::npos && a.host.front() != '[';
  std::printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", a.host.c_str(), v6 ? "]" : "",
              server.port());
  std::fflush(stdout);
  std::fprintf(stderr, "serving %s as '%s'%s; SIGINT or SIGTERM stops\n", a.model.c_str(),
               o.model_id.c_str(), api_key.empty() ? "" : " (API key required)");

  const int sig = wait_for_stop_signal();
  std::fprintf(stderr, "stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
  return 0;
}

}  // namespace spw::cli
