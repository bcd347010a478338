#include "engine/cpu/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace spw::cpu {

struct PackedWeights::Slot {
  std::once_flag once;
  PackedMatrix m;
};

struct PackedWeights::Impl {
  std::unordered_map<const GgufTensorInfo*, Slot> slots;  // fixed after construction
  // The expert stacks: one slot per expert, [n_expert] each (fixed after construction).
  std::unordered_map<const GgufTensorInfo*, std::vector<Slot>> experts;
};

namespace {

// Drops this process's pages of [p, p + n) that lie wholly inside the range (the mapping is
// MAP_PRIVATE, PROT_READ, never written: the pages come back from the file when read).
void drop_pages(const uint8_t* p, uint64_t n) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + page - 1) / page * page, hi = (a + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace

std::shared_ptr<PackedWeights> PackedWeights::of(const Model& model) {
  return std::static_pointer_cast<PackedWeights>(model.derived(
      "cpu.packed_weights", [&model] { return std::make_shared<PackedWeights>(model); }));
}

PackedWeights::PackedWeights(const Model& model) : impl_(std::make_unique<Impl>()) {
  const auto add = [&](const GgufTensorInfo* t) {
    if (t != nullptr && t->n_dims == 2 && gemm_packable(t->type)) impl_->slots.try_emplace(t);
  };
  const auto add_stack = [&](const GgufTensorInfo* t) {
    if (t != nullptr && t->n_dims == 3 && gemm_packable(t->type)) {
      impl_->experts.try_emplace(t, static_cast<size_t>(t->ne[2]));
    }
  };
  for (const LayerWeights& w : model.layers) {
    for (const GgufTensorInfo* t : w.matrices()) {
      // The router is not repacked: its logits come from quant_dot.h's kernels, whose rounding
      // the top-k expert choice has always seen.
      if (t == w.ffn_gate_inp) continue;
      add(t);
      add_stack(t);
    }
  }
  add(model.output);
}

PackedWeights::~PackedWeights() = default;

const PackedMatrix* PackedWeights::get(const GgufTensorInfo& w, ThreadPool& pool) {
  const auto it = impl_->slots.find(&w);
  if (it == impl_->slots.end()) return nullptr;
  Slot& s = it->second;
  std::call_once(s.once, [&] {
    s.m = pack_matrix(w.type, w.data, w.ne[0], w.ne[1], pool, drop_pages);
    drop_pages(w.data, w.n_bytes);  // the pages the slices share
  });
  return &s.m;
}

const PackedMatrix* PackedWeights::get_expert(const GgufTensorInfo& w, int64_t e,
                                              ThreadPool& pool) {
  const auto it = impl_->experts.find(&w);
  if (it == impl_->experts.end() || e < 0 || e >= static_cast<int64_t>(it->second.size())) {
    return nullptr;
  }
  Slot& s = it->second[static_cast<size_t>(e)];
  std::call_once(s.once, [&] {
    const MatrixView v = expert_of(w, e);
    s.m = pack_matrix(w.type, v.data, v.n_in, v.n_out, pool, drop_pages);
    drop_pages(v.data, v.row_bytes * static_cast<uint64_t>(v.n_out));  // the pages slices share
  });
  return &s.m;
}

}  // namespace spw::cpu
