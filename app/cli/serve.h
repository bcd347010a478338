// spillway-cli serve: an OpenAI-compatible HTTP server on one model (app/serve/server.h).
//
//   spillway-cli serve -m MODEL [--host 127.0.0.1] [--port 8080] [-c CTX] [-t N] [--device D]
//                      [--cache-type-k T] [--cache-type-v T] [--kv-* ...] [--max-queue N]
//                      [--alias ID]
//
// stdout: one line "listening on http://HOST:PORT" once requests are accepted (with --port 0
// the port the system chose); stderr: load notes and one line per request. SIGINT or SIGTERM
// stops it (exit 0). The API key is read from SPILLWAY_API_KEY, never from a flag (flags show in
// `ps`). Errors (stderr "error: ...", exit 1): a non-loopback --host without SPILLWAY_API_KEY, a
// port that cannot be bound, a model that does not load, bad engine or KV flags.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/kv_options.h"

namespace spw::cli {

struct ServeArgs {
  std::string data_dir;  // set by main from the global --data-dir
  std::string model;     // -m
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int64_t n_ctx = 0;
  int n_threads = 0;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  std::string device = "auto";
  std::string template_name;
  std::string alias;  // the model id served; empty: the model's file name
  int max_queue = 8;  // requests waiting for the engine
  KvArgs kv;
};

/// Adds `serve` to `app`; returns the subcommand.
CLI::App* add_serve_command(CLI::App& app, ServeArgs& args);
int run_serve(ServeArgs& args);

}  // namespace spw::cli
