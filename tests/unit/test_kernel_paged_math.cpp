// The paged-KV arithmetic of the CUDA window (kernels/paged_math.h), compiled as plain C++:
// the q8_0 block the device's KV-write kernel produces is bit-identical to the CPU cache's
// conversion (so a GPU run and a CPU run hold the same KV bytes), element loads agree with
// dequantize_row, and the row addresses the kernels compute are those of the KvCache layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/gguf/ggml_types.h"
#include "engine/kv/kv_cache.h"
#include "kernels/paged_math.h"

namespace spw::kernels {
namespace {

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(KernelPagedMath, Q8_0BlockBitIdenticalToTheCpuCache) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const float scale = std::ldexp(1.0f, trial % 40 - 20);
    std::vector<float> x = random_row(rng, kQK8_0, scale);
    if (trial % 7 == 0) x.assign(kQK8_0, 0.0f);  // all zero: d = 0, id = 0
    if (trial % 11 == 0) {                       // exact halves after scaling: 127 * k / 2
      for (int j = 0; j < kQK8_0; ++j)
        x[static_cast<size_t>(j)] = 0.5f * static_cast<float>(j - 16);
      x[0] = 127.0f;  // d = 1, x * id = x
    }
    uint8_t got[sizeof(BlockQ8_0)], cpu[sizeof(BlockQ8_0)], ref[sizeof(BlockQ8_0)];
    quantize_q8_0_block(x.data(), got);
    cpu::f32_to_q8_0_row(x.data(), cpu, kQK8_0);
    quantize_row(GgmlType::Q8_0, x.data(), ref, kQK8_0);
    ASSERT_EQ(std::memcmp(got, cpu, sizeof got), 0) << "trial " << trial;
    ASSERT_EQ(std::memcmp(got, ref, sizeof got), 0) << "trial " << trial;
  }
}

TEST(KernelPagedMath, LoadElemAgreesWithDequantizeRow) {
  std::mt19937 rng(5);
  constexpr int64_t n = 96;
  const std::vector<float> x = random_row(rng, n, 3.0f);
  for (const GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    std::vector<uint8_t> row(row_size(t, n));
    quantize_row(t, x.data(), row.data(), n);
    std::vector<float> want(static_cast<size_t>(n));
    dequantize_row(t, row.data(), want.data(), n);
    for (int d = 0; d < n; ++d) {
      float got = 0.0f;
      switch (t) {
        case GgmlType::F32:
          got = load_elem<GgmlType::F32>(row.data(), d);
          break;
        case GgmlType::F16:
          got = load_elem<GgmlType::F16>(row.data(), d);
          break;
        default:
          got = load_elem<GgmlType::Q8_0>(row.data(), d);
          break;
      }
      ASSERT_EQ(got, want[static_cast<size_t>(d)])
          << type_name(static_cast<uint32_t>(t)) << " " << d;
    }
  }
}

// A KvCache with its window in RAM: the addresses paged_k_row / paged_v_row compute from a
// block's slot and the PagedLayer the CUDA session builds read back exactly what store() wrote.
TEST(KernelPagedMath, RowAddressesMatchTheCacheLayout) {
  for (const GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::F32}) {
    kv::KvCacheConfig c;
    c.n_layer = 3;
    c.n_kv_heads = 2;
    c.head_dim = 64;
    c.head_dim_v = 32;
    c.n_ctx = 100;
    c.type_k = c.type_v = t;
    c.block_size = 16;
    c.n_sinks = 0;
    c.window_tokens = 100;
    auto made = kv::KvCache::create(c);
    ASSERT_TRUE(made.ok()) << made.error().message;
    kv::KvCache& cache = **made;
    std::mt19937 rng(3);
    const int64_t n_tok = 37;
    ASSERT_TRUE(cache.reserve(n_tok).ok());
    std::vector<std::vector<float>> ks, vs;  // [layer * n_tok + pos]
    for (int64_t l = 0; l < c.n_layer; ++l) {
      for (int64_t p = 0; p < n_tok; ++p) {
        ks.push_back(random_row(rng, c.n_kv_heads * c.head_dim, 1.0f));
        vs.push_back(random_row(rng, c.n_kv_heads * c.head_dim_v, 1.0f));
        cache.store(l, p, ks.back().data(), vs.back().data());
      }
    }
    cache.commit(n_tok);
    const int64_t row_k = static_cast<int64_t>(row_size(t, c.head_dim));
    const int64_t row_v = static_cast<int64_t>(row_size(t, c.head_dim_v));
    const int64_t layer_k_bytes = c.n_kv_heads * c.block_size * row_k;
    const int64_t layer_bytes = layer_k_bytes + c.n_kv_heads * c.block_size * row_v;
    ASSERT_EQ(cache.block_bytes(), c.n_layer * layer_bytes);
    std::vector<kv::BlockView> views;
    std::vector<float> want_k(static_cast<size_t>(c.head_dim)),
        want_v(static_cast<size_t>(c.head_dim_v));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      PagedLayer L;
      L.k_off = l * layer_bytes;
      L.v_off = l * layer_bytes + layer_k_bytes;
      L.row_k = row_k;
      L.row_v = row_v;
      L.block_size = static_cast<int32_t>(c.block_size);
      L.type_k = L.type_v = t;
      cache.blocks(l, n_tok, views);
      for (const kv::BlockView& bv : views) {
        const uint8_t* slot = bv.k - l * layer_bytes;  // the slot of the block
        for (int64_t r = 0; r < bv.n_tokens; ++r) {
          const int64_t pos = bv.pos0 + r;
          for (int g = 0; g < c.n_kv_heads; ++g) {
            const auto& k = ks[static_cast<size_t>(l * n_tok + pos)];
            const auto& v = vs[static_cast<size_t>(l * n_tok + pos)];
            std::vector<uint8_t> enc_k(static_cast<size_t>(row_k)),
                enc_v(static_cast<size_t>(row_v));
            quantize_row(t, k.data() + g * c.head_dim, enc_k.data(), c.head_dim);
            quantize_row(t, v.data() + g * c.head_dim_v, enc_v.data(), c.head_dim_v);
            ASSERT_EQ(std::memcmp(paged_k_row(slot, L, g, static_cast<int>(r)), enc_k.data(),
                                  static_cast<size_t>(row_k)),
                      0)
                << "layer " << l << " pos " << pos << " head " << g;
            ASSERT_EQ(std::memcmp(paged_v_row(slot, L, g, static_cast<int>(r)), enc_v.data(),
                                  static_cast<size_t>(row_v)),
                      0)
                << "layer " << l << " pos " << pos << " head " << g;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace spw::kernels
