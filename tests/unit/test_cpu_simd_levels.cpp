// SIMD level selection (engine/cpu/simd.h) and the edges of the integer dot products at every
// level this CPU has: the levels offered are exactly the processor's (x86-64: AVX2 / AVX-512;
// AArch64: NEON, and NEON dot product where the kernel reports HWCAP_ASIMDDP), and blocks of
// extreme codes (Q8_0's -128, Q4_0's -8, Q6_K's -32 with scales of -128 and 127, Q4_K's 15
// with 63 scales and mins, IQ4_XS's -127 with sub-block scales of -32 and 31) give the exact
// integer results, which all fit a float's 24 bits.
// The broader per-type comparisons against float64 run over the same levels in
// test_cpu_kernels.cpp.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf/ggml_types.h"
#include "tests/support/simd_levels.h"

namespace spw::cpu {
namespace {

TEST(CpuSimd, LevelsOfferedAreThisProcessorsOnly) {
  EXPECT_TRUE(simd_level_supported(SimdLevel::Scalar));
#if defined(__x86_64__)
  EXPECT_FALSE(simd_level_supported(SimdLevel::Neon));
  EXPECT_FALSE(simd_level_supported(SimdLevel::NeonDotprod));
#elif defined(__aarch64__)
  EXPECT_FALSE(simd_level_supported(SimdLevel::Avx2));
  EXPECT_FALSE(simd_level_supported(SimdLevel::Avx512));
  EXPECT_TRUE(simd_level_supported(SimdLevel::Neon));  // Advanced SIMD is in every ARMv8-A
#if defined(__linux__)
  // HWCAP_ASIMDDP: SDOT / UDOT (qemu-aarch64 -cpu max has them, -cpu cortex-a53 has not).
  const bool dotprod = (getauxval(AT_HWCAP) & (1UL << 20)) != 0;
  EXPECT_EQ(dotprod, simd_level_supported(SimdLevel::NeonDotprod));
  EXPECT_EQ(dotprod ? SimdLevel::NeonDotprod : SimdLevel::Neon, detected_simd_level());
#endif
#else
  EXPECT_EQ(SimdLevel::Scalar, detected_simd_level());
#endif
  EXPECT_TRUE(simd_level_supported(detected_simd_level()));
  // One processor's levels are offered, in enum order from the least: the last is detected.
  EXPECT_EQ(test::supported_simd_levels().back(), detected_simd_level());
}

TEST(CpuSimd, UnsupportedLevelIsRefusedAndChangesNothing) {
  const SimdLevel before = simd_level();
  for (SimdLevel l : kAllSimdLevels) {
    if (simd_level_supported(l)) continue;
    EXPECT_FALSE(set_simd_level(l)) << simd_level_name(l);
    EXPECT_EQ(before, simd_level()) << simd_level_name(l);
  }
  EXPECT_EQ("neon", simd_level_name(SimdLevel::Neon));
  EXPECT_EQ("neon-dotprod", simd_level_name(SimdLevel::NeonDotprod));
}

// Activations of all -127: quantize to d = 1, codes -127, so every product is exact.
std::vector<float> minus127(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), -127.0f);
}

struct Case {
  GgmlType type;
  std::vector<uint8_t> row;  // one weight row of kN elements
  double want;               // the exact dot product with minus127
};

constexpr int64_t kN = 512;  // two super-blocks, 16 blocks of 32

Case q8_0_case() {
  std::vector<uint8_t> row(row_size(GgmlType::Q8_0, kN));
  for (int64_t b = 0; b < kN / 32; ++b) {
    BlockQ8_0 blk;
    blk.d = fp32_to_fp16(1.0f);
    for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(j % 2 ? -128 : 127);
    std::memcpy(row.data() + b * sizeof blk, &blk, sizeof blk);
  }
  // Per block 16 (-128) + 16 (127) codes times -127.
  return {GgmlType::Q8_0, row, (kN / 32) * (16.0 * -128 + 16.0 * 127) * -127.0};
}

Case q4_0_case() {
  std::vector<uint8_t> row(row_size(GgmlType::Q4_0, kN));
  for (int64_t b = 0; b < kN / 32; ++b) {
    BlockQ4_0 blk;
    blk.d = fp32_to_fp16(1.0f);
    std::memset(blk.qs, 0x00, sizeof blk.qs);  // every code 0: value -8
    std::memcpy(row.data() + b * sizeof blk, &blk, sizeof blk);
  }
  return {GgmlType::Q4_0, row, kN * -8.0 * -127.0};
}

