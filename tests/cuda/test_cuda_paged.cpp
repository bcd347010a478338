// The paged-KV kernels of the GPU window (kernels/paged_attention.cu, kv_store.cu) against the
// CPU: the KV-write kernel produces the CPU cache's bytes exactly (f32, f16, q8_0); partial
// attention over a block table (blocks in any order, a gap, a partial last block, GQA, a layer
// offset), split across CTAs for decode and tiled for prefill, combined with a CPU partial and a
// staged batch by the log-sum-exp rule, equals a float64 softmax over all the blocks. Every test
// skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/gguf/ggml_types.h"
#include "kernels/launch.h"
#include "tests/cuda/cuda_test.h"

namespace spw::kernels {
namespace {

using test::DeviceBuffer;

constexpr int kLayers = 2, kBs = 16, kKv = 2, kHead = 4;  // GQA: 2 query heads per KV head

struct Pool {
  int hd, hdv;
  GgmlType type;
  int64_t row_k, row_v, layer_k, layer, slot;  // bytes
  std::vector<uint8_t> host;                   // [n_slots][slot]
  DeviceBuffer<uint8_t> dev;
  // The f32 values each row holds after rounding to the type: [slot][layer][head][row][d].
  std::vector<float> k_vals, v_vals;
  int n_slots;

