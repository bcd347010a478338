// spillway-cli serve (owned by the serve work; see issue 10).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace spw::cli {

struct ServeArgs {
  std::string data_dir;  // set by main from the global --data-dir
};

/// Adds `serve` to `app`; returns the subcommand.
CLI::App* add_serve_command(CLI::App& app, ServeArgs& args);
int run_serve(ServeArgs& args);

}  // namespace spw::cli
