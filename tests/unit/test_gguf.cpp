// GGUF writer -> reader round trips: every metadata type (scalars, arrays, arrays of arrays),
// GGUF v2 and v3, alignment 32 and 64, every supported tensor type; typed getters' errors.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

using V = GgufWriteValue;

constexpr GgmlType kSupportedTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

V u8(uint8_t x) { return {GgufType::UINT8, uint64_t{x}}; }
V i8(int8_t x) { return {GgufType::INT8, int64_t{x}}; }
V u16(uint16_t x) { return {GgufType::UINT16, uint64_t{x}}; }
V i16(int16_t x) { return {GgufType::INT16, int64_t{x}}; }
V i64(int64_t x) { return {GgufType::INT64, x}; }
V f64(double x) { return {GgufType::FLOAT64, x}; }

// Every scalar type, extremes included, and an array of each, plus nested arrays.
std::vector<std::pair<std::string, V>> all_metadata() {
  std::vector<std::pair<std::string, V>> kv = {
      {"t.u8", u8(255)},
      {"t.i8", i8(-128)},
      {"t.u16", u16(65535)},
      {"t.i16", i16(-32768)},
      {"t.u32", V::u32(4294967295u)},
      {"t.i32", V::i32(std::numeric_limits<int32_t>::min())},
      {"t.u64", V::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", V::f32(3.14159274f)},
      {"t.f32.tiny", V::f32(1e-6f)},
      {"t.f64", f64(-2.718281828459045)},
      {"t.bool.true", V::boolean(true)},
      {"t.bool.false", V::boolean(false)},
      {"t.str", V::str("h\xC3\xA9llo \xE2\x96\x81 world")},
      {"t.str.empty", V::str("")},
      {"t.arr.u8", V::array(GgufType::UINT8, {u8(0), u8(1), u8(255)})},
      {"t.arr.i8", V::array(GgufType::INT8, {i8(-128), i8(0), i8(127)})},
      {"t.arr.u16", V::array(GgufType::UINT16, {u16(0), u16(65535)})},
      {"t.arr.i16", V::array(GgufType::INT16, {i16(-32768), i16(32767)})},
      {"t.arr.u32", V::array(GgufType::UINT32, {V::u32(7), V::u32(4294967295u)})},
      {"t.arr.i32", V::i32_array({-1, 0, 2147483647})},
      {"t.arr.u64",
       V::array(GgufType::UINT64, {V::u64(0), V::u64(std::numeric_limits<uint64_t>::max())})},
      {"t.arr.i64", V::array(GgufType::INT64, {i64(-5), i64(std::numeric_limits<int64_t>::max())})},
      {"t.arr.f32", V::f32_array({0.5f, -1.25f, 1e30f})},
      {"t.arr.f64", V::array(GgufType::FLOAT64, {f64(1e-300), f64(-0.1)})},
      {"t.arr.bool",
       V::array(GgufType::BOOL, {V::boolean(true), V::boolean(false), V::boolean(true)})},
      {"t.arr.str", V::str_array({"a", "", "ccc", "\xE2\x96\x81the"})},
      {"t.arr.empty", V::i32_array({})},
      {"t.arr.arr", V::array(GgufType::ARRAY, {V::array(GgufType::UINT32, {V::u32(1), V::u32(2)}),
                                               V::array(GgufType::UINT32, {V::u32(3)}),
                                               V::array(GgufType::UINT32, {})})},
      {"t.arr.arr.str", V::array(GgufType::ARRAY, {V::str_array({"x", "yy"}), V::str_array({})})},
      {"t.arr.arr.arr",
       V::array(GgufType::ARRAY,
                {V::array(GgufType::ARRAY, {V::array(GgufType::INT8, {i8(-1), i8(1)})})})},
  };
  return kv;
}

// Compares a written value with what the reader returned, recursively; `where` names the key.
void expect_same(const V& w, const GgufValue& r, const std::string& where) {
  ASSERT_EQ(static_cast<uint32_t>(r.type), static_cast<uint32_t>(w.type)) << where;
  switch (w.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64:
      ASSERT_TRUE(std::holds_alternative<uint64_t>(r.v)) << where;
      EXPECT_EQ(std::get<uint64_t>(r.v), std::get<uint64_t>(w.v)) << where;
      break;
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64:
      ASSERT_TRUE(std::holds_alternative<int64_t>(r.v)) << where;
      EXPECT_EQ(std::get<int64_t>(r.v), std::get<int64_t>(w.v)) << where;
      break;
    case GgufType::FLOAT32:
      EXPECT_EQ(r.as_double(), static_cast<double>(static_cast<float>(std::get<double>(w.v))))
          << where;
      break;
    case GgufType::FLOAT64:
      EXPECT_EQ(r.as_double(), std::get<double>(w.v)) << where;
      break;
    case GgufType::BOOL:
      ASSERT_TRUE(std::holds_alternative<bool>(r.v)) << where;
      EXPECT_EQ(std::get<bool>(r.v), std::get<bool>(w.v)) << where;
      break;
    case GgufType::STRING:
      EXPECT_EQ(r.as_string(), std::get<std::string>(w.v)) << where;
      break;
    case GgufType::ARRAY: {
      const auto& items = std::get<std::vector<V>>(w.v);
      const GgufArray& a = r.as_array();
      EXPECT_EQ(static_cast<uint32_t>(a.elem_type), static_cast<uint32_t>(w.elem_type)) << where;
      ASSERT_EQ(a.items.size(), items.size()) << where;
      for (size_t i = 0; i < items.size(); ++i)
        expect_same(items[i], a.items[i], where + "[" + std::to_string(i) + "]");
      break;
    }
  }
}

std::vector<float> source_values(int64_t n, uint32_t seed) {
  // Deterministic, sign-mixed, with a few outliers per row so block scales vary.
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float x =
        static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
    if (i % 37 == 5) x *= 4.0f;
    v[static_cast<size_t>(i)] = x;
  }
  return v;
}

