#include "app/cli/jobs.h"

#include <cstdio>

namespace spw::cli {

CLI::App* add_jobs_command(CLI::App& app, JobsArgs& args) {
  (void)args;
  return app.add_subcommand("jobs", "(not built yet)");
}

int run_jobs(JobsArgs& args) {
  (void)args;
  std::fprintf(stderr, "error: jobs is not built yet\n");
  return 1;
}

}  // namespace spw::cli
