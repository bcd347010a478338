#include "app/cli/option_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "engine/backend/device.h"
#include "engine/common/output_path.h"
#include "engine/common/size.h"
#include "engine/sampling/sampler.h"
#include "engine/session/session.h"

namespace spw::cli {

bool parse_int(const std::string& s, int64_t& v) {
  const char* first = s.data();
  const char* last = s.data() + s.size();
  if (first != last && *first == '+') ++first;
  const auto [end, ec] = std::from_chars(first, last, v);
  return ec == std::errc() && end == last && first != last;
}

namespace {

// The whole text as a finite real number.
bool parse_real(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v);
}

std::string interval_text(double lo, bool lo_open, double hi, bool hi_open) {
  if (std::isinf(hi)) return fmt::format("{} {:g}", lo_open ? "more than" : "at least", lo);
  return fmt::format("in {}{:g}, {:g}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

}  // namespace

CLI::Validator int_range(const std::string& flag, int64_t lo, int64_t hi) {
  return CLI::Validator(
      [flag, lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        if (!parse_int(s, v))
          return fmt::format("{} must be a whole number {}..{}, got '{}'", flag, lo, hi, s);
        if (v < lo || v > hi) return fmt::format("{} must be {}..{}, got {}", flag, lo, hi, v);
        s = std::to_string(v);
        return std::string();
      },
      fmt::format("{}..{}", lo, hi));
}

CLI::Validator count_or_unlimited(const std::string& flag, int64_t hi) {
  return CLI::Validator(
      [flag, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const bool ok = parse_int(s, v);
        if (ok && (v == -1 || (v >= 1 && v <= hi))) {
          s = std::to_string(v);
          return std::string();
        }
        return fmt::format("{} must be -1 (until the end of text) or 1..{}, got {}", flag, hi,
                           ok ? std::to_string(v) : "'" + s + "'");
      },
      fmt::format("-1 or 1..{}", hi));
}

CLI::Validator seed_value(const std::string& flag) {
  static constexpr int64_t kMaxSeed = 0xFFFFFFFFll;
  return CLI::Validator(
      [flag](std::string& s) -> std::string {
        int64_t v = 0;
        const bool ok = parse_int(s, v);
        if (ok && (v == -1 || (v >= 0 && v <= kMaxSeed))) {
          s = std::to_string(v == -1 ? kMaxSeed : v);  // -1: the sampler's "random"
          return std::string();
        }
        return fmt::format("{} must be -1 (a random seed) or 0..{}, got {}", flag, kMaxSeed,
                           ok ? std::to_string(v) : "'" + s + "'");
      },
      "-1 or 0..4294967295");
}

CLI::Validator real_range(const std::string& flag, double lo, bool lo_open, double hi,
                          bool hi_open) {
  const std::string range = interval_text(lo, lo_open, hi, hi_open);
  return CLI::Validator(
      [flag, lo, lo_open, hi, hi_open, range](std::string& s) -> std::string {
        double v = 0;
        if (!parse_real(s, v))
          return fmt::format("{} must be a number {}, got '{}'", flag, range, s);
        const bool above = lo_open ? v > lo : v >= lo;
        const bool below = hi_open ? v < hi : v <= hi;
        if (!above || !below) return fmt::format("{} must be {}, got {}", flag, range, s);
        return std::string();
      },
      range);
}

CLI::Validator size_at_least(const std::string& flag, int64_t min_bytes) {
  return CLI::Validator(
      [flag, min_bytes](std::string& s) -> std::string {
        auto v = parse_size(s);
        // parse_size says "invalid size '8Q' (use a number with K, M, G or T, ...)".
        if (!v) {
          return fmt::format("{}: {}", flag, v.error().message);
        }
        if (*v < min_bytes) {
          return fmt::format("{} must be at least {} byte{}, got '{}'", flag, min_bytes,
                             min_bytes == 1 ? "" : "s", s);
        }
        return std::string();
      },
      "SIZE");
}

CLI::Validator parsed_by(std::function<std::string(const std::string&)> parse,
                         const std::string& what) {
  return CLI::Validator([parse = std::move(parse)](std::string& s) { return parse(s); }, what);
}

void add_kv_type_options(CLI::App& sub, std::string& type_k, std::string& type_v) {
  const auto kv_type = [](const std::string& flag) {
    return parsed_by(
        [flag](const std::string& s) -> std::string {
          auto t = parse_kv_type(s);
          return t ? std::string() : fmt::format("{}: {}", flag, t.error().message);
        },
        "TYPE");
  };
  sub.add_option("--cache-type-k", type_k, "KV cache type for K: f32 | f16 | q8_0")
      ->capture_default_str()
      ->check(kv_type("--cache-type-k"));
  sub.add_option("--cache-type-v", type_v, "KV cache type for V: f32 | f16 | q8_0")
      ->capture_default_str()
      ->check(kv_type("--cache-type-v"));
}

CLI::Option* add_ctx_option(CLI::App& sub, int64_t& n_ctx) {
  return sub
      .add_option("-c,--ctx-size", n_ctx,
                  "Context length in tokens (default: the trained context when its KV fits, "
                  "else the largest that does)")
      ->check(int_range("-c", 1, kMaxTokens));
}

CLI::Option* add_threads_option(CLI::App& sub, int& n_threads, const std::string& help) {
  return sub.add_option("-t,--threads", n_threads, help)->check(int_range("-t", 1, kMaxThreads));
}

void add_sampling_options(CLI::App& sub, SamplerParams& s) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  sub.add_option("--temp", s.temp, "Temperature (0: greedy argmax)")
      ->capture_default_str()
      ->check(real_range("--temp", 0, false, kInf, false));
  sub.add_option("--top-k", s.top_k, "Top-k (0: off)")
      ->capture_default_str()
      ->check(int_range("--top-k", 0, kMaxInt));
  sub.add_option("--top-p", s.top_p, "Top-p (1: off)")
      ->capture_default_str()
      ->check(real_range("--top-p", 0, true, 1, false));
  sub.add_option("--min-p", s.min_p, "Min-p (0: off)")
      ->capture_default_str()
      ->check(real_range("--min-p", 0, false, 1, false));
  sub.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str()
      ->check(real_range("--repeat-penalty", 0, true, kInf, false));
  sub.add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalty looks back over")
      ->capture_default_str()
      ->check(int_range("--repeat-last-n", 0, kMaxInt));
  sub.add_option("-s,--seed", s.seed, "Sampling seed, 0..4294967295 (-1 or not given: random)")
      ->transform(seed_value("-s"));
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
    // CLI11 says "--threads: -t must be 1..1024, got 0": the checks above name the flag as the
    // user knows it, so their message stands alone.
    const size_t colon = what.find(": ");
    const bool ours = colon != std::string::npos && what.compare(colon + 2, 1, "-") == 0;
    std::fprintf(stderr, "error: %s\n", ours ? what.c_str() + colon + 2 : what.c_str());
    return kExitBadValue;
  }
  // CLI11 says "--doc: At Most 1 required but received 2" for a repeated one-value option.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr &&
      what.find(": At Most 1 required but received ") != std::string::npos) {
    const std::string name = what.substr(0, what.find(": "));
    std::fprintf(stderr, "error: %s takes one value; it was given %s times\n", name.c_str(),
                 what.substr(what.rfind(' ') + 1).c_str());
    return kExitBadValue;
  }
  // CLI11 says "Could not convert: --seed = abc": name the option and what it takes.
  const std::string prefix = "Could not convert: ";
  if (what.rfind(prefix, 0) == 0 && what.find(" = ") != std::string::npos) {
    const size_t eq = what.find(" = ");
    const std::string name = what.substr(prefix.size(), eq - prefix.size());
    std::fprintf(stderr,
                 "error: %s %s: not a number (%s takes a number; see --help of the command)\n",
                 name.c_str(), what.substr(eq + 3).c_str(), name.c_str());
    return kExitBadValue;
  }
  std::fprintf(stderr, "error: %s\nRun with --help for usage.\n", what.c_str());
  return 1;
}

