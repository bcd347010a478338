// make_fast_random_model: a test model's keys, names, shapes and types with random blocks
// generated while the file is written (test_model.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <thread>

#include "engine/common/fp16.h"
#include "engine/common/parallel.h"
#include "tests/support/test_model.h"
#include "tests/support/test_model_plan.h"

namespace spw {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void random_bytes(uint64_t& state, uint8_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = splitmix64(state);
    std::memcpy(dst + i, &x, 8);
  }
  if (i < n) {
    const uint64_t x = splitmix64(state);
    std::memcpy(dst + i, &x, n - i);
  }
}

// The f16 scale fields of one block type. Random codes average to `mid` (Q4_1, Q5_1, Q4_K,
// Q5_K; 0 for the others); the min field cancels it so weights average to zero:
// m = -mid * d for Q4_1/Q5_1 (y = d*q + m), dmin = mid * d for Q4_K/Q5_K (y = d*sc*q - dmin*mn,
// where sc and mn share one distribution).
struct BlockScales {
  size_t d_at = 0;      // byte offset of d in the block
  int min_at = -1;      // byte offset of m / dmin; -1: none
  float min_per_d = 0;  // m / d or dmin / d
};

BlockScales block_scales(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
      return {0, 2, -7.5f};
    case GgmlType::Q5_1:
      return {0, 2, -15.5f};
    case GgmlType::Q4_K:
      return {0, 2, 7.5f};
    case GgmlType::Q5_K:
      return {0, 2, 15.5f};
    case GgmlType::Q6_K:
      return {offsetof(BlockQ6_K, d), -1, 0};
    case GgmlType::Q2_K:  // codes 0..3 times scales 0..15 average 11.25, mins 0..15 7.5
      return {offsetof(BlockQ2_K, d), static_cast<int>(offsetof(BlockQ2_K, dmin)), 1.5f};
    case GgmlType::Q3_K:  // signed scales and codes: about zero on their own
      return {offsetof(BlockQ3_K, d), -1, 0};
    default:  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first, no min
      return {0, -1, 0};
  }
}

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Random code bytes with the scale fields set from `d`: the block's bytes for any d.
void fill_blocks(GgmlType t, float d, uint64_t& state, uint8_t* row, size_t row_bytes) {
  const auto traits = type_traits(static_cast<uint32_t>(t));
  const size_t bs = static_cast<size_t>(traits->type_size);
  const BlockScales sc = block_scales(t);
  const uint16_t d_bits = fp32_to_fp16(d);
  const uint16_t m_bits = fp32_to_fp16(sc.min_per_d * fp16_to_fp32(d_bits));
  random_bytes(state, row, row_bytes);
  for (size_t b = 0; b < row_bytes; b += bs) {
    std::memcpy(row + b + sc.d_at, &d_bits, 2);
    if (sc.min_at >= 0) std::memcpy(row + b + static_cast<size_t>(sc.min_at), &m_bits, 2);
  }
}

// Standard deviation of the dequantized weights of random blocks with d = 1, measured once
// per type (deterministic: a fixed seed).
double unit_std(GgmlType t) {
  constexpr int64_t kN = 8192;  // a multiple of every block size
  std::vector<uint8_t> bytes(row_size(t, kN));
  uint64_t state = 12345;
  fill_blocks(t, 1.0f, state, bytes.data(), bytes.size());
  std::vector<float> y(kN);
  dequantize_row(t, bytes.data(), y.data(), kN);
  double ss = 0;
  for (float v : y) ss += static_cast<double>(v) * v;
  return std::sqrt(ss / kN);
}

uint64_t row_seed(uint64_t tensor_seed, int64_t row) {
  return tensor_seed ^ static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull;
}

// Rows are independent, so a chunk is filled on several threads (up to 16): writing to the
// page cache is faster than one thread draws random bytes.
int fill_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 16u));
}

// Rows of a random matrix: standard deviation `stddev`, mean about 0. Row r draws from its
// own generator seeded with (tensor_seed, r), so any split into chunks or threads gives the
// same bytes.
GgufWriter::RowFill random_rows(GgmlType t, int64_t n_in, double stddev, uint64_t tensor_seed) {
  const size_t rb = row_size(t, n_in);
  if (is_float_type(t)) {
    const float a = static_cast<float>(stddev * std::sqrt(3.0));  // uniform on [-a, a)
    return [t, n_in, rb, a, tensor_seed](int64_t row0, int64_t n_rows, uint8_t* dst) {
      parallel_for(n_rows, fill_threads(), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          uint64_t state = row_seed(tensor_seed, row0 + r);
          uint8_t* out = dst + static_cast<size_t>(r) * rb;
          for (int64_t i = 0; i < n_in; ++i) {
            const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
            const float x = (2.0f * u - 1.0f) * a;
            if (t == GgmlType::F32) {
              std::memcpy(out + 4 * i, &x, 4);
            } else {
              const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
              std::memcpy(out + 2 * i, &h, 2);
            }
          }
        }
      });
    };
  }
  const float d = static_cast<float>(stddev / unit_std(t));
  return [t, rb, d, tensor_seed](int64_t row0, int64_t n_rows, uint8_t* dst) {
    parallel_for(n_rows, fill_threads(), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        uint64_t state = row_seed(tensor_seed, row0 + r);
        fill_blocks(t, d, state, dst + static_cast<size_t>(r) * rb, rb);
      }
    });
  };
}

uint64_t tensor_seed(uint32_t seed, const std::string& name) {  // FNV-1a 64 over name
  uint64_t h = 14695981039346656037ull ^ (uint64_t{seed} * 0x9E3779B97F4A7C15ull);
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Expected<GgufWriter> make_fast_random_model(const TestModelSpec& s) {
  if (auto st = check_test_model_spec(s); !st) return st.error();
  TestModel m;
  const std::vector<TensorPlan> plan = plan_test_model(s, m);
  GgufWriter w = m.to_writer();  // the keys
  for (const TensorPlan& p : plan) {
    if (p.kind != TensorPlan::Kind::Matrix) {  // 1-D, routers: small, build_test_model's values
      TestTensor t = p.materialize(s);
      w.add_tensor(t.name, t.type, std::move(t.ne), std::move(t.data));
      continue;
    }
    const double stddev = s.weight_scale / std::sqrt(static_cast<double>(p.n_in));
    std::vector<int64_t> ne = {p.n_in, p.n_out};
    if (p.n_expert > 1) ne.push_back(p.n_expert);
    w.add_tensor_generated(p.name, p.type, std::move(ne),
                           random_rows(p.type, p.n_in, stddev, tensor_seed(s.seed, p.name)));
  }
  return w;
}

Status write_fast_random_model(const TestModelSpec& spec, const std::string& path) {
  auto w = make_fast_random_model(spec);
  if (!w) return w.error();
  return w->write(path);
}

}  // namespace spw