Case q6_k_case() {
  std::vector<uint8_t> row(row_size(GgmlType::Q6_K, kN));
  for (int64_t b = 0; b < kN / kQK_K; ++b) {
    BlockQ6_K blk;
    std::memset(blk.ql, 0x00, sizeof blk.ql);  // every code 0: value -32
    std::memset(blk.qh, 0x00, sizeof blk.qh);
    for (int s = 0; s < 16; ++s) blk.scales[s] = static_cast<int8_t>(s % 2 ? -128 : 127);
    blk.d = fp32_to_fp16(1.0f);
    std::memcpy(row.data() + b * sizeof blk, &blk, sizeof blk);
  }
  // Per super-block 8 sub-blocks of 16 at scale -128 and 8 at 127, each element -32 * -127.
  return {GgmlType::Q6_K, row, (kN / kQK_K) * 8.0 * 16.0 * (-128.0 + 127.0) * -32.0 * -127.0};
}

Case q4_k_case() {
  std::vector<uint8_t> row(row_size(GgmlType::Q4_K, kN));
  for (int64_t b = 0; b < kN / kQK_K; ++b) {
    BlockQ4_K blk;
    blk.d = fp32_to_fp16(1.0f);
    blk.dmin = fp32_to_fp16(1.0f);
    std::memset(blk.scales, 0xFF, sizeof blk.scales);  // every 6-bit scale and min 63
    std::memset(blk.qs, 0xFF, sizeof blk.qs);          // every code 15
    std::memcpy(row.data() + b * sizeof blk, &blk, sizeof blk);
  }
  // Value 63 * 15 - 63 = 882 per element.
  return {GgmlType::Q4_K, row, kN * (63.0 * 15 - 63.0) * -127.0};
}

Case iq4_xs_case() {
  std::vector<uint8_t> row(row_size(GgmlType::IQ4_XS, kN));
  for (int64_t b = 0; b < kN / kQK_K; ++b) {
    BlockIQ4_XS blk;
    blk.d = fp32_to_fp16(1.0f);
    // Sub-block scales ls = 0 (even sub-blocks: -32) and 63 (odd: +31), the 6-bit extremes.
    std::memset(blk.scales_l, 0xF0, sizeof blk.scales_l);
    blk.scales_h = 0xCCCC;
    std::memset(blk.qs, 0x00, sizeof blk.qs);  // every code 0: value -127, the largest
    std::memcpy(row.data() + b * sizeof blk, &blk, sizeof blk);
  }
  // Per super-block 4 sub-blocks of 32 at -32 and 4 at 31, each element -127 * -127 (a
  // sub-block's 32 products of 127 x 127 fill VPMADDUBSW's int16 pairs to 32,258).
  return {GgmlType::IQ4_XS, row, (kN / kQK_K) * 4.0 * 32.0 * (-32.0 + 31.0) * -127.0 * -127.0};
}

TEST(CpuSimd, ExtremeCodesGiveExactSumsAtEveryLevel) {
  ThreadPool pool(1);
  for (const Case& c : {q8_0_case(), q4_0_case(), q6_k_case(), q4_k_case(), iq4_xs_case()}) {
    // The fixture itself, through the format's definition.
    std::vector<float> w(kN);
    dequantize_row(c.type, c.row.data(), w.data(), kN);
    double ref = 0.0;
    for (float v : w) ref += static_cast<double>(v) * -127.0;
    ASSERT_EQ(c.want, ref) << type_name(static_cast<uint32_t>(c.type));
    const std::vector<float> x = minus127(kN);
    for (SimdLevel level : test::supported_simd_levels()) {
      test::SimdLevelScope scope(level);
      SCOPED_TRACE(std::string(type_name(static_cast<uint32_t>(c.type))) + " " +
                   std::string(simd_level_name(level)));
      // Four equal rows, so the multi-row tiles run too; six tokens, the multi-token ones.
      std::vector<uint8_t> W;
      for (int r = 0; r < 4; ++r) W.insert(W.end(), c.row.begin(), c.row.end());
      std::vector<float> X;
      for (int t = 0; t < 6; ++t) X.insert(X.end(), x.begin(), x.end());
      std::vector<float> Y(4 * 6, 0.0f);
      matmul(c.type, W.data(), kN, 4, X.data(), 6, Y.data(), pool);
      for (float y : Y) EXPECT_EQ(static_cast<float>(c.want), y);
    }
  }
}

}  // namespace
}  // namespace spw::cpu
