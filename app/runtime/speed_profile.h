// A measured speed profile of one model on one machine and backend: what the planner predicts
// prefill and decode times from, instead of memory bandwidth alone.
//
// Model: the seconds one token costs grow linearly with the context depth it is computed at
// (attention reads every earlier position): prefill t(d) = prefill_a + prefill_b * d per token,
// decode t(d) = decode_a + decode_b * d per token. A prompt of n tokens from depth 0 then takes
// prefill_a * n + prefill_b * n^2 / 2 seconds. The coefficients come from a short calibration
// (calibrate_speed(): a prefill timed per ubatch up to a few ubatches deep, and a few decode
// steps near depth 0 and at that depth), fitted by least squares, and are refreshed by real runs
// (refine_with_run(): a run's measured times pull the prediction halfway to what it measured).
//
// Cached as JSON in <cache_dir>/profiles/<model fingerprint>-<key hash>.json, the key being the
// machine (CPU model name) and the backend ("cpu (avx2, 2 threads)"): another machine, thread
// count or backend calibrates anew.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/backend/device.h"
#include "engine/common/expected.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw::app {

struct SpeedProfile {
  uint64_t model_fingerprint = 0;  // kv::model_fingerprint(model)
  std::string machine;             // "Intel(R) Xeon(R) ..." (/proc/cpuinfo model name)
  std::string backend;             // SessionChoice::backend: "cpu (avx2, 2 threads)"
  int64_t calibrated_at = 0;       // Unix seconds of the calibration
  int64_t calibration_depth = 0;   // tokens deep the calibration measured
  int runs_refined = 0;            // real runs folded in since
  // Seconds per token at context depth d: a + b * d (b >= 0).
  double prefill_a = 0, prefill_b = 0;
  double decode_a = 0, decode_b = 0;

  /// Seconds to prefill `n_tokens` tokens after `depth` tokens already in the KV.
  double prefill_s(int64_t n_tokens, int64_t depth = 0) const;
  /// Seconds to decode `n_tokens` tokens after `depth` tokens in the KV.
  double decode_s(int64_t n_tokens, int64_t depth) const;
  /// Decode tokens per second at `depth`.
  double decode_tokens_per_s(int64_t depth) const;
  /// "measured profile, calibrated 2026-12-02 04:40 UTC" (+ ", refined by N runs").
  std::string basis() const;
};

/// The JSON text of a profile, and back. Errors: not JSON, a missing or non-numeric field.
std::string speed_profile_json(const SpeedProfile& p);
Expected<SpeedProfile> parse_speed_profile(const std::string& json);

/// The CPU's model name from /proc/cpuinfo ("unknown CPU" when unreadable).
std::string machine_name();

/// <cache_dir>/profiles/<fingerprint as 16 hex digits>-<8 hex digits of machine + backend>.json
std::filesystem::path speed_profile_file(const std::filesystem::path& cache_dir,
                                         uint64_t model_fingerprint, const std::string& machine,
                                         const std::string& backend);

/// The cached profile, if one exists for exactly this model, machine and backend (a damaged
/// file counts as none).
std::optional<SpeedProfile> load_speed_profile(const std::filesystem::path& cache_dir,
                                               uint64_t model_fingerprint,
                                               const std::string& machine,
                                               const std::string& backend);
/// Writes the profile's file (through a temporary file and a rename). Errors: the folder or
/// file cannot be written (with the path).
Status save_speed_profile(const std::filesystem::path& cache_dir, const SpeedProfile& p);

struct CalibrationParams {
  /// Tokens the calibration prefill goes deep: a few ubatches (at least two), at most the
  /// session's context less the decode steps. The time it takes grows with it.
  int64_t depth = 2048;
  int64_t n_ubatch = 512;  // the session's ubatch (the prefill is timed per ubatch)
  int n_decode = 4;        // decode steps timed near depth 0 and again at `depth`
  int32_t token = 1;       // the token id fed (any valid id: speed does not depend on it)
  /// The prefill stops after the ubatch that passes this many seconds (at least two ubatches
  /// are timed): a large model on a slow machine calibrates less deep, not for minutes.
  double max_prefill_s = 10;
};

/// Calibrates `session` (an empty session of the model; its KV is used and left filled):
/// times decode steps at depth ~1, a prefill up to params.depth per ubatch, then decode steps
/// there; fits the two lines. Takes seconds on small models (depth 2048 on a 7B CPU model: about
/// as long as prefilling 2048 tokens). Errors: the session's (eval), a context shorter than two
/// ubatches plus the decode steps.
Expected<SpeedProfile> calibrate_speed(Session& session, const CalibrationParams& params);

/// The profile of `model` on the CPU session that `sp` and `opts` make (threads, ubatch, KV
/// types), from the cache under `cache_dir`, else calibrated now on a session of its own (a
/// context just deep enough; `params.depth` at most the trained context less room for the
/// decode steps) and saved there. `*calibrated` says which. Errors: the session's or the
/// calibration's; a failed save is not an error (the profile is returned).
Expected<SpeedProfile> cached_or_calibrated_profile(const Model& model, SessionParams sp,
                                                    BackendOptions opts,
                                                    const std::filesystem::path& cache_dir,
                                                    CalibrationParams params,
                                                    bool* calibrated = nullptr);

/// Folds a real run into `p`: the run prefilled `prompt_tokens` from depth `start_depth` in
/// `prefill_s` seconds and decoded `decode_tokens` after that in `decode_s` seconds (0 tokens or
/// seconds: that part is left alone). Each part of the profile moves halfway (in log space) to
/// the factor that would have predicted the run.
void refine_with_run(SpeedProfile& p, int64_t start_depth, int64_t prompt_tokens, double prefill_s,
                     int64_t decode_tokens, double decode_s);

}  // namespace spw::app
