// The tier policy of the paged KV cache (docs/DESIGN.md §4.2): the KV settings a user sets, their
// defaults and their checks, and the rules that place every block of a context in a tier. Pure:
// no I/O, no threads, no clock. The cache (kv_cache.h), the planner (planner.h), the CPU session
// and the CUDA session all ask this module; none of them re-derives a rule written here.
//
// The rules, in words (block = block_size consecutive positions; b = a block's index):
//   window  the attention-sink blocks [0, ceil(n_sinks / block)) and the ceil(window / block)
//           most recent blocks (the block being filled counts as one of them). It lives on the
//           GPU when CUDA runs the model and in RAM otherwise, and is sized by those two
//           settings, never by a budget.
//   host    blocks that left the window, in position order, up to host_budget bytes of RAM
//           (--host-budget; no limit by default).
//   disk    the blocks after those, up to disk_budget bytes of a spill file (--disk-budget).
// A block leaves the window once it is neither a sink block nor among the recent ones and never
// comes back. Every byte count is over all layers, K + V, in whole blocks. The context a session
// can hold is min(n_ctx, (window + host + disk blocks) * block): a request beyond it stops with
// "context full" before anything is computed.
//
// Sliding-window layers (a TierConfig with span_tokens > 0: gemma3's local layers, a phi3 or
// mistral file's sliding window) never attend a position more than span - 1 before the query,
// so a cache of only such layers has no cold tiers: a block wholly before the span of the last
// stored position (positions < n_tokens - span; that position's logits are recomputed after a
// snapshot is restored) is dropped, exactly, and its bytes are free. Its
// window holds the recent ceil((span - 1) / block) + 1 blocks; sinks and budgets do not apply,
// and its capacity is the context. A model with both kinds keeps one cache per kind
// (kv_cache_set.h), so the budgets count only the global layers' KV.
//
// The window's size, --kv-window, is a number of tokens or "auto": in RAM (the CPU session) auto
// is kDefaultRamWindowTokens; on a GPU it is the whole context, or as much of it as fits the
// device's free memory (the CUDA session measures that, then asks fit_recent_blocks()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"
#include "engine/common/machine.h"
#include "engine/common/numa.h"
#include "formats/ggml_format.h"

namespace spw::kv {

// ---- Limits and defaults (each written here only) ---------------------------------------------

inline constexpr int64_t kMaxContextTokens = int64_t{1} << 31;  // 2^31 positions
inline constexpr int64_t kMaxBlockTokens = int64_t{1} << 16;    // 65536 tokens per block
inline constexpr int64_t kDefaultBlockTokens = 256;             // --kv-block
inline constexpr int64_t kDefaultSinkTokens = 4;                // --kv-sinks
inline constexpr int64_t kDefaultRamWindowTokens = 4096;        // --kv-window auto, window in RAM
/// Window slots beyond the window's own blocks: a block that has left the window keeps its slot
/// until its spill has landed, so with two spares decode normally never waits.
inline constexpr int64_t kSpareWindowSlots = 2;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- The settings -----------------------------------------------------------------------------

/// How a session attends the tiered cache. Exact is the default; the other two are
/// approximations, opt-in and labelled wherever results are shown.
enum class KvAttention {
  Exact,      // every position: the window and the cold blocks, merged exactly
  Streaming,  // StreamingLLM: the sink blocks and the recent window only
  TopK,       // Quest: the window and the top_k cold blocks per KV head by key min/max bound
};

/// The KV cache's settings as a user sets them (CLI flags, the Settings dialog, a job's row).
/// Both sessions run on them; the approximate attention modes on the CPU only.
struct KvSettings {
  int64_t block_size = kDefaultBlockTokens;  // --kv-block: tokens per block (>= 1)
  int64_t n_sinks = kDefaultSinkTokens;      // --kv-sinks: attention-sink tokens (>= 0)
  std::optional<int64_t> window_tokens;      // --kv-window: recent tokens (>= 1); none: auto
  int64_t host_budget = -1;  // --host-budget: RAM for blocks out of the window, bytes; < 0: none
  int64_t disk_budget = 0;   // --disk-budget: the spill file's bytes; 0: no disk tier
  std::string spill_dir;     // --spill-dir: where the spill file goes (needed with a disk tier)
  KvAttention attention = KvAttention::Exact;  // --attention
  int64_t top_k = 0;  // cold blocks per KV head under TopK (>= 1 there, 0 otherwise)
  // The host arena's pages (kv_storage.h HostMemoryOptions): --huge-pages on|off (2 MiB
  // transparent huge pages where the kernel allows), --numa-node auto|off|N (the node it is
  // bound to on a multi-node machine; numa.h). Neither changes a token or a byte of KV.
  bool huge_pages = true;
  NumaSetting numa;