int bad_value(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return kExitBadValue;
}

Status check_ubatch_fits(const KvArgs& kv, int64_t n_ctx, bool ctx_given) {
  const int64_t n_ubatch = kv.n_ubatch;
  if (!kv.ubatch_given || n_ctx <= 0 || n_ubatch <= n_ctx) return Status::Ok();
  return make_error(
      "--ubatch {} is larger than the context ({}): a prefill step cannot hold more tokens than "
      "the context; give --ubatch {} or less, or a larger -c",
      n_ubatch,
      ctx_given ? fmt::format("-c {}", n_ctx) : fmt::format("{} tokens, chosen without -c", n_ctx),
      n_ctx);
}

Status check_output_writable(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  auto resolved = resolve_output_path(path);
  if (!resolved) return make_error("{} {}", flag, resolved.error().message);
  const fs::path target(*resolved);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // A probe of the kind the writer makes: a new file in that folder, removed at once.
  const fs::path probe = dir / fmt::format(".{}.probe-{}", target.filename().string(), ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error("{} {}: cannot write in the folder {}: {}", flag, path, dir.string(),
                      std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

CLI::Option* add_device_option(CLI::App& sub, std::string& device, const std::string& help) {
  return sub.add_option("--device", device, help)
      ->capture_default_str()
      ->check(parsed_by(
          [](const std::string& v) {
            auto d = parse_device(v);
            return d ? std::string() : "--device: " + d.error().message;
          },
          "DEVICE"));
}

}  // namespace spw::cli
