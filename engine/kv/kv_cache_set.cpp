#include "engine/kv/kv_cache_set.h"

#include <algorithm>
#include <set>

namespace spw::kv {

Expected<std::unique_ptr<KvCacheSet>> KvCacheSet::create(const KvCacheConfig& base,
                                                         std::span<const int64_t> layer_span) {
  if (!layer_span.empty() && static_cast<int64_t>(layer_span.size()) != base.n_layer) {
    return make_error("a layer span for {} layers, the KV cache has {}", layer_span.size(),
                      base.n_layer);
  }
  std::set<int64_t> spans;
  for (int64_t il = 0; il < base.n_layer; ++il) {
    const int64_t s = layer_span.empty() ? 0 : layer_span[static_cast<size_t>(il)];
    if (s < 0) return make_error("layer {} has a sliding window of {} tokens", il, s);
    spans.insert(s);  // 0 (global) sorts first
  }
  auto set = std::unique_ptr<KvCacheSet>(new KvCacheSet());
  set->layer_group_.assign(static_cast<size_t>(base.n_layer), 0);
  set->layer_index_.assign(static_cast<size_t>(base.n_layer), 0);
  for (const int64_t s : spans) {
    Group g;
    g.span = s;
    for (int64_t il = 0; il < base.n_layer; ++il) {
      if ((layer_span.empty() ? 0 : layer_span[static_cast<size_t>(il)]) != s) continue;
      set->layer_group_[static_cast<size_t>(il)] = static_cast<int64_t>(set->groups_.size());
      set->layer_index_[static_cast<size_t>(il)] = static_cast<int64_t>(g.layers.size());
      g.layers.push_back(il);
    }
    set->groups_.push_back(std::move(g));
  }
  if (set->groups_.size() > 1 && base.device_window != nullptr) {
    return Error{
        "a GPU window serves one layer group (this model has global and sliding-window "
        "layers)"};
  }
  for (Group& g : set->groups_) {
    KvCacheConfig c = base;
    c.n_layer = static_cast<int64_t>(g.layers.size());
    c.span_tokens = g.span;
    if (g.span > 0) {  // sliding layers: no cold tiers
      c.host_budget = -1;
      c.disk_budget = 0;
      c.spill_dir.clear();
      c.fail_disk_write = nullptr;
    }
    auto made = KvCache::create(c);
    if (!made) return made.error();
    g.cache = std::move(made.value());
  }
  return set;
}

int64_t KvCacheSet::max_tokens() const {
  int64_t m = primary().max_tokens();
  for (const Group& g : groups_) m = std::min(m, g.cache->max_tokens());
  return m;
}

std::string KvCacheSet::capacity_detail() const {
  const Group* limit = &groups_.front();
  for (const Group& g : groups_) {
    if (g.cache->max_tokens() < limit->cache->max_tokens()) limit = &g;
  }
  return limit->cache->capacity_detail();
}

int64_t KvCacheSet::host_bytes_at(int64_t n_tokens) const {
  int64_t bytes = 0;
  for (const Group& g : groups_) {
    bytes += g.cache->layout().host_blocks_at(n_tokens) * g.cache->block_bytes();
  }
  return bytes;
}

Status KvCacheSet::reserve(int64_t n) {
  for (Group& g : groups_) {
    if (Status st = g.cache->reserve(n); !st) return st;
  }
  return Status::Ok();
}

void KvCacheSet::commit(int64_t n) {
  for (Group& g : groups_) g.cache->commit(n);
}

Status KvCacheSet::flush() {
  for (Group& g : groups_) {
    if (Status st = g.cache->flush(); !st) return st;
  }
  return Status::Ok();
}

void KvCacheSet::clear() {
  for (Group& g : groups_) g.cache->clear();
}

KvStats KvCacheSet::stats() const {
  KvStats sum;
  for (const Group& g : groups_) {
    const KvStats s = g.cache->stats();
    sum.window_blocks += s.window_blocks;
    sum.host_blocks += s.host_blocks;
    sum.disk_blocks += s.disk_blocks;
    sum.window_bytes += s.window_bytes;
    sum.host_bytes += s.host_bytes;
    sum.disk_bytes += s.disk_bytes;
    sum.window_to_host_bytes += s.window_to_host_bytes;
    sum.window_to_disk_bytes += s.window_to_disk_bytes;
    sum.cold_to_window_bytes += s.cold_to_window_bytes;
    sum.spills_pending += s.spills_pending;
    sum.dropped_blocks += s.dropped_blocks;
    sum.dropped_bytes += s.dropped_bytes;
    sum.host_mapped_bytes += s.host_mapped_bytes;
    sum.host_huge_page_bytes += s.host_huge_page_bytes;
  }
  return sum;
}

}  // namespace spw::kv
