// The memory planner (`spillway-cli plan`, later the dashboard): given a model's shape, a
// context length, KV types, the window and the budgets, where each byte of KV goes, whether it
// all fits (and what would, if not), and the prefill and decode times the measured bandwidths
// predict. Pure computation: no I/O, no clock; the caller measures the bandwidths
// (engine/kv/bandwidth_probe.h).
//
// The split is the tier policy's (engine/kv/tier_policy.h), the one KvCache allocates by, so a
// plan and a run agree to the token on what fits:
//   window  ceil(n_sinks / block) + ceil(window / block) blocks (at most the context's blocks),
//           on the GPU when there is a VRAM budget, in RAM otherwise; sized by --kv-window (auto:
//           4096 tokens in RAM; on a GPU the whole context, or what fits --vram beside the
//           weights);
//   host    the next cold blocks, up to --host-budget (all of them without one);
//   disk    the rest, up to --disk-budget (none without one).
// The host budget counts the cold blocks in RAM only (as generate's --host-budget); the window
// in RAM is counted apart. The weights are a memory-mapped file, shared with the page cache. The
// VRAM budget holds the weights and the window; the CUDA session's scratch, its ubatch blocks and
// its spare window slots are not modelled, so on a GPU a plan is an estimate (a real session's
// auto window can come out some blocks smaller), while in RAM it is exact to the token.
//
// Predicted decode time for the last token of the context (the slowest one):
//   CPU:  weights / RAM + (window + host KV) / RAM + disk KV / disk
//   GPU:  max(weights / GPU + window KV / GPU, host KV / RAM + disk KV / disk); split attention
//         runs both sides at once. Without a GPU bandwidth, the GPU side is left out (a bound).
// Predicted prefill time, memory traffic only (a lower bound: compute is not modelled): each
// ubatch reads the weights once and the KV before it once; every token's KV is written once, to
// its tier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"
#include "engine/kv/tier_policy.h"

namespace spw {
class Model;
}