class GgufFormatTest : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {
 protected:
  uint32_t version() const { return std::get<0>(GetParam()); }
  uint32_t alignment() const { return std::get<1>(GetParam()); }
  TempDir dir_{"spillway-gguf"};
};

TEST_P(GgufFormatTest, MetadataRoundTrip) {
  GgufWriter w(version(), alignment());
  const auto kv = all_metadata();
  for (const auto& [k, v] : kv) w.set(k, v);
  w.add_tensor_f32("t.tensor", GgmlType::F32, {3}, {1.0f, 2.0f, 3.0f});
  const std::string path = dir_.file("meta.gguf");
  ASSERT_TRUE(w.write(path).ok());

  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  const GgufFile& file = **f;
  EXPECT_EQ(file.version(), version());
  EXPECT_EQ(file.alignment(), alignment());
  EXPECT_EQ(file.data_offset() % alignment(), 0u);
  // The writer adds general.alignment (as UINT32) only when it differs from the default.
  const size_t extra = alignment() != 32 ? 1 : 0;
  ASSERT_EQ(file.metadata().size(), kv.size() + extra);
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(file.metadata()[i].key, kv[i].first);  // order preserved
    const GgufValue* r = file.find(kv[i].first);
    ASSERT_NE(r, nullptr) << kv[i].first;
    expect_same(kv[i].second, *r, kv[i].first);
  }
  if (extra) {
    auto al = file.get_int("general.alignment");
    ASSERT_TRUE(al.ok());
    EXPECT_EQ(*al, alignment());
    EXPECT_EQ(file.find("general.alignment")->type, GgufType::UINT32);
  }
  // Typed getters agree with the raw values.
  EXPECT_EQ(*file.get_int("t.u8"), 255);
  EXPECT_EQ(*file.get_int("t.i8"), -128);
  EXPECT_EQ(*file.get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*file.get_float("t.f32"), static_cast<double>(3.14159274f));
  EXPECT_EQ(*file.get_float("t.u16"), 65535.0);  // integers accepted as numbers
  EXPECT_TRUE(*file.get_bool("t.bool.true"));
  EXPECT_FALSE(*file.get_bool("t.bool.false"));
  EXPECT_EQ(*file.get_string("t.str.empty"), "");
  auto strs = file.get_array("t.arr.str", GgufType::STRING);
  ASSERT_TRUE(strs.ok());
  ASSERT_NE(*strs, nullptr);
  EXPECT_EQ((*strs)->items.size(), 4u);
  auto nested = file.get_array("t.arr.arr", GgufType::ARRAY);
  ASSERT_TRUE(nested.ok());
  ASSERT_NE(*nested, nullptr);
  EXPECT_EQ((*nested)->items[0].as_array().items[1].as_int(), 2);

  const GgufTensorInfo* t = file.find_tensor("t.tensor");
  ASSERT_NE(t, nullptr);
  float x[3];
  std::memcpy(x, t->data, sizeof x);
  EXPECT_EQ(x[2], 3.0f);
}

