// GPU tests of the weight kernels (kernels/matvec.cu, dequant.cu, get_rows.cu, convert.cu)
// against the CPU reference of engine/gguf/ggml_types.cpp, for all eleven weight types.
//
// - launch_matvec: against a double-precision sum over dequantize_row()'s floats. The kernel
//   decodes exactly and accumulates in f32, so the only error is f32 summation: each output
//   is a chain of at most n_in / 32 + 16 roundings (a lane's running sum over its share of
//   the row, the 8-term group sums, the 5-level warp reduction), which bounds the error by
//   (n_in / 32 + 16) * 2^-24 * sum_i |w_i x_i|. That bound is checked per element (with the
//   worst element printed) and, as a summary, NMSE <= 1e-10.
// - launch_dequant_f16 == fp32_to_fp16(dequantize_row) and launch_get_rows ==
//   dequantize_row, bit for bit; launch_f32_to_f16 == fp32_to_fp16 bit for bit (NaN too).
// - Sizes are awkward on purpose (n_out 1, 7, 33, 300; rows of 1, 3, 9 and 67 blocks; 1, 2,
//   5, 9 and 17 tokens) and weights, activations and outputs are also placed at 2- and 4-byte
//   offsets, so every load width and tail path of the kernels runs.
// - Bad arguments return cudaErrorInvalidValue and launch nothing.
// Every test skips when no CUDA device is usable.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/fp16.h"
#include "engine/gguf/ggml_types.h"
#include "kernels/launch.h"
#include "tests/cuda/cuda_test.h"
#include "tests/support/quant_blocks.h"

