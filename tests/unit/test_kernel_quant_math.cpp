// CPU tests of kernels/quant_math.h, the block decoding the CUDA kernels run: every decoded
// float must equal the reference dequantize_row() (engine/gguf/ggml_types.cpp) bit for bit,
// for rows written by quantize_row() and for rows of random bytes (which reach codes and
// scale combinations a quantizer never writes), and the half/bfloat16 conversions must match
// engine/common/fp16.h bit for bit. Built by g++ into spillway_engine_tests: no GPU needed.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/gguf/ggml_types.h"
#include "kernels/quant_math.h"
#include "tests/support/quant_blocks.h"

namespace spw::kernels {
namespace {

constexpr GgmlType kTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

using test::bits_of;
using test::float_of;
using test::half_fields;

// Decodes a row of n elements with the quant_math.h functions the kernels use, group by
// group; `hits` counts how often each element was written (each must be written once).
void decode_row_kernels(GgmlType type, const uint8_t* src, float* dst, int64_t n,
                        std::vector<int>* hits) {
  const bool known = dispatch_type(type, [&](auto tr) {
    using TR = decltype(tr);
    if constexpr (TR::kFloat) {
      for (int64_t j = 0; j < n; ++j) {
        dst[j] = TR::decode(src + j * TR::kBlockBytes);
        if (hits) ++(*hits)[j];
      }
    } else {
      for (int64_t b = 0; b < n / TR::kBlockElems; ++b) {
        for (int g = 0; g < TR::kGroups; ++g) {
          float v[8];
          TR::decode_group(src + b * TR::kBlockBytes, g, v);
          for (int run = 0; run < 2; ++run) {
            for (int k = 0; k < 4; ++k) {
              const int64_t e = b * TR::kBlockElems + TR::run_start(g, run) + k;
              ASSERT_LT(e, n);
              dst[e] = v[4 * run + k];
              if (hits) ++(*hits)[e];
            }
          }
        }
      }
    }
  });
  ASSERT_TRUE(known) << type_name(static_cast<uint32_t>(type));
}

int block_elems(GgmlType t) { return type_traits(static_cast<uint32_t>(t))->block_size; }

// Compares the kernels' decoding with dequantize_row bit for bit (NaN payloads included).
void expect_same_decode(GgmlType type, const std::vector<uint8_t>& row, int64_t n,
                        const std::string& what) {
  std::vector<float> ref(n), got(n, float_of(0x7FBADBADu));
  dequantize_row(type, row.data(), ref.data(), n);
  std::vector<int> hits(n, 0);
  decode_row_kernels(type, row.data(), got.data(), n, &hits);
  for (int64_t j = 0; j < n; ++j) ASSERT_EQ(hits[j], 1) << what << " element " << j;
  if (std::memcmp(ref.data(), got.data(), n * sizeof(float)) != 0) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(bits_of(got[j]), bits_of(ref[j]))
          << what << ": element " << j << " got " << got[j] << " want " << ref[j];
    }
  }
}

// Random floats of a few shapes: uniform, gaussian, blocks of mixed magnitude, a lone
// outlier, and rows with exact zeros (where -0 vs +0 would show).
std::vector<float> random_floats(std::mt19937& rng, int64_t n, int shape) {
  std::vector<float> x(n);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int64_t j = 0; j < n; ++j) {
    switch (shape) {
      case 0:
        x[j] = u(rng);
        break;
      case 1:
        x[j] = gauss(rng) * 3.0f;
        break;
      case 2:
        x[j] = u(rng) * std::ldexp(1.0f, static_cast<int>((j / 16) % 12) - 8);
        break;
      case 3:
        x[j] = (j % 37 == 5) ? 100.0f * u(rng) : 0.01f * u(rng);
        break;
      default:
        x[j] = (j % 3 == 0) ? 0.0f : u(rng) - 0.5f;  // many zeros, mostly negative
        break;
    }
  }
  return x;
}

