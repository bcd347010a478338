#include "app/cli/kv_options.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/cli/option_checks.h"
#include "engine/backend/device.h"
#include "engine/common/size.h"
#include "engine/kv/kv_cache.h"

namespace spw::cli {

namespace {

// A whole-number KV setting checked as kv::validate() checks it, while the command line is
// parsed (its messages name the flag: "--kv-block 0: a block holds at least 1 token").
CLI::Validator kv_setting_check(const char* flag, void (*set)(kv::KvSettings&, int64_t)) {
  return parsed_by(
      [flag, set](const std::string& text) -> std::string {
        int64_t v = 0;
        if (!parse_int(text, v)) return fmt::format("{} '{}' is not a whole number", flag, text);
        kv::KvSettings s;
        set(s, v);
        const Status st = kv::validate(s, /*need_spill_dir=*/false);
        return st ? std::string() : st.error().message;
      },
      "N");
}

// The text settings, each read into `s` by one function that both the command line's check and
// make_kv_settings() use; the errors name the flag.
Status set_kv_window(const std::string& text, kv::KvSettings& s) {
  return kv::parse_kv_window(text, s);
}
Status set_attention(const std::string& text, kv::KvSettings& s) {
  if (auto st = kv::parse_kv_attention(text, s); !st)
    return make_error("--attention: {}", st.error().message);
  return Status::Ok();
}
Status set_huge_pages(const std::string& text, kv::KvSettings& s) {
  if (text != "on" && text != "off") return make_error("--huge-pages '{}': give on or off", text);
  s.huge_pages = text == "on";
  return Status::Ok();
}
Status set_numa_node(const std::string& text, kv::KvSettings& s) {
  auto numa = parse_numa_setting(text);
  if (!numa) return numa.error();
  s.numa = *numa;
  return Status::Ok();
}

// A text setting checked while the command line is parsed, by the function that reads it.
CLI::Validator kv_text_check(Status (*set)(const std::string&, kv::KvSettings&),
                             const std::string& what) {
  return parsed_by(
      [set](const std::string& text) {
        kv::KvSettings s;
        const Status st = set(text, s);
        return st ? std::string() : st.error().message;
      },
      what);
}

}  // namespace

void add_kv_layout_options(CLI::App& sub, KvArgs& a, bool plan_aliases) {
  sub.add_option("--kv-block", a.kv_block, "KV cache block size in tokens")
      ->capture_default_str()
      ->check(
          kv_setting_check("--kv-block", [](kv::KvSettings& s, int64_t v) { s.block_size = v; }));
  sub.add_option("--kv-window", a.kv_window,
                 "Recent tokens kept in the KV window (GPU with CUDA, else RAM), or auto: 4096 in "
                 "RAM, on a GPU the whole context or what fits")
      ->capture_default_str()
      ->check(kv_text_check(set_kv_window, "N|auto"));
  sub.add_option("--kv-sinks", a.kv_sinks, "Attention-sink tokens kept in the KV window")
      ->capture_default_str()
      ->check(kv_setting_check("--kv-sinks", [](kv::KvSettings& s, int64_t v) { s.n_sinks = v; }));
  sub.add_option("--host-budget", a.host_budget,
                 "RAM for KV blocks that left the window, e.g. 8G (default: no limit)")
      ->check(size_at_least("--host-budget", 0));
  sub.add_option("--disk-budget", a.disk_budget,
                 "Disk for KV blocks past the host budget, e.g. 100G (default 0: no disk tier)")
      ->check(size_at_least("--disk-budget", 0));
  sub.add_option("--spill-dir", a.spill_dir,
                 "Folder of the disk tier's spill file (default: the cache folder)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.empty() ? std::string("an empty folder name") : std::string();
          },
          "DIR"));
  sub.add_option("--mem-available", a.mem_available,
                 plan_aliases
                     ? "Memory the run may use, e.g. 16G (default: what the machine has "
                       "available now): the default context (no -c) is sized for it, and the "
                       "verdict checks weights + KV in RAM against it"
                     : "Memory the default context (no -c) plans with, e.g. 16G (default: what "
                       "the machine has available now)")
      ->check(size_at_least("--mem-available", 1));
  if (plan_aliases) {
    // Hidden: the old spellings of plan, kept so scripts keep working (make_kv_settings says
    // so once).
    sub.add_option("--ram", a.ram_alias, "Deprecated: --host-budget")
        ->group("")
        ->check(size_at_least("--ram", 0));
    sub.add_option("--disk", a.disk_alias, "Deprecated: --disk-budget")
        ->group("")
        ->check(size_at_least("--disk", 0));
  }
}