TEST_P(GgufFormatTest, TensorRoundTripEveryType) {
  // Row length 256 suits every block size (32 and the K-quants' 256). Between the matrices sit
  // odd-sized 1-D tensors so each offset needs padding.
  constexpr int64_t kRow = 256, kRows = 3;
  GgufWriter w(version(), alignment());
  struct Expect {
    std::string name;
    GgmlType type;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;
    std::vector<float> src;
  };
  std::vector<Expect> expects;
  uint32_t seed = 1;
  for (GgmlType type : kSupportedTypes) {
    Expect e{"m." + type_name(static_cast<uint32_t>(type)),
             type,
             {},
             {},
             source_values(kRow * kRows, seed++)};
    const size_t rb = row_size(type, kRow);
    e.bytes.resize(rb * kRows);
    e.deq.resize(static_cast<size_t>(kRow * kRows));
    for (int64_t r = 0; r < kRows; ++r) {
      quantize_row(type, e.src.data() + r * kRow, e.bytes.data() + r * rb, kRow);
      dequantize_row(type, e.bytes.data() + r * rb, e.deq.data() + r * kRow, kRow);
    }
    // Half the tensors through the raw path, half through the quantizing convenience path:
    // both must store the same bytes.
    if (seed % 2) {
      w.add_tensor(e.name, type, {kRow, kRows}, e.bytes);
    } else {
      w.add_tensor_f32(e.name, type, {kRow, kRows}, e.src);
    }
    w.add_tensor_f32("odd." + e.name, GgmlType::F32, {5}, {1, 2, 3, 4, 5});
    expects.push_back(std::move(e));
  }
  std::vector<float> cube(4 * 3 * 2), hyper(2 * 3 * 2 * 2);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<float>(i);
  for (size_t i = 0; i < hyper.size(); ++i) hyper[i] = -static_cast<float>(i);
  w.add_tensor_f32("shape.3d", GgmlType::F32, {4, 3, 2}, cube);
  w.add_tensor_f32("shape.4d", GgmlType::F16, {2, 3, 2, 2}, hyper);

  const std::string path = dir_.file("tensors.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  const GgufFile& file = **f;
  EXPECT_EQ(file.tensors().size(), expects.size() * 2 + 2);
  for (const auto& e : expects) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo* t = file.find_tensor(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->n_dims, 2);
    EXPECT_EQ(t->ne[0], kRow);
    EXPECT_EQ(t->ne[1], kRows);
    EXPECT_EQ(t->n_rows(), kRows);
    EXPECT_EQ(t->shape_string(), "[256, 3]");
    EXPECT_EQ(t->offset % alignment(), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % alignment(),
              0u);  // the mapping is page-aligned
    ASSERT_EQ(t->n_bytes, e.bytes.size());
    ASSERT_EQ(t->row_bytes() * kRows, e.bytes.size());
    EXPECT_EQ(std::memcmp(t->data, e.bytes.data(), e.bytes.size()), 0);
    std::vector<float> got(static_cast<size_t>(kRow));
    double max_err = 0, max_abs = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      dequantize_row(t->type, t->data + r * t->row_bytes(), got.data(), kRow);
      for (int64_t i = 0; i < kRow; ++i) {
        const size_t k = static_cast<size_t>(r * kRow + i);
        ASSERT_EQ(got[static_cast<size_t>(i)], e.deq[k]) << "row " << r << " element " << i;
        max_err = std::max(max_err,
                           std::fabs(static_cast<double>(got[static_cast<size_t>(i)]) - e.src[k]));
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(e.src[k])));
      }
    }
    EXPECT_LE(max_err, quant_error_bound(e.type) * max_abs + 1e-12);
  }
  const GgufTensorInfo* c = file.find_tensor("shape.3d");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_dims, 3);
  EXPECT_EQ(c->shape_string(), "[4, 3, 2]");
  EXPECT_EQ(c->n_elements(), 24);
  float last = 0;
  std::memcpy(&last, c->data + 23 * sizeof(float), sizeof last);
  EXPECT_EQ(last, 23.0f);
  const GgufTensorInfo* h = file.find_tensor("shape.4d");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->n_dims, 4);
  EXPECT_EQ(h->shape_string(), "[2, 3, 2, 2]");
  EXPECT_EQ(h->n_rows(), 12);
  EXPECT_EQ(h->n_bytes, 24u * 2u);
  std::vector<float> row(2);
  dequantize_row(GgmlType::F16, h->data + 11 * h->row_bytes(), row.data(), 2);
  EXPECT_EQ(row[1], -23.0f);
}

