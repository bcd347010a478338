// attn_bench: the query-tiled prefill attention (engine/cpu/attention_tile.h) alone, on one
// thread: one KV head with f16 K/V of 256-row blocks, a causal prefill of N tokens split into
// tiles of tile_tokens(n_rep) queries, against the FP32 FMA probe. A tool, not a test.
//
//   attn_bench [--n 4096] [--n-rep 4] [--head-dim 64] [--reps 3]
//
// GFLOP/s counts 4 x head_dim x (keys each query row attends) (Q.K and P.V, 2 per
// multiply-add), as `bench`'s pp_attention_gflops_per_s does.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/common/fp16.h"
#include "engine/cpu/attention_tile.h"
#include "engine/cpu/compute_probe.h"

int main(int argc, char** argv) {
  using namespace spw::cpu;
  int64_t n = 4096, n_rep = 4, hd = 64, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::stoll(argv[i + 1]);
    if (a == "--n") {
      n = v;
    } else if (a == "--n-rep") {
      n_rep = v;
    } else if (a == "--head-dim") {
      hd = v;
    } else if (a == "--reps") {
      reps = v;
    } else {
      std::fprintf(stderr, "usage: attn_bench [--n N] [--n-rep R] [--head-dim D] [--reps K]\n");
      return 2;
    }
  }
  constexpr int64_t kBlock = 256;
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<uint16_t> K(static_cast<size_t>(n * hd)), V(K.size());
  for (auto& x : K) x = spw::fp32_to_fp16(g(rng));
  for (auto& x : V) x = spw::fp32_to_fp16(g(rng));
  std::vector<float> Q(static_cast<size_t>(n * n_rep * hd));
  for (auto& x : Q) x = g(rng);
  const AttnShape shape{n_rep, hd, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const int64_t tt = tile_tokens(n_rep);
  TileQueries tq;
  std::vector<float> o, m, s;
  double best = 1e30, sink = 0.0;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t p0 = 0; p0 < n; p0 += tt) {
      const int64_t nt = std::min(tt, n - p0);
      tile_prepare(shape, Q.data() + p0 * n_rep * hd, n_rep * hd, nt, p0, 0, tq);
      o.resize(static_cast<size_t>(tq.rows * hd));
      m.resize(static_cast<size_t>(tq.rows));
      s.resize(static_cast<size_t>(tq.rows));
      tile_state_reset(tq.rows, hd, o.data(), m.data(), s.data());
      for (int64_t b0 = 0; b0 <= p0 + nt - 1; b0 += kBlock) {
        const int64_t nb = std::min(kBlock, n - b0);
        const KvSpan k{K.data() + b0 * hd, spw::GgmlType::F16, hd},
            v{V.data() + b0 * hd, spw::GgmlType::F16, hd};
        tile_attend_block(shape, tq, k, v, b0, nb, o.data(), m.data(), s.data());
      }
      sink += o[0] / s[0];
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // Each query head at position p attends p + 1 keys.
  const double flops = 4.0 * static_cast<double>(hd) * static_cast<double>(n_rep) *
                       (static_cast<double>(n) * static_cast<double>(n + 1) / 2.0);
  const double probe = probe_fp32_gflops_per_s(1, 0.2);
  std::printf(
      "n %lld n_rep %lld head_dim %lld tile %lld tokens: best %.3f s, %.1f GFLOP/s, FP32 "
      "probe %.1f: %.0f %% (check %.3g)\n",
      static_cast<long long>(n), static_cast<long long>(n_rep), static_cast<long long>(hd),
      static_cast<long long>(tt), best, flops / best / 1e9, probe,
      100.0 * flops / best / 1e9 / probe, sink);
  return 0;
}
