// The tiered, paged KV cache of one sequence (docs/DESIGN.md §4.1, §4.4). Which block goes to which
// tier is the tier policy's (tier_policy.h); this class keeps the block table and moves the bytes.
//
// KV lives in blocks of block_size tokens. A *logical block* b holds positions
// [b * block_size, (b + 1) * block_size) for every layer; per layer its K part is
// [n_kv_heads][block_size][head_dim] and its V part [n_kv_heads][block_size][head_dim_v], each
// row (one head, one position) in the tier's element type (f32, f16, or q8_0 as 34-byte
// BlockQ8_0 per 32 elements), so one KV head of one block is a KvSpan with stride head_dim
// (engine/cpu/attention.h).
//
// The block table maps each logical block to (tier, slot):
//   Window  the attention-sink blocks (the first ceil(n_sinks / block_size) blocks) and the most
//           recent ceil(window_tokens / block_size) blocks (the block being filled counts as one);
//           RAM for the CPU session, the GPU's memory for the CUDA session (a DeviceWindow).
//           Sized by those two settings, not by a budget.
//   Host    a RAM arena of whole logical blocks, up to host_budget bytes (all layers, K + V),
//           mapped in chunks as blocks spill into it (kv_storage.h), never reserved up front.
//   Disk    a preallocated spill file (posix_fallocate, so a full disk shows at creation) in
//           spill_dir, named spillway-spill-<pid>-<n>.kv, written with pwrite and read through a
//           read-only mmap; removed when the cache is destroyed; files of dead processes are
//           removed by remove_stale_spill_files() at start.
// A full block that leaves the window spills at once to Host, or to Disk when Host is full, on a
// copy thread (decode does not wait for it; until the copy lands the block is read from its
// window slot, whose reuse waits for the copy). No block ever moves from a cold tier back into
// the window: cold blocks are attended where they lie.
//
// Sliding-window layers (TierConfig::span_tokens > 0, tier_policy.h): blocks out of the span of
// the next query are dropped, not spilled; blocks() gives them as views of 0 tokens and null
// k / v, which a span's attention never reads; read_block() refuses them.
//
// Capacity: max_tokens() = TierLayout::max_tokens, min(n_ctx, tokens the window + host + disk
// slots hold). Sessions use
// it as their context length, so a request that does not fit stops with
// "context full: N tokens fit in the budgets you set (...)" before anything is computed.
//
// Thread safety: one writer (the session thread) for reserve/store/commit; spans() and the
// block accessors may be read from the session's worker threads between those calls; the copy
// thread is internal. stats() may be called from any thread (atomics; the host arena's smaps
// figure under a try-lock, see HostArena::huge_page_bytes).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/tier_policy.h"

namespace spw::kv {

/// The cache's configuration: the tier policy's numbers (tier_policy.h: the model's KV shape,
/// the context, the paging settings as the session resolved them) and where the tiers' bytes go.
struct KvCacheConfig : TierConfig {
  KvCacheConfig() = default;
  explicit KvCacheConfig(const TierConfig& t) : TierConfig(t) {}
  std::string spill_dir;  // --spill-dir; empty: the caller must give one when disk_budget > 0
  /// Where the window's slots live: nullptr = RAM (the CPU session). A DeviceWindow (CUDA
  /// session: the GPU) holds them instead; store() is then unused (the session writes K and V
  /// into the slots itself, at the addresses blocks() returns for Window blocks), spills go
  /// through copy_out, snapshots through copy_out / copy_in. Its n_slots() must be at least
  /// TierLayout::pool_slots() for this config and the session's ubatch.
  std::shared_ptr<DeviceWindow> device_window;
  /// How the Host arena maps its chunks: huge pages, the NUMA node (resolved by the session).
  HostMemoryOptions host_memory;
  /// Test hook: called before each pwrite to the spill file with the slot index; returning
  /// false makes that write fail as EIO would. Empty in production.
  std::function<bool(int64_t slot)> fail_disk_write;
};

/// Counters of one cache, updated with relaxed atomics by the writer and the copy thread and
/// read without locks (a snapshot may mix two steps; each field is itself consistent).
struct KvTelemetry {
  std::atomic<int64_t> window_blocks{0}, host_blocks{0}, disk_blocks{0};
  std::atomic<int64_t> window_bytes{0}, host_bytes{0}, disk_bytes{0};     // bytes of blocks held
  std::atomic<int64_t> window_to_host_bytes{0}, window_to_disk_bytes{0};  // spilled so far
  std::atomic<int64_t> cold_to_window_bytes{0};  // must stay 0: cold blocks never come back
  std::atomic<int64_t> spills_pending{0};        // blocks queued on the copy thread
  std::atomic<int64_t> dropped_blocks{0};        // sliding layers: blocks out of the span
  std::atomic<int64_t> dropped_bytes{0};         // and their bytes, freed
};

/// A plain copy of KvTelemetry for printing / JSON.
struct KvStats {
  int64_t window_blocks = 0, host_blocks = 0, disk_blocks = 0;
  int64_t window_bytes = 0, host_bytes = 0, disk_bytes = 0;
  int64_t window_to_host_bytes = 0, window_to_disk_bytes = 0, cold_to_window_bytes = 0;
  int64_t spills_pending = 0;
  int64_t dropped_blocks = 0;  // sliding layers: blocks dropped (out of every query's span)
  int64_t dropped_bytes = 0;   // their bytes (freed: what a global layer would have spilled)
  // The Host arena's mappings: bytes mapped (whole chunks) and of those backed by 2 MiB huge
  // pages (/proc/self/smaps AnonHugePages, HostArena::huge_page_bytes: read again after a
  // block was written to the host tier, else at most a second old).
  int64_t host_mapped_bytes = 0, host_huge_page_bytes = 0;
};

/// Where the data of one logical block lies (for one layer). k and v point at
/// [n_kv_heads][block_size][row] in type_k / type_v; rows [0, n_tokens) are valid. With a
/// DeviceWindow, a Window block's k and v are device addresses (the host must not read them).
struct BlockView {
  int64_t block = 0;     // logical block index
  int64_t pos0 = 0;      // first position = block * block_size
  int64_t n_tokens = 0;  // valid rows (block_size except for the last block)
  Tier tier = Tier::Window;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
};

class KvCache {
 public:
  /// Plans the tiers (plan_tiers(): shape, types, q8_0 head_dim % 32, block, window, sinks,
  /// budgets), checks the spill folder (writable, the disk budget preallocatable when
  /// disk_budget > 0) and allocates the window. Errors: plan_tiers()'s,
  /// "cannot create the spill file in DIR: REASON", "not enough disk space in DIR for
  /// the 768.0 MiB spill file (--disk-budget 1.0 GiB): ...".
  static Expected<std::unique_ptr<KvCache>> create(const KvCacheConfig& config);
  ~KvCache();  // stops the copy thread (after the queued spills), removes the spill file
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  /// The config as applied: block, window and sinks cut to the context (TierLayout).
  const KvCacheConfig& config() const;
  /// The tier policy's layout of this config: blocks per tier, a block's bytes.
  const TierLayout& layout() const;
  /// Tokens the cache can hold: min(n_ctx, (window + host + disk blocks) * block_size).
  int64_t max_tokens() const;
  /// Human-readable reason for max_tokens(), appended to "context full: N tokens fit in the
  /// budgets you set": "(window 16 tokens, host 8.0 KiB = 2 blocks, disk 1.0 MiB = 256 blocks)".
  std::string capacity_detail() const;
  int64_t n_tokens() const;  // positions stored (committed)
  /// The first block still held: 0, except for sliding layers (TierLayout::drops()), whose
  /// blocks before it were dropped. read_block() serves [first_held_block(), blocks held).
  int64_t first_held_block() const;