void add_kv_options(CLI::App& sub, KvArgs& a) {
  add_kv_layout_options(sub, a);
  sub.add_option("--ubatch", a.n_ubatch, "Tokens per prefill step (at most the context)")
      ->capture_default_str()
      ->check(int_range("--ubatch", 1, kMaxTokens))
      ->each([&a](const std::string&) { a.ubatch_given = true; });
  sub.add_option("--attention", a.attention,
                 "KV attention: exact | streaming | topk:K (the last two approximate)")
      ->capture_default_str()
      ->check(kv_text_check(set_attention, "MODE"));
  sub.add_option("--huge-pages", a.huge_pages,
                 "on | off: 2 MiB transparent huge pages for the host KV tier where the kernel's "
                 "THP mode is madvise or always")
      ->capture_default_str()
      ->check(kv_text_check(set_huge_pages, "on|off"));
  sub.add_option("--numa-node", a.numa_node,
                 "auto | off | N: the NUMA node the host KV tier is bound to (auto: the node of "
                 "the threads or the GPU that read it, on a machine with more than one)")
      ->capture_default_str()
      ->check(kv_text_check(set_numa_node, "auto|off|N"));
}

Expected<MachineMemory> machine_memory(const KvArgs& a) {
  MachineMemory m = read_machine_memory();
  if (!a.mem_available) return m;
  auto v = parse_size(*a.mem_available);
  if (!v) return make_error("--mem-available: {}", v.error().message);
  if (*v == 0) return Error{"--mem-available 0: give the memory the run may use, e.g. 8G"};
  m.available_bytes = *v;
  m.address_space_left = -1;
  return m;
}

Expected<kv::ContextChoice> choose_context_or_note(const Model& model, const SessionParams& params,
                                                   const kv::KvSettings& kv, const KvArgs& a) {
  auto machine = machine_memory(a);
  if (!machine) return machine.error();
  auto choice = choose_session_context(model, params, kv, *machine);
  if (choice && !choice->note.empty()) std::fprintf(stderr, "note: %s\n", choice->note.c_str());
  return choice;
}

bool kv_settings_given(const kv::KvSettings& s) {
  kv::KvSettings d;
  d.spill_dir = s.spill_dir;
  return !(s == d);
}

Status check_ubatch(const KvArgs& a) {
  if (a.n_ubatch < 1) return make_error("--ubatch {}: at least 1 token per step", a.n_ubatch);
  return Status::Ok();
}

namespace {

// A size flag that may have a deprecated spelling: the bytes of the one given (never both; the
// old one with a note), `none` when neither is. Errors name the spelling used.
Expected<int64_t> size_flag(const std::optional<std::string>& value,
                            const std::optional<std::string>& alias, const char* flag,
                            const char* old_flag, int64_t none) {
  if (value && alias)
    return make_error("{} and {} are the same setting: give {} only", flag, old_flag, flag);
  if (alias) {
    std::fprintf(stderr,
                 "note: %s is deprecated: use %s, which means what generate's %s means (the "
                 "window is not counted in it)\n",
                 old_flag, flag, flag);
  }
  const std::optional<std::string>& given = value ? value : alias;
  if (!given) return none;
  auto v = parse_size(*given);
  if (!v) return make_error("{}: {}", value ? flag : old_flag, v.error().message);
  return v;
}

}  // namespace

Expected<kv::KvSettings> make_kv_settings(const KvArgs& a) {
  if (Status st = check_ubatch(a); !st) return st.error();
  kv::KvSettings s;
  s.block_size = a.kv_block;
  s.n_sinks = a.kv_sinks;
  if (Status st = set_kv_window(a.kv_window, s); !st) return st.error();
  auto host = size_flag(a.host_budget, a.ram_alias, "--host-budget", "--ram", -1);
  if (!host) return host.error();
  s.host_budget = *host;
  auto disk = size_flag(a.disk_budget, a.disk_alias, "--disk-budget", "--disk", 0);
  if (!disk) return disk.error();
  s.disk_budget = *disk;
  if (Status st = set_attention(a.attention, s); !st) return st.error();
  if (Status st = set_huge_pages(a.huge_pages, s); !st) return st.error();
  if (Status st = set_numa_node(a.numa_node, s); !st) return st.error();

  s.spill_dir = a.spill_dir.empty() ? a.default_spill_dir : a.spill_dir;
  if (Status st = kv::validate(s); !st) return st.error();
  if (s.spill_dir.empty()) return s;
  if (s.disk_budget > 0) {
    // The folder's own error (read-only file system, permission) says more than the cache's
    // later "cannot create the spill file ...: No such file or directory".
    std::error_code ec;
    std::filesystem::create_directories(s.spill_dir, ec);
    if (ec) {
      return make_error("cannot create the spill folder {}: {}", s.spill_dir, ec.message());
    }
  }
  kv::remove_stale_spill_files(s.spill_dir);  // leftovers of a crashed run
  return s;
}

}  // namespace spw::cli
