// Tests of engine/gguf/ggml_types: the type table, quantize/dequantize round trips within
// the documented error bounds, and hand-built blocks whose decoded floats are known
// exactly, so the bit layout of every supported format is pinned (not just self-consistent).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/gguf/ggml_types.h"

namespace spw {
namespace {

constexpr GgmlType kSupported[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

int block_size(GgmlType t) { return type_traits(static_cast<uint32_t>(t))->block_size; }

// ---- type table ----

TEST(GgmlTypes, KnownSizes) {
  struct Want {
    uint32_t type;
    const char* name;
    int block_size, type_size;
    bool supported;
  };
  const Want wants[] = {
      {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
      {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
      {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
      {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},
      {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},
      {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
      {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
      {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
      {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
      {20, "IQ4_NL", 32, 18, true},    {21, "IQ3_S", 256, 110, false},
      {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, true},
      {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
      {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
      {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
      {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
      {35, "TQ2_0", 256, 66, false},   {39, "MXFP4", 32, 17, false},
  };
  for (const Want& w : wants) {
    const auto t = type_traits(w.type);
    ASSERT_TRUE(t.has_value()) << w.type;
    EXPECT_EQ(t->name, w.name) << w.type;
    EXPECT_EQ(t->block_size, w.block_size) << w.name;
    EXPECT_EQ(t->type_size, w.type_size) << w.name;
    EXPECT_EQ(t->supported, w.supported) << w.name;
    EXPECT_EQ(type_name(w.type), w.name);
    EXPECT_EQ(is_supported_type(static_cast<GgmlType>(w.type)), w.supported) << w.name;
  }
  // The header's block structs and the table must agree.
  EXPECT_EQ(type_traits(2)->type_size, static_cast<int>(sizeof(BlockQ4_0)));
  EXPECT_EQ(type_traits(14)->type_size, static_cast<int>(sizeof(BlockQ6_K)));
  EXPECT_EQ(type_traits(10)->type_size, static_cast<int>(sizeof(BlockQ2_K)));
  EXPECT_EQ(type_traits(11)->type_size, static_cast<int>(sizeof(BlockQ3_K)));
  EXPECT_EQ(type_traits(20)->type_size, static_cast<int>(sizeof(BlockIQ4_NL)));
  EXPECT_EQ(type_traits(23)->type_size, static_cast<int>(sizeof(BlockIQ4_XS)));
  // Field offsets as ggml-common.h lays the blocks out.
  EXPECT_EQ(offsetof(BlockQ2_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
  EXPECT_EQ(offsetof(BlockQ2_K, dmin), 82u);
  EXPECT_EQ(offsetof(BlockQ3_K, qs), 32u);
  EXPECT_EQ(offsetof(BlockQ3_K, scales), 96u);
  EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
  EXPECT_EQ(offsetof(BlockIQ4_NL, qs), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_h), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_l), 4u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
}

TEST(GgmlTypes, SupportedTypeNamesFollowTheTable) {
  EXPECT_EQ(supported_type_names(),
            "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, "
            "BF16");
}

TEST(GgmlTypes, UnknownNumbers) {
  for (uint32_t t : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 77u, 1000u, 0xFFFFFFFFu}) {
    EXPECT_FALSE(type_traits(t).has_value()) << t;
  }
  EXPECT_EQ(type_name(77), "unknown type 77");
  EXPECT_EQ(type_name(4), "unknown type 4");
  EXPECT_FALSE(is_supported_type(static_cast<GgmlType>(5)));
  EXPECT_FALSE(is_supported_type(GgmlType::IQ2_XXS));
  EXPECT_FALSE(is_supported_type(GgmlType::TQ1_0));
}

TEST(GgmlTypes, RowSize) {
  EXPECT_EQ(row_size(GgmlType::F32, 7), 28u);
  EXPECT_EQ(row_size(GgmlType::BF16, 3), 6u);
  EXPECT_EQ(row_size(GgmlType::Q4_0, 4096), 4096u / 32 * 18);
  EXPECT_EQ(row_size(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(row_size(GgmlType::Q4_K, 256 * 3), 3u * 144);
  EXPECT_EQ(row_size(GgmlType::Q6_K, 0), 0u);
  EXPECT_EQ(row_size(GgmlType::IQ2_XXS, 512), 132u);
  EXPECT_EQ(row_size(GgmlType::Q2_K, 4096), 16u * 84);
  EXPECT_EQ(row_size(GgmlType::Q3_K, 512), 220u);
  EXPECT_EQ(row_size(GgmlType::IQ4_NL, 64), 36u);
  EXPECT_EQ(row_size(GgmlType::IQ4_XS, 256 * 14), 14u * 136);
}

// ---- quantize / dequantize round trips ----

struct Row {
  std::string kind;
  std::vector<float> x;
};

std::vector<Row> test_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_real_distribution<float> pos(0.05f, 1.0f);
  auto fill = [&](auto&& gen) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = gen();
    return v;
  };
  std::vector<Row> rows;
  for (int r = 0; r < 4; ++r) rows.push_back({"uniform", fill([&] { return uni(rng); })});
  rows.push_back({"equal", fill([] { return 0.3721f; })});
  rows.push_back({"equal-negative", fill([] { return -1.75f; })});
  rows.push_back({"zeros", fill([] { return 0.0f; })});
  auto outlier = fill([&] { return uni(rng); });
  outlier[static_cast<size_t>(n) / 3] = 37.5f;
  rows.push_back({"outlier", outlier});
  auto neg_outlier = fill([&] { return uni(rng); });
  neg_outlier[static_cast<size_t>(n) - 1] = -20.0f;
  rows.push_back({"negative-outlier", neg_outlier});
  rows.push_back({"positive", fill([&] { return pos(rng); })});
  rows.push_back({"negative", fill([&] { return -pos(rng); })});
  rows.push_back({"scaled", fill([&] { return 50.0f * uni(rng); })});
  return rows;
}

// Quantizes into a buffer at an odd offset (blocks in an mmapped file are unaligned),
// checks the writer stays inside row_size, and returns the decoded row.
std::vector<float> round_trip(GgmlType type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t bytes = row_size(type, n);
  constexpr unsigned char kGuard = 0xA5;
  std::vector<unsigned char> buf(bytes + 2, kGuard);
  quantize_row(type, x.data(), buf.data() + 1, n);
  EXPECT_EQ(buf.front(), kGuard);
  EXPECT_EQ(buf.back(), kGuard);
  std::vector<float> y(x.size(), std::nanf(""));
  dequantize_row(type, buf.data() + 1, y.data(), n);
  return y;
}

TEST(GgmlQuant, RoundTripWithinBound) {
  for (GgmlType type : kSupported) {
    const int bs = block_size(type);
    std::vector<int64_t> lengths = {256, 256 * 3};
    if (bs < 256) lengths.push_back(32 * 5);
    if (bs == 1) lengths.push_back(7);
    const double bound = quant_error_bound(type);
    double worst_uniform = 0.0, worst_any = 0.0;
    for (int64_t n : lengths) {
      for (const Row& row : test_rows(n, 1234u + static_cast<uint32_t>(n))) {
        const std::vector<float> y = round_trip(type, row.x);
        double max_abs = 0.0, max_err = 0.0;
        int64_t worst_at = 0;
        for (size_t j = 0; j < row.x.size(); ++j) {
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(row.x[j])));
          const double err = std::fabs(static_cast<double>(row.x[j]) - y[j]);
          if (!(err <= max_err)) {  // also catches NaN
            max_err = err;
            worst_at = static_cast<int64_t>(j);
          }
        }
        const std::string what =
            type_name(static_cast<uint32_t>(type)) + " n=" + std::to_string(n) + " " + row.kind;
        if (max_abs == 0.0) {
          EXPECT_EQ(max_err, 0.0) << what;
          continue;
        }
        const double rel = max_err / max_abs;
        EXPECT_LE(rel, bound) << what << ": worst x[" << worst_at << "]=" << row.x[worst_at]
                              << " decoded " << y[worst_at];
        worst_any = std::max(worst_any, rel);
        if (row.kind == "uniform") worst_uniform = std::max(worst_uniform, rel);
      }
    }
    // The measured figures quoted beside quant_error_bound().
    std::printf("[ measured ] %-5s uniform %.5f  any row %.5f  bound %.5f\n",
                type_name(static_cast<uint32_t>(type)).c_str(), worst_uniform, worst_any, bound);
  }
}

TEST(GgmlQuant, F32IsACopyAndHalfTypesRoundPerElement) {
  const std::vector<float> x = {1.0f, -0.0f, 3.14159265f, 1e-30f, -65504.0f, 1e20f};
  EXPECT_EQ(round_trip(GgmlType::F32, x), x);
  const std::vector<float> h = round_trip(GgmlType::F16, x);
  const std::vector<float> b = round_trip(GgmlType::BF16, x);
  for (size_t j = 0; j < x.size(); ++j) {
    EXPECT_EQ(h[j], fp16_to_fp32(fp32_to_fp16(x[j]))) << j;
    EXPECT_EQ(b[j], bf16_to_fp32(fp32_to_bf16(x[j]))) << j;
  }
  EXPECT_TRUE(std::isinf(h[5]));
  EXPECT_EQ(b[3], bf16_to_fp32(fp32_to_bf16(1e-30f)));
}

// A row that is exactly on a format's grid must come back unchanged.
TEST(GgmlQuant, GridValuesAreExact) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j % 16) - 8) * 0.25f;  // Q4_0 grid
  EXPECT_EQ(round_trip(GgmlType::Q4_0, x), x);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) * 0.5f;  // Q5_0 grid
  EXPECT_EQ(round_trip(GgmlType::Q5_0, x), x);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j * 4 - 127);  // includes +-127
  x[0] = -127.0f;
  x[1] = 127.0f;
  EXPECT_EQ(round_trip(GgmlType::Q8_0, x), x);
  // IQ4_NL: every grid value times a power of two, both signs, with -127 d as the extreme.
  const float nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 32; ++j) x[j] = nl[j % 16] * 0.125f;
  EXPECT_EQ(round_trip(GgmlType::IQ4_NL, x), x);
}

// ---- hand-built blocks with exactly known values ----

template <typename Block>
std::vector<float> decode(GgmlType type, const Block& b) {
  const int n = block_size(type);
  // Decode from an odd address, as from an mmapped file.
  std::vector<unsigned char> buf(sizeof(Block) + 1);
  std::memcpy(buf.data() + 1, &b, sizeof b);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(type, buf.data() + 1, y.data(), n);
  return y;
}

TEST(GgmlKnownBlocks, Q4_0) {
  BlockQ4_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q4_0, b);
  // Low nibbles are elements 0..15, high nibbles elements 16..31; value (q - 8) * d.
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[16 + j], (7 - j) * 0.5f) << j;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[31], -4.0f);
}

TEST(GgmlKnownBlocks, Q4_1) {
  BlockQ4_1 b{};
  b.d = 0x3C00;  // 1.0
  b.m = 0xC000;  // -2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 2.0f) << j;
    EXPECT_EQ(y[16 + j], 13.0f - j) << j;
  }
}

TEST(GgmlKnownBlocks, Q5_0) {
  BlockQ5_0 b{};
  b.d = 0x3800;  // 0.5
  // qh as a little-endian word 0xFF008001: 5th bit set for elements 0, 15 and 24..31.
  const uint8_t qh[4] = {0x01, 0x80, 0x00, 0xFF};
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q5_0, b);
  const uint32_t word = 0xFF008001u;
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? e : 15 - (e - 16);
    const int q = low | (((word >> e) & 1u) << 4);
    EXPECT_EQ(y[e], (q - 16) * 0.5f) << e;
  }
  EXPECT_EQ(y[0], 0.0f);    // 16 - 16
  EXPECT_EQ(y[1], -7.5f);   // 1 - 16
  EXPECT_EQ(y[15], 7.5f);   // 31 - 16
  EXPECT_EQ(y[16], -0.5f);  // 15 - 16
  EXPECT_EQ(y[24], 3.5f);   // 7 | 16 = 23 -> 7
  EXPECT_EQ(y[31], 0.0f);   // 0 | 16
}

