// spillway-bench: `spillway-cli bench` as a program of its own, without Qt, for builds that have
// no app layer (SPILLWAY_DEVICE_ONLY on a bare GPU machine). Same flags, same output, same exit
// codes: run_bench (app/cli/bench.cpp) does the work.
//   spillway-bench -m model.gguf -p 512 -n 128 -r 3 --device cuda --json
//   spillway-bench -m model.gguf -p 8 -n 64 -d 4096 --kv-window 1024 --host-budget 8M
//       --disk-budget 1G --spill-dir /tmp/spill --json
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/bench.h"
#include "app/cli/option_checks.h"

int main(int argc, char** argv) {
  spw::cli::BenchArgs a;
  CLI::App app{
      "spillway-bench: prompt-processing and generation speed, bandwidth and peak memory "
      "(llama-bench; the same as `spillway-cli bench`)"};
  app.add_option("-m,--model", a.model, "GGUF file")->required();
  spw::cli::add_bench_count_options(app, a);
  // Checked by run_bench, as for spillway-cli, so both print the same error.
  app.add_option("--device", a.device,
                 "Where the model runs: auto (CUDA when usable, else the CPU) | cpu | cuda")
      ->capture_default_str();
  app.add_flag("--reference", a.reference,
               "Time the float64 reference forward pass (CPU only) instead of the fast path");
  app.add_flag("--json", a.json, "One JSON object on stdout");
  spw::cli::add_depth_option(app, a.depth);
  // The paged KV cache's flags, as spillway-cli bench. There is no app cache folder here, so the
  // disk tier (--disk-budget) needs --spill-dir.
  spw::cli::add_kv_options(app, a.kv);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return spw::cli::report_parse_error(app, e);
  }
  int rc = 1;
  try {
    rc = spw::cli::run_bench(a);
  } catch (const std::exception& e) {  // allocation failure and the like: exit 1, not a signal
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
    return 1;
  }
  return rc;
}
