#include "engine/cpu/attention_tile.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"

namespace spw::cpu {
namespace {

constexpr int64_t kRowAlign = 16;
// Tiles of at most this many rows (decode) compute their scores with the keys in the lanes.
constexpr int64_t kSmallTileRows = 8;

// Rows [r0, r0 + n) of a span in f32, [n][len]: the span's own memory for f32 rows stored
// contiguously, else converted into buf.
const float* rows_f32(const KvSpan& s, int64_t len, int64_t r0, int64_t n,
                      std::vector<float>& buf) {
  const auto* base = static_cast<const uint8_t*>(s.data);
  if (s.type == GgmlType::F32) {
    const float* rows = reinterpret_cast<const float*>(base) + r0 * s.stride;
    if (s.stride == len) return rows;
    buf.resize(static_cast<size_t>(n * len));
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(&buf[static_cast<size_t>(j * len)], rows + j * s.stride,
                  static_cast<size_t>(len) * sizeof(float));
    return buf.data();
  }
  buf.resize(static_cast<size_t>(n * len));
  const size_t row_bytes = row_size(s.type, s.stride);
  if (s.type == GgmlType::F16 && s.stride == len) {  // contiguous rows: one conversion
    f16_to_f32_row(reinterpret_cast<const uint16_t*>(base + static_cast<size_t>(r0) * row_bytes),
                   buf.data(), n * len);
    return buf.data();
  }
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = base + static_cast<size_t>(r0 + j) * row_bytes;
    float* dst = &buf[static_cast<size_t>(j * len)];
    if (s.type == GgmlType::F16) {
      f16_to_f32_row(reinterpret_cast<const uint16_t*>(row), dst, len);
    } else {
      dequantize_row(s.type, row, dst, len);
    }
  }
  return buf.data();
}

// Asks for the bytes of rows [r0, r0 + n) of a span on their way into L2 (GCC/clang builtin:
// PREFETCHT1 on x86-64, PRFM on AArch64; a hint, never a fault).
void prefetch_rows(const KvSpan& s, int64_t r0, int64_t n) {
  if (n <= 0) return;
  const size_t row_bytes = row_size(s.type, s.stride);
  const auto* p = static_cast<const char*>(s.data) + static_cast<size_t>(r0) * row_bytes;
  const size_t bytes = static_cast<size_t>(n) * row_bytes;
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

}  // namespace

void tile_rows_f32(const KvSpan& s, int64_t len, int64_t n, float* out) {
  const auto* base = static_cast<const uint8_t*>(s.data);
  if (s.type == GgmlType::F16 && s.stride == len) {  // contiguous rows: one conversion
    f16_to_f32_row(reinterpret_cast<const uint16_t*>(base), out, n * len);
    return;
  }
  const size_t row_bytes = row_size(s.type, s.stride);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = base + static_cast<size_t>(j) * row_bytes;
    float* dst = out + j * len;
    if (s.type == GgmlType::F32) {
      std::memcpy(dst, row, static_cast<size_t>(len) * sizeof(float));
    } else if (s.type == GgmlType::F16) {
      f16_to_f32_row(reinterpret_cast<const uint16_t*>(row), dst, len);
    } else {
      dequantize_row(s.type, row, dst, len);
    }
  }
}

void tile_prefetch_block(KvSpan k, KvSpan v, int64_t n) {
  prefetch_rows(k, 0, std::min(n, kTileChunk));
  prefetch_rows(v, 0, std::min(n, kTileChunk));
}

int64_t tile_tokens(int64_t n_rep) { return std::max<int64_t>(1, kTileRows / n_rep); }

void tile_prepare(const AttnShape& shape, const float* q, int64_t q_stride, int64_t n_tok,
                  int64_t pos_first, int64_t span, TileQueries& tq) {
  assert(pos_first + n_tok <= std::numeric_limits<int32_t>::max());
  const int64_t n_rep = shape.n_q, hd = shape.head_dim;
  tq.n_real = n_tok * n_rep;
  tq.rows = (tq.n_real + kRowAlign - 1) / kRowAlign * kRowAlign;
  tq.qt.assign(static_cast<size_t>(hd * tq.rows), 0.0f);
  tq.pos.assign(static_cast<size_t>(tq.rows), -1);
  tq.lo.assign(static_cast<size_t>(tq.rows), 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t p = pos_first + t;
    const int64_t lowest = span > 0 ? std::max<int64_t>(0, p - span + 1) : 0;
    for (int64_t r = 0; r < n_rep; ++r) {
      const int64_t i = t * n_rep + r;
      tq.pos[static_cast<size_t>(i)] = static_cast<int32_t>(p);
      tq.lo[static_cast<size_t>(i)] = static_cast<int32_t>(lowest);
      const float* qr = q + t * q_stride + r * hd;
      for (int64_t d = 0; d < hd; ++d) tq.qt[static_cast<size_t>(d * tq.rows + i)] = qr[d];
    }
  }
}

