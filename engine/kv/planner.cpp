#include "engine/kv/planner.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/common/size.h"
#include "engine/model/model.h"

namespace spw::kv {

namespace {

// A size as a flag value that parse_size reads back, rounded up so it still suffices, in a unit
// that keeps the rounding under 1/16: KiB below 16 MiB, MiB below 16 GiB, GiB above.
std::string size_flag(int64_t bytes) {
  constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024, kGiB = kMiB * 1024;
  if (bytes <= 0) return "0";
  if (bytes < 16 * kMiB) return fmt::format("{}K", ceil_div(bytes, kKiB));
  if (bytes < 16 * kGiB) return fmt::format("{}M", ceil_div(bytes, kMiB));
  return fmt::format("{}G", ceil_div(bytes, kGiB));
}

// Seconds to move `bytes` at `gb_per_s`; -1 when bytes are to move but the rate is unknown.
double transfer_s(double bytes, double gb_per_s) {
  if (bytes <= 0) return 0;
  if (gb_per_s <= 0) return -1;
  return bytes / (gb_per_s * 1e9);
}

// Sum of terms where any unknown (-1) makes the whole unknown (0 in the plan).
double sum_known(std::initializer_list<double> terms) {
  double s = 0;
  for (const double t : terms) {
    if (t < 0) return -1;
    s += t;
  }
  return s;
}

Status check_input(const PlanInput& in) {
  for (const auto& [v, what] : {std::pair{in.n_layer, "n_layer"},
                                {in.n_kv_heads, "n_kv_heads"},
                                {in.head_dim, "head_dim"},
                                {in.head_dim_v, "head_dim_v"},
                                {in.n_ctx, "the context (-c)"},
                                {in.ubatch, "the ubatch"}}) {
    if (v <= 0) return make_error("plan: {} must be at least 1 (got {})", what, v);
  }
  if (in.weights_bytes < 0) return make_error("plan: weights bytes must not be negative");
  if (!in.layer_span.empty() && static_cast<int64_t>(in.layer_span.size()) != in.n_layer) {
    return make_error("plan: a layer span for {} layers, the model has {}", in.layer_span.size(),
                      in.n_layer);
  }
  for (const int64_t s : in.layer_span) {
    if (s < 0) return make_error("plan: a sliding window of {} tokens", s);
  }
  // The settings as generate checks them, less the spill folder (a plan writes none).
  if (Status st = validate(in.kv, /*need_spill_dir=*/false); !st)
    return make_error("plan: {}", st.error().message);
  return Status::Ok();
}

// A TierConfig of in's shape, n_layer layers.
TierConfig shape_of(const PlanInput& in, int64_t n_layer, WindowHome home) {
  TierConfig tc = tier_config(in.kv, home, in.n_ctx);
  tc.n_layer = n_layer;
  tc.n_kv_heads = in.n_kv_heads;
  tc.head_dim = in.head_dim;
  tc.head_dim_v = in.head_dim_v;
  tc.type_k = in.type_k;
  tc.type_v = in.type_v;
  return tc;
}

int64_t global_layers(const PlanInput& in) {
  if (in.layer_span.empty()) return in.n_layer;
  return std::count(in.layer_span.begin(), in.layer_span.end(), int64_t{0});
}

// The sliding layers' share: per span, its layers' window at its fullest.
struct Sliding {
  int64_t layers = 0, window_bytes = 0, context_bytes = 0, block_size = 0;
};
Expected<Sliding> sliding_of(const PlanInput& in, WindowHome home) {
  Sliding sl;
  std::vector<int64_t> spans(in.layer_span);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size();) {
    const int64_t span = spans[i];
    size_t j = i;
    while (j < spans.size() && spans[j] == span) ++j;
    if (span > 0) {
      TierConfig tc = shape_of(in, static_cast<int64_t>(j - i), home);
      tc.span_tokens = span;
      auto t = plan_tiers(tc);
      if (!t) return make_error("plan: {}", t.error().message);
      sl.layers += tc.n_layer;
      sl.window_bytes += std::min(t->n_blocks, t->pool_slots(in.ubatch)) * t->block_bytes;
      sl.context_bytes += t->n_blocks * t->block_bytes;
      sl.block_size = t->block_size;
    }
    i = j;
  }
  return sl;
}

// The tier policy's layout for `in`'s global layers, the window resolved as the session would:
// explicit, or auto (RAM: the default; GPU: the whole context, or what fits the VRAM beside
// the weights).
Expected<TierLayout> layout_of(const PlanInput& in) {
  const bool gpu = in.vram > 0;
  TierConfig tc = shape_of(in, global_layers(in), gpu ? WindowHome::Device : WindowHome::Ram);
  auto t = plan_tiers(tc);
  if (!t) return make_error("plan: {}", t.error().message);
  if (gpu && !in.kv.window_tokens &&
      in.resident_weights() + t->window_blocks * t->block_bytes > in.vram) {
    const int64_t room = in.vram - in.resident_weights();
    const int64_t recent =
        room > 0 ? fit_recent_blocks(room / t->block_bytes, 0, t->window) : int64_t{0};
    if (recent >= 1) {
      tc.window_tokens = recent * t->block_size;
      t = plan_tiers(tc);
      if (!t) return make_error("plan: {}", t.error().message);
    }
  }
  return t;
}

// The split and the predictions, without suggestions.
Expected<Plan> compute(const PlanInput& in) {
  if (auto s = check_input(in); !s) return s.error();
  const WindowHome home = in.vram > 0 ? WindowHome::Device : WindowHome::Ram;
  auto sliding = sliding_of(in, home);
  if (!sliding) return sliding.error();
  // Every layer sliding: the global part is empty (a layout of no layers holds the context).
  PlanInput global_in = in;
  if (global_layers(in) == 0) {
    global_in.layer_span.assign(static_cast<size_t>(in.n_layer), 0);
  }
  auto laid = layout_of(global_in);
  if (!laid) return laid.error();
  TierLayout t = *laid;
  if (global_layers(in) == 0) {
    t.kv_bytes_per_token = t.block_bytes = 0;
    t.window_blocks = t.cold_blocks = t.host_slots = t.disk_slots = 0;
    t.max_tokens = in.n_ctx;
  }

  Plan p;
  const int64_t bs = t.block_size;
  p.kv_bytes_per_token = t.kv_bytes_per_token;
  p.block_bytes = t.block_bytes;
  p.n_blocks = t.n_blocks;
  p.block_size = bs;
  p.window_tokens = t.window_tokens;
  p.kv_bytes = p.n_blocks * p.block_bytes;
  p.gpu = in.vram > 0;
  p.window.blocks = t.window_blocks;
  p.window.tokens = in.n_ctx - t.cold_blocks * bs;
  p.window.bytes = p.window.blocks * p.block_bytes;
  p.host.blocks = t.host_slots;
  p.disk.blocks = t.disk_slots;
  p.host.tokens = p.host.blocks * bs;
  p.disk.tokens = p.disk.blocks * bs;
  p.host.bytes = p.host.blocks * p.block_bytes;
  p.disk.bytes = p.disk.blocks * p.block_bytes;
  p.max_tokens = t.max_tokens;
  p.sliding_layers = sliding->layers;
  p.sliding_window_bytes = sliding->window_bytes;
  p.dense_kv_bytes = t.n_blocks * in.n_layer * t.layer_bytes;
  p.window.bytes += p.sliding_window_bytes;
  p.kv_bytes += p.sliding_window_bytes;
  p.ram_kv_bytes = p.host.bytes + (p.gpu ? 0 : p.window.bytes);

  const int64_t missing = t.cold_blocks - t.host_slots - t.disk_slots;
  if (missing > 0) {
    p.problems.push_back(fmt::format(
        "{} of the {} tokens have no room: {} blocks of {} lie beyond the window and the "
        "budgets hold {} of them",
        in.n_ctx - p.max_tokens, in.n_ctx, t.cold_blocks, format_size(p.block_bytes),
        t.host_slots + t.disk_slots));
  }
  if (p.disk.bytes > 0 && !in.spill_problem.empty()) {
    p.problems.push_back(fmt::format("the disk tier ({}) has no spill folder: {}",
                                     format_size(p.disk.bytes), in.spill_problem));
  } else if (p.disk.bytes > 0 && in.spill_free_bytes >= 0 && p.disk.bytes > in.spill_free_bytes) {
    p.problems.push_back(fmt::format(
        "the disk tier's spill file of {} does not fit in the spill folder ({} free): a smaller "
        "--disk-budget or another --spill-dir",
        format_size(p.disk.bytes), format_size(in.spill_free_bytes)));
  }
  if (p.gpu) {
    p.vram_bytes = in.resident_weights() + p.window.bytes;
    if (p.vram_bytes > in.vram) {
      p.problems.push_back(fmt::format(
          "weights {} + window {} = {} do not fit in --vram {}", format_size(in.resident_weights()),
          format_size(p.window.bytes), format_size(p.vram_bytes), format_size(in.vram)));
    }
  }
  if (in.physical_ram > 0 && p.ram_kv_bytes > in.physical_ram) {
    p.problems.push_back(fmt::format("KV in RAM {} is more than this machine's {} of memory",
                                     format_size(p.ram_kv_bytes), format_size(in.physical_ram)));
  }
  if (in.mem_available > 0) {
    // The weights are read from RAM (mapped) unless a GPU holds them.
    const int64_t weights_ram = p.gpu ? 0 : in.resident_weights();
    if (weights_ram + p.ram_kv_bytes > in.mem_available) {
      // Sizes that round to the same text ("95.0 MiB are more than 95.0 MiB") say the bytes.
      const int64_t need = weights_ram + p.ram_kv_bytes;
      const std::string have = format_size(in.mem_available);
      const std::string over = format_size(need) == have
                                   ? fmt::format("{} by {} bytes", have, need - in.mem_available)
                                   : have;
      p.problems.push_back(
          p.gpu ? fmt::format("KV in RAM {} is more than --mem-available {}",
                              format_size(p.ram_kv_bytes), over)
                : fmt::format("weights {} + KV in RAM {} = {} are more than --mem-available {}",
                              format_size(weights_ram), format_size(p.ram_kv_bytes),
                              format_size(need), over));
    }
  }
  p.fits = p.problems.empty();

  // Decode, last token: KV actually held is read once, weights once.
  const auto kvb = static_cast<double>(p.kv_bytes_per_token);
  const auto weights = static_cast<double>(in.weights_bytes);
  const double window_kv = kvb * static_cast<double>(p.window.tokens);
  const double host_kv = kvb * static_cast<double>(p.host.tokens);
  const double disk_kv = kvb * static_cast<double>(p.disk.tokens);
  const double cold_side =
      sum_known({transfer_s(host_kv, in.ram_gb_per_s), transfer_s(disk_kv, in.disk_read_gb_per_s)});
  double decode = -1;
  if (p.gpu) {
    const double gpu_side = transfer_s(weights + window_kv, in.gpu_gb_per_s);
    // Without a GPU bandwidth only the cold side is predicted (a lower bound).
    decode = gpu_side < 0 ? cold_side : (cold_side < 0 ? -1 : std::max(gpu_side, cold_side));
  } else {
    decode = sum_known({transfer_s(weights + window_kv, in.ram_gb_per_s), cold_side});
  }
  if (decode > 0) {
    p.decode_s_per_token = decode;
    p.decode_tokens_per_s = 1.0 / decode;
  }

  // Prefill, memory traffic: weights once per ubatch; attention reads all earlier KV once per
  // ubatch (split over the tiers as the final placement); each token's KV written once.
  // Token-positions read over all ubatches: ubatch i reads min(n_ctx, (i + 1) * ubatch), which
  // is n_ctx for the last one only. In closed form: a context of 2^31 tokens in ubatches of one
  // is no loop of 2^31 steps.
  const int64_t n_ub = ceil_div(in.n_ctx, in.ubatch);
  const auto nub = static_cast<double>(n_ub);
  const double kv_reads =
      static_cast<double>(in.ubatch) * (nub - 1) * nub / 2 + static_cast<double>(in.n_ctx);
  const double placed = static_cast<double>(p.window.tokens + p.host.tokens + p.disk.tokens);
  const double f_host = placed > 0 ? static_cast<double>(p.host.tokens) / placed : 0;
  const double f_disk = placed > 0 ? static_cast<double>(p.disk.tokens) / placed : 0;
  const double f_window = 1 - f_host - f_disk;
  const double hot_gb = p.gpu ? in.gpu_gb_per_s : in.ram_gb_per_s;
  const double prefill = sum_known({
      transfer_s(weights * static_cast<double>(n_ub), hot_gb),
      transfer_s(kvb * kv_reads * f_window + window_kv, hot_gb),
      transfer_s(kvb * kv_reads * f_host + host_kv, in.ram_gb_per_s),
      transfer_s(kvb * kv_reads * f_disk, in.disk_read_gb_per_s),
      transfer_s(disk_kv, in.disk_write_gb_per_s),
  });
  if (prefill > 0) p.prefill_s = prefill;
  return p;
}

}  // namespace

