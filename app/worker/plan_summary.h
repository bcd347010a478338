// The memory planner's verdict on one question over one library document, as the chat shows it
// before the run starts: what lives on the GPU, in RAM and on disk, the predicted prefill time
// and decode speed, and, when the run would not fit (the prompt is longer than the context, or
// the KV is more than the budgets), what would: map-reduce, a longer context, q8_0 KV, a bigger
// RAM budget. Built on engine/kv/planner.h (as `spillway-cli plan` is).
//
// Engine-free header (ui/ includes it): plain structs; the function that computes a summary
// takes forward-declared app types and is defined in plan_summary.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <QMetaType>

namespace spw::app {

class Engine;
struct DocumentText;
struct SpeedProfile;

/// One tier's share of the KV (whole blocks).
struct PlanTierSummary {
  int64_t blocks = 0;
  int64_t tokens = 0;
  int64_t bytes = 0;
};

/// A change that would make the run fit. `kind`: "map-reduce" | "ctx" | "cache-type" | "ram" |
/// "disk" | "kv-window" | "cpu"; `flag` is the CLI spelling ("-c 4096"), `setting` the Settings
/// dialog's wording ("Context length 4096"), `why` one line for people.
struct PlanSuggestionSummary {
  std::string kind;
  std::string flag;
  std::string setting;
  std::string why;
};

struct PlanSummary {
  std::string error;  // non-empty: no verdict (the planner refused its input); the rest is unset
  int64_t doc_id = 0;
  std::string doc_title;
  // Tokens.
  int64_t prompt_tokens = 0;   // the whole-document prompt with the question
  int64_t answer_reserve = 0;  // tokens kept free for the answer
  int64_t n_ctx = 0;           // the session's context length
  int64_t n_ctx_train = 0;     // the model's trained context
  bool fits_context = false;   // prompt_tokens + answer_reserve <= n_ctx
  int n_parts = 0;             // map-reduce parts when !fits_context (0: could not be split)
  // Memory, for the tokens the run holds: min(prompt + reserve, n_ctx).
  int64_t planned_tokens = 0;
  bool gpu = false;  // the KV window lives on the GPU
  int64_t kv_bytes_per_token = 0;
  PlanTierSummary window, host, disk;
  int64_t vram_bytes = 0;    // weights + window when gpu
  int64_t ram_kv_bytes = 0;  // KV in RAM (window without a GPU, plus the host tier)
  bool fits_memory = false;  // the budgets hold every planned token
  int64_t max_tokens = 0;    // tokens the budgets hold
  // Predictions (0: unknown). From the measured speed profile when there is one
  // (app/runtime/speed_profile.h), else memory traffic only (prefill a lower bound).
  double prefill_s = 0;            // the whole-document prompt (map-reduce: every part's)
  double decode_tokens_per_s = 0;  // at the planned depth
  double answer_s = 0;             // the whole answer: prefill and decode (map-reduce: all parts
                                   // and the combination)
  std::string prediction_basis;    // "measured profile, calibrated ..." or "memory traffic only"
  /// Plain language first: "This 73,000-token document does not fit in the model's 32,768-token
  /// context. Answering over 3 parts takes about 25 minutes."
  std::string headline;
  /// Starting the run as it is can work (the prompt fits the context and the budgets hold its
  /// tokens; only the machine's memory may be short): the GUI offers "Run anyway" only then.
  bool can_run_anyway = false;
  std::vector<std::string> problems;  // why it does not fit, one line each
  std::vector<std::string> warnings;  // fits the budgets but e.g. not the machine's memory
  std::vector<PlanSuggestionSummary> suggestions;

  /// The run should not start without the user's choice (run anyway / map-reduce).
  bool needs_choice() const { return error.empty() && (!fits_context || !fits_memory); }
};

/// Bandwidths measured once per worker (0: not measured; that term is left out).
struct PlanProbes {
  double ram_gb_per_s = 0;
  double disk_read_gb_per_s = 0, disk_write_gb_per_s = 0;
  int64_t vram_free = -1;  // bytes free on the CUDA device; -1: no usable device
  /// This model's measured speed here (cached_or_calibrated_profile); null: none (the
  /// predictions are then memory traffic only, and say so).
  std::shared_ptr<const SpeedProfile> profile;
};

/// Measures RAM bandwidth (a 64 MiB read), the disk tier's folder when `spill_dir` is set, and
/// the CUDA device's free memory. Takes a fraction of a second; call once and keep the result.
PlanProbes measure_plan_probes(const std::string& spill_dir);

/// The verdict for asking `question` over `doc` with `engine`'s model and settings, answering in
/// at most `n_predict` tokens. Never fails: errors land in PlanSummary::error.
PlanSummary plan_document_ask(const Engine& engine, const DocumentText& doc,
                              const std::string& question, int32_t n_predict,
                              const PlanProbes& probes);

/// The verdict as a few lines of text for the chat ("KV: 3 blocks on the GPU ..."), sizes in
/// KiB/MiB/GiB.
std::string plan_summary_text(const PlanSummary& s);
/// The verdict of a run that fits, in one line: "415 + 120 of 2048 tokens; KV 480.0 KiB: window
/// 3 blocks in RAM, host 0, disk 0; predicted prefill >= 0.001 s, decode 2350 tokens/s".
std::string plan_summary_line(const PlanSummary& s);

}  // namespace spw::app

Q_DECLARE_METATYPE(spw::app::PlanSummary)
