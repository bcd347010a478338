// Hostile GGUF files: each must fail with a message that names the problem (and the key or
// tensor), never crash, never allocate by an unchecked count. Structural damage is caught by
// GgufFile::open; architecture and type refusals by Model::load.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "tests/support/hostile_gguf.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

class GgufHostileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir_.file(name);
    EXPECT_TRUE(write_bytes(path, bytes)) << path;
    return path;
  }
  // Opens `bytes` as a GGUF and expects failure with every phrase in the message, which must
  // start with the path.
  void expect_open_fails(const std::string& name, const std::vector<uint8_t>& bytes,
                         const std::vector<std::string>& phrases) {
    SCOPED_TRACE(name);
    const std::string path = write(name + ".gguf", bytes);
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.ok()) << name << " was accepted";
    const std::string& msg = f.error().message;
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    for (const auto& p : phrases)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
  // The reader accepts the file; Model::load refuses it with every phrase in the message.
  void expect_load_fails(const std::string& name, const std::vector<uint8_t>& bytes,
                         const std::vector<std::string>& phrases) {
    SCOPED_TRACE(name);
    const std::string path = write(name + ".gguf", bytes);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << "the reader should accept " << name << ": " << f.error().message;
    auto m = Model::load(path);
    ASSERT_FALSE(m.ok()) << name << " was loaded";
    const std::string& msg = m.error().message;
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    for (const auto& p : phrases)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
  TempDir dir_{"spillway-hostile"};
};

TEST_F(GgufHostileTest, BaseModelIsValid) {
  const std::string path = write("base.gguf", hostile_base_model());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->config().n_layer, 1);
}

TEST_F(GgufHostileTest, TinyFiles) {
  expect_open_fails("empty", hostile_empty(), {"empty", "0 bytes"});
  expect_open_fails("three", hostile_three_bytes(), {"too small", "3 bytes"});
}

TEST_F(GgufHostileTest, BadMagicAndVersions) {
  expect_open_fails("magic", hostile_bad_magic(), {"bad magic", "0x4c4d4747"});
  expect_open_fails("v1", hostile_version(1), {"version 1", "not supported"});
  expect_open_fails("v99", hostile_version(99), {"version 99", "supported: 2 and 3"});
  expect_open_fails("v0", hostile_version(0), {"version 0"});
}

TEST_F(GgufHostileTest, UnknownTensorTypeNamesNumberAndTensor) {
  expect_open_fails("type77", hostile_unknown_tensor_type(77),
                    {"unknown tensor type 77", "'blk.0.attn_q.weight'"});
  expect_open_fails("type_max", hostile_unknown_tensor_type(0xFFFFFFFFu),
                    {"unknown tensor type 4294967295", "blk.0.attn_q.weight"});
  // 31..33 are gaps in ggml's numbering (removed Q4_0_4_4 and friends).
  expect_open_fails("type31", hostile_unknown_tensor_type(31), {"unknown tensor type 31"});
}

TEST_F(GgufHostileTest, RefusedTypeIsNamedByTheLoader) {
  // The message lists what is supported, from the type table (the four low-bit types included).
  expect_load_fails("iq2_xxs", hostile_refused_type_iq2_xxs(),
                    {"IQ2_XXS", "blk.0.attn_q.weight", "not support",
                     "(supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, "
                     "Q6_K, IQ4_NL, IQ4_XS, BF16)"});
}