  bool operator==(const KvSettings&) const = default;
};

/// Every check of the settings on their own (the context's are plan_tiers'), in this order, each
/// naming its flag: "--kv-block 0: a block holds at least 1 token", "--kv-block N is too large
/// (at most 65536 tokens)", "--kv-sinks -1 must not be negative", "--kv-window 0: the window
/// holds at least 1 token", "--disk-budget -1 must not be negative", "--disk-budget needs a
/// folder for the spill file: set --spill-dir DIR" (unless !need_spill_dir: a plan writes no
/// file), "--attention topk needs K >= 1 (got 0)".
Status validate(const KvSettings& s, bool need_spill_dir = true);

/// "auto" (any case) | N (a whole number >= 1) -> window_tokens. Errors: "--kv-window 0: the window
/// holds at least 1 token", "--kv-window 'x': give a number of tokens (at least 1) or auto".
Status parse_kv_window(std::string_view text, KvSettings& s);
/// "auto" or the number of tokens.
std::string kv_window_name(const KvSettings& s);

/// "exact" | "streaming" | "topk:K" (K >= 1) into s.attention and s.top_k. Error: "unknown
/// attention mode 'X' (accepted: exact, streaming, topk:K with K >= 1)".
Status parse_kv_attention(std::string_view text, KvSettings& s);
/// "exact", "streaming" or "topk:8"; the approximate ones as "streaming (approximate)" when
/// `labelled`.
std::string kv_attention_name(const KvSettings& s, bool labelled = false);

// ---- From settings to tiers -------------------------------------------------------------------

/// Where a session keeps the window's blocks.
enum class WindowHome { Ram, Device };

/// The window in tokens a session starts from: the explicit --kv-window, else auto's value for
/// `home` (Ram: kDefaultRamWindowTokens; Device: the whole context, n_ctx).
int64_t window_tokens(const KvSettings& s, WindowHome home, int64_t n_ctx);

enum class Tier : uint8_t { Window, Host, Disk };
std::string_view tier_name(Tier t);  // "window" | "host" | "disk"

/// What the policy needs to place a context: the model's KV shape, the context, and the paging
/// numbers with the window resolved (window_tokens()). KvCacheConfig (kv_cache.h) extends it.
struct TierConfig {
  int64_t n_layer = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;    // of K
  int64_t head_dim_v = 0;  // of V
  int64_t n_ctx = 0;       // tokens the session may hold at most (before budgets)
  // Element types of K and V: F32, F16 or Q8_0 (Q8_0 needs the head dim % 32 == 0).
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int64_t block_size = kDefaultBlockTokens;
  int64_t n_sinks = kDefaultSinkTokens;
  int64_t window_tokens = kDefaultRamWindowTokens;
  int64_t host_budget = -1;  // bytes over all layers, K + V; < 0: no limit
  int64_t disk_budget = 0;   // bytes; 0: no disk tier
  // Positions a query of these layers attends, its own included (a sliding window); 0: every
  // earlier position (global layers). > 0: blocks out of the span are dropped (see above); the
  // sink, window and budget fields are then not used.
  int64_t span_tokens = 0;
};

/// The settings' TierConfig for a model shape and context: the window resolved for `home`.
/// The shape fields (n_layer ... type_v) are the caller's to fill.
TierConfig tier_config(const KvSettings& s, WindowHome home, int64_t n_ctx);

/// KV bytes of one token for one layer's K or V: n_kv_heads rows of head_dim elements in `type`
/// (F32 4 bytes, F16 2, Q8_0 34 per 32). `what` names the dimension in errors: "q8_0 KV cache
/// needs head_dim % 32 == 0 (this model has head_dim 8)"; a type other than those three:
/// "unsupported KV cache type Q4_K (accepted: f32, f16, q8_0)".
Expected<int64_t> kv_row_bytes(GgmlType type, int64_t head_dim, std::string_view what);

/// The window/cold split of the blocks before a query at position p: the window is
/// [0, sink_end) and [cold_end, last + 1); the cold blocks are [sink_end, cold_end).
struct QueryBlocks {
  int64_t last = 0;      // the query's own block
  int64_t sink_end = 0;  // min(sink blocks, last + 1)
  int64_t cold_end = 0;  // the first block of the recent window (>= sink_end)
  bool cold(int64_t b) const { return b >= sink_end && b < cold_end; }
};

/// The window rule in blocks.
struct WindowRule {
  int64_t block_size = 1;
  int64_t sink_blocks = 0;    // ceil(n_sinks / block_size)
  int64_t recent_blocks = 0;  // ceil(window_tokens / block_size)
  int64_t span = 0;           // TierConfig::span_tokens (0: global)
  int64_t total() const { return sink_blocks + recent_blocks; }
  /// Sliding layers, p positions stored: the first block a query at p - 1 (the last stored
  /// position, recomputed after a restore) or later may attend, max(0, p - span) / block_size;
  /// blocks before it are dropped. 0 for global layers.
  int64_t first_live(int64_t p) const {
    return span > 0 ? std::max<int64_t>(0, p - span) / block_size : 0;
  }
  /// The split for a query at position p (>= 0).
  QueryBlocks query(int64_t p) const;
  /// The blocks a context of n_blocks blocks has out of the window: [sink_blocks, end) with end
  /// the first recent block (sink_blocks when none has left).
  int64_t cold_end(int64_t n_blocks) const;
};

/// Blocks per tier and the bytes of one block, for a TierConfig: what the cache allocates, what
/// the planner reports, what the sessions attend by.
struct TierLayout {
  // The settings as applied: a block, a window or sinks longer than the context are cut to it.
  int64_t n_ctx = 0, block_size = 0, n_sinks = 0, window_tokens = 0;
  int64_t host_budget = -1, disk_budget = 0;
  // A block's bytes: one head's row of one position, a layer's K part (K rows of every KV
  // head), a layer (K part then V part), a block (every layer), and one token over all layers.
  int64_t row_k = 0, row_v = 0, layer_k_bytes = 0, layer_bytes = 0, block_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  WindowRule window;
  int64_t n_blocks = 0;            // blocks of the whole context
  int64_t window_blocks = 0;       // of those, held by the window: min(window.total(), n_blocks)
  int64_t cold_blocks = 0;         // of those, out of the window: n_blocks - window_blocks
  int64_t host_budget_blocks = 0;  // blocks the host budget holds; -1: no limit
  int64_t disk_budget_blocks = 0;  // blocks the disk budget holds
  // Cold slots: what the budgets hold, never more than the context's cold blocks (an unlimited
  // or huge budget does not preallocate a disk file or reserve RAM for positions that cannot
  // exist). host first, then disk.
  int64_t host_slots = 0, disk_slots = 0;
  int64_t max_tokens = 0;  // min(n_ctx, (window.total() + host_slots + disk_slots) * block_size)
  // Sliding layers (span_tokens > 0): the window holds the recent blocks of the span, there are
  // no cold slots, max_tokens is n_ctx and cold_blocks counts the blocks a full context drops.
  int64_t span_tokens = 0;
  bool drops() const { return span_tokens > 0; }