TEST(KernelQuantMath, QuantizedRowsDecodeBitExact) {
  std::mt19937 rng(1234);
  for (GgmlType type : kTypes) {
    const std::string name(type_name(static_cast<uint32_t>(type)));
    for (int64_t blocks : {1, 3, 16}) {
      const int64_t n = (block_elems(type) == 1 ? 256 : block_elems(type)) * blocks;
      for (int shape = 0; shape < 5; ++shape) {
        const std::vector<float> x = random_floats(rng, n, shape);
        std::vector<uint8_t> row(row_size(type, n));
        quantize_row(type, x.data(), row.data(), n);
        expect_same_decode(type, row, n, name + " shape " + std::to_string(shape));
      }
    }
  }
}

TEST(KernelQuantMath, RandomByteRowsDecodeBitExact) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> byte(0, 255);
  for (GgmlType type : kTypes) {
    const std::string name(type_name(static_cast<uint32_t>(type)));
    const int64_t n = block_elems(type) == 1 ? 1031 : block_elems(type) * 64;
    const size_t bytes = row_size(type, n);
    const int bb = type_traits(static_cast<uint32_t>(type))->type_size;
    for (int rep = 0; rep < 50; ++rep) {
      // One spare byte in front: decoding must not depend on the row's 4-byte alignment.
      std::vector<uint8_t> buf(bytes + 2);
      for (auto& b : buf) b = static_cast<uint8_t>(byte(rng));
      std::vector<uint8_t> row(buf.begin() + 2, buf.end());
      // Block scales forced finite (clear the top exponent bit of inf/NaN patterns): an inf
      // scale gives inf - inf = NaN in both, but NaN payloads from arithmetic are not
      // specified bit for bit. F16/BF16 elements keep every pattern, NaNs included.
      for (int64_t b = 0; b < static_cast<int64_t>(bytes) / bb; ++b) {
        for (int off : half_fields(type)) {
          uint8_t* p = row.data() + b * bb + off;
          uint16_t h;
          std::memcpy(&h, p, 2);
          if ((h & 0x7C00u) == 0x7C00u) h &= ~0x4000u;
          std::memcpy(p, &h, 2);
        }
      }
      expect_same_decode(type, row, n, name + " random bytes rep " + std::to_string(rep));
      // Extreme scales: the largest finite and the smallest subnormal halves.
      for (uint16_t scale : {uint16_t{0x7BFF}, uint16_t{0xFBFF}, uint16_t{0x0001}, uint16_t{0x8001},
                             uint16_t{0x0000}, uint16_t{0x8000}}) {
        if (half_fields(type).empty() || rep % 10 != 0) break;
        std::vector<uint8_t> r2 = row;
        for (int64_t b = 0; b < static_cast<int64_t>(bytes) / bb; ++b) {
          for (int off : half_fields(type)) std::memcpy(r2.data() + b * bb + off, &scale, 2);
        }
        expect_same_decode(type, r2, n, name + " scale bits " + std::to_string(scale));
      }
    }
  }
}

// Group g's runs must tile the block: checked above through `hits`; here the layout the
// kernels rely on (8 elements, two runs of 4, 4-aligned) is pinned per type.
TEST(KernelQuantMath, GroupRunsAreFourAligned) {
  for (GgmlType type : kTypes) {
    dispatch_type(type, [&](auto tr) {
      using TR = decltype(tr);
      if constexpr (!TR::kFloat) {
        static_assert(TR::kGroups * 8 == TR::kBlockElems);
        for (int g = 0; g < TR::kGroups; ++g) {
          for (int run = 0; run < 2; ++run) {
            EXPECT_EQ(TR::run_start(g, run) % 4, 0);
            EXPECT_LE(TR::run_start(g, run) + 4, TR::kBlockElems);
          }
        }
      }
      EXPECT_EQ(TR::kBlockBytes, type_traits(static_cast<uint32_t>(type))->type_size);
      EXPECT_EQ(TR::kBlockElems, type_traits(static_cast<uint32_t>(type))->block_size);
    });
  }
  EXPECT_FALSE(dispatch_type(GgmlType::IQ2_XXS, [](auto) {}));
  EXPECT_FALSE(dispatch_type(GgmlType::TQ2_0, [](auto) {}));
  EXPECT_FALSE(dispatch_type(GgmlType::Q8_1, [](auto) {}));
}