  Pool(int n_slots_, int hd_, int hdv_, GgmlType t, uint32_t seed)
      : hd(hd_), hdv(hdv_), type(t), n_slots(n_slots_) {
    row_k = static_cast<int64_t>(row_size(t, hd));
    row_v = static_cast<int64_t>(row_size(t, hdv));
    layer_k = kKv * kBs * row_k;
    layer = layer_k + kKv * kBs * row_v;
    slot = kLayers * layer;
    host.assign(static_cast<size_t>(n_slots * slot), 0);
    k_vals.resize(static_cast<size_t>(n_slots) * kLayers * kKv * kBs * hd);
    v_vals.resize(static_cast<size_t>(n_slots) * kLayers * kKv * kBs * hdv);
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(std::max(hd, hdv)));
    for (int s = 0; s < n_slots; ++s)
      for (int l = 0; l < kLayers; ++l)
        for (int g = 0; g < kKv; ++g)
          for (int r = 0; r < kBs; ++r) {
            for (auto& v : x) v = dist(rng);
            uint8_t* kr = host.data() + s * slot + l * layer + (g * kBs + r) * row_k;
            quantize_row(t, x.data(), kr, hd);
            dequantize_row(
                t, kr, &k_vals[static_cast<size_t>((((s * kLayers + l) * kKv + g) * kBs + r) * hd)],
                hd);
            for (auto& v : x) v = dist(rng);
            uint8_t* vr = host.data() + s * slot + l * layer + layer_k + (g * kBs + r) * row_v;
            quantize_row(t, x.data(), vr, hdv);
            dequantize_row(
                t, vr,
                &v_vals[static_cast<size_t>((((s * kLayers + l) * kKv + g) * kBs + r) * hdv)], hdv);
          }
    EXPECT_TRUE(dev.upload(host));
  }
  PagedLayer layer_of(int l) const {
    PagedLayer L;
    L.k_off = l * layer;
    L.v_off = l * layer + layer_k;
    L.row_k = row_k;
    L.row_v = row_v;
    L.block_size = kBs;
    L.type_k = L.type_v = type;
    return L;
  }
  const float* k_at(int s, int l, int g, int r) const {
    return &k_vals[static_cast<size_t>((((s * kLayers + l) * kKv + g) * kBs + r) * hd)];
  }
  const float* v_at(int s, int l, int g, int r) const {
    return &v_vals[static_cast<size_t>((((s * kLayers + l) * kKv + g) * kBs + r) * hdv)];
  }
};

struct Blk {
  int slot, pos0, n_rows;
};

// Blocks of one pool.
struct PoolBlocks {
  const Pool* pool;
  const std::vector<Blk>* blocks;
};

// float64 causal softmax attention of one query (position qpos) for head h over the blocks of
// every part (all pools share hd and hdv); span > 0: only positions > qpos - span.
std::vector<double> reference(const std::vector<PoolBlocks>& parts, int l, const float* q, int h,
                              int qpos, double scale, int span = 0) {
  const int g = h / (kHead / kKv);
  const int hd = parts.front().pool->hd, hdv = parts.front().pool->hdv;
  std::vector<double> sc;
  std::vector<const float*> vs;
  for (const PoolBlocks& part : parts)
    for (const Blk& b : *part.blocks)
      for (int r = 0; r < b.n_rows; ++r) {
        if (b.pos0 + r > qpos || (span > 0 && b.pos0 + r <= qpos - span)) continue;
        const float* k = part.pool->k_at(b.slot, l, g, r);
        double d = 0;
        for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * k[i];
        sc.push_back(d * scale);
        vs.push_back(part.pool->v_at(b.slot, l, g, r));
      }
  std::vector<double> o(static_cast<size_t>(hdv), 0.0);
  if (sc.empty()) return o;
  double m = -INFINITY, sum = 0;
  for (double x : sc) m = std::max(m, x);
  for (size_t j = 0; j < sc.size(); ++j) {
    const double w = std::exp(sc[j] - m);
    sum += w;
    for (int i = 0; i < hdv; ++i) o[static_cast<size_t>(i)] += w * vs[j][i];
  }
  for (double& x : o) x /= sum;
  return o;
}

std::vector<PagedBlock> table(const Pool& p, const std::vector<Blk>& blocks) {
  std::vector<PagedBlock> t;
  for (const Blk& b : blocks)
    t.push_back({const_cast<uint8_t*>(p.dev.get()) + b.slot * p.slot, b.pos0, b.n_rows});
  return t;
}

class PagedAttention : public ::testing::TestWithParam<GgmlType> {};

// GPU blocks: the sink block, two recent blocks out of order and the partial last block; CPU
// blocks (the cold ones, between them): attended by cpu::attn_partial and merged on the GPU.
TEST_P(PagedAttention, DecodeSplitGpuAndCpuEqualsOneSoftmax) {
  SPW_SKIP_WITHOUT_CUDA();
  const GgmlType type = GetParam();
  for (const int hd : {32, 64, 128, 256}) {
    Pool p(8, hd, hd, type, 3);
    const std::vector<Blk> gpu = {
        {0, 0, kBs}, {6, 5 * kBs, kBs}, {5, 4 * kBs, kBs}, {7, 6 * kBs, 9}};
    const std::vector<Blk> cold = {{1, 1 * kBs, kBs}, {2, 2 * kBs, kBs}, {3, 3 * kBs, kBs}};
    std::vector<Blk> all = gpu;
    all.insert(all.end(), cold.begin(), cold.end());
    const int l = 1;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (const int n_tok : {1, 3}) {
      const int pos0 = 6 * kBs + 9 - n_tok;  // the last n_tok positions held
      std::mt19937 rng(9);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> q(static_cast<size_t>(n_tok * kHead * hd));
      for (float& x : q) x = dist(rng);
      DeviceBuffer<float> qd;
      ASSERT_TRUE(qd.upload(q));
      DeviceBuffer<PagedBlock> td;
      ASSERT_TRUE(td.upload(table(p, gpu)));
      for (const int64_t n_split :
           {int64_t{1}, paged_attention_splits(n_tok, 4, kHead, 132), int64_t{4}}) {
        const int64_t parts = n_split + 1;
        DeviceBuffer<float> po(static_cast<size_t>(parts * n_tok * kHead * hd));
        DeviceBuffer<float> pm(static_cast<size_t>(parts * n_tok * kHead * 2));
        ASSERT_TRUE(po.poison() && pm.poison());
        SPW_ASSERT_CUDA(launch_paged_attention(qd.get(), td.get(), 4, p.layer_of(l), n_tok, pos0,
                                               kHead, kKv, hd, hd, static_cast<float>(scale), 0,
                                               n_split, po.get(), pm.get(), nullptr));
        // The CPU's partial over the cold blocks, in part n_split.
        std::vector<float> co(static_cast<size_t>(n_tok * kHead * hd)),
            cm(static_cast<size_t>(n_tok * kHead * 2));
        for (int t = 0; t < n_tok; ++t)
          for (int h = 0; h < kHead; ++h) {
            const int g = h / (kHead / kKv);
            cpu::AttnPartial acc, tmp;
            bool first = true;
            for (const Blk& b : cold) {
              const uint8_t* base = p.host.data() + b.slot * p.slot;
              const cpu::KvSpan ks{base + l * p.layer + g * kBs * p.row_k, type, hd};
              const cpu::KvSpan vs{base + l * p.layer + p.layer_k + g * kBs * p.row_v, type, hd};
              const cpu::AttnShape shape{1, hd, hd, static_cast<float>(scale)};
              cpu::attn_partial(shape, &q[static_cast<size_t>((t * kHead + h) * hd)], ks, vs,
                                b.n_rows, first ? &acc : &tmp);
              if (!first) cpu::attn_merge(acc, tmp);
              first = false;
            }
            std::memcpy(&co[static_cast<size_t>((t * kHead + h) * hd)], acc.o.data(),
                        static_cast<size_t>(hd) * 4);
            cm[static_cast<size_t>(2 * (t * kHead + h))] = acc.m;
            cm[static_cast<size_t>(2 * (t * kHead + h) + 1)] = acc.s;
          }
        SPW_ASSERT_CUDA(cudaMemcpy(po.get() + n_split * n_tok * kHead * hd, co.data(),
                                   co.size() * 4, cudaMemcpyHostToDevice));
        SPW_ASSERT_CUDA(cudaMemcpy(pm.get() + n_split * n_tok * kHead * 2, cm.data(), cm.size() * 4,
                                   cudaMemcpyHostToDevice));
        DeviceBuffer<float> out(static_cast<size_t>(n_tok * kHead * hd));
        SPW_ASSERT_CUDA(launch_attn_combine(po.get(), pm.get(), parts, n_tok, kHead, hd, out.get(),
                                            nullptr, nullptr));
        const std::vector<float> got = out.download();
        ASSERT_EQ(got.size(), static_cast<size_t>(n_tok * kHead * hd));
        double worst = 0;
        for (int t = 0; t < n_tok; ++t)
          for (int h = 0; h < kHead; ++h) {
            const auto ref = reference(
                {{&p, &all}}, l, &q[static_cast<size_t>((t * kHead + h) * hd)], h, pos0 + t, scale);
            for (int i = 0; i < hd; ++i)
              worst = std::max(worst, std::fabs(got[static_cast<size_t>((t * kHead + h) * hd + i)] -
                                                ref[static_cast<size_t>(i)]));
          }
        EXPECT_LE(worst, 2e-5) << type_name(static_cast<uint32_t>(type)) << " hd " << hd
                               << " n_tok " << n_tok << " splits " << n_split;
      }
    }
  }
}

// Prefill: 37 queries (the tile kernel) over the window blocks, plus a batch of "cold" blocks
// staged into another buffer and merged into part 0, then finalised.
TEST_P(PagedAttention, PrefillWindowPlusStagedBatchEqualsOneSoftmax) {
  SPW_SKIP_WITHOUT_CUDA();
  const GgmlType type = GetParam();
  for (const int hd : {64, 128}) {
    Pool p(8, hd, hd, type, 4);
    Pool staged(3, hd, hd, type, 5);
    const int n_tok = 37, pos0 = 3 * kBs + 2;  // queries span blocks 3..5
    const std::vector<Blk> win = {
        {0, 0, kBs}, {4, 3 * kBs, kBs}, {5, 4 * kBs, kBs}, {6, 5 * kBs, 7}};
    const std::vector<Blk> cold = {{0, 1 * kBs, kBs}, {1, 2 * kBs, kBs}};  // in `staged`
    const int l = 0;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::mt19937 rng(2);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(n_tok * kHead * hd));
    for (float& x : q) x = dist(rng);
    DeviceBuffer<float> qd;
    ASSERT_TRUE(qd.upload(q));
    DeviceBuffer<PagedBlock> tw, tc;
    ASSERT_TRUE(tw.upload(table(p, win)) && tc.upload(table(staged, cold)));
    DeviceBuffer<float> po(static_cast<size_t>(2 * n_tok * kHead * hd)),
        pm(static_cast<size_t>(2 * n_tok * kHead * 2));
    const float sc = static_cast<float>(scale);
    SPW_ASSERT_CUDA(launch_paged_attention(qd.get(), tw.get(), 4, p.layer_of(l), n_tok, pos0, kHead,
                                           kKv, hd, hd, sc, 0, 1, po.get(), pm.get(), nullptr));
    SPW_ASSERT_CUDA(launch_paged_attention(
        qd.get(), tc.get(), 2, staged.layer_of(l), n_tok, pos0, kHead, kKv, hd, hd, sc, 0, 1,
        po.get() + n_tok * kHead * hd, pm.get() + n_tok * kHead * 2, nullptr));
    SPW_ASSERT_CUDA(
        launch_attn_combine(po.get(), pm.get(), 2, n_tok, kHead, hd, po.get(), pm.get(), nullptr));
    DeviceBuffer<float> out(static_cast<size_t>(n_tok * kHead * hd));
    SPW_ASSERT_CUDA(
        launch_attn_combine(po.get(), pm.get(), 1, n_tok, kHead, hd, out.get(), nullptr, nullptr));
    const std::vector<float> got = out.download();
    ASSERT_EQ(got.size(), static_cast<size_t>(n_tok * kHead * hd));
    double worst = 0;
    for (int t = 0; t < n_tok; ++t)
      for (int h = 0; h < kHead; ++h) {
        // Reference over both pools: window blocks from p, cold from staged.
        const auto ref =
            reference({{&p, &win}, {&staged, &cold}}, l,
                      &q[static_cast<size_t>((t * kHead + h) * hd)], h, pos0 + t, scale);
        for (int i = 0; i < hd; ++i)
          worst = std::max(worst, std::fabs(got[static_cast<size_t>((t * kHead + h) * hd + i)] -
                                            ref[static_cast<size_t>(i)]));
      }
    EXPECT_LE(worst, 2e-5) << type_name(static_cast<uint32_t>(type)) << " hd " << hd;
  }
}