TEST_P(GgufFormatTest, EmptyFileWithNoKeysOrTensorsIsValid) {
  GgufWriter w(version(), alignment());
  const std::string path = dir_.file("empty.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE((*f)->tensors().empty());
  EXPECT_EQ((*f)->metadata().size(), alignment() != 32 ? 1u : 0u);
}

TEST_P(GgufFormatTest, SerializeIsDeterministic) {
  TestModelSpec spec;
  spec.gguf_version = version();
  spec.alignment = alignment();
  const auto a = make_test_model(spec).serialize();
  const auto b = make_test_model(spec).serialize();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size() % alignment(), 0u);
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, GgufFormatTest,
                         ::testing::Combine(::testing::Values(2u, 3u), ::testing::Values(32u, 64u)),
                         [](const auto& param_info) {
                           return "v" + std::to_string(std::get<0>(param_info.param)) + "_align" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

class GgufGettersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.set("k.u8", u8(3));
    w.set("k.u64.big", V::u64(std::numeric_limits<uint64_t>::max()));
    w.set("k.u64.ok", V::u64(uint64_t{1} << 40));
    w.set("k.f32", V::f32(0.5f));
    w.set("k.str", V::str("llama"));
    w.set("k.bool", V::boolean(true));
    w.set("k.arr.i32", V::i32_array({1, 2}));
    path_ = dir_.file("getters.gguf");
    ASSERT_TRUE(w.write(path_).ok());
    auto f = GgufFile::open(path_);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::move(*f);
  }
  // Checks that `e` failed with a message starting with the path and containing `phrase`.
  template <typename T>
  void expect_error(const Expected<T>& e, const std::string& phrase) {
    ASSERT_FALSE(e.ok()) << "expected an error containing: " << phrase;
    EXPECT_EQ(e.error().message.rfind(path_, 0), 0u) << e.error().message;
    EXPECT_NE(e.error().message.find(phrase), std::string::npos) << e.error().message;
  }
  TempDir dir_{"spillway-gguf"};
  std::string path_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufGettersTest, MissingKeyNamesTheKeyUnlessDefaulted) {
  expect_error(file_->get_int("k.none"), "required key 'k.none' is missing");
  expect_error(file_->get_float("k.none"), "required key 'k.none' is missing");
  expect_error(file_->get_bool("k.none"), "required key 'k.none' is missing");
  expect_error(file_->get_string("k.none"), "required key 'k.none' is missing");
  EXPECT_EQ(*file_->get_int("k.none", 7), 7);
  EXPECT_EQ(*file_->get_float("k.none", 1.5), 1.5);
  EXPECT_EQ(*file_->get_bool("k.none", true), true);
  EXPECT_EQ(*file_->get_string("k.none", std::string("dflt")), "dflt");
  auto arr = file_->get_array("k.none", GgufType::STRING);
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ(*arr, nullptr);
  EXPECT_EQ(file_->find("k.none"), nullptr);
  EXPECT_EQ(file_->find_tensor("none.weight"), nullptr);
}

