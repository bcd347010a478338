#include "engine/cpu/gemm.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/common/fp16.h"
#include "engine/cpu/gemm_kernels.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/thread_pool.h"

namespace spw::cpu {
namespace {

// Tokens per block of a thread's walk over its row groups: 64 tokens of Q8A activations for
// n_in = 2816 are ~220 KB, which stay in L2 while the thread's groups (48 KB each at that
// n_in) stream past them once per block.
constexpr int64_t kTokenBlock = 64;

// Below this many weight bytes x tokens a product runs on the calling thread alone (as
// quant_dot.cpp: waking the pool would cost more than it saves).
constexpr size_t kSerialBytes = 32 * 1024;

// The scalar tile: the same integer sums and the same float steps as the SIMD tiles, one
// (row, token) at a time.
void q8_0_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t*,
                 float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kQ8_0GroupBlockBytes;
        const BlockQ8A& xb = x[t * xs + b];
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) {
          const int wi = static_cast<int>(wb[64 * (i / 4) + 4 * r + i % 4]) - 128;
          s += wi * xb.qs[i];
        }
        uint16_t h;
        std::memcpy(&h, wb + 512 + 2 * r, sizeof h);
        const float dd = fp16_to_fp32(h) * xb.d;
        acc = std::fma(dd, static_cast<float>(s), acc);
      }
      y[t * ys + r] = acc;
    }
  }
}

void q4_k_scalar(const uint8_t* w, int64_t nb, const BlockQ8K256* x, int64_t xs, const int16_t* bs,
                 float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kQ4_KGroupBlockBytes;
        const BlockQ8K256& xb = x[t * xs + b];
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t s = 0;
          for (int e = 32 * j; e < 32 * j + 32; ++e) {
            const int k = (e % 128) / 4;
            const uint8_t byte = wb[64 * k + 4 * r + e % 4];
            s += (e < 128 ? byte & 0x0F : byte >> 4) * xb.qs[e];
          }
          isum += wb[2048 + 16 * j + r] * s;
          msum += wb[2176 + 32 * (j / 2) + 2 * r + j % 2] * bs[(t * xs + b) * 8 + j];
        }
        uint16_t hd, hm;
        std::memcpy(&hd, wb + 2304 + 2 * r, sizeof hd);
        std::memcpy(&hm, wb + 2336 + 2 * r, sizeof hm);
        const float dd = fp16_to_fp32(hd) * xb.d, dm = fp16_to_fp32(hm) * xb.d;
        acc = std::fma(dd, static_cast<float>(isum), acc);
        acc = std::fma(-dm, static_cast<float>(msum), acc);
      }
      y[t * ys + r] = acc;
    }
  }
}

// Q5_K: per 32-element sub-block j, S_j = sum of q x (q the 5-bit codes) in integers, then
// acc = fma(d_x, float(S_j) * (d_w sc_j), acc) and acc = fma(-(dmin_w m_j), s_x, acc).
void q5_k_scalar(const uint8_t* w, int64_t nb, const BlockQ8A* x, int64_t xs, const int32_t*,
                 float* y, int64_t ys, int nr, int nt) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w + b * kQ5_KGroupBlockBytes;
        uint16_t hd, hm;
        std::memcpy(&hd, wb + 2304 + 2 * r, sizeof hd);
        std::memcpy(&hm, wb + 2336 + 2 * r, sizeof hm);
        const float dw = fp16_to_fp32(hd), dmin = fp16_to_fp32(hm);
        for (int j = 0; j < 8; ++j) {
          const BlockQ8A& xb = x[t * xs + 8 * b + j];
          int32_t sum = 0;
          for (int e = 32 * j; e < 32 * j + 32; ++e) {
            const uint8_t byte = wb[64 * ((e % 128) / 4) + 4 * r + e % 4];
            const uint8_t h = wb[kQ4_KGroupBlockBytes + 64 * ((e % 32) / 4) + 4 * r + e % 4];
            const int q = (e < 128 ? byte & 0x0F : byte >> 4) | (((h >> j) & 1) << 4);
            sum += q * xb.qs[e % 32];
          }
          const float a = dw * static_cast<float>(wb[2048 + 16 * j + r]);
          const float bm = dmin * static_cast<float>(wb[2176 + 32 * (j / 2) + 2 * r + j % 2]);
          acc = std::fma(xb.d, static_cast<float>(sum) * a, acc);
          acc = std::fma(-bm, xb.s, acc);
        }
      }
      y[t * ys + r] = acc;
    }
  }
}

