// spillway-cli plan: where a context's KV would go (window, host RAM, disk), whether it fits the
// budgets and what would if it does not, and the prefill and decode times that bandwidths
// measured at that moment predict (engine/kv/planner.h). Needs no GPU and no budgets.
//
//   spillway-cli plan -m MODEL -c CTX [--vram SIZE] [--host-budget SIZE] [--disk-budget SIZE]
//                     [--cache-type-k T] [--cache-type-v T] [--kv-window N|auto] [--kv-block N]
//                     [--kv-sinks N] [--spill-dir DIR] [--json]
//
// The KV flags are generate's (kv_options.h) and mean what they mean there, so plan and generate
// agree to the token on what fits; --ram and --disk are the deprecated spellings of
// --host-budget and --disk-budget.
//
// Probes: RAM read bandwidth (all cores, 256 MiB, best of 3) and the disk of the spill folder
// (--spill-dir, else the cache folder): a 64 MiB file written, fsync'd, dropped from the page
// cache and read back. A disk probe that cannot run (no writable folder) is a note on stderr and
// null in the JSON, not an error.
#pragma once

#include <cstdint>
#include <string>

#include "app/cli/kv_options.h"

namespace spw::cli {

struct PlanArgs {
  std::string model;
  int64_t n_ctx = 0;  // -c; 0: the model's trained context
  std::string vram;   // a size as typed (engine/common/size.h); empty: not given (no GPU)
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  KvArgs kv;             // generate's: block, window, sinks, budgets, spill folder (the probe's)
  std::string data_dir;  // the global --data-dir (where the cache folder is)
  bool json = false;     // stdout is exactly one JSON object
  int n_threads = 0;     // -t: the threads the prediction is for (0: all cores)
  bool no_calibrate = false;  // --no-calibrate: bandwidth-only predictions, no measured profile
};

/// plan's exit status when its verdict is "does not fit" (the plan, with its problems and
/// suggestions, still printed), so a script can test the verdict; distinct from 1 (an error)
/// and 2 (a value the command line refused).
inline constexpr int kExitDoesNotFit = 3;

/// Exit 0 with the plan when it fits, kExitDoesNotFit with the plan when it does not; 1 with
/// "error: ..." on stderr for a model that does not load (2, from the command line's checks,
/// for a value out of range or not of its kind).
int run_plan(const PlanArgs& a);

}  // namespace spw::cli
