#include "app/cli/plan.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/paths.h"
#include "app/runtime/speed_profile.h"
#include "engine/backend/device.h"
#include "engine/common/size.h"
#include "engine/kv/bandwidth_probe.h"
#include "engine/kv/planner.h"
#include "engine/kv/tier_policy.h"
#include "engine/model/model.h"
#include "engine/session/session.h"

namespace spw::cli {

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

KvType kv_type_of(GgmlType t) {
  return t == GgmlType::F32 ? KvType::F32 : t == GgmlType::Q8_0 ? KvType::Q8_0 : KvType::F16;
}

// A size flag: -1 when not given.
Expected<int64_t> size_arg(const std::string& text, const char* flag) {
  if (text.empty()) return int64_t{-1};
  auto v = parse_size(text);
  if (!v) return make_error("{}: {}", flag, v.error().message);
  return v;
}

Expected<GgmlType> kv_type_arg(const std::string& text, const char* flag) {
  auto t = parse_kv_type(text);
  if (!t) return make_error("{}: {}", flag, t.error().message);
  switch (*t) {
    case KvType::F32:
      return GgmlType::F32;
    case KvType::F16:
      return GgmlType::F16;
    case KvType::Q8_0:
      return GgmlType::Q8_0;
  }
  return GgmlType::F16;
}

// The folder the disk tier would spill to: --spill-dir, else the cache folder.
Expected<std::string> spill_folder(const PlanArgs& a) {
  if (!a.kv.spill_dir.empty()) {
    if (auto s = app::ensure_writable_dir(a.kv.spill_dir, "spill folder", "--spill-dir"); !s)
      return s.error();
    return a.kv.spill_dir;
  }
  app::PathOverrides o;
  o.data_dir = a.data_dir;
  auto paths = app::prepare_paths(o);
  if (!paths) return paths.error();
  return paths->cache_dir.string();
}

nlohmann::json tier_json(const kv::TierPlan& t, const char* where) {
  return {{"where", where}, {"blocks", t.blocks}, {"tokens", t.tokens}, {"bytes", t.bytes}};
}

// null for an unknown (0) measurement or prediction.
nlohmann::json number_or_null(double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); }
nlohmann::json budget_json(int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(); }

std::string budget_text(int64_t v) { return v >= 0 ? format_size(v) : "no limit"; }

// "about 25 minutes", "about 12 s", "under a second".
std::string about(double s) {
  if (s < 1) return "under a second";
  if (s < 90) return fmt::format("about {:.0f} s", s);
  if (s < 90 * 60) return fmt::format("about {:.0f} minutes", s / 60);
  return fmt::format("about {:.1f} hours", s / 3600);
}

std::string tier_line(const kv::TierPlan& t) {
  return fmt::format("{:>6} blocks {:>9} tokens {:>12}", t.blocks, t.tokens, format_size(t.bytes));
}

}  // namespace