const GemmKernels kScalar = [] {
  GemmKernels k{.q8_0 = &q8_0_scalar,
                .q4_k = &q4_k_scalar,
                .max_tokens_k = 4,
                .max_tokens = 4,
                .uses_comp = false,
                .max_tokens_6 = 4,
                .q5_k = &q5_k_scalar};
  add_low_bit_tiles_scalar(k);
  return k;
}();

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j.
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void pack_q8_0_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                     uint8_t* gd) {
  // The padding rows: d = 0, codes 0.
  for_each_group_block<BlockQ8_0>(src, rs, g, nb, n_out, gd, kQ8_0GroupBlockBytes,
                                  [&](const BlockQ8_0& blk, int r, uint8_t* out) {
                                    for (int k = 0; k < 8;
                                         ++k) {  // 4 codes at a time, sign bits flipped
                                      uint32_t v;
                                      std::memcpy(&v, blk.qs + 4 * k, sizeof v);
                                      v ^= 0x80808080u;
                                      std::memcpy(out + 64 * k + 4 * r, &v, sizeof v);
                                    }
                                    std::memcpy(out + 512 + 2 * r, &blk.d, sizeof blk.d);
                                  });
}

// Q4_K, and Q5_K (its codes' low 4 bits in Q4_K's record, the 5th bits after it).
template <bool kFive>
void pack_q45_k_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                      uint8_t* gd) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  // The padding rows: d = dmin = 0, codes and scales 0.
  for_each_group_block<Block>(
      src, rs, g, nb, n_out, gd, kFive ? kQ5_KGroupBlockBytes : kQ4_KGroupBlockBytes,
      [&](const Block& blk, int r, uint8_t* out) {
        uint8_t q[256];  // the element codes' low 4 bits in order
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = blk.qs[32 * c + l] & 0x0F;
            q[64 * c + 32 + l] = blk.qs[32 * c + l] >> 4;
          }
        }
        if constexpr (kFive) {  // the 5th bit of element e is bit e / 32 of qh[e % 32]
          for (int gr = 0; gr < 8; ++gr) {
            for (int j = 0; j < 4; ++j)
              out[kQ4_KGroupBlockBytes + 64 * gr + 4 * r + j] = blk.qh[4 * gr + j];
          }
        }
        for (int k = 0; k < 32; ++k) {
          for (int j = 0; j < 4; ++j) {
            out[64 * k + 4 * r + j] =
                static_cast<uint8_t>(q[4 * k + j] | (q[128 + 4 * k + j] << 4));
          }
        }
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          scale_min_k4(j, blk.scales, sc, m);
          out[2048 + 16 * j + r] = sc;
          out[2176 + 32 * (j / 2) + 2 * r + j % 2] = m;
        }
        std::memcpy(out + 2304 + 2 * r, &blk.d, sizeof blk.d);
        std::memcpy(out + 2336 + 2 * r, &blk.dmin, sizeof blk.dmin);
      });
}

// Q6_K: the low 4 bits of element e of a 128-element half h sit in ql[64 h + e % 64], low nibble
// for e % 128 < 64, high above (ggml's dequantize_row_q6_K), so plane k < 16 takes the low nibbles
// of ql[4k ..] and ql[64 + 4k ..], plane k >= 16 the high nibbles of ql[4k - 64 ..] and ql[4k ..];
// qh has Q3_K's 2-bit layout (pack_2bit_planes); the scale pairs (2j, 2j + 1) are adjacent.
void pack_q6_k_group(const uint8_t* src, size_t rs, int64_t g, int64_t nb, int64_t n_out,
                     uint8_t* gd) {
  const auto word = [](const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, sizeof w);
    return w;
  };
  // The padding rows: d = 0, codes and scales 0.
  for_each_group_block<BlockQ6_K>(
      src, rs, g, nb, n_out, gd, kQ6_KGroupBlockBytes,
      [&](const BlockQ6_K& blk, int r, uint8_t* out) {
        constexpr uint32_t m4 = 0x0F0F0F0Fu;
        for (int k = 0; k < 32; ++k) {
          const uint32_t v =
              k < 16 ? (word(blk.ql + 4 * k) & m4) | ((word(blk.ql + 64 + 4 * k) & m4) << 4)
                     : ((word(blk.ql + 4 * k - 64) >> 4) & m4) | (word(blk.ql + 4 * k) & ~m4);
          std::memcpy(out + 64 * k + 4 * r, &v, sizeof v);
        }
        pack_2bit_planes(blk.qh, r, out + 2048);
        for (int j = 0; j < 8; ++j) std::memcpy(out + 3072 + 32 * j + 2 * r, blk.scales + 2 * j, 2);
        std::memcpy(out + 3328 + 2 * r, &blk.d, sizeof blk.d);
      });
}

