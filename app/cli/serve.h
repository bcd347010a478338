// spillway-cli serve: an OpenAI-compatible HTTP server on one model (app/serve/server.h).
//
//   spillway-cli serve -m MODEL [--host 127.0.0.1] [--port 8080] [-c CTX] [-t N] [--device D]
//                      [--cache-type-k T] [--cache-type-v T] [--kv-* ...] [--max-queue N]
//                      [--alias ID] [--max-body SIZE] [--max-connections N]
//                      [--max-client-connections N] [--header-timeout S]
//
// stdout: one line "listening on http://HOST:PORT" once requests are accepted (with --port 0
// the port the system chose); stderr: load notes and one line per request. SIGINT or SIGTERM
// stops it (exit 0). The API key is read from SPILLWAY_API_KEY, never from a flag (flags show in
// `ps`). Errors (stderr "error: ...", exit 1): a non-loopback --host without SPILLWAY_API_KEY or
// with one shorter than 16 bytes, a port that cannot be bound, a model that does not load, bad
// engine, KV or limit flags.
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
  std::string alias;                // the model id served; empty: the model's file name
  int max_queue = 8;                // requests waiting for the engine
  std::string max_body = "8MiB";    // request bodies larger: 413 (a size: 512KiB, 8MiB, ...)
  int max_connections = 64;         // open connections in all
  int max_client_connections = 16;  // open connections from one client address
  double header_timeout_s = 5;      // the whole request head within it, else 408
  double tokenize_timeout_s = 5;    // a prompt's tokenizing within it, else 413
  KvArgs kv;
};

/// Adds `serve` to `app`; returns the subcommand.
CLI::App* add_serve_command(CLI::App& app, ServeArgs& args);
int run_serve(ServeArgs& args);

}  // namespace spw::cli
