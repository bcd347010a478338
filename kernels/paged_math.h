// Addressing and element access of the paged KV cache as the CUDA kernels read and write it
// (kernels/paged_attention.cu, kernels/kv_store.cu), shared with the CPU tests
// (tests/unit/test_kernel_paged_math.cpp) so the layout and the q8_0 rounding are checked
// without a GPU.
//
// Layout (engine/kv/kv_cache.h, the read_block layout): a logical block of block_size
// positions is one slot of block_bytes; for each layer il its K part starts at
// il * layer_bytes and holds [n_kv_heads][block_size][row_k bytes], its V part follows at
// il * layer_bytes + layer_k_bytes with [n_kv_heads][block_size][row_v bytes]. A row is one
// head of one position in the cache type: F32 (4 B per element), F16 (2 B) or Q8_0 (34-byte
// blocks of 32 elements: f16 scale d, then 32 int8 q; element e = q[e % 32] * d of block e / 32).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common.h"
#include "kernels/quant_math.h"

namespace spw::kernels {

/// One block of the paged cache as an attention kernel sees it (an entry of a block table).
struct PagedBlock {
  uint8_t* base = nullptr;  // the block's slot (device memory), all layers
  int32_t pos0 = 0;         // position of its row 0
  int32_t n_rows = 0;       // valid rows, 1..block_size
};

/// Where one layer's K and V rows lie inside a slot, and their types.
struct PagedLayer {
  int64_t k_off = 0;  // bytes from the slot to this layer's K part: il * layer_bytes
  int64_t v_off = 0;  // ... to its V part: il * layer_bytes + layer_k_bytes
  int64_t row_k = 0;  // bytes of one K row: row_size(type_k, head_dim)
  int64_t row_v = 0;  // bytes of one V row: row_size(type_v, head_dim_v)
  int32_t block_size = 0;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
};

/// K row of KV head g, row r of a block whose slot starts at base.
SPW_HD const uint8_t* paged_k_row(const uint8_t* base, const PagedLayer& L, int g, int r) {
  return base + L.k_off + (static_cast<int64_t>(g) * L.block_size + r) * L.row_k;
}
/// V row of KV head g, row r.
SPW_HD const uint8_t* paged_v_row(const uint8_t* base, const PagedLayer& L, int g, int r) {
  return base + L.v_off + (static_cast<int64_t>(g) * L.block_size + r) * L.row_v;
}

/// Element d of a row in type T (F32, F16 or Q8_0), as f32. Q8_0: q * d in one rounding, as
/// the CPU's dequantize_row.
template <GgmlType T>
SPW_HD float load_elem(const uint8_t* row, int d) {
  if constexpr (T == GgmlType::F32) {
    return bits_to_float(load_u32<true>(row + 4 * d));
  } else if constexpr (T == GgmlType::F16) {
    return half_to_float(static_cast<uint16_t>(load_u16(row + 2 * d)));
  } else {
    static_assert(T == GgmlType::Q8_0, "paged KV types: F32, F16, Q8_0");
    const uint8_t* blk = row + (d / kQK8_0) * static_cast<int>(sizeof(BlockQ8_0));
    const float scale = half_to_float(static_cast<uint16_t>(load_u16(blk)));
    const auto q = static_cast<int8_t>(blk[2 + d % kQK8_0]);
    return mul_rn(static_cast<float>(q), scale);
  }
}

/// a / b rounded once (IEEE division also under nvcc's fast-division flags).
SPW_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// max(m, |x|) (fmaxf / std::fmax: exact, and order-free for the non-NaN values a cache holds).
SPW_HD float fmax_abs(float m, float x) {
#if defined(__CUDA_ARCH__)
  return fmaxf(m, fabsf(x));
#else
  return std::fmax(m, std::fabs(x));
#endif
}

/// The Q8_0 scale of a 32-element block whose largest |x| is amax, and its inverse, as the CPU
/// cache writes them (engine/cpu: d = amax / 127, id = 1 / d, or 0 for an all-zero
/// block). The device reduces amax across a warp with fmaxf, which is exact, so the bytes match
/// the CPU's bit for bit.
struct Q8Scale {
  float d;
  float id;
};
SPW_HD Q8Scale q8_0_scale(float amax) {
  const float d = div_rn(amax, 127.0f);
  return {d, d != 0.0f ? div_rn(1.0f, d) : 0.0f};
}

/// One element's int8: round(x * id), halves away from zero (std::round / roundf).
SPW_HD int8_t q8_0_quant(float x, float id) {
#if defined(__CUDA_ARCH__)
  return static_cast<int8_t>(roundf(mul_rn(x, id)));
#else
  return static_cast<int8_t>(std::round(mul_rn(x, id)));
#endif
}

/// Quantizes 32 floats into one BlockQ8_0 (34 bytes at out), serially: the reference the
/// device's warp-parallel write is checked against, and bit-identical to the CPU cache's
/// f32 -> q8_0 row conversion.
SPW_HD void quantize_q8_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = fmax_abs(amax, x[j]);
  const Q8Scale s = q8_0_scale(amax);
  const uint16_t dh = float_to_half_rne(s.d);
  out[0] = static_cast<uint8_t>(dh & 0xFF);
  out[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < kQK8_0; ++j) out[2 + j] = static_cast<uint8_t>(q8_0_quant(x[j], s.id));
}

}  // namespace spw::kernels