  /// ceil(max_tokens / block_size).
  int64_t max_blocks() const { return ceil_div(max_tokens, block_size); }
  /// Blocks in the host tier once n_tokens positions are stored: the cold blocks (those past
  /// the window's) up to host_slots; 0 for sliding layers (they drop instead).
  int64_t host_blocks_at(int64_t n_tokens) const {
    if (drops()) return 0;
    const int64_t cold = ceil_div(n_tokens, block_size) - window.total();
    return cold <= 0 ? 0 : (cold < host_slots ? cold : host_slots);
  }
  /// Where the policy puts position pos once n_past positions are stored (pos < n_past <=
  /// max_tokens): the window rule for the last block, then the cold blocks in order to host and
  /// then disk. (A cache may still read a block from its window slot while its spill is in
  /// flight: BlockView::tier says where a block is read from now.)
  Tier tier_of(int64_t pos, int64_t n_past) const;
  /// Slots a fixed window pool (a GPU window) needs so that the cache never has to grow it: the
  /// window, the spares, and the blocks one ubatch of n_ubatch tokens can newly touch (it may
  /// span more blocks than the window holds; those leave the window at commit); never more than
  /// the context's blocks plus the spares. A window that holds the whole context never spills
  /// and needs exactly the context's blocks.
  int64_t pool_slots(int64_t n_ubatch) const;
  /// Why max_tokens is what it is, after "context full: N tokens fit in the budgets you set":
  /// "(window 16 tokens, host 8.0 KiB = 2 blocks, disk 1.0 MiB = 256 blocks)".
  std::string capacity_detail() const;
};

/// The layout of `c`. Errors: a non-positive shape or context ("invalid KV cache shape: ..."),
/// a context beyond kMaxContextTokens, a bad block, window or sink count (as validate()), a KV
/// type the cache cannot hold (kv_row_bytes()).
Expected<TierLayout> plan_tiers(const TierConfig& c);

/// The recent blocks a window pool of `slots` block slots holds beside the sink blocks and the
/// `fixed` slots it always needs (a ubatch's blocks, the spares); 0 when not even one fits.
/// Auto on a GPU: the CUDA session's window is the one that fits its free memory.
int64_t fit_recent_blocks(int64_t slots, int64_t fixed, const WindowRule& w);

// ---- The default context ----------------------------------------------------------------------
//
// Without -c (Settings' context 0) and without --host-budget, a session runs the trained
// context only if its KV fits the default budgets: the window, a host budget of RAM taken from
// the machine (default_kv_ram_budget()) and the disk budget when one is set. Otherwise it runs
// the largest context that does fit, and says so (ContextChoice::note). An explicit -c or host
// budget is kept as given: the budgets then limit the context as they always did ("context
// full: ..."). The window is counted in RAM (where the CPU session keeps it; a CUDA session
// moves it to the GPU and so needs less RAM, never more).

/// The RAM the default context gives the KV cache (its window in RAM and its host tier): half of
/// the memory available now (MemAvailable, else the installed RAM) less the weights' bytes (a
/// mapping of the model file: its pages count as available page cache, yet they must stay
/// resident while the model runs), and never more than half the address space RLIMIT_AS still
/// allows. The other half stays for the system, the app and other programs. -1 when the machine
/// says nothing (no limit: the trained context).
int64_t default_kv_ram_budget(const MachineMemory& m, int64_t weights_bytes);

/// The largest context of at most c.n_ctx tokens whose KV fits `ram_budget` bytes of RAM (the
/// window, and a host tier of what the window leaves of it: c.host_budget is replaced) plus
/// c.disk_budget on disk: the layout, whose max_tokens is that context and whose host_budget is
/// the one that gives it. The default context and the planner's "-c N" both come from here.
Expected<TierLayout> fit_ram_budget(TierConfig c, int64_t ram_budget);

/// What the default context is chosen from.
struct ContextRequest {
  TierConfig shape;  // the model's KV shape and types; n_ctx and the paging are ignored
  // [n_layer] each layer's attention span (ModelConfig::layer_attn_span; 0: global), or empty:
  // every layer global. Sliding layers hold only their window (kv_cache_set.h): their windows
  // come off the RAM budget and the context is chosen for the global layers.
  std::vector<int64_t> layer_span;
  int64_t n_ubatch = 512;     // the prefill ubatch (a sliding window holds its span and one ubatch)
  int64_t n_ctx = 0;          // -c as given; 0: choose
  int64_t n_ctx_train = 0;    // the model's trained context (>= 1)
  KvSettings kv;              // the settings as given
  int64_t weights_bytes = 0;  // bytes of weights mapped while the model runs
  MachineMemory machine;
};

struct ContextChoice {
  int64_t n_ctx = 0;  // the context to run
  /// The settings to run: as given, except that a chosen context that needs a limit on the host
  /// tier (the trained context does not fit all in RAM) gets host_budget set to the RAM
  /// budget less the window, so the blocks past it go to the disk tier when there is one.
  KvSettings kv;
  bool chosen = false;           // the default applied (no -c, no host budget, a known machine)
  int64_t ram_budget = -1;       // default_kv_ram_budget(); -1: unknown
  int64_t trained_kv_bytes = 0;  // KV of the trained context in whole blocks
  /// Empty when the trained context runs; else one line for stderr and the app's notes:
  /// "context 32,768 of 131,072 trained: KV needs 16.0 GiB, RAM budget 11.5 GiB (half the
  /// available memory less the weights); -c or Settings to change" (or "(half the address space
  /// the ulimit leaves)" when RLIMIT_AS decided).
  std::string note;
};

/// The context and settings a session runs. Errors: plan_tiers()'s for the shape and settings.
Expected<ContextChoice> choose_context(const ContextRequest& r);

/// 131072 -> "131,072".
std::string group_thousands(int64_t n);

}  // namespace spw::kv
