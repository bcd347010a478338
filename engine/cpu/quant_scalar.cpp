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

void quantize_q8k(const float* x, BlockQ8K* y, int64_t n) {
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

// Q4_K / Q5_K: per super-block d dx sum_j sc_j sum(q x) - dmin dx sum_j m_j bsum_j.
template <bool kFive>
float dot_q45_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<Block>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {  // 32-element sub-blocks; chunk c = j / 2 shares qs bytes
      int sc, m;
      scale_min_k4(j, b->scales, &sc, &m);
      const uint8_t* qs = b->qs + 32 * (j / 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (j & 1) ? (qs[l] >> 4) : (qs[l] & 0x0F);
        if constexpr (kFive) q |= ((b->qh[l] >> j) & 1) << 4;
        s += q * a->qs[32 * j + l];
      }
      sumi += sc * s;
      summ += m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(sumi) -
           fp16_to_fp32(b->dmin) * a->d * static_cast<float>(summ);
  }
  return acc;
}

// Q6_K: per super-block d dx sum_k sc_k sum((q - 32) x), q in 0..63, 16-element sub-blocks.
float dot_q6_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ6_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int sumi = 0;
    for (int h = 0; h < 2; ++h) {  // 128-element halves
      const uint8_t* ql = b->ql + 64 * h;
      const uint8_t* qh = b->qh + 32 * h;
      for (int k = 0; k < 4; ++k) {  // quarters of 32: low/high nibbles of ql[0..31]/ql[32..63]
        for (int half = 0; half < 2; ++half) {
          int s = 0;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const uint8_t lo = ql[l + 32 * (k & 1)];
            const int nib = k < 2 ? (lo & 0x0F) : (lo >> 4);
            const int q = nib | (((qh[l] >> (2 * k)) & 3) << 4);
            s += (q - 32) * a->qs[128 * h + 32 * k + l];
          }
          sumi += b->scales[8 * h + 2 * k + half] * s;
        }
      }
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(sumi);
  }
  return acc;
}

// Q2_K: per super-block d dx sum_s sc_s sum(q x) - dmin dx sum_s m_s bsum_s, q in 0..3 and
// 16-element sub-blocks s; element 16 s + l sits in byte 32 h + 16 (s % 2) + l at bits 2 j, with
// h = s / 8 the 128-element half and j = (s % 8) / 2 the shift.
float dot_q2_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ2_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int sumi = 0, summ = 0;
    for (int s = 0; s < 16; ++s) {
      const uint8_t* qs = b->qs + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += ((qs[l] >> shift) & 3) * a->qs[16 * s + l];
      sumi += (b->scales[s] & 0xF) * dot;
      summ += (b->scales[s] >> 4) * a->bsums[s];
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(sumi) -
           fp16_to_fp32(b->dmin) * a->d * static_cast<float>(summ);
  }
  return acc;
}

// The signed scale of Q3_K sub-block s (-32..31) from its 12 packed bytes.
int q3_k_scale(const uint8_t* sc, int s) {
  const int low = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
  const int top = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (top << 4)) - 32;
}

// Q3_K: per super-block d dx sum_s sc_s sum((q - 4) x), q = low 2 bits (laid out as Q2_K's) |
// bit 4 h + j of hmask[16 (s % 2) + l] << 2.
float dot_q3_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* b = block<BlockQ3_K>(w, i);
    const auto* a = block<BlockQ8K>(x, i);
    int sumi = 0;
    for (int s = 0; s < 16; ++s) {
      const int h = s / 8, j = (s % 8) / 2;
      const uint8_t* qs = b->qs + 32 * h + 16 * (s % 2);
      const uint8_t* hm = b->hmask + 16 * (s % 2);
      int dot = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = ((qs[l] >> (2 * j)) & 3) | (((hm[l] >> (4 * h + j)) & 1) << 2);
        dot += (q - 4) * a->qs[16 * s + l];
      }
      sumi += q3_k_scale(b->scales, s) * dot;
    }
    acc += fp16_to_fp32(b->d) * a->d * static_cast<float>(sumi);
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
  return q;
}

}  // namespace

const QuantKernels* quant_kernels_scalar() {
  static const QuantKernels table = make_table();
  return &table;
}

}  // namespace spw::cpu