const GemmKernels& active_kernels() {
  const GemmKernels* k = nullptr;
  switch (simd_level()) {
#if defined(__x86_64__)  // the AVX units are built on x86-64 only (engine/CMakeLists.txt)
    case SimdLevel::Avx512:
      k = gemm_kernels_avx512();
      break;
    case SimdLevel::Avx2:
      k = gemm_kernels_avx2();
      break;
#endif
    default:  // Scalar, and the NEON levels (no int8 GEMM tiles for Arm yet)
      break;
  }
  return k != nullptr ? *k : kScalar;
}

// What a thread's kept activations were quantized from (gemm's GemmInput::SameAsLast).
struct ActivationKey {
  const float* x = nullptr;
  int64_t n_tokens = 0, n_in = 0;
  bool k256 = false;                     // BlockQ8K256 (Q4_K) rather than BlockQ8A (Q8_0, Q6_K)
  const GemmKernels* kernels = nullptr;  // the SIMD level whose side arrays were made
  bool tiles = false;                    // the packed 8-token tiles were made too
  bool operator==(const ActivationKey&) const = default;
};

ActivationKey& last_activations() {
  thread_local ActivationKey last;
  return last;
}

// What the Q4_K tiles read beside token t's codes of super-block xb: the sums of its 8 sub-blocks
// (|sum| <= 32 x 127 fits int16) into bj[8], and where o is not null (a whole 8-token tile) its
// codes, sums and scale into slot tt of that tile (gemm_kernels.h's kQ8KTileBlockBytes layout).
void side_q8k256(const BlockQ8K256& xb, int16_t* bj, uint8_t* o, int tt) {
  for (int j = 0; j < 8; ++j) bj[j] = static_cast<int16_t>(xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
  if (o == nullptr) return;
  for (int e = 0; e < kQK_K; e += 4)  // sub-block e / 32, group (e % 32) / 4
    std::memcpy(o + 4 * (8 * (e / 4) + tt), xb.qs + e, 4);
  for (int p = 0; p < 4; ++p) std::memcpy(o + 2048 + 4 * (8 * p + tt), bj + 2 * p, 4);
  std::memcpy(o + 2176 + 4 * tt, &xb.d, 4);
}

// What the tiles read beside a BlockQ8A block: where comp is not null (Q8_0 at a level with
// VNNI's u8 bias) -128 x the sum of its codes; always the negated sums of its two 16-element
// halves as an int16 pair (Q6_K's offset); where o is not null its codes, comp, scale, halves
// and s into slot tt of an 8-token tile (kQ8ATileBlockBytes layout).
void side_q8a(const BlockQ8A& xb, int32_t* comp, int32_t& halves, uint8_t* o, int tt) {
  int32_t lo = 0, hi = 0;
  for (int i = 0; i < 16; ++i) lo += xb.qs[i];
  for (int i = 16; i < 32; ++i) hi += xb.qs[i];
  const int16_t pair[2] = {static_cast<int16_t>(-lo), static_cast<int16_t>(-hi)};
  std::memcpy(&halves, pair, sizeof halves);
  const int32_t c = -128 * (lo + hi);
  if (comp != nullptr) *comp = c;
  if (o == nullptr) return;
  for (int k = 0; k < 8; ++k) std::memcpy(o + 32 * k + 4 * tt, xb.qs + 4 * k, 4);
  std::memcpy(o + 256 + 4 * tt, &c, 4);
  std::memcpy(o + 288 + 4 * tt, &xb.d, 4);
  std::memcpy(o + 320 + 4 * tt, &halves, 4);
  std::memcpy(o + 352 + 4 * tt, &xb.s, 4);
}

// Reused activation buffers of the calling thread (grow, never shrink).
template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// The tiles of a type with BlockQ8A activations and a halves argument (all but Q8_0 and Q4_K) at
// the level of k: null where it has none.
struct TilesA {
  GemmTileFn fn = nullptr;
  GemmTile8Fn tile8 = nullptr;
};
TilesA tiles_a(const GemmKernels& k, GgmlType type) {
  if (const int slot = b32_slot(type); slot >= 0) return {k.b32[slot], k.b32_tile8[slot]};
  switch (type) {
    case GgmlType::Q2_K:
      return {k.q2_k, k.q2_k_tile8};
    case GgmlType::Q3_K:
      return {k.q3_k, k.q3_k_tile8};
    case GgmlType::Q5_K:
      return {k.q5_k, k.q5_k_tile8};
    case GgmlType::Q6_K:
      return {k.q6_k, k.q6_k_tile8};
    case GgmlType::IQ4_XS:
      return {k.iq4_xs, k.iq4_xs_tile8};
    default:
      return {};
  }
}

// Bytes of a 16-row record per block (super-block) of the type, or 0 where it has no layout.
int record_bytes(GgmlType type) {
  if (const int slot = b32_slot(type); slot >= 0) return kB32GroupBlockBytes[slot];
  switch (type) {
    case GgmlType::Q8_0:
      return kQ8_0GroupBlockBytes;
    case GgmlType::Q2_K:
      return kQ2_KGroupBlockBytes;
    case GgmlType::Q3_K:
      return kQ3_KGroupBlockBytes;
    case GgmlType::Q4_K:
      return kQ4_KGroupBlockBytes;
    case GgmlType::Q5_K:
      return kQ5_KGroupBlockBytes;
    case GgmlType::Q6_K:
      return kQ6_KGroupBlockBytes;
    case GgmlType::IQ4_XS:
      return kIQ4_XSGroupBlockBytes;
    default:
      return 0;
  }
}

}  // namespace

