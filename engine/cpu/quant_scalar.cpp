// Portable scalar dot products: the fallback on CPUs without AVX2 and on non-x86 builds, and
// the yardstick the SIMD levels are tested against. The integer parts are exactly the SIMD
// kernels' (same activation codes, same per-block integer sums); only the float
// accumulation order differs.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/common/fp16.h"
#include "engine/cpu/kernels.h"
#include "engine/gguf/ggml_types.h"

namespace spw::cpu {
namespace {

template <typename B>
const B* block(const uint8_t* row, int64_t i) {
  return reinterpret_cast<const B*>(row) + i;
}

// ---- activation quantization: d = amax / 127, q = round-to-nearest-even(x * (1 / d)) ----

float quantize_block(const float* x, int n, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int s = 0;
  for (int j = 0; j < n; ++j) {
    const float v = x[j] * id;  // a separate statement: no fused multiply-round
    qs[j] = static_cast<int8_t>(std::lrint(v));
    s += qs[j];
  }
  *sum = s;
  return d;
}

void quantize_q8a(const float* x, BlockQ8A* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) {
    int s;
    y[i].d = quantize_block(x + 32 * i, 32, y[i].qs, &s);
    y[i].s = y[i].d * static_cast<float>(s);
  }
}

void quantize_q8k256(const float* x, BlockQ8K256* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int s;
    y[i].d = quantize_block(x + kQK_K * i, kQK_K, y[i].qs, &s);
    for (int j = 0; j < 16; ++j) {
      int b = 0;
      for (int l = 0; l < 16; ++l) b += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(b);
    }
  }
}

// Group of element e (0..255) of a super-block: BlockQ8K's strided groups of 32.
int q8k_group(int e) { return (e % 32) / 4; }

void quantize_q8k(const float* x, BlockQ8K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* v = x + kQK_K * i;
    float amax[8] = {};
    for (int e = 0; e < kQK_K; ++e)
      amax[q8k_group(e)] = std::fmax(amax[q8k_group(e)], std::fabs(v[e]));
    float id[8];
    for (int g = 0; g < 8; ++g) {
      y[i].d[g] = amax[g] / 127.0f;
      id[g] = y[i].d[g] != 0.0f ? 1.0f / y[i].d[g] : 0.0f;
    }
    for (int e = 0; e < kQK_K; ++e) {
      const float t = v[e] * id[q8k_group(e)];  // a separate statement: no fused multiply-round
      y[i].qs[e] = static_cast<int8_t>(std::lrint(t));
    }
    q8k_bsums(&y[i]);
  }
}

// ---- dot products of one weight row with one activation row ----

// Weight rows may sit at any byte offset (blocks of 18, 20, 22 bytes pack rows unaligned in
// general), so elements are read with memcpy.
float dot_f32(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* b = reinterpret_cast<const float*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float a;
    std::memcpy(&a, w + 4 * i, 4);
    acc += a * b[i];
  }
  return acc;
}

float dot_f16(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* b = reinterpret_cast<const float*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    acc += fp16_to_fp32(h) * b[i];
  }
  return acc;
}

float dot_bf16(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* b = reinterpret_cast<const float*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    acc += bf16_to_fp32(h) * b[i];
  }
  return acc;
}

// Q4_0 / Q5_0: value (q - 8) d, (q - 16) d; exact integer sum per block.
float dot_q4_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockQ4_0>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += ((b->qs[j] & 0x0F) - 8) * a->qs[j];
      s += ((b->qs[j] >> 4) - 8) * a->qs[j + 16];
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s);
  }
  return acc;
}

float dot_q4_1(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockQ4_1>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += (b->qs[j] & 0x0F) * a->qs[j];
      s += (b->qs[j] >> 4) * a->qs[j + 16];
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s) + fp16_to_fp32(b->m) * a->s;
  }
  return acc;
}

int q5_code(const uint8_t* qs, uint32_t qh, int j) {  // element j (0..31) of a Q5 block
  const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}

