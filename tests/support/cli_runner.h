// Runs a command-line program as a user would (a shell, stdin from /dev/null) and captures its
// exit code, stdout and stderr. Used by the spillway-cli black-box tests.
#pragma once

#include <string>
#include <vector>

namespace spw {

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

/// A folder for this test process's files (under the system temp folder, named with the pid so
/// that ctest -j's parallel processes never share one), removed when the process exits.
std::string cli_test_dir(const std::string& prefix);

/// Single-quotes `s` for /bin/sh.
std::string shell_quote(const std::string& s);

/// Runs `binary args...`; output goes through files in `scratch_dir`, removed afterwards.
CliResult run_cli(const std::string& binary, const std::vector<std::string>& args,
                  const std::string& scratch_dir);

}  // namespace spw