// The low-bit types the engine does not compute with stay refused, each by its GGUF name, with
// the tensor and the supported list: every IQ1/IQ2/IQ3 and TQ type.
TEST_F(GgufHostileTest, RemainingLowBitTypesAreRefusedByName) {
  for (GgmlType t :
       {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
        GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    const std::string name = type_name(static_cast<uint32_t>(t));
    expect_load_fails(name, hostile_refused_type(t),
                      {"tensor 'blk.0.attn_q.weight' has type " + name, "not support",
                       "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"});
  }
}

// A low-bit file cut inside its data names the first tensor that no longer fits, with the byte
// it should end at: for each mix, the last tensor of the mix's own type, cut one byte short.
TEST_F(GgufHostileTest, TruncatedLowBitTensorIsNamed) {
  const std::pair<const char*, GgmlType> mixes[] = {{"q2_k", GgmlType::Q2_K},
                                                    {"q3_k_m", GgmlType::Q3_K},
                                                    {"iq4_nl", GgmlType::IQ4_NL},
                                                    {"iq4_xs", GgmlType::IQ4_XS}};
  for (const auto& [mix, type] : mixes) {
    SCOPED_TRACE(mix);
    TestModelSpec s;
    s.mix = mix;
    s.n_embd = 256;
    s.n_ff = 256;
    s.head_dim = 64;
    s.n_layer = 1;
    auto m = build_test_model(s);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const std::vector<uint8_t> full = m->serialize();
    const GgufLayout layout = scan_gguf_layout(full);
    const GgufLayout::Tensor* cut = nullptr;
    for (const TestTensor& t : m->tensors) {
      if (t.type == type) cut = &layout.tensor(t.name);
    }
    ASSERT_NE(cut, nullptr);
    const std::vector<uint8_t> bytes(full.begin(),
                                     full.begin() + static_cast<std::ptrdiff_t>(cut->data_end - 1));
    expect_open_fails(std::string("trunc-") + mix, bytes,
                      {"tensor '" + cut->name + "' ends at byte " + std::to_string(cut->data_end)});
  }
}

TEST_F(GgufHostileTest, UnknownArchitectureListsTheSupportedOnes) {
  const auto bytes = hostile_unknown_arch();
  expect_load_fails("mamba9", bytes,
                    {"mamba9", "llama, qwen2, qwen2moe, qwen3, qwen3moe, phi3, gemma3"});
  // read_config (used by `info`) refuses it the same way.
  auto f = GgufFile::open(dir_.file("mamba9.gguf"));
  ASSERT_TRUE(f.ok());
  auto c = Model::read_config(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("unknown architecture 'mamba9'"), std::string::npos)
      << c.error().message;
}

TEST_F(GgufHostileTest, AlignmentAndOffsets) {
  expect_open_fails("misaligned", hostile_misaligned_offset(),
                    {"blk.0.attn_norm.weight", "not a multiple of the alignment 32"});
  expect_open_fails("align0", hostile_alignment(0),
                    {"general.alignment = 0", "not a power of two"});
  expect_open_fails("align48", hostile_alignment(48),
                    {"general.alignment = 48", "not a power of two"});
  // The second tensor's offset pointed at the first tensor's bytes: aliasing is refused.
  auto overlap = hostile_base_model();
  const GgufLayout l = scan_gguf_layout(overlap);
  ASSERT_GE(l.tensors.size(), 2u);
  patch_u64(overlap, l.tensors[1].offset_pos, l.tensors[0].data_begin - l.data_begin);
  expect_open_fails("overlap", overlap, {"overlaps", l.tensors[1].name, l.tensors[0].name});
  // Sanity: the same file with the key left at 64 is valid.
  auto m = Model::load(write("align64.gguf", hostile_alignment(64)));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->file().alignment(), 64u);
}

TEST_F(GgufHostileTest, HugeCountsAndLengthsAreRejectedBeforeAllocating) {
  expect_open_fails("kv_count", hostile_kv_count(uint64_t{1} << 62),
                    {"metadata count 4611686018427387904", "larger than the file"});
  expect_open_fails("array_count", hostile_array_count(uint64_t{1} << 60),
                    {"array count 1152921504606846976", "tokenizer.ggml.tokens"});
  expect_open_fails("key_len", hostile_key_length(uint64_t{1} << 63),
                    {"string length 9223372036854775808", "metadata entry 0", "runs past the end"});
  expect_open_fails(
      "value_len", hostile_value_length(uint64_t{1} << 63),
      {"string length 9223372036854775808", "general.architecture", "runs past the end"});
  expect_open_fails("value_len_max", hostile_value_length(~uint64_t{0}), {"runs past the end"});
}

TEST_F(GgufHostileTest, TensorShapes) {
  expect_open_fails("ndims9", hostile_n_dims(9), {"token_embd.weight", "9 dimensions"});
  expect_open_fails("ndims0", hostile_n_dims(0), {"token_embd.weight", "0 dimensions"});
  expect_open_fails("dim_overflow", hostile_dim_overflow(),
                    {"token_embd.weight", "too many elements"});
}

TEST_F(GgufHostileTest, Duplicates) {
  expect_open_fails("dup_key", hostile_duplicate_key(),
                    {"duplicate metadata key 'general.architecture'"});
  expect_open_fails("dup_tensor", hostile_duplicate_tensor(),
                    {"duplicate tensor name 'token_embd.weight'"});
}

TEST_F(GgufHostileTest, DeeplyNestedArrays) {
  expect_open_fails("nested100", hostile_nested_arrays(100), {"test.deep", "nests arrays deeper"});
  // A few levels are fine.
  const std::string path = write("nested3.gguf", hostile_nested_arrays(3));
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  const GgufValue* v = (*f)->find("test.deep");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->as_array().items[0].as_array().items[0].as_array().items[0].as_int(), 42);
}

