// Bit-exact tests of engine/common/fp16.h: every binary16 and bfloat16 pattern, the exact
// halfway points between neighbours (round to nearest even), subnormals, overflow, NaN.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"

namespace spw {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool half_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0; }

// The value of a binary16 pattern computed independently of fp16.h, in double.
double half_value(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0x1F) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Fp16, EveryHalfDecodesToItsValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const double ref = half_value(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << "h=0x" << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << "h=0x" << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << "h=0x" << std::hex << h;  // -0 too
    }
  }
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    const uint16_t back = fp32_to_fp16(fp16_to_fp32(hh));
    if (half_is_nan(hh)) {
      EXPECT_TRUE(half_is_nan(back)) << "h=0x" << std::hex << h << " -> 0x" << back;
      EXPECT_EQ(back & 0x8000u, hh & 0x8000u) << "NaN sign, h=0x" << std::hex << h;
    } else {
      EXPECT_EQ(back, hh) << "h=0x" << std::hex << h;
    }
  }
}

// Between each pair of adjacent finite halves (subnormals, the subnormal/normal boundary
// and every binade included) the midpoint is exact in float; it must go to the even
// neighbour, and one float ulp either side of it to the nearer one.
TEST(Fp16, HalfwayPointsRoundToNearestEven) {
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
    for (uint32_t h = 0; h < 0x7BFFu; ++h) {
      const auto lo = static_cast<uint16_t>(sign | h);
      const auto hi = static_cast<uint16_t>(sign | (h + 1));
      const float mid = (fp16_to_fp32(lo) + fp16_to_fp32(hi)) / 2;
      ASSERT_EQ(static_cast<double>(mid), (half_value(lo) + half_value(hi)) / 2);
      const uint16_t even = (h & 1u) ? hi : lo;
      EXPECT_EQ(fp32_to_fp16(mid), even) << "midpoint after h=0x" << std::hex << lo;
      EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, 0.0f)), lo) << "h=0x" << std::hex << lo;
      const float away =
          sign ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, away)), hi) << "h=0x" << std::hex << lo;
    }
  }
}

TEST(Fp16, SubnormalsAndUnderflow) {
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 steps: tie to even (2)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 steps: tie to even (2)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half a step: tie to even (0)
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -26)), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  // Rounding up out of the subnormal range lands on the smallest normal.
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);
}

TEST(Fp16, OverflowGoesToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);  // largest finite half
  EXPECT_EQ(fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // tie between 65504 (odd) and 2^16: inf
  EXPECT_EQ(fp32_to_fp16(-65520.0f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(inf), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-inf), 0xFC00);
  EXPECT_EQ(fp16_to_fp32(0x7C00), inf);
  EXPECT_EQ(fp16_to_fp32(0xFC00), -inf);
}

TEST(Fp16, NanStaysNan) {
  // Quiet, signalling (payload only in low float bits, which a naive shift would drop to
  // an infinity) and negative NaNs.
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7F801000u, 0xFFC00000u, 0xFF800001u}) {
    const uint16_t h = fp32_to_fp16(float_of(u));
    EXPECT_TRUE(half_is_nan(h)) << "float bits 0x" << std::hex << u << " -> 0x" << h;
    EXPECT_EQ(h & 0x8000u, (u >> 16) & 0x8000u);
  }
}

// The compiler's own binary16 conversion (libgcc/compiler-rt or the FPU, round to nearest even)
// as an independent reference over a sweep of float bit patterns in every binade. AArch64 GCC 12
// has no _Float16 in C++ but its __fp16 (IEEE format by default) converts the same way.
#if defined(__aarch64__)
#define SPW_COMPILER_HALF __fp16
#elif defined(__FLT16_MAX__)
#define SPW_COMPILER_HALF _Float16
#endif
#if defined(SPW_COMPILER_HALF)
TEST(Fp16, MatchesCompilerFloat16OnASweep) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4093) {
    const float f = float_of(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const SPW_COMPILER_HALF ref = static_cast<SPW_COMPILER_HALF>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, sizeof ref_bits);
    ASSERT_EQ(fp32_to_fp16(f), ref_bits) << "float bits 0x" << std::hex << u;
  }
}
#endif

TEST(Bf16, EveryBf16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto bb = static_cast<uint16_t>(b);
    const float f = bf16_to_fp32(bb);
    EXPECT_EQ(bits_of(f), b << 16);  // bf16 is the top half of a float, exactly
    const uint16_t back = fp32_to_bf16(f);
    if (bf16_is_nan(bb)) {
      EXPECT_TRUE(bf16_is_nan(back)) << "b=0x" << std::hex << b << " -> 0x" << back;
      EXPECT_EQ(back & 0x8000u, bb & 0x8000u);
    } else {
      EXPECT_EQ(back, bb) << "b=0x" << std::hex << b;
    }
  }
}

TEST(Bf16, HalfwayPointsRoundToNearestEven) {
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
    for (uint32_t b = 0; b < 0x7F7Fu; ++b) {  // every finite neighbour pair, subnormals too
      const auto lo = static_cast<uint16_t>(sign | b);
      const auto hi = static_cast<uint16_t>(sign | (b + 1));
      // The midpoint sets the float bit just below bf16's last kept bit.
      const float mid = float_of((static_cast<uint32_t>(lo) << 16) | 0x8000u);
      const uint16_t even = (b & 1u) ? hi : lo;
      EXPECT_EQ(fp32_to_bf16(mid), even) << "midpoint after b=0x" << std::hex << lo;
      EXPECT_EQ(fp32_to_bf16(float_of(bits_of(mid) - 1)), lo) << "b=0x" << std::hex << lo;
      EXPECT_EQ(fp32_to_bf16(float_of(bits_of(mid) + 1)), hi) << "b=0x" << std::hex << lo;
    }
  }
}

TEST(Bf16, OverflowNanAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(float_of(0x7F7F0000u)), 0x7F7F);  // largest finite bf16
  EXPECT_EQ(fp32_to_bf16(float_of(0x7F7F8000u)), 0x7F80);  // tie with an odd last bit: inf
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(inf), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-inf), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // below half
  // NaNs whose payload lies only in the dropped low bits must not turn into infinities.
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = fp32_to_bf16(float_of(u));
    EXPECT_TRUE(bf16_is_nan(b)) << "float bits 0x" << std::hex << u << " -> 0x" << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u);
  }
}

}  // namespace
}  // namespace spw
