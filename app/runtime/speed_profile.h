// A measured speed profile of one model on one machine and backend: what the planner predicts
// prefill and decode times from, instead of memory bandwidth alone.
//
// Model: a token computed at context depth d (d positions before it) costs a + g(d) seconds: a
// for the weights, the same at every depth, and g(d) for attending the d positions, 0 at depth 0.
// g is piecewise linear through measured knots, so it follows what the machine does between
// them (a cost per position that rises once the KV outgrows a cache level, positions out of the
// KV window read from the host tier) instead of one slope fitted near depth 0; past the deepest
// knot it goes on with the last segment's slope. Prefill and decode have a curve each. A prompt
// of n tokens from depth d0 costs the sum over its positions d0 .. d0 + n - 1.
//
// The calibration (calibrate_speed(), seconds): a prefill of a few ubatches timed per ubatch
// gives a and the slope near depth 0; decode steps (up to 64 per depth) timed near depth 0, at
// the prefill's end, at the KV window's edge and deep (16K tokens unless the context, the RAM
// or the time allowed is less) give the decode curve; short prompt chunks timed after the
// prefill and at those depths give the prefill curve's deeper knots (a chunk's weights cost
// cancels in the difference, its attention is the ubatch's). The deep depths are reached without
// prefilling them: CpuSession::repeat_kv() fills the cache with copies of the blocks computed so
// far, in the tiers a real run of that length uses, so a step there costs what it costs in a
// real run: attention over that many positions, the cold blocks (out of the window, on the host
// tier) included, and a block spill where a step starts a block. The knot at the window's edge
// separates the window's positions from the cold ones. Real runs refine the profile
// (refine_with_run(): a run's measured times pull the prediction halfway to what it measured).
//
// Cached as JSON, format 2 (a file of another format is calibrated again, never misread), in
// <cache_dir>/profiles/<model fingerprint>-<key hash>.json, the key being the machine (CPU model
// name) and the backend ("cpu (avx2, 2 threads)"): another machine, thread count or backend
// calibrates anew.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/device.h"
#include "engine/common/expected.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw::app {

/// Seconds per token as a function of the context depth it is computed at: a + g(depth).
struct DepthCost {
  struct Knot {
    double depth = 0;  // positions before the token (> 0; knots ascending)
    double g = 0;      // seconds of attention at that depth (>= 0; never falling with depth)
    bool operator==(const Knot&) const = default;
  };
  double a = 0;  // seconds per token at depth 0
  std::vector<Knot> knots;

  /// The line a + b * depth (one knot at depth 1, continued with its slope).
  static DepthCost line(double a, double b);
  /// g(depth): 0 at depth 0, linear between knots, the last segment's slope past the last knot
  /// (0 everywhere without knots).
  double attention_s(double depth) const;
  /// Seconds of one token at `depth`.
  double token_s(double depth) const { return a + attention_s(depth); }
  /// Seconds of `n_tokens` tokens at positions depth .. depth + n_tokens - 1: the exact sum
  /// (g is linear between knots, so each stretch costs its count times g at its mean position).
  double tokens_s(int64_t n_tokens, int64_t depth) const;
  /// Multiplies a and every knot's g by f.
  void scale(double f);
  bool operator==(const DepthCost&) const = default;
};

struct SpeedProfile {
  /// The cache file's format: 2 = piecewise-linear curves. Format 1 (one line a + b * depth per
  /// curve, fitted 2K tokens deep) is refused when read, so it is calibrated again.
  static constexpr int kFormat = 2;

  uint64_t model_fingerprint = 0;  // kv::model_fingerprint(model)
  std::string machine;             // "Intel(R) Xeon(R) ..." (/proc/cpuinfo model name)
  std::string backend;             // SessionChoice::backend: "cpu (avx2, 2 threads)"
  int64_t calibrated_at = 0;       // Unix seconds of the calibration
  int64_t calibration_depth = 0;   // the deepest depth timed (tokens)
  int64_t prefill_depth = 0;       // tokens the calibration really prefilled
  int64_t window_tokens = 0;       // its KV window: positions past it were cold (host tier)
  double calibration_s = 0;        // how long the calibration took
  int runs_refined = 0;            // real runs folded in since
  DepthCost prefill, decode;

  /// Seconds to prefill `n_tokens` tokens after `depth` tokens already in the KV.
  double prefill_s(int64_t n_tokens, int64_t depth = 0) const {
    return prefill.tokens_s(n_tokens, depth);
  }
  /// Seconds to decode `n_tokens` tokens after `depth` tokens in the KV.
  double decode_s(int64_t n_tokens, int64_t depth) const {
    return decode.tokens_s(n_tokens, depth);
  }
  /// Decode tokens per second at `depth`.
  double decode_tokens_per_s(int64_t depth) const;
  /// "measured profile, calibrated 2026-12-02 04:40 UTC" (+ ", refined by N runs").
  std::string basis() const;
};

/// The JSON text of a profile, and back. Errors: not JSON; another format than kFormat ("the
/// speed profile is format 1; this version reads format 2"); a missing or non-numeric field;
/// knots not ascending in depth or with a negative g; a non-positive a.
std::string speed_profile_json(const SpeedProfile& p);
Expected<SpeedProfile> parse_speed_profile(const std::string& json);

/// The CPU's model name from /proc/cpuinfo ("unknown CPU" when unreadable).
std::string machine_name();

/// <cache_dir>/profiles/<fingerprint as 16 hex digits>-<8 hex digits of machine + backend>.json
std::filesystem::path speed_profile_file(const std::filesystem::path& cache_dir,
                                         uint64_t model_fingerprint, const std::string& machine,
                                         const std::string& backend);

