// The KV of a model whose layers attend different spans (docs/DESIGN.md §4.2): gemma3 (five
// sliding-window layers to one global), a phi3 or mistral file with a sliding window on every
// layer. One KvCache per span: the global layers' cache is the tiered one (window, host, disk,
// the budgets); each sliding span's cache holds only the blocks of its span and drops the rest
// (TierConfig::span_tokens, tier_policy.h), so a Gemma-3 file at 128K needs the host KV of its
// global layers only. A model with global layers only has one group, the plain KvCache.
//
// The set has KvCache's session interface with layers numbered as the model numbers them;
// reserve() and commit() go to every group, store() and blocks() to the layer's group.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/kv/kv_cache.h"

namespace spw::kv {

class KvCacheSet {
 public:
  /// `base`: the model's KV shape with n_layer = every layer, the context, and the global
  /// layers' paging and budgets. `layer_span`: [n_layer] positions layer il attends (0: global),
  /// or empty (every layer global). The group of span s gets base with n_layer = its layers and
  /// span_tokens = s (no spill file, no budgets). Errors: a layer_span of another size than
  /// n_layer, a negative span, KvCache::create()'s; a DeviceWindow in base with more than one
  /// group ("a GPU window serves one layer group").
  static Expected<std::unique_ptr<KvCacheSet>> create(const KvCacheConfig& base,
                                                      std::span<const int64_t> layer_span);

  int64_t n_groups() const { return static_cast<int64_t>(groups_.size()); }
  /// Group g's cache; groups are in order: the global layers first (if any), then each sliding
  /// span, smallest first.
  KvCache& group(int64_t g) { return *groups_[static_cast<size_t>(g)].cache; }
  const KvCache& group(int64_t g) const { return *groups_[static_cast<size_t>(g)].cache; }
  int64_t group_span(int64_t g) const { return groups_[static_cast<size_t>(g)].span; }
  /// The model layers of group g, ascending.
  std::span<const int64_t> group_layers(int64_t g) const {
    return groups_[static_cast<size_t>(g)].layers;
  }
  /// The group of model layer il and il's index in that group's cache.
  int64_t group_of(int64_t il) const { return layer_group_[static_cast<size_t>(il)]; }
  int64_t layer_in_group(int64_t il) const { return layer_index_[static_cast<size_t>(il)]; }
  KvCache& cache_of(int64_t il) { return group(group_of(il)); }
  const KvCache& cache_of(int64_t il) const { return group(group_of(il)); }

  /// The global layers' cache (the first sliding group's when every layer slides): its config
  /// and layout are what a session reports as its paging.
  const KvCache& primary() const { return group(0); }

  int64_t n_tokens() const { return primary().n_tokens(); }
  /// The smallest of the groups' capacities (a sliding group's is the context).
  int64_t max_tokens() const;
  /// The limiting group's KvCache::capacity_detail().
  std::string capacity_detail() const;
  /// RAM the host tiers of every group hold once n_tokens positions are stored (whole blocks,
  /// TierLayout::host_blocks_at), for checking a long prompt against the memory left before it
  /// runs.
  int64_t host_bytes_at(int64_t n_tokens) const;

  /// KvCache::reserve() on every group; on an error the groups hold what they held.
  Status reserve(int64_t n);
  /// KvCache::store() for model layer il.
  void store(int64_t il, int64_t pos, const float* k, const float* v) {
    cache_of(il).store(layer_in_group(il), pos, k, v);
  }
  void commit(int64_t n);
  /// KvCache::blocks() for model layer il (a sliding layer's dropped blocks are views of 0
  /// tokens with null k / v).
  void blocks(int64_t il, int64_t end, std::vector<BlockView>& out) const {
    cache_of(il).blocks(layer_in_group(il), end, out);
  }
  Status flush();
  void clear();
  /// The groups' stats summed (blocks and bytes of every group; dropped_blocks from the
  /// sliding groups).
  KvStats stats() const;

 private:
  struct Group {
    int64_t span = 0;
    std::vector<int64_t> layers;
    std::unique_ptr<KvCache> cache;
  };
  std::vector<Group> groups_;
  std::vector<int64_t> layer_group_, layer_index_;  // [n_layer]
};

}  // namespace spw::kv
