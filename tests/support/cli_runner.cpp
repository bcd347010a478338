#include "tests/support/cli_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
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

CliResult run_cli_file_size_limited(const std::string& binary, const std::vector<std::string>& args,
                                    unsigned long long max_file_bytes) {
  CliResult r;
  int out[2], err[2];
  if (::pipe(out) != 0) return r;
  if (::pipe(err) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return r;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (int fd : {null_fd, out[0], out[1], err[0], err[1]}) ::close(fd);
    ::signal(SIGXFSZ, SIG_IGN);  // ignored stays ignored across exec
    const struct rlimit lim = {static_cast<rlim_t>(max_file_bytes),
                               static_cast<rlim_t>(max_file_bytes)};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    std::string bin = binary;
    argv.push_back(bin.data());
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0 && pid > 0) {
    if (::poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const struct pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace spw