// Every truncation of the base model fails cleanly: byte by byte through the header, the
// metadata and the tensor index, then every 7 bytes (and at each tensor's first and last
// byte) through the data. Truncating only trailing padding after the last tensor's data
// leaves every tensor intact, and the reader accepts that (as llama.cpp does); the test
// pins that boundary exactly.
TEST_F(GgufHostileTest, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> full = hostile_base_model();
  const GgufLayout layout = scan_gguf_layout(full);
  uint64_t last_data_end = 0;
  for (const auto& t : layout.tensors) last_data_end = std::max(last_data_end, t.data_end);
  ASSERT_LE(last_data_end, full.size());

  std::set<uint64_t> offsets;
  for (uint64_t k = 0; k <= layout.data_begin + 8 && k <= full.size(); ++k) offsets.insert(k);
  for (uint64_t k = layout.data_begin; k <= full.size(); k += 7) offsets.insert(k);
  for (const auto& t : layout.tensors) {
    for (uint64_t k : {t.data_begin, t.data_begin + 1, t.data_end - 1, t.data_end})
      offsets.insert(k);
  }
  offsets.insert(full.size() - 1);
  offsets.insert(full.size());

  // One file, truncated in place from long to short: no rewrite per offset.
  const std::string path = write("trunc.gguf", full);
  int n_failed = 0, n_accepted = 0;
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    const uint64_t k = *it;
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(k)), 0) << k;
    auto f = GgufFile::open(path);
    if (k >= last_data_end) {
      EXPECT_TRUE(f.ok()) << "k=" << k << ": " << f.error().message;
      n_accepted += k < full.size();
      continue;
    }
    ASSERT_FALSE(f.ok()) << "truncation at " << k << " of " << full.size() << " was accepted";
    ++n_failed;
    const std::string& msg = f.error().message;
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    if (k == 0) {
      EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
    } else if (k < 4) {
      EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
    } else if (k < layout.tensor_index_end) {
      // Header, metadata or index cut short: "truncated", or a length/count that now runs
      // past the end.
      const bool named = msg.find("truncated") != std::string::npos ||
                         msg.find("past the end") != std::string::npos ||
                         msg.find("larger than the file") != std::string::npos;
      EXPECT_TRUE(named) << "k=" << k << ": " << msg;
    } else {
      // "tensor 'X' ends at byte N but the file has k bytes", or, when one tensor alone is
      // larger than what is left of the file, "tensor 'X' needs N bytes but the file has k bytes".
      const bool named =
          msg.find("ends at byte") != std::string::npos || msg.find("needs") != std::string::npos;
      EXPECT_TRUE(named) << "k=" << k << ": " << msg;
      EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
      EXPECT_NE(msg.find("but the file has " + std::to_string(k) + " bytes"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("truncated or corrupted"), std::string::npos) << msg;
    }
  }
  EXPECT_GT(n_failed, 1000);
  EXPECT_EQ(n_accepted > 0, last_data_end < full.size());
  // A truncation inside the data names the first tensor that no longer fits.
  const auto& last = layout.tensors.back();
  const std::string p2 = write("trunc_last.gguf", hostile_truncated(last.data_end - 1));
  auto f = GgufFile::open(p2);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("tensor '" + last.name + "' ends at byte " +
                                   std::to_string(last.data_end)),
            std::string::npos)
      << f.error().message;
}

// Cutting only the zero padding after the last tensor leaves every tensor whole: the reader
// accepts it (llama.cpp does too). One byte less and the last tensor is named as cut short.
TEST_F(GgufHostileTest, TruncatedTrailingPaddingIsAccepted) {
  auto m = build_test_model(hostile_base_spec());
  ASSERT_TRUE(m.ok());
  m->tensors.push_back(
      {"extra.bias", GgmlType::F32, {5}, std::vector<uint8_t>(5 * sizeof(float), 0)});
  const std::vector<uint8_t> full = m->serialize();
  const GgufLayout layout = scan_gguf_layout(full);
  const uint64_t end = layout.tensor("extra.bias").data_end;
  ASSERT_EQ(full.size(), end + 12);  // 20 bytes of data padded to 32
  const std::string path = write("pad.gguf", full);
  for (uint64_t k = full.size(); k >= end; --k) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(k)), 0);
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.ok()) << "k=" << k << ": " << f.error().message;
  }
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(end - 1)), 0);
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("tensor 'extra.bias' ends at byte " + std::to_string(end)),
            std::string::npos)
      << f.error().message;
}

// Byte-level fuzz: flip one byte at a time through the header and index of the base model
// (patched in place in one file, then restored). Any outcome is allowed except a crash;
// accepted files must still have every tensor inside the file.
TEST_F(GgufHostileTest, SingleByteCorruptionsNeverCrash) {
  const std::vector<uint8_t> full = hostile_base_model();
  const GgufLayout layout = scan_gguf_layout(full);
  const std::string path = write("flip.gguf", full);
  FILE* fp = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(fp, nullptr);
  auto poke = [&](uint64_t k, uint8_t byte) {
    return std::fseek(fp, static_cast<long>(k), SEEK_SET) == 0 && std::fputc(byte, fp) == byte &&
           std::fflush(fp) == 0;
  };
  int n_rejected = 0;
  for (uint64_t k = 0; k < layout.tensor_index_end; k += 3) {
    ASSERT_TRUE(poke(k, static_cast<uint8_t>(full[k] ^ (0x80 | (k & 0x7f)))));
    auto f = GgufFile::open(path);
    ASSERT_TRUE(poke(k, full[k]));
    if (!f.ok()) {
      ++n_rejected;
      continue;
    }
    for (const auto& t : (*f)->tensors()) {
      ASSERT_LE((*f)->data_offset() + t.offset + t.n_bytes, (*f)->file_size()) << t.name;
    }
  }
  std::fclose(fp);
  EXPECT_GT(n_rejected, 0);
}

}  // namespace
}  // namespace spw
