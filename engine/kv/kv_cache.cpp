#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <optional>

#include "engine/common/size.h"
#include "engine/cpu/ops.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/spill_file.h"
#include "engine/kv/spill_queue.h"

namespace spw::kv {
namespace {

// One row (one head, one position) f32 -> the cache type.
void write_row(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16:
      cpu::f32_to_f16_row(x, reinterpret_cast<uint16_t*>(dst), n);
      break;
    case GgmlType::Q8_0:
      cpu::f32_to_q8_0_row(x, dst, n);
      break;
    default:
      assert(false && "unsupported KV type");
  }
}

// Life of a logical block in the table. Window, Spilling and Failed are all read from the
// window slot; only a landed spill (Cold) is read from its cold slot.
enum class State : uint8_t {
  Unused,    // no position of it reserved
  Window,    // in its window slot
  Spilling,  // queued on the copy thread; still read from (and holding) its window slot
  Failed,    // its spill failed; stays in its window slot for good (the cache is in error)
  Cold,      // landed in cold_tier / cold_slot; window slot given back
  Dropped,   // sliding layers: out of every future query's span, its bytes freed
};

struct BlockEntry {
  State state = State::Unused;
  Tier cold_tier = Tier::Host;
  int32_t window_slot = -1;
  int64_t cold_slot = -1;
};

}  // namespace

struct KvCache::Impl {
  KvCacheConfig config;
  // The tier policy's layout: the window rule, a block's geometry ([n_layer][K part:
  // n_kv_heads * block_size * row_k, V part: n_kv_heads * block_size * row_v]), the cold slots
  // and the capacity.
  TierLayout layout;
  int64_t row_k = 0, row_v = 0;  // bytes of one head's row of one position
  int64_t layer_k_bytes = 0, layer_bytes = 0, block_bytes = 0;
  int64_t n_sink_blocks = 0, n_recent_blocks = 0;  // the window = sinks + recent
  int64_t max_tokens = 0;

  // Bookkeeping: the block table and the free cold slots, written by the writer thread only.
  // The table grows in reserve() (readers run only between the writer's calls and keep no
  // reference into it), so a context of 2^31 tokens costs nothing until it is used. Cold slots
  // are handed out lowest first: the never-used ones by a counter, then any given back.
  std::vector<BlockEntry> table;
  int64_t max_blocks = 0;                       // ceil(max_tokens / block_size)
  int64_t next_host = 0, next_disk = 0;         // slots [next, n_slots) never used
  std::vector<int64_t> freed_host, freed_disk;  // slots given back (a failed spill)
  int64_t n_tokens = 0, reserved = 0;
  int64_t n_window = 0, n_host = 0, n_disk = 0;  // blocks read from each tier
  int64_t n_dropped = 0;                         // sliding layers: blocks dropped
  int64_t retire_cursor = 0;  // blocks in [n_sink_blocks, retire_cursor) have left the window
  std::optional<Error> spill_error;  // first failed spill; sticky until clear()/restore()

  // Storage.
  WindowPool window;
  std::unique_ptr<HostArena> host;
  std::unique_ptr<SpillFile> disk;  // null without a disk budget

  KvTelemetry telemetry;
  // Last: destroyed first, so the copy thread drains while the tiers it writes still exist.
  std::unique_ptr<SpillQueue> queue;

  Impl(const KvCacheConfig& c, const TierLayout& l)
      : config(c),
        layout(l),
        row_k(l.row_k),
        row_v(l.row_v),
        layer_k_bytes(l.layer_k_bytes),
        layer_bytes(l.layer_bytes),
        block_bytes(l.block_bytes),
        n_sink_blocks(l.window.sink_blocks),
        n_recent_blocks(l.window.recent_blocks),
        max_tokens(l.max_tokens),
        max_blocks(l.max_blocks()),
        window(l.block_bytes, c.device_window.get()) {}

  DeviceWindow* device() const { return config.device_window.get(); }

  int64_t window_blocks() const { return layout.window.total(); }