int run_plan(const PlanArgs& a) {
  auto vram = size_arg(a.vram, "--vram");
  if (!vram) return fail(vram.error());
  auto kv_settings = make_kv_settings(a.kv);
  if (!kv_settings) return fail(kv_settings.error());
  auto type_k = kv_type_arg(a.cache_type_k, "--cache-type-k");
  if (!type_k) return fail(type_k.error());
  auto type_v = kv_type_arg(a.cache_type_v, "--cache-type-v");
  if (!type_v) return fail(type_v.error());
  if (a.n_ctx < 0) return fail(make_error("-c {} must not be negative", a.n_ctx));

  auto loaded = Model::load(a.model);
  if (!loaded) return fail(loaded.error());
  const Model& model = **loaded;
  const ModelConfig& c = model.config();

  // The context generate would run: -c, else the trained context if its KV fits this machine's
  // default budgets, else the largest that fits (the same function, the same machine facts).
  auto machine = machine_memory(a.kv);
  if (!machine) return fail(machine.error());
  SessionParams sp;
  sp.n_ctx = a.n_ctx;
  sp.kv_type_k = kv_type_of(*type_k);
  sp.kv_type_v = kv_type_of(*type_v);
  auto context = choose_session_context(model, sp, *kv_settings, *machine);
  if (!context) return fail(context.error());
  // The note as generate says it; the text plan says it in its own lines.
  if (a.json && !context->note.empty()) std::fprintf(stderr, "note: %s\n", context->note.c_str());

  kv::PlanInput in;
  in.n_layer = c.n_layer;
  in.n_kv_heads = c.n_head_kv;
  in.head_dim = c.head_dim;
  in.head_dim_v = c.head_dim_v;
  in.weights_bytes = kv::decode_weight_bytes(model);
  in.resident_weights_bytes = mapped_weight_bytes(model);  // a MoE's unused experts too
  in.n_ctx = context->n_ctx;
  in.type_k = *type_k;
  in.type_v = *type_v;
  in.kv = context->kv;
  in.ubatch = a.kv.n_ubatch;
  in.vram = *vram;
  // Sliding-window layers keep only their window in the CPU session (kv_cache_set.h); the CUDA
  // session keeps every layer's KV in its one tiered cache (the sliding layers masked).
  if (in.vram <= 0) in.layer_span = c.layer_attn_span;
  in.physical_ram = machine->physical_bytes;
  // The verdict plans for --mem-available when it is given, as the default context does.
  const int64_t mem_given = a.kv.mem_available ? machine->available_bytes : 0;
  in.mem_available = mem_given;
  in.ram_budget = context->ram_budget;
  // Shape and type errors before the probes spend their second.
  if (auto p = kv::make_plan(in); !p) return fail(p.error());
  if (in.n_ctx > c.n_ctx_train) {
    std::fprintf(stderr, "note: -c %lld is longer than the model's trained context (%lld)\n",
                 static_cast<long long>(in.n_ctx), static_cast<long long>(c.n_ctx_train));
  }

  // Probes, now.
  const unsigned hw = std::thread::hardware_concurrency();
  const int n_threads = hw == 0 ? 1 : static_cast<int>(hw);
  constexpr int64_t kRamProbeBytes = int64_t{256} << 20;
  in.ram_gb_per_s = kv::probe_ram_read_gb_per_s(n_threads, kRamProbeBytes);
  std::optional<kv::DiskProbe> disk_probe;
  std::string disk_dir;
  if (auto dir = spill_folder(a); !dir) {
    std::fprintf(stderr, "note: no disk probe: %s\n", dir.error().message.c_str());
    in.spill_problem = dir.error().message;
  } else {
    disk_dir = *dir;
    struct statvfs vfs {};
    if (::statvfs(disk_dir.c_str(), &vfs) == 0)
      in.spill_free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    auto d = kv::probe_disk(disk_dir);
    if (!d) {
      std::fprintf(stderr, "note: no disk probe: %s\n", d.error().message.c_str());
    } else {
      disk_probe = *d;
      in.disk_read_gb_per_s = d->read_gb_per_s;
      in.disk_write_gb_per_s = d->write_gb_per_s;
    }
  }
  auto planned = kv::make_plan(in);
  if (!planned) return fail(planned.error());
  const kv::Plan& p = *planned;
  const char* window_where = p.gpu ? "gpu" : "ram";

  // The measured speed profile of this model here: cached, else calibrated now (seconds). The
  // bandwidth-only figures stay as the fallback without one.
  std::optional<app::SpeedProfile> profile;
  std::string no_profile_why = "--no-calibrate";
  if (!a.no_calibrate) {
    app::PathOverrides o;
    o.data_dir = a.data_dir;
    auto paths = app::prepare_paths(o);
    if (!paths) {
      no_profile_why = paths.error().message;
    } else {
      SessionParams cal = sp;
      cal.n_threads = a.n_threads > 0 ? a.n_threads : n_threads;
      BackendOptions bo;
      bo.n_ubatch = a.kv.n_ubatch;
      bool calibrated = false;
      auto prof =
          app::cached_or_calibrated_profile(model, cal, bo, paths->cache_dir, {}, &calibrated);
      if (!prof) {
        no_profile_why = "calibration failed: " + prof.error().message;
      } else {
        profile = *prof;
        if (calibrated) {
          std::fprintf(stderr,
                       "note: measured this model's speed on this machine (a %lld-token "
                       "prefill, then timed up to %lld tokens deep); kept in %s\n",
                       static_cast<long long>(profile->prefill_depth),
                       static_cast<long long>(profile->calibration_depth),
                       app::speed_profile_file(paths->cache_dir, profile->model_fingerprint,
                                               profile->machine, profile->backend)
                           .c_str());
        }
      }
    }
  }
  const int64_t planned_tokens = p.fits ? in.n_ctx : p.max_tokens;
  const double prefill_s = profile ? profile->prefill_s(planned_tokens) : p.prefill_s;
  const double decode_tps =
      profile ? profile->decode_tokens_per_s(planned_tokens) : p.decode_tokens_per_s;
  const std::string basis =
      profile ? profile->basis() + " (" + profile->backend + ")"
              : "memory traffic only (a lower bound; compute not modelled); no measured "
                "profile: " +
                    no_profile_why;
  // The plain-language summary, before the numbers.
  const std::string memory_name =
      mem_given > 0 ? "--mem-available " + format_size(mem_given) : "this machine's memory";
  std::string summary;
  if (p.fits) {
    summary =
        fmt::format("A {}-token context fits {}.", kv::group_thousands(in.n_ctx), memory_name);
  } else if (p.max_tokens < in.n_ctx || p.problems.empty()) {
    summary = fmt::format("A {}-token context does not fit: the budgets hold {} tokens.",
                          kv::group_thousands(in.n_ctx), kv::group_thousands(p.max_tokens));
  } else {
    summary = fmt::format("A {}-token context does not fit: {}.", kv::group_thousands(in.n_ctx),
                          p.problems.front());
  }
  if (profile) {
    summary += fmt::format(
        " Prefilling {} tokens takes {}; decoding then runs at about {:.0f} "
        "tokens/s.",
        kv::group_thousands(planned_tokens), about(prefill_s), decode_tps);
  } else if (prefill_s > 0) {
    // A floor, not an estimate: "at least under a second" read as nonsense.
    summary += fmt::format(
        " Prefilling {} tokens takes {} (memory traffic alone; the real time is longer).",
        kv::group_thousands(planned_tokens),
        prefill_s < 90 ? fmt::format("at least {:.2g} s", prefill_s)
                       : "at least " + about(prefill_s).substr(6));  // "about 5 min" -> "5 min"
  }

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["arch"] = c.arch_name;
    j["n_layer"] = c.n_layer;
    j["n_kv_heads"] = c.n_head_kv;
    j["head_dim"] = c.head_dim;
    j["head_dim_v"] = c.head_dim_v;
    j["weights_bytes"] = in.weights_bytes;
    j["resident_weights_bytes"] = in.resident_weights();
    j["n_ctx"] = in.n_ctx;
    j["n_ctx_train"] = c.n_ctx_train;
    j["context_chosen"] = context->chosen;  // no -c, no host budget: the default's budgets
    j["context_note"] = context->note.empty() ? nlohmann::json() : nlohmann::json(context->note);
    j["ram_budget"] = budget_json(context->ram_budget);
    j["physical_ram"] = in.physical_ram > 0 ? nlohmann::json(in.physical_ram) : nlohmann::json();
    j["mem_available"] = mem_given > 0 ? nlohmann::json(mem_given) : nlohmann::json();
    j["cache_type_k"] = kv::kv_type_label(in.type_k);
    j["cache_type_v"] = kv::kv_type_label(in.type_v);
    j["kv_block"] = in.kv.block_size;
    j["kv_window"] = p.window_tokens;  // as planned: auto resolved
    j["kv_window_setting"] = kv::kv_window_name(in.kv);
    j["kv_sinks"] = in.kv.n_sinks;
    j["budgets"] = {{"vram", budget_json(in.vram)},
                    {"host_budget", budget_json(in.kv.host_budget)},
                    {"disk_budget", in.kv.disk_budget}};
    j["device"] = p.gpu ? "gpu" : "cpu";
    j["kv_bytes_per_token"] = p.kv_bytes_per_token;
    j["block_bytes"] = p.block_bytes;
    j["n_blocks"] = p.n_blocks;
    j["kv_bytes"] = p.kv_bytes;
    j["window_bytes"] = p.window.bytes;
    j["host_bytes"] = p.host.bytes;
    j["disk_bytes"] = p.disk.bytes;
    j["window"] = tier_json(p.window, window_where);
    j["host"] = tier_json(p.host, "ram");
    j["disk"] = tier_json(p.disk, "disk");
    j["vram_bytes"] = p.vram_bytes;
    j["ram_kv_bytes"] = p.ram_kv_bytes;
    j["max_tokens"] = p.max_tokens;
    j["sliding_layers"] = p.sliding_layers;
    j["sliding_window_bytes"] = p.sliding_window_bytes;
    j["dense_kv_bytes"] = p.dense_kv_bytes;
    j["fits"] = p.fits;
    j["problems"] = p.problems;
    j["warnings"] = p.warnings;
    j["suggestions"] = nlohmann::json::array();
    for (const kv::Suggestion& s : p.suggestions) {
      j["suggestions"].push_back({{"kind", s.kind}, {"flag", s.flag}, {"why", s.why}});
    }
    j["probe_ram_gb_per_s"] = number_or_null(in.ram_gb_per_s);
    j["probe_ram_bytes"] = kRamProbeBytes;
    j["probe_threads"] = n_threads;
    j["probe_disk_gb_per_s"] = number_or_null(in.disk_read_gb_per_s);
    j["probe_disk_write_gb_per_s"] = number_or_null(in.disk_write_gb_per_s);
    j["probe_disk_bytes"] = disk_probe ? nlohmann::json(disk_probe->bytes) : nlohmann::json();
    j["probe_disk_dir"] = disk_dir.empty() ? nlohmann::json() : nlohmann::json(disk_dir);
    j["summary"] = summary;
    j["predicted_tokens"] = planned_tokens;
    j["predicted_prefill_s"] = number_or_null(prefill_s);
    j["predicted_prefill_basis"] = basis;
    j["predicted_decode_s_per_token"] = number_or_null(decode_tps > 0 ? 1.0 / decode_tps : 0);
    j["predicted_decode_tokens_per_s"] = number_or_null(decode_tps);
    j["predicted_basis"] = profile ? "measured profile" : "memory traffic only";
    j["profile"] =
        profile ? nlohmann::json::parse(app::speed_profile_json(*profile)) : nlohmann::json();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return p.fits ? 0 : kExitDoesNotFit;
  }

  fmt::print("{}\n\n", summary);
  fmt::print("model       {}: {}, {} layers, {} KV heads, head_dim {}/{}\n", a.model, c.arch_name,
             c.n_layer, c.n_head_kv, c.head_dim, c.head_dim_v);
  fmt::print(
      "weights     {} read per decoded token{}\n", format_size(in.weights_bytes),
      c.is_moe() && in.resident_weights() > in.weights_bytes
          ? fmt::format(", {} held in memory (every expert)", format_size(in.resident_weights()))
          : std::string());
  fmt::print("context     {} tokens, KV {}/{}: {} bytes per token, {} in all\n", in.n_ctx,
             kv::kv_type_label(in.type_k), kv::kv_type_label(in.type_v), p.kv_bytes_per_token,
             format_size(p.kv_bytes));
  if (!context->note.empty()) fmt::print("            {}\n", context->note);
  fmt::print("memory      {} installed, {}RAM budget for KV {}{}\n",
             in.physical_ram > 0 ? format_size(in.physical_ram) : "unknown",
             mem_given > 0 ? fmt::format("planned for --mem-available {}, ", format_size(mem_given))
                           : std::string(),
             context->ram_budget >= 0 ? format_size(context->ram_budget) : "unknown",
             context->chosen ? " (the default host budget below)" : "");
  fmt::print("blocks      {} tokens = {} each, {} blocks; window {} recent{} + {} sink tokens\n",
             p.block_size, format_size(p.block_bytes), p.n_blocks, p.window_tokens,
             in.kv.window_tokens ? "" : " (auto)", std::min(in.kv.n_sinks, in.n_ctx));
  if (p.sliding_layers > 0) {
    fmt::print(
        "sliding     {} of {} layers attend a window of {} tokens: their KV beyond it is dropped, "
        "at most {} in the window (all layers global would need {})\n",
        p.sliding_layers, c.n_layer, c.n_swa, format_size(p.sliding_window_bytes),
        format_size(p.dense_kv_bytes));
  }
  fmt::print("budgets     vram {}, host {}, disk {}\n",
             in.vram > 0 ? format_size(in.vram) : "none (no GPU)", budget_text(in.kv.host_budget),
             in.kv.disk_budget > 0 ? format_size(in.kv.disk_budget) : "none (no disk tier)");
  fmt::print("\nwindow ({}) {}\n", p.gpu ? "GPU" : "RAM", tier_line(p.window));
  fmt::print("host   (RAM) {}\n", tier_line(p.host));
  fmt::print("disk  (disk) {}\n", tier_line(p.disk));
  if (p.gpu) fmt::print("VRAM        weights + window = {}\n", format_size(p.vram_bytes));
  fmt::print("RAM for KV  {}\n", format_size(p.ram_kv_bytes));
  for (const std::string& w : p.warnings) fmt::print("warning     {}\n", w);
  if (p.fits) {
    fmt::print("\nfits        yes: all {} tokens\n", in.n_ctx);
  } else {
    if (p.max_tokens >= in.n_ctx) {
      // The budgets hold every token; the machine or the spill folder cannot (the problems).
      fmt::print("\nfits        no: the budgets hold all {} tokens, {}\n", in.n_ctx,
                 in.physical_ram > 0 && p.ram_kv_bytes > in.physical_ram
                     ? "this machine's memory does not"
                 : mem_given > 0 && (p.gpu ? 0 : in.resident_weights()) + p.ram_kv_bytes > mem_given
                     ? "--mem-available does not"
                     : "the tiers' homes do not");
    } else {
      fmt::print("\nfits        no: {} of {} tokens fit\n", p.max_tokens, in.n_ctx);
    }
    for (const std::string& why : p.problems) fmt::print("  problem   {}\n", why);
    for (const kv::Suggestion& s : p.suggestions)
      fmt::print("  try       {}  ({})\n", s.flag, s.why);
  }
  fmt::print("\nprobe       RAM read {:.2f} GB/s ({} threads, {} MiB, best of 3)\n",
             in.ram_gb_per_s, n_threads, kRamProbeBytes >> 20);
  if (disk_probe) {
    fmt::print("            disk read {:.2f} GB/s, write {:.2f} GB/s ({} MiB in {})\n",
               disk_probe->read_gb_per_s, disk_probe->write_gb_per_s, disk_probe->bytes >> 20,
               disk_dir);
  } else {
    fmt::print("            disk not measured\n");
  }
  const auto or_unknown = [](double v, const char* f) {
    return v > 0 ? fmt::format(fmt::runtime(f), v) : std::string("unknown");
  };
  if (profile) {
    fmt::print("predicted   prefill of {} tokens {}, decode {} at {} tokens ({})\n", planned_tokens,
               or_unknown(prefill_s, "{:.3g} s"), or_unknown(decode_tps, "{:.1f} tokens/s"),
               planned_tokens, or_unknown(1e3 / decode_tps, "{:.2f} ms per token"));
    fmt::print("            basis: {}\n", basis);
  } else {
    fmt::print(
        "predicted   decode {} at {} tokens ({}), prefill >= {} (memory traffic only; no "
        "measured profile: {})\n",
        or_unknown(p.decode_tokens_per_s, "{:.1f} tokens/s"), planned_tokens,
        or_unknown(p.decode_s_per_token * 1e3, "{:.2f} ms per token"),
        or_unknown(p.prefill_s, "{:.3g} s"), no_profile_why);
  }
  return p.fits ? 0 : kExitDoesNotFit;
}

}  // namespace spw::cli