TEST(GgmlKnownBlocks, Q5_1) {
  BlockQ5_1 b{};
  b.d = 0x3C00;  // 1.0
  b.m = 0x3800;  // 0.5
  const uint8_t qh[4] = {0x01, 0x80, 0x00, 0xFF};
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q5_1, b);
  const uint32_t word = 0xFF008001u;
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? e : 15 - (e - 16);
    const int q = low | (((word >> e) & 1u) << 4);
    EXPECT_EQ(y[e], q + 0.5f) << e;
  }
  EXPECT_EQ(y[0], 16.5f);
  EXPECT_EQ(y[16], 15.5f);
  EXPECT_EQ(y[31], 16.5f);
}

TEST(GgmlKnownBlocks, Q8_0) {
  BlockQ8_0 b{};
  b.d = 0x3400;  // 0.25
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  b.qs[31] = 127;
  const auto y = decode(GgmlType::Q8_0, b);
  for (int j = 0; j < 31; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.25f) << j;
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 31.75f);
}

// Q4_K/Q5_K scales: sub-block s (0..7) of 32 elements has 6-bit scale sc[s] and min m[s].
// The packed bytes below are written out by hand from the format description (s < 4: plain
// 6 bits in bytes s and s+4; s >= 4: low nibbles in byte s+4, top two bits in bits 6-7 of
// bytes s-4 (scale) and s (min)), so both the packing and get_scale_min_k4 are pinned.
constexpr uint8_t kSc[8] = {1, 2, 3, 4, 17, 33, 63, 5};
constexpr uint8_t kMin[8] = {0, 1, 2, 3, 20, 40, 63, 7};
constexpr uint8_t kPackedScales[12] = {0x41, 0x82, 0xC3, 0x04, 0x40, 0x81,
                                       0xC2, 0x03, 0x41, 0x81, 0xFF, 0x75};

