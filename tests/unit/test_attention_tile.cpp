// The query-tiled attention kernel (engine/cpu/attention_tile.h) at every SIMD level: against a
// float64 softmax over the stored keys and values (f32, f16, q8_0 rows; GQA groups of 1 to 7
// heads; head sizes with and without a tail past the vector width; causal and sliding spans;
// blocks of 16 and 256 with a partial last one), and its determinism: a query row gives the same
// bits in any tile, and the AVX2 and AVX-512 levels give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/attention_tile.h"
#include "engine/cpu/simd.h"
#include "engine/gguf/ggml_types.h"
#include "tests/support/simd_levels.h"

namespace spw::cpu {
namespace {

// One KV head's keys and values of n_pos positions in blocks of `block` rows, stored in `type`
// (the cache's block layout: a block's rows contiguous), and the same values as stored, in f32.
struct Keys {
  GgmlType type = GgmlType::F32;
  int64_t block = 16, n_pos = 0, hd = 0, hdv = 0;
  std::vector<std::vector<uint8_t>> k, v;  // per block
  std::vector<float> kf, vf;               // [n_pos][hd], [n_pos][hdv] as stored
};

Keys make_keys(GgmlType type, int64_t block, int64_t n_pos, int64_t hd, int64_t hdv,
               uint32_t seed) {
  Keys ks{type, block, n_pos, hd, hdv, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ks.kf.resize(static_cast<size_t>(n_pos * hd));
  ks.vf.resize(static_cast<size_t>(n_pos * hdv));
  for (int64_t b0 = 0; b0 < n_pos; b0 += block) {
    std::vector<float> kb(static_cast<size_t>(block * hd), 0.0f),
        vb(static_cast<size_t>(block * hdv), 0.0f);
    for (int64_t j = 0; j < std::min(block, n_pos - b0); ++j) {
      for (int64_t i = 0; i < hd; ++i) kb[static_cast<size_t>(j * hd + i)] = 2.0f * nd(rng);
      for (int64_t i = 0; i < hdv; ++i) vb[static_cast<size_t>(j * hdv + i)] = nd(rng);
    }
    std::vector<uint8_t> kq(row_size(type, block * hd)), vq(row_size(type, block * hdv));
    quantize_row(type, kb.data(), kq.data(), block * hd);
    quantize_row(type, vb.data(), vq.data(), block * hdv);
    std::vector<float> kd(kb.size()), vd(vb.size());
    dequantize_row(type, kq.data(), kd.data(), block * hd);
    dequantize_row(type, vq.data(), vd.data(), block * hdv);
    for (int64_t j = 0; j < std::min(block, n_pos - b0); ++j) {
      std::copy_n(&kd[static_cast<size_t>(j * hd)], hd, &ks.kf[static_cast<size_t>((b0 + j) * hd)]);
      std::copy_n(&vd[static_cast<size_t>(j * hdv)], hdv,
                  &ks.vf[static_cast<size_t>((b0 + j) * hdv)]);
    }
    ks.k.push_back(std::move(kq));
    ks.v.push_back(std::move(vq));
  }
  return ks;
}

// Queries [pos_first, pos_first + n_tok) of a group of n_rep heads through the tile kernel, in
// tiles of `tile` tokens: out [n_tok][n_rep][hdv].
std::vector<float> tiled(const Keys& ks, const std::vector<float>& q, int64_t n_rep,
                         int64_t pos_first, int64_t n_tok, int64_t span, int64_t tile) {
  const AttnShape shape{n_rep, ks.hd, ks.hdv, static_cast<float>(1.0 / std::sqrt(ks.hd))};
  std::vector<float> out(static_cast<size_t>(n_tok * n_rep * ks.hdv));
  TileQueries tq;
  for (int64_t t0 = 0; t0 < n_tok; t0 += tile) {
    const int64_t nt = std::min(tile, n_tok - t0);
    tile_prepare(shape, &q[static_cast<size_t>(t0 * n_rep * ks.hd)], n_rep * ks.hd, nt,
                 pos_first + t0, span, tq);
    std::vector<float> o(static_cast<size_t>(tq.rows * ks.hdv)), m(static_cast<size_t>(tq.rows)),
        s(static_cast<size_t>(tq.rows));
    tile_state_reset(tq.rows, ks.hdv, o.data(), m.data(), s.data());
    for (size_t b = 0; b < ks.k.size(); ++b) {
      const int64_t p0 = static_cast<int64_t>(b) * ks.block;
      const KvSpan k{ks.k[b].data(), ks.type, ks.hd}, v{ks.v[b].data(), ks.type, ks.hdv};
      tile_attend_block(shape, tq, k, v, p0, std::min(ks.block, ks.n_pos - p0), o.data(), m.data(),
                        s.data());
    }
    for (int64_t i = 0; i < nt * n_rep; ++i) {
      const float inv = s[static_cast<size_t>(i)] > 0 ? 1.0f / s[static_cast<size_t>(i)] : 0.0f;
      for (int64_t d = 0; d < ks.hdv; ++d)
        out[static_cast<size_t>((t0 * n_rep + i) * ks.hdv + d)] =
            o[static_cast<size_t>(i * ks.hdv + d)] * inv;
    }
  }
  return out;
}

// The same in float64 over the stored values: the largest |error| over the largest |output|.
double rel_error(const Keys& ks, const std::vector<float>& q, const std::vector<float>& got,
                 int64_t n_rep, int64_t pos_first, int64_t n_tok, int64_t span) {
  double worst = 0, top = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t p = pos_first + t, lo = span > 0 ? std::max<int64_t>(0, p - span + 1) : 0;
    for (int64_t r = 0; r < n_rep; ++r) {
      const float* qr = &q[static_cast<size_t>((t * n_rep + r) * ks.hd)];
      std::vector<double> w;
      double mx = -INFINITY, z = 0;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < ks.hd; ++i)
          dot += static_cast<double>(qr[i]) * ks.kf[static_cast<size_t>(j * ks.hd + i)];
        w.push_back(dot / std::sqrt(static_cast<double>(ks.hd)));
        mx = std::max(mx, w.back());
      }
      for (double& x : w) z += x = std::exp(x - mx);
      for (int64_t d = 0; d < ks.hdv; ++d) {
        double o = 0;
        for (int64_t j = lo; j <= p; ++j)
          o += w[static_cast<size_t>(j - lo)] / z * ks.vf[static_cast<size_t>(j * ks.hdv + d)];
        const float g = got[static_cast<size_t>((t * n_rep + r) * ks.hdv + d)];
        worst = std::max(worst, std::fabs(o - g));
        top = std::max(top, std::fabs(o));
      }
    }
  }
  return worst / top;
}

