#include "tests/support/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include "tests/support/vocab_cases.h"

namespace spw {

namespace fs = std::filesystem;

std::string cli_test_dir(const std::string& prefix) {
  // One folder per prefix and process, removed with everything in it at exit.
  struct Folders {
    std::map<std::string, fs::path> dirs;
    ~Folders() {
      for (const auto& [prefix, dir] : dirs) {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    }
  };
  static Folders folders;
  auto it = folders.dirs.find(prefix);
  if (it == folders.dirs.end()) {
    const fs::path d = fs::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()));
    fs::create_directories(d);
    it = folders.dirs.emplace(prefix, d).first;
  }
  return it->second.string();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CliResult run_cli(const std::string& binary, const std::vector<std::string>& args,
                  const std::string& scratch_dir) {
  std::string cmd = shell_quote(binary);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  static int calls = 0;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(++calls);
  const fs::path out = fs::path(scratch_dir) / ("stdout-" + tag);
  const fs::path err = fs::path(scratch_dir) / ("stderr-" + tag);
  cmd += " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string()) + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_file_bytes(out.string());
  r.err = read_file_bytes(err.string());
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace spw