namespace spw::kv {

/// Bytes of weights one decode step reads: every layer matrix and the output matrix (which is
/// token_embd.weight when the embeddings are tied); of a mixture of experts, the router and the
/// n_expert_used / n_expert share of the expert stacks (Model::size()). token_embd's single
/// looked-up row and the 1-D norm and bias vectors are negligible and left out.
int64_t decode_weight_bytes(const Model& model);

struct PlanInput {
  // Model.
  int64_t n_layer = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;
  // [n_layer] positions layer il attends, its own included (ModelConfig's sliding window; 0:
  // global), or empty: every layer global. Sliding layers keep only their span's blocks
  // (kv_cache_set.h): the tiers and budgets are the global layers'.
  std::vector<int64_t> layer_span;
  int64_t weights_bytes = 0;  // bytes of weights one decode step reads (the speed)
  // Bytes of weights held while the model runs (every tensor; a mixture of experts' unused
  // experts too): what the memory checks count (RAM without a GPU, --vram with one). 0: the
  // same as weights_bytes.
  int64_t resident_weights_bytes = 0;
  int64_t resident_weights() const {
    return resident_weights_bytes > 0 ? resident_weights_bytes : weights_bytes;
  }
  // Run: the context and the KV settings generate takes (budgets in bytes).
  int64_t n_ctx = 0;  // tokens to hold (>= 1)
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvSettings kv;         // --kv-block, --kv-sinks, --kv-window, --host-budget, --disk-budget
  int64_t ubatch = 512;  // prefill batch (for the prefill prediction)
  int64_t vram = -1;     // > 0: a GPU holds the weights and the window; 0 or < 0: no GPU
  // Bandwidths in GB/s (1e9 bytes/s); 0: unknown (that term is left out of the predictions).
  double ram_gb_per_s = 0;
  double disk_read_gb_per_s = 0;
  double disk_write_gb_per_s = 0;
  double gpu_gb_per_s = 0;
  // The machine: physical memory in bytes; 0: unknown (not checked).
  int64_t physical_ram = 0;
  // --mem-available: the memory the run may use, in bytes; 0: not given (not checked). The
  // weights (without a GPU) and the KV planned into RAM must fit in it.
  int64_t mem_available = 0;
  // The spill folder: bytes free in it (< 0: unknown), and why it cannot take a spill file
  // (empty: it can). A disk tier that does not fit there does not fit.
  int64_t spill_free_bytes = -1;
  std::string spill_problem;
  // The RAM the default context gives KV (default_kv_ram_budget(), tier_policy.h), for the
  // suggestions when KV in RAM is more than the machine has; -1: unknown (half physical_ram).
  int64_t ram_budget = -1;
};

/// One tier's share.
struct TierPlan {
  int64_t blocks = 0;
  int64_t tokens = 0;  // positions held (the last block may be partial)
  int64_t bytes = 0;   // blocks * block_bytes (whole blocks are allocated)
};

/// A change that makes the plan fit, with the flag that makes it.
struct Suggestion {
  // "ctx" | "cache-type" | "ram" | "disk" | "host-disk" | "kv-window" | "cpu"
  std::string kind;
  std::string flag;  // "-c 1536", "--cache-type-k q8_0 --cache-type-v q8_0", "--host-budget 2G"
  std::string why;   // one line for people
};

struct Plan {
  // Everything up to `max_tokens` is the global layers' (all layers when none slides), except
  // window.bytes, kv_bytes, vram_bytes and ram_kv_bytes, which add the sliding layers' share.
  int64_t kv_bytes_per_token = 0;  // all global layers, K + V
  int64_t block_bytes = 0;         // one block over all layers, K + V
  int64_t n_blocks = 0;            // blocks the context needs
  int64_t block_size = 0;          // --kv-block as applied (cut to the context)
  int64_t window_tokens = 0;       // the window planned (auto resolved), sinks excluded
  bool gpu = false;                // the window lives on the GPU
  TierPlan window, host, disk;
  int64_t kv_bytes = 0;      // the whole context's KV, in whole blocks
  int64_t vram_bytes = 0;    // weights + window when gpu
  int64_t ram_kv_bytes = 0;  // window (no gpu) + host
  int64_t max_tokens = 0;    // tokens the budgets hold: min(n_ctx, blocks that fit * block)
  // Sliding-window layers (PlanInput::layer_span): how many, and the most bytes their windows
  // hold (the span and one ubatch, TierLayout::pool_slots()); their KV beyond that is dropped.
  int64_t sliding_layers = 0;
  int64_t sliding_window_bytes = 0;
  // The whole context's KV were every layer global (the saving of the sliding layers is
  // dense_kv_bytes - kv_bytes).
  int64_t dense_kv_bytes = 0;
  /// Every token has a tier and the tiers fit the machine: false when the budgets leave tokens
  /// without room, the window does not fit --vram, or the KV planned into RAM (without a host
  /// budget, every cold block) is more than physical_ram ("KV in RAM 1.2 TiB is more than this
  /// machine's 23.0 GiB of memory"), or weights and KV in RAM are more than mem_available.
  bool fits = false;
  std::vector<std::string> problems;    // why it does not fit, one line each
  std::vector<std::string> warnings;    // fits, but worth saying (none at present)
  std::vector<Suggestion> suggestions;  // empty when it fits
  // Predictions; 0 where a needed bandwidth is unknown.
  double decode_s_per_token = 0;  // the context's last token
  double decode_tokens_per_s = 0;
  double prefill_s = 0;  // the whole context, memory traffic only
};

/// Plans `in`. Errors (the input itself is wrong, not "does not fit"): non-positive shape,
/// n_ctx or ubatch, the settings' own (validate(), plan_tiers()), an unsupported or misfit KV
/// type.
Expected<Plan> make_plan(const PlanInput& in);

/// "f32" | "f16" | "q8_0" for F32 / F16 / Q8_0; type_name() otherwise.
std::string kv_type_label(GgmlType t);

}  // namespace spw::kv
