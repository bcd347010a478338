// AVX-512 repacking of the K-quant records built from 2-bit planes (Q6_K, Q3_K, Q2_K; gemm.h's
// layouts): the same bytes as the portable packers of gemm.cpp and gemm_low_bit.cpp (CpuGemm
// compares them), each plane of 16 rows made by one 16 x 16 transpose of 32-bit words instead of
// one 4-byte store per row and word. The portable Q6_K packer ran at ~3 GB/s of the file's bytes
// on one Zen 5 core, the larger part of a Q6_K model's first token. Compiled as gemm_avx512.cpp.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernels.h"

namespace spw::cpu {
namespace {

// Stores word k of rows[r] at out + 64 k + 4 r for k < n (n <= 16).
inline void store_planes(const __m512i rows[16], uint8_t* out, int n) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4 h + c], 128-bit lane L: word 4 L + c of rows 4 h .. 4 h + 3.
  for (int h = 0; h < 4; ++h) {
    u[4 * h] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  const auto store = [&](int k, __m512i v) {
    if (k < n) _mm512_storeu_si512(out + 64 * k, v);
  };
  for (int c = 0; c < 4; ++c) {
    const __m512i a = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);  // lanes 0, 2
    const __m512i b = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);  // lanes 1, 3
    const __m512i e = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i f = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    store(c, _mm512_shuffle_i32x4(a, e, 0x88));
    store(8 + c, _mm512_shuffle_i32x4(a, e, 0xDD));
    store(4 + c, _mm512_shuffle_i32x4(b, f, 0x88));
    store(12 + c, _mm512_shuffle_i32x4(b, f, 0xDD));
  }
}

// One row's 16 words of pack_2bit_planes() (gemm_kernels.h) from its 64 bytes q2: word k ORs,
// for i = 0..3, the 2-bit fields of dword 8 (i / 2) + k % 8 shifted right by 2 (2 (i % 2) + k / 8)
// into bits 2 i of each byte.
inline __m512i planes2(const uint8_t* q2) {
  const __m512i q = _mm512_loadu_si512(q2);
  const __m512i x = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), q);
  const __m512i y = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15), q);
  const __m512i s = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i s4 = _mm512_add_epi32(s, _mm512_set1_epi32(4));
  const __m512i m = _mm512_set1_epi32(0x03030303);
  const __m512i f0 = _mm512_and_si512(_mm512_srlv_epi32(x, s), m);
  const __m512i f1 = _mm512_and_si512(_mm512_srlv_epi32(x, s4), m);
  const __m512i f2 = _mm512_and_si512(_mm512_srlv_epi32(y, s), m);
  const __m512i f3 = _mm512_and_si512(_mm512_srlv_epi32(y, s4), m);
  return _mm512_or_si512(_mm512_or_si512(f0, _mm512_slli_epi32(f1, 2)),
                         _mm512_or_si512(_mm512_slli_epi32(f2, 4), _mm512_slli_epi32(f3, 6)));
}

// Row r of group g's block b; past n_out a block of zeros (the padding rows, packed as the
// portable packers pack them: for_each_group_block()).
alignas(64) constexpr uint8_t kZeroBlock[sizeof(BlockQ6_K)] = {};
template <typename Block>
inline const uint8_t* block_row(const uint8_t* src, size_t rs, int64_t g, int64_t b, int r,
                                int64_t n_out) {
  static_assert(sizeof(Block) <= sizeof(kZeroBlock));
  const int64_t row = g * kGemmGroupRows + r;
  return row < n_out ? src + static_cast<size_t>(row) * rs + static_cast<size_t>(b) * sizeof(Block)
                     : kZeroBlock;
}