std::vector<float> random_q(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n));
  for (float& x : q) x = nd(rng);
  return q;
}

struct Case {
  GgmlType type;
  int64_t block, n_rep, hd, hdv, span;
};

TEST(AttentionTile, MatchesAFloat64SoftmaxAtEveryLevel) {
  const Case cases[] = {
      {GgmlType::F32, 16, 4, 64, 64, 0},    {GgmlType::F16, 16, 1, 64, 40, 0},
      {GgmlType::F16, 256, 7, 128, 128, 0}, {GgmlType::Q8_0, 16, 3, 96, 64, 0},
      {GgmlType::F32, 16, 2, 24, 24, 37},   {GgmlType::F16, 256, 4, 64, 64, 300},
  };
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(simd_level_name(level)) + " " +
                   type_name(static_cast<uint32_t>(c.type)) + " block " + std::to_string(c.block) +
                   " n_rep " + std::to_string(c.n_rep) + " hd " + std::to_string(c.hd) + "/" +
                   std::to_string(c.hdv) + " span " + std::to_string(c.span));
      const int64_t n_pos = 2 * c.block + 70;  // a partial last block
      const Keys ks = make_keys(c.type, c.block, n_pos, c.hd, c.hdv, 5);
      // The last 90 positions as one ubatch, in tiles of the kernel's size.
      const int64_t n_tok = 90, pos_first = n_pos - n_tok;
      const std::vector<float> q = random_q(n_tok * c.n_rep * c.hd, 9);
      const std::vector<float> out =
          tiled(ks, q, c.n_rep, pos_first, n_tok, c.span, tile_tokens(c.n_rep));
      EXPECT_LE(rel_error(ks, q, out, c.n_rep, pos_first, n_tok, c.span), 2e-6);
      // One token per tile: decode's small tiles (keys in the lanes), the same bits.
      EXPECT_EQ(tiled(ks, q, c.n_rep, pos_first, n_tok, c.span, 1), out);
    }
  }
}