  // Runs on the copy thread: reads only the job and the (immutable) tiers.
  // With a DeviceWindow the block comes off the device first: straight into its Host slot, or
  // into copy_staging (copy thread only) on its way to the spill file.
  std::vector<uint8_t> copy_staging;
  // A block's bytes in RAM on their way between the device and a file.
  Status resize_staging(std::vector<uint8_t>& staging) const {
    try {
      staging.resize(static_cast<size_t>(block_bytes));
    } catch (const std::bad_alloc&) {
      return make_error(
          "cannot allocate {} of RAM to stage a KV block: out of memory; a smaller --kv-block "
          "or a shorter -c",
          format_size(block_bytes));
    }
    return Status::Ok();
  }
  Status copy_block(const SpillJob& job) {
    Status st = Status::Ok();
    const uint8_t* src = job.src;
    if (static_cast<Tier>(job.tier) == Tier::Host) {
      // The arena maps its chunks as blocks first land in them: a failure is this spill's.
      auto dst = host->acquire(job.slot);
      if (!dst) {
        st = dst.error();
      } else if (device() != nullptr) {
        st = device()->copy_out(job.window_slot, *dst);
      } else {
        std::memcpy(*dst, src, static_cast<size_t>(block_bytes));
      }
      if (st) telemetry.window_to_host_bytes.fetch_add(block_bytes, std::memory_order_relaxed);
    } else if (config.fail_disk_write && !config.fail_disk_write(job.slot)) {
      st = disk->write_error(EIO);  // injected, as the kernel would report it
    } else {
      if (device() != nullptr) {
        if (Status r = resize_staging(copy_staging); !r) {
          st = r;
        } else {
          st = device()->copy_out(job.window_slot, copy_staging.data());
          src = copy_staging.data();
        }
      }
      if (st) st = disk->write_slot(job.slot, src);
      if (st) telemetry.window_to_disk_bytes.fetch_add(block_bytes, std::memory_order_relaxed);
    }
    telemetry.spills_pending.fetch_sub(1, std::memory_order_relaxed);
    return st;
  }

  const uint8_t* read_base(const BlockEntry& e) const {
    assert(e.state != State::Unused && e.state != State::Dropped);
    if (e.state != State::Cold) return window.slot(e.window_slot);
    if (e.cold_tier == Tier::Host) return host->slot(e.cold_slot);
    return disk->slot(e.cold_slot);
  }

  void publish() {
    const auto set = [](std::atomic<int64_t>& a, int64_t v) {
      a.store(v, std::memory_order_relaxed);
    };
    set(telemetry.window_blocks, n_window);
    set(telemetry.host_blocks, n_host);
    set(telemetry.disk_blocks, n_disk);
    set(telemetry.window_bytes, n_window * block_bytes);
    set(telemetry.host_bytes, n_host * block_bytes);
    set(telemetry.disk_bytes, n_disk * block_bytes);
    set(telemetry.dropped_blocks, n_dropped);
    set(telemetry.dropped_bytes, n_dropped * block_bytes);
  }

  // Applies the copies the copy thread has finished: a landed block is read from its cold slot
  // from now on and its window slot is free; a failed one stays in the window.
  void apply_landed() {
    std::vector<SpillDone> done;
    queue->take_landed(done);
    for (SpillDone& d : done) {
      BlockEntry& e = table[static_cast<size_t>(d.job.block)];
      assert(e.state == State::Spilling);
      if (d.status.ok()) {
        window.give_back(e.window_slot);
        e.window_slot = -1;
        e.state = State::Cold;
        --n_window;
        ++(e.cold_tier == Tier::Host ? n_host : n_disk);
      } else {
        (e.cold_tier == Tier::Host ? freed_host : freed_disk).push_back(e.cold_slot);
        e.cold_slot = -1;
        e.state = State::Failed;
        if (!spill_error) spill_error = d.status.error();
      }
    }
    if (!done.empty()) publish();
  }