void PackedMatrix::Free::operator()(uint8_t* p) const {
  if (!borrowed) std::free(p);
}

bool gemm_packable(GgmlType type) {
  return type == GgmlType::Q8_0 || type == GgmlType::Q4_K ||
         tiles_a(active_kernels(), type).tile8 != nullptr;
}

size_t packed_size(GgmlType type, int64_t n_in, int64_t n_out) {
  const auto qk = static_cast<size_t>(type_traits(static_cast<uint32_t>(type))->block_size);
  const auto groups = static_cast<size_t>((n_out + kGemmGroupRows - 1) / kGemmGroupRows);
  const size_t bytes =
      groups * (static_cast<size_t>(n_in) / qk) * static_cast<size_t>(record_bytes(type));
  return (bytes + 63) / 64 * 64;
}

PackedMatrix pack_matrix(GgmlType type, const void* W, int64_t n_in, int64_t n_out,
                         ThreadPool& pool,
                         const std::function<void(const uint8_t*, size_t)>& release) {
  // The whole 2 MiB pages of a matrix sit on transparent huge pages where the kernel allows it
  // (THP "madvise" mode): the repack then takes a few hundred page faults instead of ~61,000
  // for a 250 MB model (measured 15x faster on this VM). The tail stays on small pages, so
  // nothing past the matrix becomes resident.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t total = packed_size(type, n_in, n_out);
  void* mem = nullptr;
  if (::posix_memalign(&mem, total >= kHuge ? kHuge : 64, total) != 0) std::abort();
  if (total >= kHuge) ::madvise(mem, total / kHuge * kHuge, MADV_HUGEPAGE);
  PackedMatrix p =
      pack_matrix_into(static_cast<uint8_t*>(mem), type, W, n_in, n_out, pool, release);
  p.bytes.get_deleter().borrowed = false;
  return p;
}

