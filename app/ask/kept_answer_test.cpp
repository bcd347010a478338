// An answer cut by its length limit or cancelled is kept as its token ids and continued
// (AskParams::continue_answer) on the real tiny model: greedy, the continued answer equals one
// uninterrupted answer of the summed length, and only the question and the kept tokens are
// prefilled on top of the document prefix's saved KV.
#include "app/ask/kept_answer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/ask/ask.h"
#include "app/ask/ask_test_util.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;
using namespace spw::app::test;

// The kept answer files in `dir`.
std::vector<fs::path> kept_files(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().string().ends_with("-answer.tokens")) out.push_back(e.path());
  return out;
}

TEST(KeptAnswerFile, RoundTripsAndRefusesDamageAndAnotherPrompt) {
  TempFolder dir;
  const std::string file = (dir.path() / "sub" / kept_answer_file_name(0x1234, 0xabcd)).string();
  EXPECT_EQ(fs::path(file).filename(), "0000000000001234-000000000000abcd-answer.tokens");
  const std::vector<int32_t> ids = {1, 400, 31999, 0, 7};
  ASSERT_TRUE(write_kept_answer(file, 88, ids));
  auto back = read_kept_answer(file, 88);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, ids);
  auto other = read_kept_answer(file, 89);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().message, "kept for another prompt (88 tokens, not 89)");
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(text.substr(0, text.find("check ")),
            "spillway kept answer 1\nprompt_tokens 88\nanswer_tokens 5\n1 400 31999 0 7\n");
  {  // one id changed: the check fails
    std::string bad = text;
    bad.replace(bad.find("31999"), 5, "31998");
    std::ofstream(file, std::ios::trunc) << bad;
  }
  auto damaged = read_kept_answer(file, 88);
  ASSERT_FALSE(damaged);
  EXPECT_EQ(damaged.error().message, file + " is damaged");
  std::ofstream(file, std::ios::trunc) << text.substr(0, text.size() / 2);  // cut short
  EXPECT_FALSE(read_kept_answer(file, 88));
  EXPECT_EQ(read_kept_answer((dir.path() / "none").string(), 88).error().message, "none kept");
  EXPECT_TRUE(fs::directory_iterator(dir.path() / "sub") != fs::directory_iterator())
      << "the file stays";
  for (const auto& e : fs::directory_iterator(dir.path() / "sub"))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "no temporary left";
}

