// Tokenizing can be stopped (engine/tokenizer/encode_poll.h): a poll in scope is asked every
// kEncodePollEvery steps, a stop ends the encode within one more step, and an encode that is not
// stopped gives exactly the ids it gives without a poll (llama.cpp's reference ids included).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/encode_poll.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/vocab_cases.h"

namespace spw {
namespace {

namespace fs = std::filesystem;

const fs::path kModelsDir = fs::path(SPILLWAY_SHARED_DIR) / "models";

std::unique_ptr<Tokenizer> load_vocab(const std::string& vocab) {
  auto gguf = GgufFile::open((kModelsDir / ("ggml-vocab-" + vocab + ".gguf")).string());
  EXPECT_TRUE(gguf.ok()) << (gguf.ok() ? "" : gguf.error().message);
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::from_gguf(**gguf);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  if (!tok.ok()) return nullptr;
  return std::move(*tok);
}

// A slow prompt: one long "word" without spaces (a single pre-token, a single merge run), then
// ordinary words.
std::string slow_text() {
  std::string s;
  for (int i = 0; i < 20000; ++i) s += "qzxj"[i % 4] + std::to_string(i % 97);
  for (int i = 0; i < 2000; ++i) s += " the cat sat";
  return s;
}

class TokenizerPoll : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!fs::exists(kModelsDir / ("ggml-vocab-" + std::string(GetParam()) + ".gguf"))) {
      GTEST_SKIP() << "shared test data not found: " << kModelsDir.string();
    }
    tok_ = load_vocab(GetParam());
    ASSERT_NE(tok_, nullptr);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(TokenizerPoll, NotStoppedGivesTheSameIdsAsWithoutAPoll) {
  const std::string text = slow_text();
  const std::vector<int32_t> plain = tok_->encode(text, true, false);
  ASSERT_GT(plain.size(), 10000u);
  int64_t calls = 0;
  {
    EncodePoll poll([&] {
      ++calls;
      return false;
    });
    EXPECT_EQ(tok_->encode(text, true, false), plain);
    EXPECT_FALSE(poll.stopped());
    // One poll per kEncodePollEvery steps: the text takes tens of thousands of merges.
    EXPECT_GE(poll.polls(), 20);
    EXPECT_EQ(poll.polls(), calls);
  }
  // The reference cases under a poll: llama.cpp's ids still.
  const std::string base = kModelsDir / ("ggml-vocab-" + std::string(GetParam()) + ".gguf");
  const std::vector<std::string> inputs = split_vocab_inputs(read_file_bytes(base + ".inp"));
  const std::vector<std::vector<int32_t>> outputs = read_vocab_outputs(base + ".out");
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GT(inputs.size(), 0u);
  EncodePoll poll([] { return false; });
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(tok_->encode(inputs[i], false, false), outputs[i]) << "case " << i;
  }
}

TEST_P(TokenizerPoll, StopEndsTheEncodeAtThatPoll) {
  const std::string text = slow_text();
  const std::vector<int32_t> plain = tok_->encode(text, true, false);
  int64_t full_polls = 0;
  {
    EncodePoll count([] { return false; });
    (void)tok_->encode(text, true, false);
    full_polls = count.polls();
  }
  ASSERT_GE(full_polls, 20);
  EncodePoll poll([n = 0]() mutable { return ++n == 3; });
  const std::vector<int32_t> cut = tok_->encode(text, true, false);
  EXPECT_TRUE(poll.stopped());
  EXPECT_EQ(poll.polls(), 3) << "asked again after it said stop";
  EXPECT_LT(cut.size(), plain.size() / 2);
  // Stopped stays stopped: a second encode under the same scope ends at once, asking nothing.
  EXPECT_LT(tok_->encode(text, true, false).size(), 2u);
  EXPECT_EQ(poll.polls(), 3);
}

TEST_P(TokenizerPoll, OuterPollStopsAnInnerScopeAndSegments) {
  const std::string text = slow_text();
  const std::vector<TextSegment> segments = {{"<s>", true}, {text, false}, {"</s>", true}};
  const std::vector<int32_t> plain = tok_->encode_segments(segments, false);
  bool outer_asked = false;
  EncodePoll outer([&] {
    outer_asked = true;
    return true;
  });
  {
    EncodePoll inner{std::function<bool()>()};  // passes the outer poll's answer on
    const std::vector<int32_t> cut = tok_->encode_segments(segments, false);
    EXPECT_TRUE(inner.stopped());
    EXPECT_EQ(inner.polls(), 0);
    EXPECT_LT(cut.size(), plain.size() / 2);
  }
  EXPECT_TRUE(outer_asked);
  EXPECT_TRUE(outer.stopped());
  EXPECT_EQ(outer.polls(), 1);
}

TEST_P(TokenizerPoll, NoPollAfterTheScopeEnds) {
  const std::string text = slow_text();
  const std::vector<int32_t> plain = tok_->encode(text, true, false);
  {
    EncodePoll poll([] { return true; });
    EXPECT_LT(tok_->encode(text, true, false).size(), plain.size() / 2);
  }
  EXPECT_EQ(tok_->encode(text, true, false), plain);
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerPoll,
                         ::testing::Values("llama-spm", "gpt-2", "llama-bpe"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace spw