TEST(GgmlKnownBlocks, Q4_K) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPackedScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const auto y = decode(GgmlType::Q4_K, b);
  // Byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l (high nibble).
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const int q = (s % 2 == 0) ? l % 16 : 15 - l % 16;
    EXPECT_EQ(y[e], 1.0f * kSc[s] * q - 0.5f * kMin[s]) << e;
  }
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[32], 29.5f);           // s=1: 2*15 - 0.5
  EXPECT_EQ(y[4 * 32 + 3], 41.0f);   // s=4: 17*3 - 10
  EXPECT_EQ(y[5 * 32 + 0], 475.0f);  // s=5: 33*15 - 20
  EXPECT_EQ(y[6 * 32 + 5], 283.5f);  // s=6: 63*5 - 31.5
  EXPECT_EQ(y[7 * 32 + 0], 71.5f);   // s=7: 5*15 - 3.5
}

TEST(GgmlKnownBlocks, Q5_K) {
  BlockQ5_K b{};
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3C00;  // 1.0
  std::memcpy(b.scales, kPackedScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  for (int l = 0; l < 32; ++l) b.qh[l] = static_cast<uint8_t>(l * 37 + 11);
  const auto y = decode(GgmlType::Q5_K, b);
  // qh[l] bit 2c is the 5th bit of element 64c + l, bit 2c+1 that of element 64c + 32 + l.
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const int low = (s % 2 == 0) ? l % 16 : 15 - l % 16;
    const int hbit = (b.qh[l] >> s) & 1;
    const int q = low | (hbit << 4);
    EXPECT_EQ(y[e], 0.5f * kSc[s] * q - 1.0f * kMin[s]) << e;
  }
  // qh[0] = 11 = 0b00001011: elements 0, 32 and 96 carry the 5th bit, 64 does not.
  EXPECT_EQ(y[0], 0.5f * 1 * 16);         // 8
  EXPECT_EQ(y[32], 0.5f * 2 * 31 - 1);    // 30
  EXPECT_EQ(y[64], 0.5f * 3 * 0 - 2);     // -2
  EXPECT_EQ(y[96], 0.5f * 4 * 31 - 3);    // 59
  EXPECT_EQ(y[128], 0.5f * 17 * 0 - 20);  // qh[0] bit 4 clear: -20
}