// A sliding-window layer's lower bound: keys at positions <= q - span are masked, in the decode
// kernel (split or not) and the prefill tile kernel, with the bound inside a block, on a block
// boundary and beyond every block of a split (an all-masked split gives the empty partial).
TEST_P(PagedAttention, SpanMasksKeysBelowTheWindow) {
  SPW_SKIP_WITHOUT_CUDA();
  const GgmlType type = GetParam();
  const int hd = 64;
  Pool p(8, hd, hd, type, 11);
  const std::vector<Blk> blocks = {{2, 0, kBs},       {0, kBs, kBs},     {3, 2 * kBs, kBs},
                                   {1, 3 * kBs, kBs}, {5, 4 * kBs, kBs}, {4, 5 * kBs, 10}};
  const int l = 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  DeviceBuffer<PagedBlock> td;
  ASSERT_TRUE(td.upload(table(p, blocks)));
  for (const int span : {1, 7, 16, 23, 40}) {
    for (const int n_tok : {1, 3, 20}) {
      const int pos0 = 5 * kBs + 10 - n_tok;
      std::mt19937 rng(static_cast<uint32_t>(span * 100 + n_tok));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> q(static_cast<size_t>(n_tok * kHead * hd));
      for (float& x : q) x = dist(rng);
      DeviceBuffer<float> qd;
      ASSERT_TRUE(qd.upload(q));
      const int64_t n_split = paged_attention_splits(n_tok, 6, kHead, 132);
      DeviceBuffer<float> po(static_cast<size_t>(n_split * n_tok * kHead * hd));
      DeviceBuffer<float> pm(static_cast<size_t>(n_split * n_tok * kHead * 2));
      SPW_ASSERT_CUDA(launch_paged_attention(qd.get(), td.get(), 6, p.layer_of(l), n_tok, pos0,
                                             kHead, kKv, hd, hd, static_cast<float>(scale), span,
                                             n_split, po.get(), pm.get(), nullptr));
      DeviceBuffer<float> out(static_cast<size_t>(n_tok * kHead * hd));
      SPW_ASSERT_CUDA(launch_attn_combine(po.get(), pm.get(), n_split, n_tok, kHead, hd, out.get(),
                                          nullptr, nullptr));
      const std::vector<float> got = out.download();
      double worst = 0;
      for (int t = 0; t < n_tok; ++t)
        for (int h = 0; h < kHead; ++h) {
          const auto ref =
              reference({{&p, &blocks}}, l, &q[static_cast<size_t>((t * kHead + h) * hd)], h,
                        pos0 + t, scale, span);
          for (int i = 0; i < hd; ++i)
            worst = std::max(worst, std::fabs(got[static_cast<size_t>((t * kHead + h) * hd + i)] -
                                              ref[static_cast<size_t>(i)]));
        }
      EXPECT_LE(worst, 2e-5) << type_name(static_cast<uint32_t>(type)) << " span " << span
                             << " n_tok " << n_tok;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, PagedAttention,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0),
                         [](const auto& info) {
                           return std::string(type_name(static_cast<uint32_t>(info.param)));
                         });

// The KV-write kernel: rows of positions [pos0, pos0 + n) land in their blocks' slots with the
// bytes the CPU cache's conversion gives (quantize_row), in every type; other bytes untouched.
TEST(PagedKvStore, BytesEqualTheCpuCache) {
  SPW_SKIP_WITHOUT_CUDA();
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    const int hd = 64, n_tok = 21, pos0 = 2 * kBs + 11;  // blocks 2, 3, 4
    Pool p(4, hd, hd, type, 6);                          // slots 3, 1, 0 hold blocks 2, 3, 4
    const std::vector<Blk> blocks = {{3, 2 * kBs, kBs}, {1, 3 * kBs, kBs}, {0, 4 * kBs, 0}};
    DeviceBuffer<PagedBlock> td;
    ASSERT_TRUE(td.upload(table(p, blocks)));
    std::mt19937 rng(8);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> src(static_cast<size_t>(n_tok * kKv * hd));
    for (float& x : src) x = dist(rng);
    DeviceBuffer<float> sd;
    ASSERT_TRUE(sd.upload(src));
    const int l = 1;
    const PagedLayer L = p.layer_of(l);
    SPW_ASSERT_CUDA(launch_kv_store_paged(sd.get(), type, hd, kKv, td.get(), 2, kBs, L.v_off, pos0,
                                          n_tok, nullptr));
    const std::vector<uint8_t> got = p.dev.download();
    ASSERT_EQ(got.size(), p.host.size());
    std::vector<uint8_t> want = p.host;
    for (int t = 0; t < n_tok; ++t) {
      const int pos = pos0 + t, b = pos / kBs - 2, r = pos % kBs;
      for (int g = 0; g < kKv; ++g) {
        uint8_t* row = want.data() + blocks[static_cast<size_t>(b)].slot * p.slot + L.v_off +
                       (g * kBs + r) * p.row_v;
        quantize_row(type, &src[static_cast<size_t>((t * kKv + g) * hd)], row, hd);
      }
    }
    size_t first_diff = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i]) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, got.size()) << type_name(static_cast<uint32_t>(type)) << ": byte "
                                      << first_diff << " of slot " << first_diff / p.slot;
  }
}