PackedMatrix pack_matrix_into(uint8_t* dst, GgmlType type, const void* W, int64_t n_in,
                              int64_t n_out, ThreadPool& pool,
                              const std::function<void(const uint8_t*, size_t)>& release) {
  const int record = record_bytes(type);
  assert(record > 0 && n_out >= 1);
  const int64_t qk = type_traits(static_cast<uint32_t>(type))->block_size;
  assert(n_in % qk == 0);
  assert(reinterpret_cast<uintptr_t>(dst) % 64 == 0);
  PackedMatrix p;
  p.type = type;
  p.n_in = n_in;
  p.n_out = n_out;
  p.n_groups = (n_out + kGemmGroupRows - 1) / kGemmGroupRows;
  const int64_t nb = n_in / qk;
  p.group_bytes = static_cast<size_t>(nb) * static_cast<size_t>(record);
  p.bytes = std::unique_ptr<uint8_t[], PackedMatrix::Free>(dst, PackedMatrix::Free{true});
  const auto* src = static_cast<const uint8_t*>(W);
  const size_t rs = row_size(type, n_in);
  // The level's own packer of the type where it has one (the same bytes as the portable one).
  const GemmKernels& K = active_kernels();
  const GemmPackFn level_pack = type == GgmlType::Q6_K   ? K.pack_q6_k
                                : type == GgmlType::Q3_K ? K.pack_q3_k
                                : type == GgmlType::Q2_K ? K.pack_q2_k
                                                         : nullptr;
  // Slices of about kReleaseBytes of the source, each released once packed: the source and its
  // packed copy are resident together for one slice at a time, not for the whole matrix (a
  // 32000 x 4096 output matrix is 100+ MB).
  constexpr size_t kReleaseBytes = size_t{4} << 20;
  const size_t group_src = rs * kGemmGroupRows;
  const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(kReleaseBytes / group_src));
  for (int64_t s0 = 0; s0 < p.n_groups; s0 += slice) {
    const int64_t s1 = std::min(p.n_groups, s0 + slice);
    pool.parallel_for(s1 - s0, [&](int64_t g0, int64_t g1) {
      for (int64_t g = s0 + g0; g < s0 + g1; ++g) {
        uint8_t* gd = dst + static_cast<size_t>(g) * p.group_bytes;
        if (level_pack != nullptr) {
          level_pack(src, rs, g, nb, n_out, gd);
          continue;
        }
        switch (type) {
          case GgmlType::Q8_0:
            pack_q8_0_group(src, rs, g, nb, n_out, gd);
            break;
          case GgmlType::Q4_K:
            pack_q45_k_group<false>(src, rs, g, nb, n_out, gd);
            break;
          case GgmlType::Q5_K:
            pack_q45_k_group<true>(src, rs, g, nb, n_out, gd);
            break;
          case GgmlType::Q6_K:
            pack_q6_k_group(src, rs, g, nb, n_out, gd);
            break;
          default:
            pack_low_bit_group(type, src, rs, g, nb, n_out, gd);
            break;
        }
      }
    });
    if (release) {
      const auto r0 = static_cast<size_t>(s0) * group_src;
      const size_t r1 =
          std::min(static_cast<size_t>(s1) * group_src, rs * static_cast<size_t>(n_out));
      release(src + r0, r1 - r0);
    }
  }
  return p;
}

void gemm_forget_input() { last_activations() = ActivationKey{}; }