float dot_q5_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockQ5_0>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += (q5_code(b->qs, qh, j) - 16) * a->qs[j];
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s);
  }
  return acc;
}

float dot_q5_1(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockQ5_1>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += q5_code(b->qs, qh, j) * a->qs[j];
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s) + fp16_to_fp32(b->m) * a->s;
  }
  return acc;
}

float dot_q8_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockQ8_0>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += b->qs[j] * a->qs[j];
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s);
  }
  return acc;
}

// Scale and min of sub-block j from the 12 packed bytes (as ggml_types.cpp decodes them).
void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// The K-quants against BlockQ8K: per super-block and group g, the exact integer sum isum[g] =
// sum over the group's elements of (sub-block scale) q_w q_x, with the weight codes unsigned as
// the x86 kernels take them (Q6_K 0..63, Q3_K 0..7); then d sum_g d_x[g] isum[g] in float, and
// the mins (Q2_K, Q4_K, Q5_K: - dmin sum m bsums) or offsets (Q6_K: - 32 d sum sc bsums, Q3_K:
// - 4 d sum sc bsums) through the dequantized activation sums. The integer sums are gathered per
// offset l within 32 elements, acc32[l] += sc q_w q_x with the product of the codes in 16 bits
// (an element-wise loop the compiler vectorises; summing into isum[l / 4] directly, or three
// factors in 32 bits, ran 2-18x slower), and group g's sum is acc32[4g] + .. + acc32[4g + 3].

// d_x's dot with the 8 group sums of acc32, in float.
float group_dot(const BlockQ8K* a, const int* acc32) {
  float s = 0.0f;
  for (int g = 0; g < 8; ++g) {
    const int isum = acc32[4 * g] + acc32[4 * g + 1] + acc32[4 * g + 2] + acc32[4 * g + 3];
    s += a->d[g] * static_cast<float>(isum);
  }
  return s;
}

// Q4_K / Q5_K: 32-element sub-blocks j with scale sc_j and min m_j; chunk c = j / 2 shares qs
// bytes (low nibbles: j even).
template <bool kFive>
float dot_q45_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<Block>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) scale_min_k4(j, b->scales, &sc[j], &m[j]);
    int acc32[32] = {};
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) of qs[32c ..]
      const uint8_t* qs = b->qs + 32 * c;
      const int8_t* x0 = a->qs + 64 * c;
      const int8_t* x1 = x0 + 32;
      const auto s0 = static_cast<int16_t>(sc[2 * c]), s1 = static_cast<int16_t>(sc[2 * c + 1]);
      for (int l = 0; l < 32; ++l) {
        int q0 = qs[l] & 0x0F, q1 = qs[l] >> 4;
        if constexpr (kFive) {
          q0 |= ((b->qh[l] >> (2 * c)) & 1) << 4;
          q1 |= ((b->qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        const auto p0 = static_cast<int16_t>(q0 * x0[l]), p1 = static_cast<int16_t>(q1 * x1[l]);
        acc32[l] += static_cast<int>(s0) * p0 + static_cast<int>(s1) * p1;
      }
    }
    float summ = 0.0f;
    for (int j = 0; j < 8; ++j)
      summ += static_cast<float>(m[j]) * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    acc += fp16_to_fp32(b->d) * group_dot(a, acc32) - fp16_to_fp32(b->dmin) * summ;
  }
  return acc;
}