TEST(GgmlKnownBlocks, Q6_K) {
  BlockQ6_K b{};
  b.d = 0x3400;  // 0.25
  const int8_t sc[16] = {1, -1, 2, -2, 3, -3, 127, -128, 5, 6, 7, 8, 9, 10, 11, -12};
  std::memcpy(b.scales, sc, 16);
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 7 + 3);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 53 + 29);
  const auto y = decode(GgmlType::Q6_K, b);
  // Per 128-element half h: for group g (32 elements) and l < 32, the low 4 bits are
  // ql[64h + 32(g%2) + l], low nibble for g < 2, high nibble for g >= 2; the top 2 bits
  // are bits 2g..2g+1 of qh[32h + l]. Scale: scales[e / 16]. Value d * scale * (q - 32).
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b.ql[64 * h + 32 * (g % 2) + l];
    const int low = g < 2 ? (lb & 0xF) : (lb >> 4);
    const int top = (b.qh[32 * h + l] >> (2 * g)) & 3;
    const int q = (low | (top << 4)) - 32;
    EXPECT_EQ(y[e], 0.25f * sc[e / 16] * q) << e;
  }
  // Spot values: ql[0] = 3, qh[0] = 29 = 0b00011101.
  // Spot values worked out by hand: ql[0] = 0x03, ql[32] = 0xE3, ql[48] = 0x53,
  // qh[0] = 0b00011101, qh[16] = 0b01101101.
  EXPECT_EQ(y[0], -3.25f);    // q = 3 | 1<<4 = 19 -> -13, scale 1
  EXPECT_EQ(y[32], 9.5f);     // q = 3 | 3<<4 = 51 -> 19, scale 2
  EXPECT_EQ(y[64], -12.0f);   // q = 0 | 1<<4 = 16 -> -16, scale 3
  EXPECT_EQ(y[96], -571.5f);  // q = 14 | 0 = 14 -> -18, scale 127
  EXPECT_EQ(y[112], 352.0f);  // q = 5 | 1<<4 = 21 -> -11, scale -128
}