// A row's bits depend on nothing but its own query, position and keys: tiles of 1 and 2 (small
// tiles, keys in the lanes), 5 and the kernel's size, starting anywhere, give identical outputs.
TEST(AttentionTile, ARowGivesTheSameBitsInAnyTile) {
  for (SimdLevel level : test::supported_simd_levels()) {
    test::SimdLevelScope scope(level);
    for (const int64_t span : {int64_t{0}, int64_t{50}}) {
      SCOPED_TRACE(std::string(simd_level_name(level)) + " span " + std::to_string(span));
      const int64_t n_rep = 4, block = 256, n_pos = 700, n_tok = 61, pos_first = n_pos - n_tok;
      const Keys ks = make_keys(GgmlType::F16, block, n_pos, 64, 64, 3);
      const std::vector<float> q = random_q(n_tok * n_rep * 64, 4);
      const std::vector<float> a = tiled(ks, q, n_rep, pos_first, n_tok, span, tile_tokens(n_rep));
      EXPECT_EQ(tiled(ks, q, n_rep, pos_first, n_tok, span, 1), a);
      EXPECT_EQ(tiled(ks, q, n_rep, pos_first, n_tok, span, 2), a);
      EXPECT_EQ(tiled(ks, q, n_rep, pos_first, n_tok, span, 5), a);
      // The last 30 queries on their own.
      const std::vector<float> tail(q.begin() + 31 * n_rep * 64, q.end());
      const std::vector<float> b = tiled(ks, tail, n_rep, pos_first + 31, 30, span, 7);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin() + 31 * n_rep * 64));
    }
  }
}

// The AVX2 and AVX-512 kernels run the same operations lane for lane (the same exp): same bits.
TEST(AttentionTile, Avx2AndAvx512GiveTheSameBits) {
  if (!simd_level_supported(SimdLevel::Avx2) || !simd_level_supported(SimdLevel::Avx512))
    GTEST_SKIP() << "needs a CPU with both AVX2 and AVX-512";
  const Keys ks = make_keys(GgmlType::F16, 256, 900, 128, 128, 8);
  const std::vector<float> q = random_q(100 * 4 * 128, 2);
  std::vector<float> a, b;
  {
    test::SimdLevelScope s(SimdLevel::Avx2);
    a = tiled(ks, q, 4, 800, 100, 0, tile_tokens(4));
  }
  {
    test::SimdLevelScope s(SimdLevel::Avx512);
    b = tiled(ks, q, 4, 800, 100, 0, tile_tokens(4));
  }
  EXPECT_EQ(a, b);
}

// A tile whose rows attend nothing in a block (a sliding window past it) leaves the state as it
// was; a row that never attends anything ends with s = 0 (output 0), never NaN.
TEST(AttentionTile, RowsWithNothingToAttendStayEmpty) {
  const Keys ks = make_keys(GgmlType::F32, 16, 64, 32, 32, 1);
  const AttnShape shape{2, 32, 32, 0.2f};
  const std::vector<float> q = random_q(3 * 2 * 32, 6);
  TileQueries tq;
  tile_prepare(shape, q.data(), 2 * 32, 3, 60, 4, tq);  // positions 60..62 attend [57, 62]
  EXPECT_EQ(tq.rows, 16);
  std::vector<float> o(static_cast<size_t>(tq.rows * 32)), m(16), s(16);
  tile_state_reset(tq.rows, 32, o.data(), m.data(), s.data());
  const KvSpan k0{ks.k[0].data(), GgmlType::F32, 32}, v0{ks.v[0].data(), GgmlType::F32, 32};
  tile_attend_block(shape, tq, k0, v0, 0, 16, o.data(), m.data(), s.data());
  for (int64_t i = 0; i < tq.rows; ++i) {
    EXPECT_EQ(s[static_cast<size_t>(i)], 0.0f);
    EXPECT_EQ(m[static_cast<size_t>(i)], -INFINITY);
  }
  for (float x : o) EXPECT_EQ(x, 0.0f);
  const KvSpan k3{ks.k[3].data(), GgmlType::F32, 32}, v3{ks.v[3].data(), GgmlType::F32, 32};
  tile_attend_block(shape, tq, k3, v3, 48, 16, o.data(), m.data(), s.data());
  for (int64_t i = 0; i < 6; ++i) EXPECT_GT(s[static_cast<size_t>(i)], 0.0f);
  for (int64_t i = 6; i < tq.rows; ++i)
    EXPECT_EQ(s[static_cast<size_t>(i)], 0.0f) << "masked pad row";
  for (float x : o) EXPECT_FALSE(std::isnan(x));
}

}  // namespace
}  // namespace spw::cpu