TEST_F(GgufGettersTest, WrongTypeNamesKeyStoredAndWantedType) {
  expect_error(file_->get_int("k.str"), "key 'k.str' has type STRING, expected an integer");
  expect_error(file_->get_int("k.f32"), "key 'k.f32' has type FLOAT32, expected an integer");
  expect_error(file_->get_float("k.str"), "key 'k.str' has type STRING, expected a number");
  expect_error(file_->get_bool("k.u8"), "key 'k.u8' has type UINT8, expected BOOL");
  expect_error(file_->get_string("k.u8"), "key 'k.u8' has type UINT8, expected STRING");
  expect_error(file_->get_array("k.str", GgufType::STRING),
               "key 'k.str' has type STRING, expected ARRAY of STRING");
  expect_error(file_->get_array("k.arr.i32", GgufType::STRING),
               "key 'k.arr.i32' is an ARRAY of INT32, expected ARRAY of STRING");
  // A default does not hide a present key of the wrong type.
  expect_error(file_->get_int("k.str", 1), "expected an integer");
  expect_error(file_->get_string("k.u8", std::string("x")), "expected STRING");
}

TEST_F(GgufGettersTest, IntegerRangeAndConversions) {
  expect_error(file_->get_int("k.u64.big"),
               "key 'k.u64.big' = 18446744073709551615 is out of range");
  EXPECT_EQ(*file_->get_int("k.u64.ok"), int64_t{1} << 40);
  EXPECT_EQ(*file_->get_float("k.f32"), 0.5);
  EXPECT_EQ(*file_->get_float("k.u8"), 3.0);
  EXPECT_EQ(*file_->get_string("k.str"), "llama");
  auto arr = file_->get_array("k.arr.i32", GgufType::INT32);
  ASSERT_TRUE(arr.ok());
  ASSERT_NE(*arr, nullptr);
  ASSERT_EQ((*arr)->items.size(), 2u);
  EXPECT_EQ((*arr)->items[1].as_int(), 2);
}

TEST(GgufOpen, MissingFileAndDirectoryFailWithThePath) {
  TempDir dir("spillway-gguf");
  auto f = GgufFile::open(dir.file("does-not-exist.gguf"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("does-not-exist.gguf: cannot open"), std::string::npos)
      << f.error().message;
  auto d = GgufFile::open(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("not a regular file"), std::string::npos) << d.error().message;
}

TEST(GgufWriterErrors, WriteIntoMissingDirectoryNamesThePath) {
  TempDir dir("spillway-gguf");
  GgufWriter w;
  const std::string path = dir.file("no/such/dir/x.gguf");
  const Status st = w.write(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("no/such/dir/x.gguf"), std::string::npos) << st.error().message;
}

TEST(GgufWriterErrors, NonRegularOutputIsRefusedAndLeftAlone) {
  TempDir dir("spillway-gguf");
  GgufWriter w;
  const std::string fifo = dir.file("pipe.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status st = w.write(fifo);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("not a regular file"), std::string::npos) << st.error().message;
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));  // not renamed over
  const Status sd = w.write(dir.path());
  ASSERT_FALSE(sd.ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir.path()));
  EXPECT_FALSE(std::filesystem::exists(GgufWriter::temp_path_for(fifo)));
}

TEST(GgufWriterErrors, SymlinkIsFollowedAndStaysALink) {
  TempDir dir("spillway-gguf");
  GgufWriter w;
  const std::string link = dir.file("link.gguf");
  std::filesystem::create_symlink("target.gguf", link);  // dangling until written
  ASSERT_TRUE(w.write(link).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(std::filesystem::symlink_status(link)));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir.file("target.gguf")));
  EXPECT_TRUE(GgufFile::open(link).ok());
}

}  // namespace
}  // namespace spw