// Q2_K: sub-block s (16 elements) has scales[s] = sc | m << 4; per 128-element half h,
// qs[32h + l] holds elements 128h + 32j + l (l < 32) at bits 2j. Value d * sc * q - dmin * m.
TEST(GgmlKnownBlocks, Q2_K) {
  BlockQ2_K b{};
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>((s + 1) % 16 | ((15 - s) << 4));
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>(i * 29 + 7);
  const auto y = decode(GgmlType::Q2_K, b);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = e / 16;
    const int q = (b.qs[32 * h + l] >> (2 * j)) & 3;
    EXPECT_EQ(y[e], 0.5f * ((s + 1) % 16) * q - 0.25f * (15 - s)) << e;
  }
  // By hand: qs[0] = 7 = 0b00000111 (codes 3, 1, 0, 0 for elements 0, 32, 64, 96),
  // qs[1] = 36 = 0b00100100 (codes 0, 1, 2, 0 for elements 1, 33, 65, 97), qs[32] = 167 =
  // 0b10100111 (codes 3, 1, 2, 2 for elements 128, 160, 192, 224), qs[48] = 119 = 0b01110111.
  EXPECT_EQ(y[0], 0.5f * 1 * 3 - 0.25f * 15);    // s 0: -2.25
  EXPECT_EQ(y[32], 0.5f * 3 * 1 - 0.25f * 13);   // s 2: -1.75
  EXPECT_EQ(y[65], 0.5f * 5 * 2 - 0.25f * 11);   // s 4: 2.25
  EXPECT_EQ(y[160], 0.5f * 11 * 1 - 0.25f * 5);  // s 10: 4.25
  EXPECT_EQ(y[224], 0.5f * 15 * 2 - 0.25f * 1);  // s 14: 14.75
  EXPECT_EQ(y[240], 0.5f * 0 * 1 - 0.25f * 0);   // s 15: scale 0, min 0
}

// Q3_K: q = low 2 bits (as Q2_K) | bit 4h + j of hmask[l] << 2; value d * (sc - 32) * (q - 4).
// The 16 six-bit scale codes written out by hand: low nibbles of sub-blocks 0-7 in bytes 0-7,
// of 8-15 in the high nibbles of bytes 0-7; top two bits of sub-block s at bits 2(s/4) of byte
// 8 + s%4.
TEST(GgmlKnownBlocks, Q3_K) {
  // Codes 0, 63, 32, 33, 31, 1, 62, 16, 48, 5, 40, 20, 59, 7, 36, 10: scales -32, 31, 0, 1, -1,
  // -31, 30, -16, 16, -27, 8, -12, 27, -25, 4, -22.
  constexpr int kCode[16] = {0, 63, 32, 33, 31, 1, 62, 16, 48, 5, 40, 20, 59, 7, 36, 10};
  constexpr uint8_t kPacked[12] = {
      // bytes 0-7: low nibble = code s & 15, high nibble = code s+8 & 15
      0x00, 0x5F, 0x80, 0x41, 0xBF, 0x71, 0x4E, 0xA0,
      // bytes 8-11: bits 0-1 code k >> 4, 2-3 code 4+k >> 4, 4-5 code 8+k >> 4, 6-7 code 12+k >> 4
      0xF4, 0x03, 0xAE, 0x16};
  BlockQ3_K b{};
  b.d = 0x3400;  // 0.25
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>(i * 53 + 17);
  for (int i = 0; i < 32; ++i) b.hmask[i] = static_cast<uint8_t>(i * 71 + 3);
  const auto y = decode(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = e / 16;
    const int q = ((b.qs[32 * h + l] >> (2 * j)) & 3) | (((b.hmask[l] >> (4 * h + j)) & 1) << 2);
    EXPECT_EQ(y[e], 0.25f * (kCode[s] - 32) * (q - 4)) << e;
  }
  // By hand: qs[0] = 17 = 0b00010001, hmask[0] = 3 = 0b00000011: element 0 q = 1 | 4 = 5,
  // element 32 q = 0 | 4 = 4, element 64 q = 1 (no high bit) -> -3, element 96 q = 0 -> -4.
  EXPECT_EQ(y[0], 0.25f * -32 * 1);   // -8
  EXPECT_EQ(y[32], 0.25f * 0 * 0);    // scale 0
  EXPECT_EQ(y[64], 0.25f * -1 * -3);  // 0.75
  EXPECT_EQ(y[96], 0.25f * 30 * -4);  // -30
  // hmask[0] bit 4 clear: element 128 (s 8, scale 16) q = qs[32] & 3 = (32*53+17 = 1713 & 255
  // = 177 = 0b10110001) & 3 = 1 -> -3.
  EXPECT_EQ(y[128], 0.25f * 16 * -3);  // -12
}

