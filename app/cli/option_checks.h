// Range checks of spillway-cli's numeric and size options, one definition for every command
// (generate, ask, bench, plan, serve, jobs add, and spillway-bench). Each is a CLI11 validator,
// so a value out of range is refused while the command line is parsed, before a model is opened
// or a prefill starts, with the option, the value given and what it takes:
//   error: -t must be 1..1024, got 0
// Such a refusal exits with kExitBadValue (2), as does a value that is not a number; every other
// error of a command exits 1.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "app/cli/kv_options.h"
#include "engine/common/expected.h"

namespace CLI {
class App;
class Option;
class ParseError;
class Validator;
}  // namespace CLI

namespace spw {
struct SamplerParams;
}

namespace spw::cli {

/// The exit status of a command line whose option value is out of range or not a value of its
/// kind (shells and scripts tell it from a run that failed, status 1).
inline constexpr int kExitBadValue = 2;

/// -t: more threads than this is a typo, not a machine.
inline constexpr int64_t kMaxThreads = 1024;
/// -c, --ubatch, -n and the like: the most positions a context has (kv::kMaxContextTokens).
inline constexpr int64_t kMaxTokens = int64_t{1} << 31;
/// The largest value of an int option (bench's -p, -n, -r, -d; -n of generate and ask).
inline constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

/// A whole number in [lo, hi]: "-t must be 1..1024, got 0" (or "got 'abc'"). `flag` is the
/// spelling the message uses. The value is rewritten in plain decimal, so CLI11 never reads
/// "010" as octal after the check read it as ten.
CLI::Validator int_range(const std::string& flag, int64_t lo, int64_t hi);

/// -n of generate, ask and jobs add: -1 (until the end of text or a full context) or [1, hi]:
/// "-n must be -1 (until the end of text) or 1..2147483647, got 0".
CLI::Validator count_or_unlimited(const std::string& flag, int64_t hi);

/// -s,--seed: -1 (a random seed, stored as the sampler's 0xFFFFFFFF) or 0..4294967295:
/// "-s must be -1 (a random seed) or 0..4294967295, got -2".
CLI::Validator seed_value(const std::string& flag);

/// A finite real number in [lo, hi] (an open end where `lo_open`/`hi_open`; hi may be
/// infinity): "--top-p must be in (0, 1], got 1.5", "--temp must be at least 0, got -1".
CLI::Validator real_range(const std::string& flag, double lo, bool lo_open, double hi,
                          bool hi_open);

/// A size such as 8G, 512MiB or 4096 (engine/common/size.h parse_size) of at least `min_bytes`:
/// "--host-budget: invalid size '8Q' (use a number with K, M, G or T, ...)", "--max-body must be
/// at least 1 byte, got '0'".
CLI::Validator size_at_least(const std::string& flag, int64_t min_bytes);

/// A value `parse` accepts: `parse` returns "" or the whole message, which names the flag
/// ("--kv-window 0: the window holds at least 1 token"). `what` is the help's type name.
CLI::Validator parsed_by(std::function<std::string(const std::string&)> parse,
                         const std::string& what);

/// --device: auto | cpu | cuda (engine/backend/device.h parse_device), default "auto", checked
/// while parsing: "--device: unknown device 'tpu' (accepted: auto, cpu, cuda)" and exit 2 as
/// other refused values.
CLI::Option* add_device_option(
    CLI::App& sub, std::string& device,
    const std::string& help =
        "Where the model runs: auto (CUDA when usable, else the CPU) | cpu "
        "| cuda");

/// --cache-type-k and --cache-type-v into `type_k` / `type_v`, each checked while parsing to be
/// f32 | f16 | q8_0 (engine/session/session.h parse_kv_type): "--cache-type-k: unknown KV cache
/// type 'q4' (accepted: f32, f16, q8_0)".
void add_kv_type_options(CLI::App& sub, std::string& type_k, std::string& type_v);

/// The whole text as a base-10 integer (a leading '+' allowed); false when it is not one or
/// does not fit in 64 bits.
bool parse_int(const std::string& s, int64_t& v);

/// -c,--ctx-size: 1..kMaxTokens; not given, n_ctx stays 0 (the command chooses the context:
/// the trained one when its KV fits, else the largest that does).
CLI::Option* add_ctx_option(CLI::App& sub, int64_t& n_ctx);
/// -t,--threads: 1..kMaxThreads; not given, n_threads stays 0 (all cores).
CLI::Option* add_threads_option(CLI::App& sub, int& n_threads,
                                const std::string& help = "CPU threads (default: all cores)");
/// --temp [0, inf), --top-k 0.., --top-p (0, 1], --min-p [0, 1], --repeat-penalty (0, inf),
/// --repeat-last-n 0.. and -s,--seed: generate's and ask's sampling.
void add_sampling_options(CLI::App& sub, SamplerParams& s);

/// The message and exit status of a command line CLI11 refused: help and version exit 0; a
/// value out of range or not a number says so and exits kExitBadValue; anything else (an
/// unknown option, a missing one) "error: ...", exit 1.
int report_parse_error(CLI::App& app, const CLI::ParseError& e);

/// Prints "error: MESSAGE" and returns kExitBadValue: a check of values against each other
/// (--ubatch against -c) after parsing.
int bad_value(const Error& e);

/// A --ubatch given larger than the context it fills: "--ubatch 1024 is larger than the context
/// (-c 512): a prefill step cannot hold more tokens than the context; give --ubatch 512 or
/// less, or a larger -c". `n_ctx` 0 (not chosen yet) passes; `ctx_given` false: the context
/// was chosen without -c, and the message says so. The default --ubatch is never refused (the
/// session takes at most the context per step).
Status check_ubatch_fits(const KvArgs& kv, int64_t n_ctx, bool ctx_given = true);

/// An output file the run writes at its end (--save-kv), checked before any work: the path as
/// resolve_output_path() takes it (engine/common/output_path.h), and its folder takes a new file
/// (the file is written beside it and renamed). Errors name the flag, the path and the errno
/// text: "--save-kv /sys/x.kv: cannot write in the folder /sys: Permission denied".
Status check_output_writable(const std::string& flag, const std::string& path);

}  // namespace spw::cli
