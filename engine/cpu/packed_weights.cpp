#include "engine/cpu/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace spw::cpu {

struct PackedWeights::Slot {
  std::once_flag once;
  size_t offset = 0;  // of its packed bytes in the arena
  PackedMatrix m;
};

struct PackedWeights::Impl {
  std::unordered_map<const GgufTensorInfo*, Slot> slots;  // fixed after construction
  // The expert stacks: one slot per expert, [n_expert] each (fixed after construction).
  std::unordered_map<const GgufTensorInfo*, std::vector<Slot>> experts;
  // One mapping for every matrix's packed bytes, laid out in the model's order (layers, then
  // output), reserved at construction and made resident matrix by matrix as they are packed.
  // On transparent huge pages (MADV_HUGEPAGE) as one run: a matrix's first 2 MiB page may
  // already hold the end of the one packed before it, so no matrix ends in a tail of 4 KiB
  // pages (the small matrices and the tails of the large ones were ~23,000 of the ~31,000 page
  // faults of a 250 MB Q8_0 model's first token when each matrix had its own allocation).
  uint8_t* arena = nullptr;
  size_t arena_bytes = 0;   // the mapping's length (2 MiB alignment included)
  uint8_t* base = nullptr;  // arena rounded up to 2 MiB
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
  size_t total = 0;
  const auto add = [&](const GgufTensorInfo* t) {
    if (t != nullptr && t->n_dims == 2 && gemm_packable(t->type)) {
      const auto [it, added] = impl_->slots.try_emplace(t);
      if (added) {
        it->second.offset = total;
        total += packed_size(t->type, t->ne[0], t->ne[1]);
      }
    }
  };
  const auto add_stack = [&](const GgufTensorInfo* t) {
    if (t != nullptr && t->n_dims == 3 && gemm_packable(t->type)) {
      const auto [it, added] = impl_->experts.try_emplace(t, static_cast<size_t>(t->ne[2]));
      if (added) {
        for (Slot& e : it->second) {
          e.offset = total;
          total += packed_size(t->type, t->ne[0], t->ne[1]);
        }
      }
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
  if (total == 0) return;
  // Reserved, not committed (MAP_NORESERVE): pages become resident as matrices are packed into
  // them, so a model whose experts are never all used never holds all their packed bytes.
  constexpr size_t kHuge = size_t{2} << 20;
  impl_->arena_bytes = total + kHuge;
  void* m = ::mmap(nullptr, impl_->arena_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    throw std::runtime_error("cannot reserve " + std::to_string(impl_->arena_bytes >> 20) +
                             " MiB of address space for the repacked weights (mmap: " +
                             std::strerror(errno) + "); check `ulimit -v`");
  }
  impl_->arena = static_cast<uint8_t*>(m);
  const auto a = reinterpret_cast<uintptr_t>(m);
  impl_->base = reinterpret_cast<uint8_t*>((a + kHuge - 1) / kHuge * kHuge);
  ::madvise(impl_->base, (total + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
}

PackedWeights::~PackedWeights() {
  if (impl_->arena != nullptr) ::munmap(impl_->arena, impl_->arena_bytes);
}

const PackedMatrix* PackedWeights::get(const GgufTensorInfo& w, ThreadPool& pool) {
  const auto it = impl_->slots.find(&w);
  if (it == impl_->slots.end()) return nullptr;
  Slot& s = it->second;
  std::call_once(s.once, [&] {
    s.m = pack_matrix_into(impl_->base + s.offset, w.type, w.data, w.ne[0], w.ne[1], pool,
                           drop_pages);
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
    s.m =
        pack_matrix_into(impl_->base + s.offset, w.type, v.data, v.n_in, v.n_out, pool, drop_pages);
    drop_pages(v.data, v.row_bytes * static_cast<uint64_t>(v.n_out));  // the pages slices share
  });
  return &s.m;
}

}  // namespace spw::cpu