  // Queues the spill of block b (full, out of the window) to a free Host slot, else Disk.
  void queue_spill(int64_t b) {
    BlockEntry& e = table[static_cast<size_t>(b)];
    assert(e.state == State::Window);
    const auto take = [](std::vector<int64_t>& freed, int64_t& next, int64_t n) -> int64_t {
      if (!freed.empty()) {
        const int64_t slot = freed.back();
        freed.pop_back();
        return slot;
      }
      return next < n ? next++ : -1;
    };
    if (const int64_t h = take(freed_host, next_host, host->n_slots()); h >= 0) {
      e.cold_tier = Tier::Host;
      e.cold_slot = h;
    } else if (const int64_t d = take(freed_disk, next_disk, disk ? disk->n_slots() : 0); d >= 0) {
      e.cold_tier = Tier::Disk;
      e.cold_slot = d;
    } else {
      // max_tokens() leaves a cold slot for every block out of the window; unreachable.
      assert(false && "no cold slot for a block leaving the window");
      return;
    }
    e.state = State::Spilling;
    telemetry.spills_pending.fetch_add(1, std::memory_order_relaxed);
    queue->push(SpillJob{b, static_cast<uint8_t>(e.cold_tier), e.cold_slot,
                         window.slot(e.window_slot), e.window_slot});
  }

  // Spills the blocks that are no longer sinks or among the n_recent_blocks most recent of
  // [0, n_blocks), except those from keep_from on (being written in this ubatch). Blocks leave
  // the window in order and never come back, hence the cursor.
  void retire(int64_t n_blocks, int64_t keep_from) {
    if (spill_error) return;  // the cache is in error: keep what it holds where it is
    if (layout.drops()) return drop_before(n_tokens);
    const int64_t end = std::min(layout.window.cold_end(n_blocks), keep_from);
    for (; retire_cursor < end; ++retire_cursor) {
      if (table[static_cast<size_t>(retire_cursor)].state == State::Window) {
        queue_spill(retire_cursor);
      }
    }
  }

  // Sliding layers: drops the blocks no query at p or later attends (TierLayout::drops()).
  void drop_before(int64_t p) {
    const int64_t end = std::min(layout.window.first_live(p), static_cast<int64_t>(table.size()));
    for (; retire_cursor < end; ++retire_cursor) {
      BlockEntry& e = table[static_cast<size_t>(retire_cursor)];
      assert(e.state == State::Window);
      window.give_back(e.window_slot);
      e = BlockEntry{State::Dropped, Tier::Window, -1, -1};
      --n_window;
      ++n_dropped;
    }
  }

  // A window slot for a new block: a free one; else a new one while the pool is below the
  // window's size plus spares; else the slot of a spill in flight, once it lands; else (a
  // ubatch spanning more blocks than the window) a new one.
  Expected<int32_t> take_window_slot() {
    const int64_t base = std::min(window_blocks(), max_blocks) + kSpareWindowSlots;
    for (;;) {
      if (window.n_free() > 0) return window.take();
      if (window.size() < base && window.can_grow()) return window.grow();
      if (queue->in_flight() == 0) {
        apply_landed();
        if (spill_error) return *spill_error;  // a spill failed: the cache is in error
        if (window.n_free() > 0) continue;
        // A fixed device pool is sized by TierLayout::pool_slots(), which covers this case.
        assert(window.can_grow() && "device window pool too small");
        return window.grow();
      }
      queue->wait_one();
      apply_landed();
      if (spill_error) return *spill_error;
    }
  }

  // Drops blocks allocated for positions from n_tokens on (a reservation not committed).
  void release_uncommitted() {
    for (auto b = static_cast<size_t>(ceil_div(n_tokens, config.block_size)); b < table.size();
         ++b) {
      BlockEntry& e = table[b];
      if (e.state == State::Unused) break;
      assert(e.state == State::Window);
      window.give_back(e.window_slot);
      e = BlockEntry{};
      --n_window;
    }
    reserved = 0;
  }

  void reset() {
    queue->wait_all();
    std::vector<SpillDone> discard;
    queue->take_landed(discard);
    table.clear();
    window.release_all();
    next_host = next_disk = 0;
    freed_host.clear();
    freed_disk.clear();
    n_tokens = reserved = 0;
    n_window = n_host = n_disk = n_dropped = 0;
    retire_cursor = n_sink_blocks;
    spill_error.reset();
    publish();
  }
};

