#include "app/cli/serve.h"

#include <cstdio>

namespace spw::cli {

CLI::App* add_serve_command(CLI::App& app, ServeArgs& args) {
  (void)args;
  return app.add_subcommand("serve", "(not built yet)");
}

int run_serve(ServeArgs& args) {
  (void)args;
  std::fprintf(stderr, "error: serve is not built yet\n");
  return 1;
}

}  // namespace spw::cli