int64_t decode_weight_bytes(const Model& m) { return m.size().decode_bytes; }

Expected<Plan> make_plan(const PlanInput& in) {
  auto planned = compute(in);
  if (!planned) return planned;
  Plan& p = *planned;
  if (p.fits) return planned;
  const bool vram_problem = p.gpu && p.vram_bytes > in.vram;
  const bool room_problem = p.max_tokens < in.n_ctx;
  const bool ram_problem = in.physical_ram > 0 && p.ram_kv_bytes > in.physical_ram;
  const int64_t cold = p.n_blocks - p.window.blocks;

  if (room_problem && !vram_problem && p.max_tokens > 0) {
    p.suggestions.push_back({"ctx", fmt::format("-c {}", p.max_tokens),
                             fmt::format("the budgets hold {} tokens", p.max_tokens)});
  }
  // More KV in RAM than the machine has (or than --mem-available leaves beside the weights):
  // what the default context would do (the RAM budget for the window and a host tier, the disk
  // tier for the rest), or a context that fits it.
  const bool mem_problem =
      in.mem_available > 0 &&
      (p.gpu ? 0 : in.resident_weights()) + p.ram_kv_bytes > in.mem_available &&
      (p.gpu ? 0 : in.resident_weights()) < in.mem_available;
  if ((ram_problem || mem_problem) && !room_problem && global_layers(in) > 0) {
    const int64_t budget = in.ram_budget >= 0 ? in.ram_budget : in.physical_ram / 2;
    auto laid = layout_of(in);
    if (!laid) return laid.error();
    // The global layers' tiers; the sliding layers' windows (in RAM without a GPU) come first.
    TierConfig tc = shape_of(in, global_layers(in), p.gpu ? WindowHome::Device : WindowHome::Ram);
    tc.window_tokens = laid->window_tokens;
    tc.disk_budget = 0;
    const int64_t sliding_ram = p.gpu ? 0 : p.sliding_window_bytes;
    auto fitted = fit_ram_budget(tc, std::max<int64_t>(0, budget - sliding_ram));
    if (!fitted) return fitted.error();
    const int64_t host = fitted->host_budget;
    const int64_t host_blocks = host / p.block_bytes;
    const int64_t disk = std::max<int64_t>(0, cold - host_blocks) * p.block_bytes;
    const int64_t room = std::max<int64_t>(0, budget - sliding_ram);
    // The window alone is more than the budget: the context that fits is the blocks the budget
    // has room for, all in the window, as the default context chooses.
    const bool window_over = fitted->window_blocks * fitted->block_bytes > room;
    // A disk tier only when the window fits the budget and blocks leave it, and only one the
    // spill folder's free space can hold (when it was measured).
    if (!window_over && cold > 0 && (in.spill_free_bytes < 0 || disk <= in.spill_free_bytes)) {
      p.suggestions.push_back(
          {"host-disk",
           fmt::format("--host-budget {} --disk-budget {}", size_flag(host), size_flag(disk)),
           fmt::format("{} of RAM (the RAM budget {} less the window) and {} of disk hold the {} "
                       "tokens",
                       format_size(host_blocks * p.block_bytes), format_size(budget),
                       format_size(disk), in.n_ctx)});
    }
    const int64_t tokens = window_over ? room / p.block_bytes * p.block_size : fitted->max_tokens;
    if (tokens >= 1 && tokens < in.n_ctx) {
      p.suggestions.push_back(
          {"ctx", fmt::format("-c {}", tokens),
           fmt::format("the RAM budget {} holds {} tokens", format_size(budget), tokens)});
    }
  }
  // q8_0 KV: 8.5 bits per value instead of 16 or 32.
  if (in.type_k != GgmlType::Q8_0 || in.type_v != GgmlType::Q8_0) {
    PlanInput q = in;
    q.type_k = q.type_v = GgmlType::Q8_0;
    auto qp = compute(q);
    if (qp && qp->fits) {
      p.suggestions.push_back({"cache-type", "--cache-type-k q8_0 --cache-type-v q8_0",
                               fmt::format("q8_0 KV ({} bytes per token instead of {}) fits",
                                           qp->kv_bytes_per_token, p.kv_bytes_per_token)});
    }
  }
  // A bigger host budget (the disk budget as it is), and a disk budget for what the host budget
  // cannot hold.
  if (in.kv.host_budget >= 0 && room_problem) {
    const int64_t disk_slots = in.kv.disk_budget / p.block_bytes;
    const int64_t host_needed = std::max<int64_t>(0, cold - disk_slots) * p.block_bytes;
    if (host_needed > in.kv.host_budget) {
      p.suggestions.push_back(
          {"ram", fmt::format("--host-budget {}", size_flag(host_needed)),
           fmt::format("{} of RAM holds the {} tokens{}", format_size(host_needed), in.n_ctx,
                       disk_slots > 0 ? " with the disk budget as it is" : "")});
    }
    const int64_t host_slots = in.kv.host_budget / p.block_bytes;
    const int64_t disk_needed = std::max<int64_t>(0, cold - host_slots) * p.block_bytes;
    if (disk_needed > in.kv.disk_budget) {
      p.suggestions.push_back(
          {"disk", fmt::format("--disk-budget {}", size_flag(disk_needed)),
           fmt::format("a disk tier of {} holds the rest", format_size(disk_needed))});
    }
  }
  // A window that fits the GPU beside the weights.
  if (vram_problem && in.resident_weights() >= in.vram) {
    p.suggestions.push_back(
        {"cpu", "(leave out --vram)",
         fmt::format("the weights alone ({}) fill --vram {}; run on the CPU",
                     format_size(in.resident_weights()), format_size(in.vram))});
  } else if (vram_problem && p.block_bytes > 0) {
    const int64_t sink_blocks = ceil_div(std::min(in.kv.n_sinks, in.n_ctx), p.block_size);
    const int64_t recent_blocks = (in.vram - in.resident_weights()) / p.block_bytes - sink_blocks;
    if (recent_blocks >= 1) {
      const int64_t w = recent_blocks * p.block_size;
      p.suggestions.push_back(
          {"kv-window", fmt::format("--kv-window {}", w),
           fmt::format("a window of {} recent tokens ({} with the sinks) fits", w,
                       format_size((recent_blocks + sink_blocks) * p.block_bytes))});
    }
  }
  return planned;
}

}  // namespace spw::kv