Expected<std::unique_ptr<KvCache>> KvCache::create(const KvCacheConfig& config_in) {
  auto planned = plan_tiers(config_in);
  if (!planned) return planned.error();
  const TierLayout& t = *planned;
  if (config_in.disk_budget > 0 && config_in.spill_dir.empty() && !t.drops()) {
    return Error{"--disk-budget needs a folder for the spill file: set --spill-dir DIR"};
  }
  KvCacheConfig config = config_in;  // what config() reports: the settings as applied
  config.block_size = t.block_size;
  config.window_tokens = t.window_tokens;
  config.n_sinks = t.n_sinks;
  if (config.device_window != nullptr) {
    const int64_t need =
        t.window.total() >= t.n_blocks ? t.n_blocks : t.window.total() + kSpareWindowSlots;
    if (config.device_window->n_slots() < need) {
      return make_error("the device window has {} block slots; the window needs at least {}",
                        config.device_window->n_slots(), need);
    }
  }

  auto impl = std::make_unique<Impl>(config, t);
  Impl& m = *impl;
  auto host = HostArena::create(t.host_slots, t.block_bytes, config.host_memory);
  if (!host) return host.error();
  m.host = std::move(host.value());
  if (config.disk_budget > 0 && !t.drops()) {  // a bad folder for a disk budget: an error now
    auto disk =
        SpillFile::create(config.spill_dir, t.disk_slots, t.block_bytes, config.disk_budget);
    if (!disk) return disk.error();
    m.disk = std::move(disk.value());
  }
  Impl* self = impl.get();
  m.queue =
      std::make_unique<SpillQueue>([self](const SpillJob& job) { return self->copy_block(job); });
  m.reset();
  return std::unique_ptr<KvCache>(new KvCache(std::move(impl)));
}

KvCache::KvCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvCache::~KvCache() = default;

const KvCacheConfig& KvCache::config() const { return impl_->config; }
int64_t KvCache::max_tokens() const { return impl_->max_tokens; }
std::string KvCache::capacity_detail() const { return impl_->layout.capacity_detail(); }
const TierLayout& KvCache::layout() const { return impl_->layout; }
int64_t KvCache::n_tokens() const { return impl_->n_tokens; }
int64_t KvCache::first_held_block() const {
  return impl_->layout.drops() ? impl_->retire_cursor : 0;
}
int64_t KvCache::block_bytes() const { return impl_->block_bytes; }

Status KvCache::reserve(int64_t n) {
  Impl& m = *impl_;
  assert(n >= 0);
  m.apply_landed();
  if (m.spill_error) return *m.spill_error;
  if (m.reserved > 0) m.release_uncommitted();
  if (m.n_tokens + n > m.max_tokens) {
    return make_error("context full: {} tokens fit in the budgets you set {}", m.max_tokens,
                      m.layout.capacity_detail());
  }
  if (n == 0) return Status::Ok();
  const int64_t bs = m.config.block_size;
  const int64_t first = m.n_tokens / bs;  // the block of the first reserved position
  const int64_t n_blocks = ceil_div(m.n_tokens + n, bs);
  // Blocks before `first` are full and committed: those that are now out of the window spill
  // (before taking slots, so their copies are under way while we allocate).
  m.retire(n_blocks, first);
  if (static_cast<int64_t>(m.table.size()) < n_blocks) {
    try {
      m.table.resize(static_cast<size_t>(n_blocks));
    } catch (const std::bad_alloc&) {
      return make_error(
          "cannot allocate {} of RAM for the KV block table ({} blocks of {} tokens): out of "
          "memory; a shorter -c or a larger --kv-block",
          format_size(n_blocks * static_cast<int64_t>(sizeof(BlockEntry))), n_blocks, bs);
    }
  }
  for (int64_t b = first; b < n_blocks; ++b) {
    BlockEntry& e = m.table[static_cast<size_t>(b)];
    if (e.state != State::Unused) continue;  // the partial block being filled
    auto slot = m.take_window_slot();
    if (!slot) {
      // Give back what this call took: the cache holds what it held.
      for (int64_t u = b - 1; u >= first; --u) {
        BlockEntry& t = m.table[static_cast<size_t>(u)];
        if (u * bs < m.n_tokens) break;  // the partial block, already held before this call
        m.window.give_back(t.window_slot);
        t = BlockEntry{};
        --m.n_window;
      }
      m.publish();
      return slot.error();
    }
    m.table[static_cast<size_t>(b)] = BlockEntry{State::Window, Tier::Host, *slot, -1};
    ++m.n_window;
  }
  // Blocks still in flight beyond the spares (those a long prefill ubatch spilled at commit)
  // hold window slots: wait for them here, once, so the window keeps to its size in decode.
  const int64_t tail =
      std::max(m.n_sink_blocks, std::min(m.layout.window.cold_end(n_blocks), first));
  const int64_t needed =
      std::min(m.n_sink_blocks, n_blocks) + std::max<int64_t>(0, n_blocks - tail);
  // in_flight() is read before apply_landed(): a copy that lands in between would otherwise
  // leave its block counted in the window with nothing left to wait for.
  for (;;) {
    const bool idle = m.queue->in_flight() == 0;
    m.apply_landed();
    if (m.n_window <= needed + kSpareWindowSlots || idle) break;
    m.queue->wait_one();
  }
  m.reserved = n;
  m.publish();
  return Status::Ok();
}

