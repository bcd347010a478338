// spillway-cli jobs: the batch queue from the command line (app/jobs/jobs.h).
//
//   jobs add --task summary|clauses|prompt --doc ID [--doc ID...] -m MODEL [...]  prints "job N"
//   jobs list [--json] | show N [--json] | cancel N | pause N | resume N | retry N | remove N
//   jobs priority N P | move N (--before M | --last) | run N
//   jobs run-due [--watch] | export N --format md|csv -o FILE
//
// Errors go to stderr as "error: ..." with exit 1; run-due exits 1 when a job or document it
// ran failed (the reasons are printed and stored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli/kv_options.h"

namespace spw::cli {

struct JobsArgs {
  std::string data_dir;  // set by main from the global --data-dir

  // add
  std::string task = "summary";
  std::string prompt;
  std::string clauses;
  std::string length = "medium";
  std::vector<int64_t> docs;
  std::string model;
  std::string title;
  int32_t n_predict = 256;
  float temp = 0.0f;
  uint32_t seed = 0;
  int64_t n_ctx = 0;
  int n_threads = 0;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string device = "auto";
  std::string template_name;
  KvArgs kv;
  bool no_snapshot = false;
  bool no_map_reduce = false;
  std::string at;
  std::string nightly;
  bool when_idle = false;
  int idle_minutes = 15;
  std::string endpoint;
  int priority = 0;

  // the other subcommands
  int64_t id = 0;
  int64_t before = 0;
  bool last = false;
  int new_priority = 0;
  bool json = false;
  bool watch = false;
  std::string progress_json;  // run-due, run: --progress-json FILE
  double poll_s = 30;
  double lease_s = 30;
  double heartbeat_s = 5;
  double backoff_s = 2;  // the first retry delay of a transient failure; doubles
  std::string format;
  std::string output;

  CLI::App* self = nullptr;  // the `jobs` subcommand (set by add_jobs_command)
};

/// Adds `jobs` and its subcommands to `app`; returns the `jobs` subcommand.
CLI::App* add_jobs_command(CLI::App& app, JobsArgs& args);
int run_jobs(JobsArgs& args);

}  // namespace spw::cli
