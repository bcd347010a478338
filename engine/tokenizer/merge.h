// The bigram-merge loop shared by the SentencePiece and BPE encoders (llama.cpp's
// llm_tokenizer_spm_session / llm_tokenizer_bpe_session): symbols form a linked list over the
// text; a priority queue of candidate pairs is drained, each pair merged unless it went stale.
// The two encoders differ only in how a pair is ranked (SPM: highest score; BPE: lowest merge
// rank), which lives in their queue's comparator and their try_add callback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/tokenizer/encode_poll.h"

namespace spw {

/// A run of bytes [pos, pos + n) of the text being merged; n == 0 once merged into its left
/// neighbour. prev/next are indices into the symbol vector, -1 at the ends.
struct MergeSymbol {
  int32_t prev;
  int32_t next;
  size_t pos;
  size_t n;
};

/// Drains `work` (a priority queue of bigrams with fields left, right and size = the pair's
/// bytes when queued). A bigram is stale when one side was merged away or has grown since it was
/// queued (a symbol only grows by absorbing its right neighbour, so comparing sizes tells the
/// same as llama.cpp's text comparison). Otherwise the right symbol is merged into the left and
/// try_add(prev, left) and try_add(left, next) queue the new candidate pairs. Each bigram taken
/// is a step of encode_should_stop(): false when the poll stopped the merge (symbols then are
/// only partly merged).
template <typename Queue, typename TryAdd>
bool merge_bigrams(std::vector<MergeSymbol>& symbols, Queue& work, TryAdd&& try_add) {
  while (!work.empty()) {
    if (encode_should_stop()) return false;
    const auto bigram = work.top();
    work.pop();
    MergeSymbol& left = symbols[static_cast<size_t>(bigram.left)];
    MergeSymbol& right = symbols[static_cast<size_t>(bigram.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
  return true;
}

}  // namespace spw
