// Query-tiled exact attention for prefill (docs/DESIGN.md §4.3): one KV head and a tile of
// consecutive query positions, all n_rep query heads of the head's GQA group together, walk
// the key blocks in position order. Per chunk of keys S = Q K^T is one register-blocked
// product (rows: the tile's query heads; columns: keys), then an online softmax per row
// (running max m and sum s) and O <- O * exp(m_old - m) + P V. K and V are read once per tile
// instead of once per query, and converted to f32 once per chunk.
//
// Determinism (what the tiered cache's exactness rests on): every output element is one fixed
// chain of float operations over the keys in position order, and the chunks start at fixed
// positions (block start + multiples of kTileChunk), so a query row gives the same bits
// whichever tile, ubatch or thread computes it and whichever tier its blocks lie in. Keys no
// row of a tile attends (the causal mask past the diagonal, a sliding window's lower edge) are
// skipped, which is exact: they would add zeros. The arithmetic differs from attn_partial()'s
// (decode's per-block partials) by float rounding only.
//
// Scratch per calling thread (thread_local, bounded by the tile and chunk sizes, never by the
// context): S [kTileChunk][rows], K and V of a chunk in f32 [kTileChunk][head_dim(_v)], the
// chunk's rescale factors [rows]: with rows <= 64 and head_dim 128, about 160 KiB.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/attention.h"

namespace spw::cpu {

/// Keys per online-softmax step.
inline constexpr int64_t kTileChunk = 128;
/// Query heads per tile, before padding to a multiple of 16.
inline constexpr int64_t kTileRows = 64;

/// Query positions per tile for a GQA group of n_rep query heads: max(1, kTileRows / n_rep).
int64_t tile_tokens(int64_t n_rep);

/// One tile's queries, prepared once per (tile, KV head). Row i is query token i / n_rep, head
/// i % n_rep of the group.
struct TileQueries {
  int64_t n_real = 0;        // n_tok * n_rep
  int64_t rows = 0;          // n_real rounded up to a multiple of 16 (pad rows: never read)
  std::vector<float> qt;     // [head_dim][rows], pad rows 0
  std::vector<int32_t> pos;  // [rows] position of the row's token; pad rows -1
  std::vector<int32_t> lo;   // [rows] lowest position it attends (span); pad rows 0
};

/// q: the group's heads of n_tok consecutive tokens at positions [pos_first, pos_first +
/// n_tok), head r of token t at q + t * q_stride + r * head_dim (f32, after RoPE). span: the
/// positions a query attends back, its own included (0: all). Positions must fit in int32.
void tile_prepare(const AttnShape& shape, const float* q, int64_t q_stride, int64_t n_tok,
                  int64_t pos_first, int64_t span, TileQueries& tq);

/// The running state of a tile's rows: o [rows][head_dim_v] unnormalised, m and s [rows].
/// Start from tile_state_reset(); after the last block, o / s is the attention output (s = 0:
/// nothing attended, output 0).
void tile_state_reset(int64_t rows, int64_t head_dim_v, float* o, float* m, float* s);

/// Rows [0, n) of span s (rows of len elements, s.stride elements apart) in f32 into out
/// [n][len], exactly the values tile_attend_block converts them to (binary16 and bfloat16 widen,
/// quantized rows dequantize). For a caller that attends the same rows from several tiles: it
/// passes them on as an F32 span (stride len), the same bits as the rows themselves give.
void tile_rows_f32(const KvSpan& s, int64_t len, int64_t n, float* out);

/// A hint that the first chunk of a block's rows (k, v as for tile_attend_block) is read next:
/// its bytes are prefetched into L2 while the current block computes. No effect on results.
void tile_prefetch_block(KvSpan k, KvSpan v, int64_t n);

/// Attends the n rows of one KV head's block whose first row holds position block_pos0 (k, v:
/// that head's rows, stride head_dim / head_dim_v elements apart: the block layout), causally
/// and within each row's span, into the state. Blocks must come in position order.
void tile_attend_block(const AttnShape& shape, const TileQueries& tq, KvSpan k, KvSpan v,
                       int64_t block_pos0, int64_t n, float* o, float* m, float* s);

}  // namespace spw::cpu
