#include "engine/cpu/quant_dot.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"

namespace spw::cpu {
namespace {

// Tokens per block in matmul: 64 rows of Q8 activations for n_in = 4096 are ~320 KB, which
// stay in L2 while a thread walks its weight rows over them.
constexpr int64_t kTokenBlock = 64;

// Below this many bytes of weights x tokens a product runs on the calling thread alone: waking
// the pool would cost more than it saves.
constexpr size_t kSerialBytes = 32 * 1024;

const TypeKernels& type_kernels(const QuantKernels& q, GgmlType wtype) {
  assert(is_supported_type(wtype));
  const TypeKernels& k = q.type[static_cast<int>(wtype)];
  assert(k.tile[0][0] != nullptr);
  return k;
}

// Reused conversion buffer of the calling thread (grows, never shrinks).
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

void run_tiles(const TypeKernels& k, const uint8_t* W, size_t ws, int64_t n_in, int64_t n_out,
               const uint8_t* X, size_t xs, int64_t n_tokens, float* Y, ThreadPool& pool) {
  const bool decode = n_tokens == 1;
  const int R = decode ? k.decode_rows : k.prefill_rows;
  const int T = decode ? 1 : k.prefill_tokens;
  const int64_t n_units = (n_out + R - 1) / R;  // a unit is R consecutive rows
  const auto body = [&](int64_t u0, int64_t u1) {
    const int64_t r0 = u0 * R, r1 = std::min(n_out, u1 * R);
    for (int64_t tb = 0; tb < n_tokens; tb += kTokenBlock) {
      const int64_t te = std::min(n_tokens, tb + kTokenBlock);
      for (int64_t r = r0; r < r1; r += R) {
        const int nr = static_cast<int>(std::min<int64_t>(R, r1 - r));
        for (int64_t t = tb; t < te; t += T) {
          const int nt = static_cast<int>(std::min<int64_t>(T, te - t));
          k.tile[nr - 1][nt - 1](W + static_cast<size_t>(r) * ws, ws,
                                 X + static_cast<size_t>(t) * xs, xs, n_in, Y + t * n_out + r,
                                 static_cast<size_t>(n_out));
        }
      }
    }
  };
  if (pool.size() == 1 || ws * static_cast<size_t>(n_out * n_tokens) < kSerialBytes) {
    body(0, n_units);
  } else {
    pool.parallel_for(n_units, body);
  }
}

}  // namespace

VecDotType vec_dot_type(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return VecDotType::F32;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return VecDotType::Q8K;
    default:
      return VecDotType::Q8A;
  }
}

size_t activation_row_size(GgmlType wtype, int64_t n) {
  switch (vec_dot_type(wtype)) {
    case VecDotType::F32:
      return static_cast<size_t>(n) * sizeof(float);
    case VecDotType::Q8A:
      assert(n % 32 == 0);
      return static_cast<size_t>(n / 32) * sizeof(BlockQ8A);
    case VecDotType::Q8K:
      assert(n % kQK_K == 0);
      return static_cast<size_t>(n / kQK_K) * sizeof(BlockQ8K);
  }
  return 0;
}

void quantize_activation_row(GgmlType wtype, const float* x, void* xq, int64_t n) {
  const QuantKernels& q = active_quant_kernels();
  switch (vec_dot_type(wtype)) {
    case VecDotType::F32:
      std::memcpy(xq, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case VecDotType::Q8A:
      return q.quantize_q8a(x, static_cast<BlockQ8A*>(xq), n);
    case VecDotType::Q8K:
      return q.quantize_q8k(x, static_cast<BlockQ8K*>(xq), n);
  }
}

void quantize_activations(GgmlType wtype, const float* X, int64_t n_tokens, int64_t n, void* Xq,
                          ThreadPool& pool) {
  const size_t xs = activation_row_size(wtype, n);
  auto* out = static_cast<uint8_t*>(Xq);
  const auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      quantize_activation_row(wtype, X + t * n, out + static_cast<size_t>(t) * xs, n);
  };
  if (n_tokens * n < 16384) {
    body(0, n_tokens);
  } else {
    pool.parallel_for(n_tokens, body);
  }
}

float vec_dot(GgmlType wtype, const void* w_row, const void* xq, int64_t n) {
  const TypeKernels& k = type_kernels(active_quant_kernels(), wtype);
  float y;
  k.tile[0][0](static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(xq), 0, n, &y, 0);
  return y;
}

void matvec(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const float* x, float* y,
            ThreadPool& pool) {
  matmul(wtype, W, n_in, n_out, x, 1, y, pool);
}

void matmul(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const float* X,
            int64_t n_tokens, float* Y, ThreadPool& pool) {
  if (n_tokens <= 0 || n_out <= 0) return;
  if (vec_dot_type(wtype) == VecDotType::F32) {
    return matmul_q(wtype, W, n_in, n_out, X, n_tokens, Y, pool);
  }
  uint8_t* xq = scratch(activation_row_size(wtype, n_in) * static_cast<size_t>(n_tokens));
  quantize_activations(wtype, X, n_tokens, n_in, xq, pool);
  matmul_q(wtype, W, n_in, n_out, xq, n_tokens, Y, pool);
}

void matmul_q(GgmlType wtype, const void* W, int64_t n_in, int64_t n_out, const void* Xq,
              int64_t n_tokens, float* Y, ThreadPool& pool) {
  if (n_tokens <= 0 || n_out <= 0) return;
  const TypeKernels& k = type_kernels(active_quant_kernels(), wtype);
  run_tiles(k, static_cast<const uint8_t*>(W), row_size(wtype, n_in), n_in, n_out,
            static_cast<const uint8_t*>(Xq), activation_row_size(wtype, n_in), n_tokens, Y, pool);
}

}  // namespace spw::cpu