TEST_F(AskDocument, ALengthLimitedAnswerContinuesToTheUninterruptedAnswer) {
  const DocumentText doc = story_doc(2);
  params_.n_predict = 8;
  auto first = ask(doc);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->stopped, "length limit 8 tokens");
  ASSERT_EQ(kept_files(params_.snapshot_dir).size(), 1u);
  const fs::path kept = kept_files(params_.snapshot_dir)[0];
  auto ids8 = read_kept_answer(kept.string(), first->prompt_tokens);
  ASSERT_TRUE(ids8) << ids8.error().message;
  ASSERT_EQ(ids8->size(), 8u);
  std::string text8;
  for (const int32_t id : *ids8) text8 += tok_->token_to_piece(id);
  EXPECT_EQ(text8, first->answer);

  // Continued twice by 8: the question and the kept tokens are computed, the document prefix
  // restored from its snapshot.
  params_.continue_answer = true;
  auto second = ask(doc);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->continued_tokens, 8);
  EXPECT_EQ(second->generated_tokens, 8);
  EXPECT_TRUE(second->reused_snapshot);
  EXPECT_EQ(second->prefill_tokens_computed, second->question_tokens + 8);
  EXPECT_EQ(second->answer.substr(0, first->answer.size()), first->answer);
  EXPECT_EQ(second->stopped, "length limit 8 tokens");
  EXPECT_NE(notes_.find("continuing the earlier answer: its 8 tokens are kept"), std::string::npos)
      << notes_;
  auto third = ask(doc);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->continued_tokens, 16);
  EXPECT_EQ(third->prefill_tokens_computed, third->question_tokens + 16);
  auto ids24 = read_kept_answer(kept.string(), first->prompt_tokens);
  ASSERT_TRUE(ids24) << ids24.error().message;
  ASSERT_EQ(ids24->size(), 24u);
  EXPECT_TRUE(std::equal(ids8->begin(), ids8->end(), ids24->begin()));

  // One uninterrupted answer of 24 tokens, in a folder of its own: the same ids and text.
  TempFolder other;
  const AskParams continued = params_;
  params_.snapshot_dir = (other.path() / "snapshots").string();
  params_.continue_answer = false;
  params_.n_predict = 24;
  index_.records.clear();
  auto whole = ask(doc);
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(whole->answer, third->answer);
  ASSERT_EQ(kept_files(params_.snapshot_dir).size(), 1u);
  EXPECT_EQ(*read_kept_answer(kept_files(params_.snapshot_dir)[0].string(), whole->prompt_tokens),
            *ids24);

  // Continued until it ends (end of text or the full context): nothing is left to continue.
  params_ = continued;
  params_.n_predict = -1;
  auto rest = ask(doc);
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(rest->continued_tokens, 24);
  EXPECT_EQ(rest->answer.substr(0, third->answer.size()), third->answer);
  EXPECT_TRUE(rest->stopped.empty() || rest->stopped.starts_with("context full")) << rest->stopped;
  EXPECT_TRUE(kept_files(params_.snapshot_dir).empty());
  // And a continue with nothing kept answers from the start, saying so.
  params_.n_predict = 8;
  auto fresh = ask(doc);
  ASSERT_TRUE(fresh) << fresh.error().message;
  EXPECT_EQ(fresh->continued_tokens, 0);
  EXPECT_EQ(fresh->answer, first->answer);
  EXPECT_NE(notes_.find("no answer of this question to continue (none kept): answering from the "
                        "start"),
            std::string::npos)
      << notes_;
}

TEST_F(AskDocument, ACancelledAnswerIsKeptAndContinues) {
  const DocumentText doc = story_doc(2);
  params_.n_predict = 12;
  auto whole = ask(doc);  // the uninterrupted answer
  ASSERT_TRUE(whole) << whole.error().message;
  for (const auto& f : kept_files(params_.snapshot_dir)) fs::remove(f);

  int pieces = 0;
  const SessionFactory factory = session_factory();
  AskCallbacks cb;
  cb.piece = [&](int, const std::string&) { ++pieces; };
  cb.cancelled = [&] { return pieces >= 5; };
  auto cut = ask_document(*tok_, doc, params_, factory, &index_, cb);
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().message, "cancelled");
  ASSERT_EQ(kept_files(params_.snapshot_dir).size(), 1u);
  auto ids = read_kept_answer(kept_files(params_.snapshot_dir)[0].string(), whole->prompt_tokens);
  ASSERT_TRUE(ids) << ids.error().message;
  EXPECT_EQ(ids->size(), 5u);

  params_.continue_answer = true;
  params_.n_predict = 7;
  auto cont = ask(doc);
  ASSERT_TRUE(cont) << cont.error().message;
  EXPECT_EQ(cont->continued_tokens, 5);
  EXPECT_EQ(cont->generated_tokens, 7);
  EXPECT_EQ(cont->answer, whole->answer);

  // A damaged kept file: said, and answered from the start.
  const fs::path f = kept_files(params_.snapshot_dir)[0];
  std::ofstream(f, std::ios::trunc) << "spillway kept answer 1\nprompt_tokens 3\n";
  auto again = ask(doc);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->continued_tokens, 0);
  EXPECT_NE(notes_.find(f.string() + " is damaged): answering from the start"), std::string::npos)
      << notes_;
}

}  // namespace
}  // namespace spw::app