void KvCache::store(int64_t layer, int64_t pos, const float* k, const float* v) {
  Impl& m = *impl_;
  const KvCacheConfig& c = m.config;
  assert(layer >= 0 && layer < c.n_layer);
  assert(pos >= m.n_tokens && pos < m.n_tokens + m.reserved);
  const BlockEntry& e = m.table[static_cast<size_t>(pos / c.block_size)];
  assert(e.state == State::Window);
  assert(m.device() == nullptr && "the session writes a device window itself");
  uint8_t* base = m.window.slot(e.window_slot) + layer * m.layer_bytes;
  const int64_t r = pos % c.block_size;
  for (int64_t h = 0; h < c.n_kv_heads; ++h) {
    const int64_t row = h * c.block_size + r;  // [n_kv_heads][block_size]
    write_row(c.type_k, k + h * c.head_dim, base + row * m.row_k, c.head_dim);
    write_row(c.type_v, v + h * c.head_dim_v, base + m.layer_k_bytes + row * m.row_v, c.head_dim_v);
  }
}

void KvCache::commit(int64_t n) {
  Impl& m = *impl_;
  assert(n >= 0 && n <= m.reserved);
  m.n_tokens += n;
  m.release_uncommitted();  // positions reserved but not committed, if n < reserved
  // Blocks of a long ubatch that are already out of the recent window spill now.
  m.retire(ceil_div(m.n_tokens, m.config.block_size), INT64_MAX);
  m.apply_landed();
  m.publish();
}

void KvCache::blocks(int64_t layer, int64_t end, std::vector<BlockView>& out) const {
  const Impl& m = *impl_;
  const int64_t bs = m.config.block_size;
  assert(layer >= 0 && layer < m.config.n_layer);
  assert(end >= 0 && end <= m.n_tokens + m.reserved);
  out.clear();
  const int64_t n_blocks = ceil_div(end, bs);
  out.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockEntry& e = m.table[static_cast<size_t>(b)];
    if (e.state == State::Dropped) {  // no bytes: the span's attention never reads it
      out.push_back(BlockView{b, b * bs, 0, Tier::Window, nullptr, nullptr});
      continue;
    }
    const uint8_t* base = m.read_base(e) + layer * m.layer_bytes;
    out.push_back(BlockView{b, b * bs, std::min(bs, end - b * bs),
                            e.state == State::Cold ? e.cold_tier : Tier::Window, base,
                            base + m.layer_k_bytes});
  }
}

Status KvCache::flush() {
  Impl& m = *impl_;
  m.queue->wait_all();
  m.apply_landed();
  if (m.spill_error) return *m.spill_error;
  return Status::Ok();
}