TEST(PagedKvStore, BadArgumentsLaunchNothing) {
  SPW_SKIP_WITHOUT_CUDA();
  PagedBlock* none = nullptr;
  float* f = nullptr;
  // first_block must be pos0's block; q8_0 rows need multiples of 32; unsupported type.
  EXPECT_EQ(launch_kv_store_paged(f, GgmlType::F16, 64, 2, none, 1, 16, 0, 0, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_kv_store_paged(f, GgmlType::Q8_0, 48, 2, none, 0, 16, 0, 0, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_kv_store_paged(f, GgmlType::Q4_0, 64, 2, none, 0, 16, 0, 0, 4, nullptr),
            cudaErrorInvalidValue);
  // Prefill (>= 8 queries) takes one split only; K and V types must match.
  PagedLayer L;
  L.block_size = 16;
  L.type_k = GgmlType::F16;
  L.type_v = GgmlType::F16;
  EXPECT_EQ(launch_paged_attention(f, none, 0, L, 8, 0, 4, 2, 64, 64, 1.0f, 0, 2, f, f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_paged_attention(f, none, 0, L, 1, 0, 4, 2, 64, 64, 1.0f, -1, 1, f, f, nullptr),
            cudaErrorInvalidValue);  // a negative span
  L.type_v = GgmlType::F32;
  EXPECT_EQ(launch_paged_attention(f, none, 0, L, 1, 0, 4, 2, 64, 64, 1.0f, 0, 1, f, f, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace spw::kernels