TEST(GgmlKnownBlocks, IQ4_NL) {
  BlockIQ4_NL b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::IQ4_NL, b);
  // Low nibbles are elements 0..15, high nibbles 16..31; value d * kvalues_iq4nl[code].
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kValuesIQ4NL[j]) << j;
    EXPECT_EQ(y[16 + j], 0.5f * kValuesIQ4NL[15 - j]) << j;
  }
  EXPECT_EQ(y[0], -63.5f);   // -127 / 2
  EXPECT_EQ(y[7], -5.0f);    // -10 / 2
  EXPECT_EQ(y[8], 0.5f);     // 1 / 2
  EXPECT_EQ(y[15], 56.5f);   // 113 / 2
  EXPECT_EQ(y[16], 56.5f);   // code 15
  EXPECT_EQ(y[20], 19.0f);   // code 11: 38 / 2
  EXPECT_EQ(y[31], -63.5f);  // code 0
}

// IQ4_XS: sub-block b (32 elements, laid out as an IQ4_NL block in qs[16b..16b+16)) has scale
// ls - 32 with ls = nibble (b % 2) of scales_l[b / 2] | bits 2b..2b+1 of scales_h << 4.
TEST(GgmlKnownBlocks, IQ4_XS) {
  // ls 0, 63, 32, 33, 1, 48, 17, 40: scales -32, 31, 0, 1, -31, 16, -15, 8.
  constexpr int kLs[8] = {0, 63, 32, 33, 1, 48, 17, 40};
  BlockIQ4_XS b{};
  b.d = 0x3C00;          // 1.0
  b.scales_l[0] = 0xF0;  // ls 0 -> 0, ls 63 -> 15
  b.scales_l[1] = 0x10;  // ls 32 -> 0, ls 33 -> 1
  b.scales_l[2] = 0x01;  // ls 1 -> 1, ls 48 -> 0
  b.scales_l[3] = 0x81;  // ls 17 -> 1, ls 40 -> 8
  // top bits 0, 3, 2, 2, 0, 3, 1, 2 at bits 2b: 0b10'01'11'00'10'10'11'00
  b.scales_h = 0x9CAC;
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 37 + 5);
  const auto y = decode(GgmlType::IQ4_XS, b);
  for (int e = 0; e < 256; ++e) {
    const int sb = e / 32, k = e % 32;
    const uint8_t byte = b.qs[16 * sb + k % 16];
    const int code = k < 16 ? (byte & 0xF) : (byte >> 4);
    EXPECT_EQ(y[e], 1.0f * (kLs[sb] - 32) * kValuesIQ4NL[code]) << e;
  }
  // By hand: qs[0] = 5 -> elements 0 (code 5: -35) and 16 (code 0: -127), scale -32;
  // qs[16] = 597 & 255 = 85 = 0x55 -> elements 32 and 48 (code 5), scale 31.
  EXPECT_EQ(y[0], 1120.0f);    // -32 * -35
  EXPECT_EQ(y[16], 4064.0f);   // -32 * -127
  EXPECT_EQ(y[32], -1085.0f);  // 31 * -35
  EXPECT_EQ(y[64], 0.0f);      // scale 0
}

}  // namespace
}  // namespace spw