/// The cached profile, if one exists for exactly this model, machine and backend (a damaged
/// file or one of another format counts as none).
std::optional<SpeedProfile> load_speed_profile(const std::filesystem::path& cache_dir,
                                               uint64_t model_fingerprint,
                                               const std::string& machine,
                                               const std::string& backend);
/// Writes the profile's file (through a temporary file and a rename). Errors: the folder or
/// file cannot be written (with the path).
Status save_speed_profile(const std::filesystem::path& cache_dir, const SpeedProfile& p);

// ---- The calibration's timings and their fit (pure) -------------------------------------------

/// A timed stretch of a prefill: `tokens` tokens whose mean depth is `depth`, `s_per_token`
/// seconds each.
struct TimedTokens {
  double depth = 0;
  double s_per_token = 0;
  double tokens = 1;
};

/// Decode steps timed one by one, the first at position `depth`.
struct TimedSteps {
  int64_t depth = 0;
  std::vector<double> step_s;
};

/// What calibrate_speed() times, in the order it times it.
struct CalibrationTimings {
  std::vector<TimedTokens> ubatches;       // the prefill's whole ubatches, from depth 0
  std::vector<TimedTokens> anchor_chunks;  // short chunks right after the prefill
  std::vector<TimedTokens> probe_chunks;   // one chunk of the same size at each deeper depth
  std::vector<TimedSteps> decode;          // near depth 0 first, then deeper, ascending
};

/// Seconds per step of a group: the mean of the steps that took at most 4x the median (a step
/// that starts a block and spills one counts; one that waited for other processes does not).
/// 0 for no steps.
double typical_step_s(std::span<const double> step_s);

/// The prefill curve: a line fitted by least squares (weighted by tokens; the first of three or
/// more ubatches left out: it warms caches and threads up) to the ubatches gives a and g up to
/// the anchor chunks' mean depth (a single ubatch: a flat line); each probe chunk's seconds per
/// token less the anchor chunks' mean give g's growth from there to the probe's depth. A knot
/// that would fall below the one before it is raised to it.
DepthCost fit_prefill_cost(const CalibrationTimings& t);

/// The decode curve through each group's point (the mean position of its steps,
/// typical_step_s()): a from the line through the first two points at depth 0 (at least half
/// and at most all of the first point's seconds), then a knot at every later point (never
/// falling). One group: a flat curve at its seconds.
DepthCost fit_decode_cost(std::span<const TimedSteps> groups);

// ---- Calibrating ------------------------------------------------------------------------------

struct CalibrationParams {
  /// Tokens the calibration really prefills: whole ubatches (at least two), at most the
  /// session's context less the decode steps and chunks. The time it takes grows with it.
  int64_t depth = 1536;
  int64_t n_ubatch = 512;  // the session's ubatch (the prefill is timed per ubatch)
  /// Decode steps timed at each depth: as many, or fewer once a depth's steps took
  /// max_decode_group_s (8 at least).
  int n_decode = 64;
  double max_decode_group_s = 2;
  /// The deepest depth timed through repeat_kv(); less when the session's context is shorter or
  /// the deep steps' estimated time passes max_probe_s (halved until it fits); 0: time no deeper
  /// than the prefill (the curves then go on with their slopes there). A fast-path CPU session
  /// only (other sessions have no repeat_kv()).
  int64_t probe_depth = 16384;
  int64_t chunk_tokens = 32;  // tokens of each timed prompt chunk
  double max_probe_s = 4;
  int32_t token = 1;  // the token id fed (any valid id: speed does not depend on it)
  /// The prefill stops after the ubatch that passes this many seconds (at least two ubatches
  /// are timed): a large model on a slow machine calibrates less deep, not for minutes.
  double max_prefill_s = 10;
};

/// Calibrates `session` (an empty session of the model; its KV is used and left filled): decode
/// steps near depth 0, the prefill per ubatch, two chunks and decode steps there, then (a
/// CpuSession) at the KV window's edge and at the probe depth, decode steps and a chunk each;
/// fits both curves. Seconds: about as long as prefilling params.depth tokens, decoding 4 x 64
/// tokens and a 32-token chunk 16K deep (tests/bench/RESULTS.md has the bench model's figure).
/// Errors: the session's (eval, repeat_kv), a context shorter than two ubatches plus the decode
/// steps and chunks.
Expected<SpeedProfile> calibrate_speed(Session& session, const CalibrationParams& params);

/// The profile of `model` on the CPU session that `sp` and `opts` make (threads, ubatch, KV
/// types), from the cache under `cache_dir`, else calibrated now on a session of its own with the
/// default KV settings (a context just deep enough for params.probe_depth, at most the trained
/// context and KV of at most 1 GiB and a quarter of the available RAM) and saved there.
/// `*calibrated` says which. Errors: the session's or the calibration's; a failed save is not
/// an error (the profile is returned).
Expected<SpeedProfile> cached_or_calibrated_profile(const Model& model, SessionParams sp,
                                                    BackendOptions opts,
                                                    const std::filesystem::path& cache_dir,
                                                    CalibrationParams params,
                                                    bool* calibrated = nullptr);

/// Folds a real run into `p`: the run prefilled `prompt_tokens` from depth `start_depth` in
/// `prefill_s` seconds and decoded `decode_tokens` after that in `decode_s` seconds (0 tokens or
/// seconds: that part is left alone). Each curve moves halfway (in log space) to the factor that
/// would have predicted the run.
void refine_with_run(SpeedProfile& p, int64_t start_depth, int64_t prompt_tokens, double prefill_s,
                     int64_t decode_tokens, double decode_s);

}  // namespace spw::app