void tile_state_reset(int64_t rows, int64_t head_dim_v, float* o, float* m, float* s) {
  std::fill(o, o + rows * head_dim_v, 0.0f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(s, s + rows, 0.0f);
}

void tile_attend_block(const AttnShape& shape, const TileQueries& tq, KvSpan k, KvSpan v,
                       int64_t block_pos0, int64_t n, float* o, float* m, float* s) {
  if (tq.n_real == 0) return;
  // Keys some row of the tile attends: rows are in position order, and so are their spans.
  const int64_t first = std::max<int64_t>(0, tq.lo[0] - block_pos0);
  const int64_t end = std::min<int64_t>(
      n, static_cast<int64_t>(tq.pos[static_cast<size_t>(tq.n_real - 1)]) + 1 - block_pos0);
  if (end <= first) return;
  const OpKernels& K = active_op_kernels();
  const int64_t rows = tq.rows, hd = shape.head_dim, hdv = shape.head_dim_v;
  thread_local std::vector<float> st, kbuf, vbuf, ktbuf, a;
  st.resize(static_cast<size_t>(kTileChunk * rows));
  a.resize(static_cast<size_t>(rows));
  // Chunks start at fixed positions of the block (see the header); only their attended part
  // is computed.
  for (int64_t c0 = first / kTileChunk * kTileChunk; c0 < end; c0 += kTileChunk) {
    const int64_t j0 = std::max(c0, first), j1 = std::min(c0 + kTileChunk, end);
    const int64_t nk = j1 - j0;
    // The next chunk's K and V come in while this one computes: at long context they are read
    // from L3 or memory, and the f16 conversion below would otherwise wait for them.
    if (c0 + kTileChunk < end) {
      const int64_t n_next = std::min(c0 + 2 * kTileChunk, end) - (c0 + kTileChunk);
      prefetch_rows(k, c0 + kTileChunk, n_next);
      prefetch_rows(v, c0 + kTileChunk, n_next);
    }
    const float* vf = rows_f32(v, hdv, j0, nk, vbuf);
    const auto kp0 = static_cast<int32_t>(block_pos0 + j0);
    if (tq.n_real <= kSmallTileRows) {  // decode: keys in the lanes, no padded rows computed
      const int64_t nkp = (nk + kRowAlign - 1) / kRowAlign * kRowAlign;
      ktbuf.resize(static_cast<size_t>(hd * nkp));
      if (k.type == GgmlType::F16 && k.stride == hd) {  // converted as it is transposed
        K.tile_transpose_f16(static_cast<const uint16_t*>(k.data) + j0 * hd, hd, nk, ktbuf.data(),
                             nkp);
      } else {
        K.tile_transpose(rows_f32(k, hd, j0, nk, kbuf), hd, nk, ktbuf.data(), nkp);
      }
      K.tile_scores_t(tq.qt.data(), rows, tq.n_real, hd, ktbuf.data(), nkp, nk, shape.scale,
                      st.data());
    } else {
      K.tile_scores(tq.qt.data(), rows, hd, rows_f32(k, hd, j0, nk, kbuf), nk, shape.scale,
                    st.data());
    }
    // Keys every real row attends (the common case off the diagonal and the window's edge) need
    // no mask; pad rows then hold values nobody reads.
    const bool all = block_pos0 + j1 - 1 <= tq.pos[0] &&
                     block_pos0 + j0 >= tq.lo[static_cast<size_t>(tq.n_real - 1)];
    K.tile_softmax(st.data(), rows, nk, kp0, all ? nullptr : tq.pos.data(), tq.lo.data(), m, s,
                   a.data());
    K.tile_accum(st.data(), rows, nk, kp0, tq.pos.data(), tq.lo.data(), vf, hdv, a.data(),
                 tq.n_real, o);
  }
}

}  // namespace spw::cpu