void pack_q6_k(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out, uint8_t* gd) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + static_cast<size_t>(b) * kQ6_KGroupBlockBytes;
    __m512i lo[16], hi[16], qh[16];
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const uint8_t* p = block_row<BlockQ6_K>(src, rs, g, b, r, n_out);
      const uint8_t* ql = p + offsetof(BlockQ6_K, ql);
      const __m512i a = _mm512_loadu_si512(ql), c = _mm512_loadu_si512(ql + 64);
      // words 0..15: low nibbles of ql[4k ..] under those of ql[64 + 4k ..] (select by m4: 0xCA)
      lo[r] = _mm512_ternarylogic_epi32(m4, a, _mm512_slli_epi32(c, 4), 0xCA);
      // words 16..31: the high nibbles of ql[4k ..] under those of ql[64 + 4k ..]
      hi[r] = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi32(a, 4), c, 0xCA);
      qh[r] = planes2(p + offsetof(BlockQ6_K, qh));
      const uint8_t* sc = p + offsetof(BlockQ6_K, scales);
      for (int j = 0; j < 8; ++j) std::memcpy(out + 3072 + 32 * j + 2 * r, sc + 2 * j, 2);
      std::memcpy(out + 3328 + 2 * r, p + offsetof(BlockQ6_K, d), 2);
    }
    store_planes(lo, out, 16);
    store_planes(hi, out + 1024, 16);
    store_planes(qh, out + 2048, 16);
  }
}

void pack_q3_k(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out, uint8_t* gd) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + static_cast<size_t>(b) * kQ3_KGroupBlockBytes;
    __m512i q[16], hm[16];
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const uint8_t* p = block_row<BlockQ3_K>(src, rs, g, b, r, n_out);
      q[r] = planes2(p + offsetof(BlockQ3_K, qs));
      hm[r] = _mm512_zextsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(BlockQ3_K, hmask))));
      // The 16 scales minus 32 (q3_k_scale()): low 4 bits from the nibbles of bytes 0..7, the
      // top 2 from bits 2 (s / 4) of byte 8 + s % 4 (16-bit shifts by 0, 2, 4, 6 per 4 scales).
      const __m128i sc = _mm_maskz_loadu_epi8(0x0FFF, p + offsetof(BlockQ3_K, scales));
      const __m128i m4 = _mm_set1_epi8(0x0F);
      const __m128i lo =
          _mm_unpacklo_epi64(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4));
      const __m128i top = _mm_shuffle_epi8(
          sc, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
      const __m128i hi = _mm_and_si128(_mm_srlv_epi16(top, _mm_setr_epi16(0, 0, 2, 2, 4, 4, 6, 6)),
                                       _mm_set1_epi8(3));
      const __m128i v = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
      alignas(16) uint8_t scales[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(scales), v);
      for (int j = 0; j < 8; ++j) std::memcpy(out + 1536 + 32 * j + 2 * r, scales + 2 * j, 2);
      std::memcpy(out + 1792 + 2 * r, p + offsetof(BlockQ3_K, d), 2);
    }
    store_planes(q, out, 16);
    store_planes(hm, out + 1024, 8);
  }
}

void pack_q2_k(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out, uint8_t* gd) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = gd + static_cast<size_t>(b) * kQ2_KGroupBlockBytes;
    __m512i q[16];
    for (int r = 0; r < kGemmGroupRows; ++r) {
      const uint8_t* p = block_row<BlockQ2_K>(src, rs, g, b, r, n_out);
      q[r] = planes2(p + offsetof(BlockQ2_K, qs));
      const uint8_t* sc = p + offsetof(BlockQ2_K, scales);
      for (int j = 0; j < 8; ++j) std::memcpy(out + 1024 + 32 * j + 2 * r, sc + 2 * j, 2);
      std::memcpy(out + 1280 + 2 * r, p + offsetof(BlockQ2_K, d), 2);
      std::memcpy(out + 1312 + 2 * r, p + offsetof(BlockQ2_K, dmin), 2);
    }
    store_planes(q, out, 16);
  }
}

}  // namespace

void add_packers_avx512(GemmKernels& k) {
  k.pack_q6_k = &pack_q6_k;
  k.pack_q3_k = &pack_q3_k;
  k.pack_q2_k = &pack_q2_k;
}

}  // namespace spw::cpu
#endif
