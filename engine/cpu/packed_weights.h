// The CPU's repacked weight matrices of one model (engine/cpu/gemm.h), shared by all CPU
// sessions of the model and made lazily, one matrix at its first use.
//
// Memory: a matrix is repacked from its mapped file bytes, after which those pages are
// dropped from this process (madvise MADV_DONTNEED on the whole pages inside the tensor; the
// mapping stays valid and reads of it fault the bytes back in from the page cache, so other
// users of the original bytes, the float64 reference, a CUDA upload, the token_embd rows of
// tied embeddings, still see them). The repacked copy thus replaces the mapped one in the
// resident set: peak RSS grows by at most the largest matrix being repacked plus the padding
// of each matrix's last 16-row group, plus one 2 MiB page: the packed matrices lie in one
// mapping reserved at construction (address space of the sum of their packed sizes + 2 MiB,
// not committed), on transparent huge pages where the kernel allows them, so the page a
// matrix ends in may hold the zero start of the next one before it is packed.
//
// Time: the repack runs on the calling session's pool at about memory speed; the first
// prefill or decode step pays it once per matrix (model load itself is unchanged).
//
// Errors: the constructor (and of()) throws std::runtime_error naming the size when the
// address space cannot be reserved (`ulimit -v`).
#pragma once

#include <memory>

#include "engine/cpu/gemm.h"
#include "engine/model/model.h"

namespace spw::cpu {

class ThreadPool;

class PackedWeights {
 public:
  /// The model's shared instance (made on the first call).
  static std::shared_ptr<PackedWeights> of(const Model& model);

  explicit PackedWeights(const Model& model);
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  /// The repacked form of weight tensor `w` (one of the model's layer matrices or output),
  /// repacked now with `pool` if this is its first use; nullptr when its type has no GEMM
  /// (gemm_packable) or the tensor is not one of the model's matrices. Thread-safe.
  const PackedMatrix* get(const GgufTensorInfo& w, ThreadPool& pool);
  /// Expert e of a 3-D expert stack (ffn_{gate,up,down}_exps, [n_in, n_out, n_expert]),
  /// repacked at its first use; nullptr as get() does, or when e is out of range.
  const PackedMatrix* get_expert(const GgufTensorInfo& w, int64_t e, ThreadPool& pool);

 private:
  struct Slot;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spw::cpu