namespace spw::kernels {
namespace {

using test::DeviceBuffer;

constexpr GgmlType kTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

std::string name_of(GgmlType t) { return type_name(static_cast<uint32_t>(t)); }
int block_elems(GgmlType t) { return type_traits(static_cast<uint32_t>(t))->block_size; }
int block_bytes(GgmlType t) { return type_traits(static_cast<uint32_t>(t))->type_size; }

using test::bits_of;
using test::float_of;
using test::half_fields;

// A weight [n_out][n_in] as uploaded: rows of row_bytes (the row's data plus `pad` bytes),
// and the reference floats of each row.
struct HostWeights {
  int64_t n_in = 0, n_out = 0, row_bytes = 0;
  std::vector<uint8_t> bytes;  // [n_out][row_bytes]
  std::vector<float> deq;      // [n_out][n_in], dequantize_row of each row
};

// Rows quantized from random floats (random_bytes == false), or rows of random bytes with the
// block scales forced finite (F16/BF16/F32 keep every pattern, NaN and inf included).
HostWeights make_weights(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng,
                         bool random_bytes, int64_t pad = 0) {
  HostWeights h;
  h.n_in = n_in;
  h.n_out = n_out;
  const auto data = static_cast<int64_t>(row_size(type, n_in));
  h.row_bytes = data + pad;
  h.bytes.assign(n_out * h.row_bytes, 0xA5);
  h.deq.resize(n_out * n_in);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<float> x(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    uint8_t* row = h.bytes.data() + r * h.row_bytes;
    if (random_bytes) {
      for (int64_t i = 0; i < data; ++i) row[i] = static_cast<uint8_t>(byte(rng));
      for (int64_t b = 0; b < data / block_bytes(type); ++b) {
        for (int off : half_fields(type)) {
          uint16_t s;
          std::memcpy(&s, row + b * block_bytes(type) + off, 2);
          if ((s & 0x7C00u) == 0x7C00u) s &= ~0x4000u;
          std::memcpy(row + b * block_bytes(type) + off, &s, 2);
        }
      }
    } else {
      const float scale = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);  // rows differ in size
      for (auto& v : x) v = u(rng) * scale;
      quantize_row(type, x.data(), row, n_in);
    }
    dequantize_row(type, row, h.deq.data() + r * n_in, n_in);
  }
  return h;
}

// A device copy of `host` starting `offset` bytes past a 256-byte aligned allocation.
template <typename T>
struct OffsetBuffer {
  DeviceBuffer<uint8_t> buf;
  T* ptr = nullptr;
  bool ok = false;
  OffsetBuffer(const std::vector<T>& host, size_t offset) {
    std::vector<uint8_t> raw(offset + host.size() * sizeof(T) + 16, 0xEE);
    if (!host.empty()) std::memcpy(raw.data() + offset, host.data(), host.size() * sizeof(T));
    ok = buf.upload(raw);
    ptr = reinterpret_cast<T*>(buf.get() + offset);
  }
  std::vector<T> download(size_t n) const {
    std::vector<uint8_t> raw = buf.download();
    std::vector<T> out(n);
    size_t offset = reinterpret_cast<const uint8_t*>(ptr) - buf.get();
    if (raw.size() >= offset + n * sizeof(T))
      std::memcpy(out.data(), raw.data() + offset, n * sizeof(T));
    return out;
  }
};

// ---- matvec ----------------------------------------------------------------------------

struct MatvecCase {
  GgmlType type;
  int64_t n_out, n_in, n_tok;
  size_t w_offset = 0;  // bytes
  size_t x_offset = 0;  // bytes (a multiple of 4)
  int64_t pad = 0;      // row_bytes - row data
};

void run_matvec_case(const MatvecCase& c, std::mt19937& rng) {
  const std::string what = name_of(c.type) + " n_out=" + std::to_string(c.n_out) +
                           " n_in=" + std::to_string(c.n_in) + " n_tok=" + std::to_string(c.n_tok) +
                           " w_off=" + std::to_string(c.w_offset) +
                           " x_off=" + std::to_string(c.x_offset) + " pad=" + std::to_string(c.pad);
  SCOPED_TRACE(what);
  const HostWeights w = make_weights(c.type, c.n_out, c.n_in, rng, false, c.pad);
  std::vector<float> x(c.n_tok * c.n_in);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (auto& v : x) v = gauss(rng);

  // Reference in double, and sum |w x| for the error bound.
  std::vector<double> ref(c.n_tok * c.n_out), mag(c.n_tok * c.n_out);
  for (int64_t t = 0; t < c.n_tok; ++t) {
    for (int64_t r = 0; r < c.n_out; ++r) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < c.n_in; ++i) {
        const double p = static_cast<double>(w.deq[r * c.n_in + i]) * x[t * c.n_in + i];
        s += p;
        a += std::fabs(p);
      }
      ref[t * c.n_out + r] = s;
      mag[t * c.n_out + r] = a;
    }
  }

  OffsetBuffer<uint8_t> dw(w.bytes, c.w_offset);
  OffsetBuffer<float> dx(x, c.x_offset);
  DeviceBuffer<float> dy(c.n_tok * c.n_out);
  ASSERT_TRUE(dw.ok && dx.ok && dy.poison());
  SPW_ASSERT_CUDA(launch_matvec(c.type, dw.ptr, w.row_bytes, c.n_in, c.n_out, dx.ptr, c.n_tok,
                                dy.get(), nullptr));
  SPW_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  ASSERT_EQ(y.size(), ref.size());

  const double bound_factor = (static_cast<double>(c.n_in) / 32 + 16) * std::ldexp(1.0, -24);
  double num = 0, den = 0, worst_ratio = 0;
  size_t worst = 0;
  for (size_t k = 0; k < y.size(); ++k) {
    ASSERT_TRUE(std::isfinite(y[k])) << "output " << k << " not written or not finite";
    const double err = std::fabs(y[k] - ref[k]);
    const double tol = bound_factor * mag[k] + 1e-30;
    num += err * err;
    den += ref[k] * ref[k];
    if (err / tol > worst_ratio) {
      worst_ratio = err / tol;
      worst = k;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << "worst output t=" << worst / c.n_out << " r=" << worst % c.n_out
                              << ": got " << y[worst] << " want " << ref[worst] << " (bound "
                              << bound_factor * mag[worst] << ")";
  EXPECT_LE(den > 0 ? num / den : num, 1e-10) << "NMSE";
}

TEST(CudaQuant, MatvecAllTypesAwkwardSizes) {
  SPW_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(2024);
  for (GgmlType type : kTypes) {
    for (int64_t n_out : {1, 7, 33, 300}) {
      for (int64_t mult : {1, 3, 9}) {
        for (int64_t n_tok : {1, 2, 5}) {
          run_matvec_case({type, n_out, block_elems(type) * mult, n_tok}, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Rows of many tiles (the staging pipeline), token counts past one CTA's chunk of 8, and
// float rows whose length is not a multiple of the 8-element group.
TEST(CudaQuant, MatvecLongRowsAndManyTokens) {
  SPW_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(77);
  for (GgmlType type : kTypes) {
    const int64_t be = block_elems(type);
    const int64_t n_in = be == 1 ? 4099 : be * 67;
    for (int64_t n_tok : {1, 9, 17}) {
      run_matvec_case({type, 33, n_in, n_tok}, rng);
      if (HasFatalFailure()) return;
    }
    if (be == 1) {
      for (int64_t n_in_f : {1, 7, 8, 12, 263, 1031}) {
        run_matvec_case({type, 9, n_in_f, 3}, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Weights 2 and 4 bytes past 16-byte alignment, padded rows, and activations that are not
// 16-byte aligned: the 2- and 4-byte staging loads and the scalar activation loads.
TEST(CudaQuant, MatvecMisalignedInputs) {
  SPW_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  for (GgmlType type : kTypes) {
    const int64_t be = block_elems(type);
    const int64_t n_in = be == 1 ? 520 : be * 11;
    for (size_t w_off : {size_t{2}, size_t{4}, size_t{8}}) {
      run_matvec_case({type, 7, n_in, 1, w_off, 0}, rng);
      if (HasFatalFailure()) return;
      run_matvec_case({type, 7, n_in, 2, w_off, 4}, rng);
      if (HasFatalFailure()) return;
    }
    run_matvec_case({type, 5, n_in, 3, 0, 12, 2}, rng);  // row_bytes = data + 2
    if (HasFatalFailure()) return;
    run_matvec_case({type, 5, n_in, 1, 0, 0, 16}, rng);  // row_bytes = data + 16
    if (HasFatalFailure()) return;
  }
}

// ---- dequant_f16 and get_rows: exact ----------------------------------------------------

void check_dequant(GgmlType type, int64_t n_out, int64_t n_in, int64_t row0, int64_t n_rows,
                   bool random_bytes, size_t dst_offset, std::mt19937& rng) {
  SCOPED_TRACE(name_of(type) + " n_in=" + std::to_string(n_in) + " rows [" + std::to_string(row0) +
               ", +" + std::to_string(n_rows) + ") random_bytes=" + std::to_string(random_bytes) +
               " dst_off=" + std::to_string(dst_offset));
  const HostWeights w = make_weights(type, n_out, n_in, rng, random_bytes);
  DeviceBuffer<uint8_t> dw;
  ASSERT_TRUE(dw.upload(w.bytes));
  OffsetBuffer<uint16_t> dd(std::vector<uint16_t>(n_rows * n_in, 0xFFFF), dst_offset);
  ASSERT_TRUE(dd.ok);
  SPW_ASSERT_CUDA(
      launch_dequant_f16(type, dw.get(), w.row_bytes, n_in, row0, n_rows, dd.ptr, nullptr));
  SPW_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = dd.download(n_rows * n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n_in; ++i) {
      const uint16_t want = fp32_to_fp16(w.deq[(row0 + r) * n_in + i]);
      ASSERT_EQ(got[r * n_in + i], want) << "row " << row0 + r << " element " << i;
    }
  }
}

TEST(CudaQuant, DequantF16IsExact) {
  SPW_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  for (GgmlType type : kTypes) {
    const int64_t be = block_elems(type);
    for (int64_t mult : {1, 3, 9}) {
      for (bool random_bytes : {false, true}) {
        check_dequant(type, 9, be * mult, 2, 5, random_bytes, 0, rng);
        if (HasFatalFailure()) return;
      }
    }
    check_dequant(type, 4, be == 1 ? 7 : be * 5, 0, 4, true, 2, rng);  // unaligned dst
    if (HasFatalFailure()) return;
    check_dequant(type, 3, be == 1 ? 1031 : be * 40, 1, 2, false, 0, rng);
    if (HasFatalFailure()) return;
  }
}

void check_get_rows(GgmlType type, int64_t n_out, int64_t n_in, int64_t n, bool random_bytes,
                    size_t dst_offset, std::mt19937& rng) {
  SCOPED_TRACE(name_of(type) + " n_in=" + std::to_string(n_in) + " n=" + std::to_string(n) +
               " random_bytes=" + std::to_string(random_bytes) +
               " dst_off=" + std::to_string(dst_offset));
  const HostWeights w = make_weights(type, n_out, n_in, rng, random_bytes);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_out - 1));
  for (auto& id : ids) id = pick(rng);  // repeats included
  ids[0] = static_cast<int32_t>(n_out - 1);
  DeviceBuffer<uint8_t> dw;
  DeviceBuffer<int32_t> dids;
  ASSERT_TRUE(dw.upload(w.bytes) && dids.upload(ids));
  OffsetBuffer<float> dd(std::vector<float>(n * n_in, float_of(0xFFFFFFFFu)), dst_offset);
  ASSERT_TRUE(dd.ok);
  SPW_ASSERT_CUDA(
      launch_get_rows(type, dw.get(), w.row_bytes, n_in, dids.get(), n, dd.ptr, nullptr));
  SPW_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = dd.download(n * n_in);
  for (int64_t t = 0; t < n; ++t) {
    const float* want = w.deq.data() + ids[t] * n_in;
    if (std::memcmp(got.data() + t * n_in, want, n_in * sizeof(float)) == 0) continue;
    for (int64_t i = 0; i < n_in; ++i) {  // bits: NaN payloads and -0 count
      ASSERT_EQ(bits_of(got[t * n_in + i]), bits_of(want[i]))
          << "lookup " << t << " (row " << ids[t] << ") element " << i;
    }
  }
}

TEST(CudaQuant, GetRowsIsExact) {
  SPW_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(41);
  for (GgmlType type : kTypes) {
    const int64_t be = block_elems(type);
    for (int64_t mult : {1, 3, 9}) {
      for (bool random_bytes : {false, true}) {
        check_get_rows(type, 11, be * mult, 6, random_bytes, 0, rng);
        if (HasFatalFailure()) return;
      }
    }
    check_get_rows(type, 5, be == 1 ? 7 : be * 5, 3, true, 4, rng);  // unaligned dst
    if (HasFatalFailure()) return;
  }
}

// Every binary16 pattern through the F16 embedding path: the device's half_to_float must
// give fp16_to_fp32's bits for subnormals, infinities and NaN payloads.
TEST(CudaQuant, GetRowsEveryHalfPattern) {
  SPW_SKIP_WITHOUT_CUDA();
  std::vector<uint16_t> row(65536);
  for (uint32_t h = 0; h < 65536; ++h) row[h] = static_cast<uint16_t>(h);
  std::vector<uint8_t> bytes(row.size() * 2);
  std::memcpy(bytes.data(), row.data(), bytes.size());
  DeviceBuffer<uint8_t> dw;
  DeviceBuffer<int32_t> ids;
  DeviceBuffer<float> dst(row.size());
  ASSERT_TRUE(dw.upload(bytes) && ids.upload({0}) && dst.poison());
  SPW_ASSERT_CUDA(launch_get_rows(GgmlType::F16, dw.get(), static_cast<int64_t>(bytes.size()),
                                  65536, ids.get(), 1, dst.get(), nullptr));
  const std::vector<float> got = dst.download();
  ASSERT_EQ(got.size(), row.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(got[h]), bits_of(fp16_to_fp32(static_cast<uint16_t>(h))))
        << "h=0x" << std::hex << h;
  }
}

// ---- f32_to_f16 ------------------------------------------------------------------------

TEST(CudaQuant, F32ToF16MatchesReference) {
  SPW_SKIP_WITHOUT_CUDA();
  // Every half value, the midpoints between neighbours (ties to even) and a float ulp either
  // side of them, both signs; specials; random bit patterns (NaNs included).
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    const float v = fp16_to_fp32(static_cast<uint16_t>(h));
    const float next = h + 1 < 0x7C00u ? fp16_to_fp32(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
    for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      x.push_back(f);
      x.push_back(-f);
    }
  }
  for (float f : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  65520.0f, -65520.0f, 1e10f, std::ldexp(1.0f, -25), std::ldexp(1.5f, -25)}) {
    x.push_back(f);
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 100001; ++i) x.push_back(float_of(static_cast<uint32_t>(rng())));
  while (x.size() % 4 != 3) x.push_back(0.1f);  // a tail for the vector path

  for (size_t x_off : {size_t{0}, size_t{4}}) {    // 16-byte aligned, and not
    for (size_t y_off : {size_t{0}, size_t{2}}) {  // 8-byte aligned, and not
      SCOPED_TRACE("x_off=" + std::to_string(x_off) + " y_off=" + std::to_string(y_off));
      OffsetBuffer<float> dx(x, x_off);
      OffsetBuffer<uint16_t> dy(std::vector<uint16_t>(x.size(), 0xFFFF), y_off);
      ASSERT_TRUE(dx.ok && dy.ok);
      SPW_ASSERT_CUDA(launch_f32_to_f16(dx.ptr, dy.ptr, static_cast<int64_t>(x.size()), nullptr));
      SPW_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = dy.download(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(got[i], fp32_to_fp16(x[i]))
            << "x[" << i << "]=" << x[i] << " bits 0x" << std::hex << bits_of(x[i]);
      }
    }
  }
}

// ---- bad arguments ----------------------------------------------------------------------

TEST(CudaQuant, BadArgumentsAreRefused) {
  SPW_SKIP_WITHOUT_CUDA();
  DeviceBuffer<uint8_t> w(4096);
  DeviceBuffer<float> x(1024), y(1024);
  DeviceBuffer<uint16_t> h(1024);
  DeviceBuffer<int32_t> ids(4);
  ASSERT_TRUE(ids.upload({0, 0, 0, 0}));
  const void* wp = w.get();
  const auto inval = cudaErrorInvalidValue;
  const int64_t rb = 18;  // one Q4_0 block

  // matvec
  EXPECT_EQ(launch_matvec(GgmlType::IQ2_XXS, wp, 66, 256, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::I8, wp, 32, 32, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(static_cast<GgmlType>(77), wp, 32, 32, 1, x.get(), 1, y.get(), nullptr),
            inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 48, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 0, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, -32, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, -1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, 1, x.get(), -1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, 17, 32, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, nullptr, rb, 32, 1, x.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, 1, nullptr, 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, 1, x.get(), 1, nullptr, nullptr), inval);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, w.get() + 1, rb, 32, 1, x.get(), 1, y.get(), nullptr),
            inval);  // odd address
  EXPECT_EQ(launch_matvec(GgmlType::F16, wp, 4, 3, 1, x.get(), 1, y.get(), nullptr),
            inval);  // row_bytes < 2 * n_in
  // Empty work is not an error and launches nothing.
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, 0, x.get(), 1, y.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(launch_matvec(GgmlType::Q4_0, wp, rb, 32, 1, x.get(), 0, y.get(), nullptr),
            cudaSuccess);

  // dequant_f16
  EXPECT_EQ(launch_dequant_f16(GgmlType::IQ3_S, wp, 110, 256, 0, 1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q3_K, wp, 110, 128, 0, 1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_K, wp, 144, 128, 0, 1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_0, wp, rb, 32, -1, 1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_0, wp, rb, 32, 0, -1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_0, wp, rb, 32, 0, 1, nullptr, nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_0, wp, 16, 32, 0, 1, h.get(), nullptr), inval);
  EXPECT_EQ(launch_dequant_f16(GgmlType::Q4_0, wp, rb, 32, 0, 0, h.get(), nullptr), cudaSuccess);

  // get_rows
  EXPECT_EQ(launch_get_rows(GgmlType::IQ1_S, wp, 50, 256, ids.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::IQ4_NL, wp, 18, 16, ids.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::Q8_0, wp, 34, 16, ids.get(), 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::Q8_0, wp, 34, 32, ids.get(), -1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::Q8_0, wp, 34, 32, nullptr, 1, y.get(), nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::Q8_0, wp, 34, 32, ids.get(), 1, nullptr, nullptr), inval);
  EXPECT_EQ(launch_get_rows(GgmlType::Q8_0, wp, 34, 32, ids.get(), 0, y.get(), nullptr),
            cudaSuccess);

  // f32_to_f16
  EXPECT_EQ(launch_f32_to_f16(x.get(), h.get(), -1, nullptr), inval);
  EXPECT_EQ(launch_f32_to_f16(nullptr, h.get(), 4, nullptr), inval);
  EXPECT_EQ(launch_f32_to_f16(x.get(), nullptr, 4, nullptr), inval);
  EXPECT_EQ(launch_f32_to_f16(x.get(), h.get(), 0, nullptr), cudaSuccess);

  // Nothing was launched, so no error is pending.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace spw::kernels