  /// Bytes of one logical block over all layers, K + V (the unit of the budgets).
  int64_t block_bytes() const;

  /// Makes room for positions [n_tokens(), n_tokens() + n): allocates window blocks, sends
  /// blocks that leave the window to the copy thread. Errors (the cache then holds what it
  /// held): "context full: ..." when n_tokens() + n > max_tokens(); an error of an earlier
  /// spill ("writing the spill file FILE failed: Input/output error", "cannot allocate 64.0 MiB
  /// of RAM for the host KV tier ...": sticky, the cache is in error); RAM that runs out for a
  /// window block or the block table (the message names the bytes and the setting to change).
  Status reserve(int64_t n);
  /// Writes one position's K row [n_kv_heads * head_dim] and V row [n_kv_heads * head_dim_v]
  /// (f32, converted to the cache types) of `layer` at `pos` in [n_tokens(), n_tokens() + n)
  /// of the last reserve(). Safe to call from several threads for different (layer, pos).
  /// Not used with a DeviceWindow (the session writes the device slots).
  void store(int64_t layer, int64_t pos, const float* k, const float* v);
  /// Marks the reserved positions as stored: n_tokens() += n.
  void commit(int64_t n);

  /// The blocks that cover positions [0, end) for `layer`, in position order, each with the
  /// tier it is read from now. The last may be partial. Valid until the next reserve().
  /// end <= n_tokens() + reserved (positions being stored in this ubatch included).
  void blocks(int64_t layer, int64_t end, std::vector<BlockView>& out) const;

  /// Waits until every queued spill has landed (tests, snapshots, shutdown).
  Status flush();

  /// Snapshot support: the bytes of logical block b (all layers; per layer K part then V part,
  /// as laid out above, full block_size rows even for the last block) copied into `out`
  /// (block_bytes() bytes), from whatever tier holds it.
  Status read_block(int64_t b, std::span<uint8_t> out) const;
  /// Empties the cache, then rebuilds it holding n_tokens positions whose blocks' bytes are
  /// produced by fill(b, dst) in the read_block layout, placing them in tiers as a normal run
  /// would (sinks and recent blocks in the window, the rest spilled). On error the cache is
  /// empty. Sliding layers: fill() is asked only for the blocks from
  /// WindowRule::first_live(n_tokens) on; those before it are dropped.
  Status restore(int64_t n_tokens,
                 const std::function<Status(int64_t b, std::span<uint8_t> dst)>& fill);

  /// Forgets every position (n_tokens() = 0); cold slots are freed.
  void clear();

  const KvTelemetry& telemetry() const;
  KvStats stats() const;
  /// The Host tier's arena (its mapping options, THP mode, smaps figures).
  const HostArena& host_arena() const;

 private:
  struct Impl;
  explicit KvCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Removes spill files (spillway-spill-<pid>-*.kv) in dir whose process no longer runs.
/// Returns how many were removed; never fails (errors are ignored: a file in use stays).
int remove_stale_spill_files(const std::string& dir);

}  // namespace spw::kv
