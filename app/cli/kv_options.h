// The tiered KV cache's command-line options (docs/DESIGN.md §4.2), one definition for every
// command that runs or plans a model: generate, ask, serve, jobs add, bench (spillway-cli and
// spillway-bench) and plan. The flags turn into kv::KvSettings (engine/kv/tier_policy.h), which
// travels unchanged to the session: BackendOptions::kv, or EngineSettings::kv for the app's
// runtime.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/common/expected.h"
#include "engine/common/machine.h"
#include "engine/kv/tier_policy.h"

namespace CLI {
class App;
}

namespace spw {
class Model;
struct SessionParams;
}  // namespace spw

namespace spw::cli {

/// The flags as typed. Defaults are the tier policy's (kv::KvSettings).
struct KvArgs {
  int64_t kv_block = kv::kDefaultBlockTokens;  // --kv-block: tokens per block
  std::string kv_window = "auto";              // --kv-window: recent tokens, or auto
  int64_t kv_sinks = kv::kDefaultSinkTokens;   // --kv-sinks: attention-sink tokens
  std::optional<std::string> host_budget;      // --host-budget SIZE; not given: no limit
  std::optional<std::string> disk_budget;      // --disk-budget SIZE; not given: 0, no disk tier
  std::string spill_dir;                       // --spill-dir; empty: default_spill_dir
  int64_t n_ubatch = 512;                      // --ubatch: tokens per prefill step
  bool ubatch_given = false;                   // --ubatch was on the command line
  std::string attention = "exact";             // --attention exact | streaming | topk:K
  std::string huge_pages = "on";               // --huge-pages on | off: the host arena's pages
  std::string numa_node = "auto";              // --numa-node auto | off | N: the host arena's
  /// The spill folder without --spill-dir: the app cache folder, filled in by spillway-cli;
  /// empty where there is none (then the disk tier needs --spill-dir).
  std::string default_spill_dir;
  /// plan's deprecated spellings of --host-budget and --disk-budget (--ram, --disk).
  std::optional<std::string> ram_alias, disk_alias;
  /// --mem-available SIZE: the memory the default context plans with instead of what the
  /// machine has available now (a plan for another moment or machine; tests); unset: now.
  std::optional<std::string> mem_available;
};

/// Adds --kv-block, --kv-window, --kv-sinks, --host-budget, --disk-budget and --spill-dir: what
/// decides where KV goes. `plan` takes these (and --ram / --disk, deprecated, when
/// `plan_aliases`).
void add_kv_layout_options(CLI::App& sub, KvArgs& a, bool plan_aliases = false);
/// The layout options and --ubatch and --attention: every command that runs a model.
void add_kv_options(CLI::App& sub, KvArgs& a);

/// The settings of the flags: --ubatch checked (check_ubatch()), sizes parsed (errors name the
/// flag: "--host-budget: invalid size '8Q' (...)"), --kv-window and --attention read, then
/// kv::validate(); the spill folder chosen
/// (--spill-dir, else default_spill_dir), created when the disk tier uses it and cleared of the
/// spill files of processes that no longer run. A deprecated alias prints a note to stderr.
Expected<kv::KvSettings> make_kv_settings(const KvArgs& a);

/// The machine the default context is chosen for (engine/common/machine.h): read now, with
/// --mem-available in place of MemAvailable and of the address-space limit when given. Error:
/// "--mem-available: invalid size ...".
Expected<MachineMemory> machine_memory(const KvArgs& a);

/// The context a command runs: choose_session_context() (engine/backend/device.h) for the
/// machine of machine_memory(a); its note, when the default context was cut, printed to stderr
/// as "note: context 32,768 of 131,072 trained: ...".
Expected<kv::ContextChoice> choose_context_or_note(const Model& model, const SessionParams& params,
                                                   const kv::KvSettings& kv, const KvArgs& a);

/// True when a setting differs from its default (the spill folder aside): the paged-cache flags
/// that --reference, with its contiguous cache, cannot take.
bool kv_settings_given(const kv::KvSettings& s);

/// --ubatch checked: "--ubatch 0: at least 1 token per step".
Status check_ubatch(const KvArgs& a);

}  // namespace spw::cli