Status KvCache::read_block(int64_t b, std::span<uint8_t> out) const {
  const Impl& m = *impl_;
  const int64_t n_blocks = ceil_div(m.n_tokens, m.config.block_size);
  if (b < 0 || b >= n_blocks) {
    return make_error("KV block {} is not held (the cache holds {} blocks)", b, n_blocks);
  }
  if (static_cast<int64_t>(out.size()) != m.block_bytes) {
    return make_error("KV block buffer of {} bytes, a block has {}", out.size(), m.block_bytes);
  }
  const BlockEntry& e = m.table[static_cast<size_t>(b)];
  if (e.state == State::Dropped) {
    return make_error(
        "KV block {} was dropped: these sliding-window layers keep only the last {} "
        "positions",
        b, m.layout.span_tokens);
  }
  if (m.device() != nullptr && e.state != State::Cold) {
    return m.device()->copy_out(e.window_slot, out.data());
  }
  std::memcpy(out.data(), m.read_base(e), out.size());
  return Status::Ok();
}

Status KvCache::restore(int64_t n_tokens,
                        const std::function<Status(int64_t b, std::span<uint8_t> dst)>& fill) {
  Impl& m = *impl_;
  m.reset();
  if (n_tokens < 0 || n_tokens > m.max_tokens) {
    return make_error("context full: {} tokens fit in the budgets you set {}", m.max_tokens,
                      m.layout.capacity_detail());
  }
  // Block by block through the window, as a run of block-sized ubatches would write them: the
  // blocks land in the tiers a normal run puts them in, by the same spill path.
  const int64_t bs = m.config.block_size;
  // Sliding layers: the blocks before the span of the next query are dropped, not restored.
  const int64_t first = m.layout.window.first_live(n_tokens);
  if (first > 0) {
    m.table.assign(static_cast<size_t>(first), BlockEntry{State::Dropped, Tier::Window, -1, -1});
    m.n_tokens = first * bs;
    m.retire_cursor = first;
    m.n_dropped = first;
  }
  std::vector<uint8_t> staging;
  for (int64_t b = first; b * bs < n_tokens; ++b) {
    const int64_t n = std::min(bs, n_tokens - b * bs);
    Status st = reserve(n);
    if (st) {
      const BlockEntry& e = m.table[static_cast<size_t>(b)];
      if (m.device() != nullptr) {  // through RAM onto the device
        st = m.resize_staging(staging);
        if (st) st = fill(b, std::span<uint8_t>(staging));
        if (st) st = m.device()->copy_in(e.window_slot, staging.data());
      } else {
        st = fill(b, std::span<uint8_t>(m.window.slot(e.window_slot),
                                        static_cast<size_t>(m.block_bytes)));
      }
    }
    if (!st) {
      m.reset();
      return st;
    }
    commit(n);
  }
  if (Status st = flush(); !st) {
    m.reset();
    return st;
  }
  return Status::Ok();
}

void KvCache::clear() { impl_->reset(); }

const KvTelemetry& KvCache::telemetry() const { return impl_->telemetry; }
const HostArena& KvCache::host_arena() const { return *impl_->host; }

KvStats KvCache::stats() const {
  const KvTelemetry& t = impl_->telemetry;
  const auto get = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  KvStats s;
  s.window_blocks = get(t.window_blocks);
  s.host_blocks = get(t.host_blocks);
  s.disk_blocks = get(t.disk_blocks);
  s.window_bytes = get(t.window_bytes);
  s.host_bytes = get(t.host_bytes);
  s.disk_bytes = get(t.disk_bytes);
  s.window_to_host_bytes = get(t.window_to_host_bytes);
  s.window_to_disk_bytes = get(t.window_to_disk_bytes);
  s.cold_to_window_bytes = get(t.cold_to_window_bytes);
  s.spills_pending = get(t.spills_pending);
  s.dropped_blocks = get(t.dropped_blocks);
  s.dropped_bytes = get(t.dropped_bytes);
  s.host_mapped_bytes = impl_->host->mapped_bytes();
  s.host_huge_page_bytes = impl_->host->huge_page_bytes();
  return s;
}

}  // namespace spw::kv