// Q6_K: value d sc_s (q - 32), q in 0..63, 16-element sub-blocks s.
float dot_q6_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ6_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int acc32[32] = {};
    float corr = 0.0f;
    for (int h = 0; h < 2; ++h) {  // 128-element halves
      const uint8_t* ql = b->ql + 64 * h;
      const uint8_t* qh = b->qh + 32 * h;
      for (int k = 0; k < 4; ++k) {  // quarters of 32: low/high nibbles of ql[0..31]/ql[32..63]
        const int8_t* xq = a->qs + 128 * h + 32 * k;
        // Elements 0-15 of the quarter are sub-block 8h + 2k, 16-31 the next.
        for (int half = 0; half < 2; ++half) {
          const auto sc = static_cast<int16_t>(b->scales[8 * h + 2 * k + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const uint8_t lo = ql[l + 32 * (k & 1)];
            const int nib = k < 2 ? (lo & 0x0F) : (lo >> 4);
            const auto p = static_cast<int16_t>((nib | (((qh[l] >> (2 * k)) & 3) << 4)) * xq[l]);
            acc32[l] += static_cast<int>(sc) * p;
          }
        }
      }
    }
    for (int s = 0; s < 16; ++s) corr += static_cast<float>(b->scales[s]) * a->bsums[s];
    acc += fp16_to_fp32(b->d) * (group_dot(a, acc32) - 32.0f * corr);
  }
  return acc;
}

// Q2_K: value d sc_s q - dmin m_s, q in 0..3 and 16-element sub-blocks s; element 16 s + l sits
// in byte 32 h + 16 (s % 2) + l at bits 2 j, with h = s / 8 the 128-element half and j = (s % 8)
// / 2 the shift.
float dot_q2_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ2_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int acc32[32] = {};
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 4; ++j) {  // elements 128 h + 32 j + l at bits 2 j of qs[32 h + l]
        const uint8_t* qs = b->qs + 32 * h;
        const int8_t* xq = a->qs + 128 * h + 32 * j;
        for (int half = 0; half < 2; ++half) {  // sub-blocks 8h + 2j (elements 0-15), + 1
          const auto sc = static_cast<int16_t>(b->scales[8 * h + 2 * j + half] & 0xF);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const auto p = static_cast<int16_t>(((qs[l] >> (2 * j)) & 3) * xq[l]);
            acc32[l] += static_cast<int>(sc) * p;
          }
        }
      }
    }
    float summ = 0.0f;
    for (int s = 0; s < 16; ++s) summ += static_cast<float>(b->scales[s] >> 4) * a->bsums[s];
    acc += fp16_to_fp32(b->d) * group_dot(a, acc32) - fp16_to_fp32(b->dmin) * summ;
  }
  return acc;
}

// The signed scale of Q3_K sub-block s (-32..31) from its 12 packed bytes.
int q3_k_scale(const uint8_t* sc, int s) {
  const int low = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
  const int top = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (top << 4)) - 32;
}

// Q3_K: value d sc_s (q - 4), q = low 2 bits (laid out as Q2_K's) | bit 4 h + j of
// hmask[16 (s % 2) + l] << 2.
float dot_q3_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ3_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int acc32[32] = {};
    int sc[16];
    for (int s = 0; s < 16; ++s) sc[s] = q3_k_scale(b->scales, s);
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 4; ++j) {  // elements 128 h + 32 j + l, as Q2_K's, high bit 4 h + j
        const uint8_t* qs = b->qs + 32 * h;
        const int8_t* xq = a->qs + 128 * h + 32 * j;
        for (int half = 0; half < 2; ++half) {  // sub-blocks 8h + 2j (elements 0-15), + 1
          const auto s16 = static_cast<int16_t>(sc[8 * h + 2 * j + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = ((qs[l] >> (2 * j)) & 3) | (((b->hmask[l] >> (4 * h + j)) & 1) << 2);
            acc32[l] += static_cast<int>(s16) * static_cast<int16_t>(q * xq[l]);
          }
        }
      }
    }
    float corr = 0.0f;
    for (int s = 0; s < 16; ++s) corr += static_cast<float>(sc[s]) * a->bsums[s];
    acc += fp16_to_fp32(b->d) * (group_dot(a, acc32) - 4.0f * corr);
  }
  return acc;
}