void gemm(const PackedMatrix& W, const float* X, int64_t n_tokens, float* Y, ThreadPool& pool,
          GemmInput input) {
  if (n_tokens <= 0) return;
  const GemmKernels& k = active_kernels();
  const bool k4 = W.type == GgmlType::Q4_K;  // BlockQ8K256 activations; the others BlockQ8A
  const bool q8 = W.type == GgmlType::Q8_0;  // its T-token tile takes comp; the others halves
  const int64_t n_in = W.n_in, n_out = W.n_out;
  const int64_t nb = n_in / type_traits(static_cast<uint32_t>(W.type))->block_size;  // per row
  const int64_t nx = n_in / (k4 ? kQK_K : 32);  // activation blocks per row
  // The tiles of the types packed at some levels only (all but Q8_0 and Q4_K): the level's own,
  // or for a matrix packed at a level with them and used after a change of level, the portable
  // ones (the same results).
  const GemmKernels& ka = k4 || q8 || tiles_a(k, W.type).fn != nullptr ? k : kScalar;
  const TilesA a = k4 || q8 ? TilesA{} : tiles_a(ka, W.type);
  const auto n_blocks = static_cast<size_t>(n_tokens * nx);
  const int T = k4 ? k.max_tokens_k : q8 ? k.max_tokens : ka.max_tokens_6;
  // The calling thread's quantized activations, kept for the next call over the same input.
  thread_local std::vector<BlockQ8A> xa;
  thread_local std::vector<BlockQ8K256> xk;
  thread_local std::vector<int32_t> cbuf, hbuf;
  thread_local std::vector<int16_t> bbuf;
  thread_local std::vector<uint8_t> pbuf;
  ActivationKey& last = last_activations();
  const GemmTile8Fn tile8 = k4 ? k.q4_k_tile8 : q8 ? k.q8_0_tile8 : a.tile8;
  const int64_t n_tiles8 = tile8 != nullptr ? n_tokens / 8 : 0;
  const ActivationKey key{X, n_tokens, n_in, k4, &k, n_tiles8 > 0};
  const int64_t tile_block = k4 ? kQ8KTileBlockBytes : kQ8ATileBlockBytes;
  const size_t tile_bytes = static_cast<size_t>(nx * tile_block);
  // Plain pointers: the workers below must not name the thread_local buffers (they would get
  // their own).
  BlockQ8K256* xkp = k4 ? scratch(xk, n_blocks) : nullptr;
  BlockQ8A* xap = k4 ? nullptr : scratch(xa, n_blocks);
  int16_t* bs = k4 ? scratch(bbuf, n_blocks * 8) : nullptr;
  int32_t* comp = !k4 && k.uses_comp ? scratch(cbuf, n_blocks) : nullptr;
  int32_t* halves = k4 ? nullptr : scratch(hbuf, n_blocks);
  uint8_t* xpk = nullptr;  // the packed 8-token tiles, 64-byte aligned
  if (n_tiles8 > 0) {
    uint8_t* base = scratch(pbuf, static_cast<size_t>(n_tiles8) * tile_bytes + 64);
    xpk = base + (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  }
  if (input != GemmInput::SameAsLast || !(key == last)) {
    last = ActivationKey{};  // nothing valid while the buffers are rewritten
    // One pass over the tokens, 8 at a time: each token's codes (the matvec's quantizers), then
    // what the tiles read beside them: Q4_K's sub-block sums, the BlockQ8A blocks' u8-bias
    // compensations and negated half sums, and the packed 8-token tiles.
    const QuantKernels& qk = active_quant_kernels();
    const auto side = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t1 = std::min(n_tokens, 8 * i + 8);
        for (int64_t t = 8 * i; t < t1; ++t) {
          if (k4) {
            // BlockQ8K256: one scale per 256 elements (kernels.h says why)
            qk.quantize_q8k256(X + t * n_in, xkp + t * nx, n_in);
          } else {
            quantize_activation_row(GgmlType::Q8_0, X + t * n_in, xap + t * nx, n_in);
          }
          const int tt = static_cast<int>(t - 8 * i);
          for (int64_t b = 0; b < nx; ++b) {
            const size_t src = static_cast<size_t>(t * nx + b);
            uint8_t* o = i < n_tiles8 ? xpk + i * tile_bytes + b * tile_block : nullptr;
            if (k4) {
              side_q8k256(xkp[src], bs + src * 8, o, tt);
            } else {
              side_q8a(xap[src], comp != nullptr ? comp + src : nullptr, halves[src], o, tt);
            }
          }
        }
      }
    };
    const int64_t n_eights = (n_tokens + 7) / 8;
    if (n_tokens * n_in < 16384) {
      side(0, n_eights);
    } else {
      pool.parallel_for(n_eights, side);
    }
    last = key;
  }
  const uint8_t* wp = W.bytes.get();
  const auto body = [&](int64_t g0, int64_t g1) {
    for (int64_t tb = 0; tb < n_tokens; tb += kTokenBlock) {
      const int64_t te = std::min(n_tokens, tb + kTokenBlock);
      for (int64_t g = g0; g < g1; ++g) {
        const int nr =
            static_cast<int>(std::min<int64_t>(kGemmGroupRows, n_out - g * kGemmGroupRows));
        const uint8_t* wg = wp + static_cast<size_t>(g) * W.group_bytes;
        float* yg = Y + g * kGemmGroupRows;
        int64_t t = tb;
        if (xpk != nullptr) {  // whole 8-token tiles (tb is a multiple of 8: kTokenBlock is)
          for (; t + 8 <= te; t += 8)
            tile8(wg, nb, xpk + (t / 8) * tile_bytes, yg + t * n_out, n_out, nr);
        }
        for (; t < te; t += T) {
          const int nt = static_cast<int>(std::min<int64_t>(T, te - t));
          if (k4) {
            k.q4_k(wg, nb, xkp + t * nx, nx, bs + t * nx * 8, yg + t * n_out, n_out, nr, nt);
          } else if (!q8) {
            a.fn(wg, nb, xap + t * nx, nx, halves + t * nx, yg + t * n_out, n_out, nr, nt);
          } else {
            k.q8_0(wg, nb, xap + t * nx, nx, comp != nullptr ? comp + t * nx : nullptr,
                   yg + t * n_out, n_out, nr, nt);
          }
        }
      }
    }
  };
  if (pool.size() == 1 || W.size_bytes() * static_cast<size_t>(n_tokens) < kSerialBytes) {
    body(0, W.n_groups);
  } else {
    pool.parallel_for(W.n_groups, body);
  }
}

}  // namespace spw::cpu
