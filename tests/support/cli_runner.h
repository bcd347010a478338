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

/// Runs `binary args...` with its file size limit (RLIMIT_FSIZE) at `max_file_bytes` and SIGXFSZ
/// ignored: a write that would grow any file past that fails (EFBIG), as writes fail on a full
/// disk, also for root (for whom a read-only folder is not read-only). stdin is /dev/null;
/// stdout and stderr come back through pipes, which the limit does not touch.
CliResult run_cli_file_size_limited(const std::string& binary, const std::vector<std::string>& args,
                                    unsigned long long max_file_bytes);

}  // namespace spw
