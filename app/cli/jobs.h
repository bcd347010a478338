// spillway-cli jobs (owned by the jobs work; see issue 10).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace spw::cli {

struct JobsArgs {
  std::string data_dir;  // set by main from the global --data-dir
};

/// Adds `jobs` to `app`; returns the subcommand.
CLI::App* add_jobs_command(CLI::App& app, JobsArgs& args);
int run_jobs(JobsArgs& args);

}  // namespace spw::cli