// The launchers check their weights with block_shape() instead of the engine's type table: for
// every type number the two must accept the same types with the same sizes.
TEST(KernelQuantMath, BlockShapeAgreesWithTheTypeTable) {
  int n_supported = 0;
  for (uint32_t number = 0; number < 64; ++number) {
    const auto type = static_cast<GgmlType>(number);
    const auto traits = type_traits(number);
    const BlockShape shape = block_shape(type);
    if (traits && is_supported_type(type)) {
      ++n_supported;
      EXPECT_EQ(shape.elems, traits->block_size) << type_name(number);
      EXPECT_EQ(shape.bytes, traits->type_size) << type_name(number);
    } else {
      EXPECT_EQ(shape.elems, 0) << type_name(number);
      EXPECT_EQ(shape.bytes, 0) << type_name(number);
    }
  }
  EXPECT_EQ(n_supported, static_cast<int>(std::size(kTypes)));
}

// The IQ4 grid the kernels select from packed words must be formats/ggml_format.h's table.
TEST(KernelQuantMath, Iq4GridEqualsTheTable) {
  for (uint32_t code = 0; code < 16; ++code) {
    EXPECT_EQ(small_uint_to_float<128>(iq4nl_biased(code)), static_cast<float>(kValuesIQ4NL[code]))
        << code;
  }
}

TEST(KernelQuantMath, HalfToFloatEveryPattern) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float want = fp16_to_fp32(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    // Bits, so NaN payloads and the sign of zero count too.
    ASSERT_EQ(bits_of(got), bits_of(want)) << "h=0x" << std::hex << h;
  }
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(half_to_float(0xFC01)));
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(half_to_float(0x8000)), 0x80000000u);
}

TEST(KernelQuantMath, Bf16ToFloatEveryPattern) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    ASSERT_EQ(bits_of(bf16_to_float(static_cast<uint16_t>(b))),
              bits_of(bf16_to_fp32(static_cast<uint16_t>(b))))
        << "b=0x" << std::hex << b;
  }
}

void expect_same_half(float f) {
  ASSERT_EQ(float_to_half_rne(f), fp32_to_fp16(f))
      << "f=" << f << " bits 0x" << std::hex << bits_of(f);
}

TEST(KernelQuantMath, FloatToHalfMatchesReference) {
  // Every half's exact value, the midpoints between neighbours (ties: even wins) and one
  // float ulp either side of each midpoint, both signs: covers subnormals, the
  // subnormal/normal boundary, each binade and the overflow threshold (65520).
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    const float v = fp16_to_fp32(static_cast<uint16_t>(h));
    const float next = h + 1 < 0x7C00u ? fp16_to_fp32(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact
    for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      expect_same_half(f);
      expect_same_half(-f);
    }
  }
  // Specials.
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  65504.0f, 65519.99f, 65520.0f, 1e10f, std::ldexp(1.0f, -25),
                  std::ldexp(1.0f, -24), std::ldexp(1.5f, -25), std::ldexp(1.0f, -26)}) {
    expect_same_half(f);
    expect_same_half(-f);
  }
  // A stride through all 2^32 patterns (NaNs included: the quiet-NaN pattern with the sign
  // matches fp32_to_fp16's too), then random ones.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    expect_same_half(float_of(static_cast<uint32_t>(u)));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) expect_same_half(float_of(static_cast<uint32_t>(rng())));
  // Dense sweep of the subnormal-half range, where the host path differs most.
  for (uint32_t a = 0x33000000u - 64; a < 0x38800000u + 64; a += 97) {
    expect_same_half(float_of(a));
    expect_same_half(float_of(a | 0x80000000u));
  }
}

TEST(KernelQuantMath, SmallUintToFloatIsExact) {
  for (uint32_t v = 0; v < (1u << 16); ++v) {
    ASSERT_EQ(small_uint_to_float<0>(v), static_cast<float>(v));
    ASSERT_EQ(small_uint_to_float<8>(v), static_cast<float>(static_cast<int>(v) - 8));
    ASSERT_EQ(small_uint_to_float<128>(v), static_cast<float>(static_cast<int>(v) - 128));
  }
  // v == bias is +0, as the reference's int -> float conversion gives.
  EXPECT_EQ(bits_of(small_uint_to_float<32>(32)), 0u);
  EXPECT_EQ(small_uint_to_float<0>((1u << 23) - 1), 8388607.0f);
}

}  // namespace
}  // namespace spw::kernels
