#include "app/worker/plan_summary.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "app/ask/ask.h"
#include "app/ask/prompt.h"
#include "app/runtime/engine.h"
#include "app/runtime/speed_profile.h"
#include "engine/backend/device.h"
#include "engine/common/size.h"
#include "engine/kv/bandwidth_probe.h"
#include "engine/kv/planner.h"
#include "engine/kv/tier_policy.h"

namespace spw::app {

namespace {

GgmlType ggml_kv_type(const std::string& text) {
  auto t = parse_kv_type(text);
  return kv_ggml_type(t ? *t : KvType::F16);
}

PlanTierSummary tier(const kv::TierPlan& t) { return {t.blocks, t.tokens, t.bytes}; }

// The Settings dialog's wording of a planner suggestion (its flag is the CLI's).
std::string setting_for(const kv::Suggestion& s) {
  const auto value_after = [&](const std::string& flag) {
    const size_t sp = flag.find(' ');
    return sp == std::string::npos ? std::string() : flag.substr(sp + 1);
  };
  if (s.kind == "ctx") return "Settings > Model: context length " + value_after(s.flag);
  if (s.kind == "cache-type") return "Settings > Model: K and V precision q8_0";
  if (s.kind == "ram") return "Settings > Model: host RAM budget " + value_after(s.flag);
  if (s.kind == "disk") return "Settings > Model: disk budget " + value_after(s.flag);
  if (s.kind == "kv-window") return "Settings > Model: KV window " + value_after(s.flag);
  if (s.kind == "cpu") return "Settings > Model: device CPU";
  return s.flag;
}

// "25 minutes", "40 s", "1.5 hours".
std::string duration(double s) {
  if (s < 90) return fmt::format("{:.0f} s", std::max(1.0, s));
  if (s < 90 * 60) return fmt::format("{:.0f} minutes", s / 60);
  return fmt::format("{:.1f} hours", s / 3600);
}

// "about 25 minutes", "under a second".
std::string about(double s) { return s < 1 ? "under a second" : "about " + duration(s); }

}  // namespace

PlanProbes measure_plan_probes(const std::string& spill_dir) {
  PlanProbes p;
  const unsigned hw = std::thread::hardware_concurrency();
  p.ram_gb_per_s =
      kv::probe_ram_read_gb_per_s(hw == 0 ? 1 : static_cast<int>(hw), int64_t{64} << 20);
  if (!spill_dir.empty()) {
    if (auto d = kv::probe_disk(spill_dir, int64_t{16} << 20)) {
      p.disk_read_gb_per_s = d->read_gb_per_s;
      p.disk_write_gb_per_s = d->write_gb_per_s;
    }
  }
  const CudaProbe cuda = probe_cuda();
  if (cuda.usable) p.vram_free = cuda.free_bytes;
  return p;
}

PlanSummary plan_document_ask(const Engine& engine, const DocumentText& doc,
                              const std::string& question, int32_t n_predict,
                              const PlanProbes& probes) {
  PlanSummary s;
  s.doc_id = doc.id;
  s.doc_title = doc.shown_title.empty() ? doc.title : doc.shown_title;
  const EngineSettings& es = engine.settings();
  const ModelConfig& c = engine.model().config();
  s.n_ctx_train = c.n_ctx_train;
  s.n_ctx = engine.n_ctx();  // as every session runs it (the default may be cut to the machine)
  s.answer_reserve = answer_reserve(n_predict, s.n_ctx);

  const PromptContext ctx{&engine.tokenizer(), engine.family()};
  PageRange whole;
  whole.page_end = doc.pages.size();
  const BuiltPrompt prompt = build_document_prompt(ctx, doc, whole, question);
  s.prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  s.fits_context = s.prompt_tokens + s.answer_reserve <= s.n_ctx;
  std::vector<int64_t> part_tokens;  // map-reduce: each part's prompt
  if (!s.fits_context) {
    const auto question_tokens = static_cast<int64_t>(prompt.tokens.suffix.size());
    if (auto parts = plan_parts(ctx, doc, s.n_ctx, part_reserve(s.n_ctx, question_tokens))) {
      s.n_parts = static_cast<int>(parts->size());
      for (int k = 0; k < s.n_parts; ++k) {
        part_tokens.push_back(
            static_cast<int64_t>(build_document_prompt(ctx, doc, (*parts)[static_cast<size_t>(k)],
                                                       question, k + 1, s.n_parts)
                                     .tokens.size()));
      }
    }
  }
  s.planned_tokens = std::min(s.prompt_tokens + s.answer_reserve, s.n_ctx);

  // Where the run goes: ask_library_document runs on the CPU when saved KV is on and the
  // device is auto (snapshots need the CPU session's paged cache).
  const bool want_gpu = es.device == "cuda" || (es.device == "auto" && !es.use_snapshots);
  kv::PlanInput in;
  in.n_layer = c.n_layer;
  in.n_kv_heads = c.n_head_kv;
  in.head_dim = c.head_dim;
  in.head_dim_v = c.head_dim_v;
  in.weights_bytes = kv::decode_weight_bytes(engine.model());
  in.resident_weights_bytes = mapped_weight_bytes(engine.model());  // a MoE's every expert
  in.n_ctx = std::max<int64_t>(1, s.planned_tokens);
  in.type_k = ggml_kv_type(es.kv_type_k);
  in.type_v = ggml_kv_type(es.kv_type_v);
  in.kv = engine.kv_settings();
  in.ubatch = es.n_ubatch;
  in.vram = want_gpu && probes.vram_free > 0 ? probes.vram_free : -1;
  if (in.vram <= 0) in.layer_span = c.layer_attn_span;  // the CPU session drops sliding KV
  in.ram_gb_per_s = probes.ram_gb_per_s;
  in.disk_read_gb_per_s = probes.disk_read_gb_per_s;
  in.disk_write_gb_per_s = probes.disk_write_gb_per_s;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  in.physical_ram = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  auto planned = kv::make_plan(in);
  if (!planned) {
    s.error = planned.error().message;
    return s;
  }
  const kv::Plan& p = *planned;
  s.gpu = p.gpu;
  s.kv_bytes_per_token = p.kv_bytes_per_token;
  s.window = tier(p.window);
  s.host = tier(p.host);
  s.disk = tier(p.disk);
  s.vram_bytes = p.vram_bytes;
  s.ram_kv_bytes = p.ram_kv_bytes;
  s.fits_memory = p.fits;
  s.max_tokens = p.max_tokens;
  s.prefill_s = p.prefill_s;
  s.decode_tokens_per_s = p.decode_tokens_per_s;
  s.prediction_basis = "memory traffic only (a lower bound); no measured speed profile yet";
  if (probes.profile) {
    const SpeedProfile& sp = *probes.profile;
    s.prediction_basis = sp.basis();
    if (s.fits_context) {
      s.prefill_s = sp.prefill_s(s.prompt_tokens);
      s.decode_tokens_per_s = sp.decode_tokens_per_s(s.prompt_tokens);
      s.answer_s = s.prefill_s + sp.decode_s(s.answer_reserve, s.prompt_tokens);
    } else if (!part_tokens.empty()) {
      // Every part's prompt and answer, then the combination: one answer per part, and its own.
      s.prefill_s = 0;
      double decode = 0;
      for (const int64_t n : part_tokens) {
        s.prefill_s += sp.prefill_s(n);
        decode += sp.decode_s(s.answer_reserve, n);
      }
      const int64_t reduce_prompt = static_cast<int64_t>(part_tokens.size()) * s.answer_reserve;
      s.prefill_s += sp.prefill_s(reduce_prompt);
      decode += sp.decode_s(s.answer_reserve, reduce_prompt);
      s.decode_tokens_per_s = sp.decode_tokens_per_s(s.n_ctx / 2);
      s.answer_s = s.prefill_s + decode;
    }
  } else if (s.prefill_s > 0 && s.decode_tokens_per_s > 0) {
    s.answer_s = s.prefill_s + static_cast<double>(s.answer_reserve) / s.decode_tokens_per_s;
  }
  s.problems = p.problems;
  s.warnings = p.warnings;

  if (!s.fits_context) {
    s.problems.insert(s.problems.begin(),
                      fmt::format("the prompt needs {} tokens and the answer {}, but the context "
                                  "holds {}",
                                  s.prompt_tokens, s.answer_reserve, s.n_ctx));
    if (s.n_parts > 0) {
      s.suggestions.push_back(
          {"map-reduce", "--map-reduce", "Use map-reduce",
           fmt::format("answer over {} page-aligned parts, then combine the parts' answers",
                       s.n_parts)});
    }
    const int64_t need = s.prompt_tokens + s.answer_reserve;
    if (need <= s.n_ctx_train) {
      s.suggestions.push_back({"ctx", fmt::format("-c {}", need),
                               fmt::format("Settings > Model: context length {}", need),
                               fmt::format("the model was trained on {} tokens; a context of {} "
                                           "holds the whole document",
                                           s.n_ctx_train, need)});
    }
  }
  for (const kv::Suggestion& g : p.suggestions)
    s.suggestions.push_back({g.kind, g.flag, setting_for(g), g.why});
  // A prompt longer than the context, or more tokens than the budgets hold, fails the run:
  // only a shortfall of the machine's memory (the budgets hold every token) may still run.
  s.can_run_anyway = s.fits_context && s.max_tokens >= s.planned_tokens;

  // The plain-language summary.
  const std::string how_long =
      s.answer_s <= 0  ? std::string()
      : probes.profile ? about(s.answer_s)
                       : "at least " + duration(s.answer_s) +
                             " (from memory bandwidth alone; no measured speed profile yet)";
  const std::string doc_tokens = kv::group_thousands(s.prompt_tokens);
  if (s.fits_context) {
    s.headline = fmt::format("This {}-token document fits in the model's {}-token context.",
                             doc_tokens, kv::group_thousands(s.n_ctx));
    if (!s.fits_memory) {
      s.headline += s.can_run_anyway
                        ? " Its KV is more than this machine's memory; it may run slowly."
                        : fmt::format(" Its KV does not fit the memory budgets ({} of {} tokens).",
                                      kv::group_thousands(s.max_tokens),
                                      kv::group_thousands(s.planned_tokens));
    }
    if (!how_long.empty()) s.headline += fmt::format(" Answering takes {}.", how_long);
  } else {
    s.headline = fmt::format("This {}-token document does not fit in the model's {}-token context.",
                             doc_tokens, kv::group_thousands(s.n_ctx));
    if (s.n_parts > 0) {
      s.headline += how_long.empty()
                        ? fmt::format(" It can be answered over {} parts.", s.n_parts)
                        : fmt::format(" Answering over {} parts takes {}.", s.n_parts, how_long);
    }
  }
  return s;
}

std::string plan_summary_text(const PlanSummary& s) {
  if (!s.error.empty()) return "No memory plan: " + s.error;
  std::string out = s.headline.empty() ? std::string() : s.headline + "\n\n";
  out += fmt::format(
      "{} tokens of prompt + {} for the answer; context {} tokens{}.\n", s.prompt_tokens,
      s.answer_reserve, s.n_ctx,
      s.fits_context ? "" : fmt::format(" (too short: {} parts with map-reduce)", s.n_parts));
  out += fmt::format(
      "KV ({} per token): window {} blocks {} on the {}; RAM {} blocks {}; disk {} "
      "blocks {}.\n",
      format_size(s.kv_bytes_per_token), s.window.blocks, format_size(s.window.bytes),
      s.gpu ? "GPU" : "CPU (RAM)", s.host.blocks, format_size(s.host.bytes), s.disk.blocks,
      format_size(s.disk.bytes));
  if (s.gpu) out += fmt::format("VRAM: weights + window {}.\n", format_size(s.vram_bytes));
  const bool measured = s.prediction_basis.rfind("measured", 0) == 0;
  std::string prefill = s.prefill_s > 0
                            ? fmt::format("{}{:.3g} s", measured ? "" : "at least ", s.prefill_s)
                            : "unknown";
  std::string decode =
      s.decode_tokens_per_s > 0 ? fmt::format("{:.1f} tokens/s", s.decode_tokens_per_s) : "unknown";
  out += fmt::format("Predicted: prefill {}, decode {}", prefill, decode);
  out += s.prediction_basis.empty() ? "." : " (" + s.prediction_basis + ").";
  for (const std::string& w : s.warnings) out += "\nWarning: " + w;
  for (const std::string& pr : s.problems) out += "\nProblem: " + pr;
  for (const PlanSuggestionSummary& g : s.suggestions)
    out += fmt::format("\nWould fit: {} ({})", g.setting, g.why);
  return out;
}

std::string plan_summary_line(const PlanSummary& s) {
  if (!s.error.empty()) return "no memory plan: " + s.error;
  std::string line = fmt::format(
      "{} + {} of {} tokens; KV {}: window {} blocks {}, host {}, disk {}", s.prompt_tokens,
      s.answer_reserve, s.n_ctx, format_size(s.window.bytes + s.host.bytes + s.disk.bytes),
      s.window.blocks, s.gpu ? "on the GPU" : "in RAM", s.host.blocks, s.disk.blocks);
  const bool measured = s.prediction_basis.rfind("measured", 0) == 0;
  if (s.prefill_s > 0)
    line += fmt::format("; predicted prefill {}{:.2g} s", measured ? "" : ">= ", s.prefill_s);
  if (s.decode_tokens_per_s > 0)
    line += fmt::format("{} decode {:.0f} tokens/s", s.prefill_s > 0 ? "," : "; predicted",
                        s.decode_tokens_per_s);
  for (const std::string& w : s.warnings) line += "; warning: " + w;
  return line;
}

}  // namespace spw::app