// IQ4_NL: value kValuesIQ4NL[code] * d, codes laid out as Q4_0's; exact integer sum per block.
float dot_iq4_nl(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto* b = block<BlockIQ4_NL>(w, i);
    const auto* a = block<BlockQ8A>(x, i);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += kValuesIQ4NL[b->qs[j] & 0x0F] * a->qs[j];
      s += kValuesIQ4NL[b->qs[j] >> 4] * a->qs[j + 16];
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(s);
  }
  return acc;
}

// IQ4_XS: per 32-element sub-block ib (each laid out as an IQ4_NL block) d dx_ib (ls_ib - 32)
// sum(kValuesIQ4NL[code] x), against one BlockQ8A per sub-block: a scale of its own for each
// sub-block's activations, as for the weights (one scale per 256 gave the test models' logits
// 1.4x to 3.7x the NMSE against the float64 reference).
float dot_iq4_xs(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockIQ4_XS>(w, i);
    const float d = fp16_to_fp32(b->d);
    const uint32_t scales_h = b->scales_h;
    for (int ib = 0; ib < 8; ++ib) {
      const auto* a = block<BlockQ8A>(x, 8 * i + ib);
      const int ls =
          ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t* qs = b->qs + 16 * ib;
      int s = 0;
      for (int j = 0; j < 16; ++j) {
        s += kValuesIQ4NL[qs[j] & 0x0F] * a->qs[j];
        s += kValuesIQ4NL[qs[j] >> 4] * a->qs[j + 16];
      }
      acc += d * a->d * static_cast<float>((ls - 32) * s);
    }
  }
  return acc;
}

template <float (*Dot)(const uint8_t*, const uint8_t*, int64_t)>
void tile11(const uint8_t* w, size_t, const uint8_t* x, size_t, int64_t n, float* y, size_t) {
  y[0] = Dot(w, x, n);
}

template <float (*Dot)(const uint8_t*, const uint8_t*, int64_t)>
void put(QuantKernels& q, GgmlType t) {
  TypeKernels& k = q.type[static_cast<int>(t)];
  k.tile[0][0] = &tile11<Dot>;
  k.decode_rows = k.prefill_rows = k.prefill_tokens = 1;
}

QuantKernels make_table() {
  QuantKernels q{};
  put<dot_f32>(q, GgmlType::F32);
  put<dot_f16>(q, GgmlType::F16);
  put<dot_bf16>(q, GgmlType::BF16);
  put<dot_q4_0>(q, GgmlType::Q4_0);
  put<dot_q4_1>(q, GgmlType::Q4_1);
  put<dot_q5_0>(q, GgmlType::Q5_0);
  put<dot_q5_1>(q, GgmlType::Q5_1);
  put<dot_q8_0>(q, GgmlType::Q8_0);
  put<dot_q45_k<false>>(q, GgmlType::Q4_K);
  put<dot_q45_k<true>>(q, GgmlType::Q5_K);
  put<dot_q6_k>(q, GgmlType::Q6_K);
  put<dot_q2_k>(q, GgmlType::Q2_K);
  put<dot_q3_k>(q, GgmlType::Q3_K);
  put<dot_iq4_nl>(q, GgmlType::IQ4_NL);
  put<dot_iq4_xs>(q, GgmlType::IQ4_XS);
  q.quantize_q8a = &quantize_q8a;
  q.quantize_q8k = &quantize_q8k;
  q.quantize_q8k256 = &quantize_q8k256;
  return q;
}

}  // namespace

void q8k_bsums(BlockQ8K* b) {
  for (int j = 0; j < 16; ++j) {
    float p[4];
    for (int k = 0; k < 4; ++k) {
      const int8_t* q = b->qs + 16 * j + 4 * k;
      p[k] = b->d[4 * (j % 2) + k] * static_cast<float>(q[0] + q[1] + q[2] + q[3]);
    }
    b->bsums[j] = (p[0] + p[1]) + (p[2] + p[3]);
  }
}

const QuantKernels* quant_kernels_scalar() {
  static const QuantKernels table = make_table();
  return &table;
}

}  // namespace spw::cpu
