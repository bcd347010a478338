// Asking a document end to end on a real tiny model (stories260K, from ../shared/models):
// snapshot save and reuse, the corrupt-snapshot fallback, context too small, map-reduce, and
// the refusal of a document without text. stories260K's answers are nonsense; the pipeline is
// what is checked.
#include "app/ask/ask.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "app/ask/ask_test_util.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/kv/snapshot.h"
#include "engine/model/model.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;
using namespace spw::app::test;

// A data folder moved elsewhere: the index still names the file where it was written, and the
// ask reads the copy in its own snapshot folder (it read the old path, or failed when it was
// gone).
TEST_F(AskDocument, AMovedSnapshotFolderIsReadWhereItIsNow) {
  const DocumentText doc = story_doc(2);
  auto first = ask(doc);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(index_.records.size(), 1u);
  const std::string recorded = index_.records.begin()->second;
  const fs::path moved = fs::path(params_.snapshot_dir).string() + "-moved";
  fs::rename(params_.snapshot_dir, moved);
  params_.snapshot_dir = moved.string();
  ASSERT_FALSE(fs::exists(recorded));
  auto second = ask(doc);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(second->reused_snapshot) << notes_;
  EXPECT_EQ(second->prefill_tokens_computed, second->question_tokens);
  EXPECT_EQ(second->answer, first->answer);
}

TEST_F(AskDocument, SecondAskReusesTheSavedKv) {
  const DocumentText doc = story_doc(2);
  auto first = ask(doc);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->reused_snapshot);
  EXPECT_FALSE(first->map_reduce);
  EXPECT_EQ(first->prefill_tokens_computed, first->prompt_tokens);
  EXPECT_GT(first->document_tokens, 30);
  EXPECT_GT(first->question_tokens, 3);
  EXPECT_GT(first->prompt_tokens, first->document_tokens + first->question_tokens);
  EXPECT_EQ(first->context, model_->config().n_ctx_train);
  EXPECT_EQ(first->generated_tokens, 12);
  EXPECT_NE(notes_.find("saved KV of the document prefix: "), std::string::npos) << notes_;
  ASSERT_EQ(index_.records.size(), 1u);
  const std::string file = index_.records.begin()->second;
  EXPECT_TRUE(fs::exists(file));
  EXPECT_EQ(fs::path(file).parent_path(), fs::path(params_.snapshot_dir));

  auto second = ask(doc);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(second->reused_snapshot);
  EXPECT_EQ(second->reused_tokens, second->prompt_tokens - second->question_tokens);
  EXPECT_EQ(second->prefill_tokens_computed, second->question_tokens);
  EXPECT_EQ(second->answer, first->answer);
  EXPECT_NE(notes_.find("reused saved KV: " + std::to_string(second->reused_tokens) + " tokens"),
            std::string::npos)
      << notes_;

  // Another question on the same document: the same prefix, only the new question computed.
  params_.question = "What did Lily see under the tree?";
  auto third = ask(doc);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE(third->reused_snapshot);
  EXPECT_EQ(third->prefill_tokens_computed, third->question_tokens);
  EXPECT_EQ(index_.records.size(), 1u);

  // Other KV settings are another key: no reuse of an f16 snapshot by an f32 session.
  sp_.kv_type_k = KvType::F32;
  params_.kv_config = snapshot_kv_config(sp_, kv::KvSettings{});
  auto f32 = ask(doc);
  ASSERT_TRUE(f32) << f32.error().message;
  EXPECT_FALSE(f32->reused_snapshot);
  EXPECT_EQ(index_.records.size(), 2u);
}

TEST_F(AskDocument, DamagedOrMissingSnapshotFallsBackToPrefill) {
  const DocumentText doc = story_doc(2);
  auto first = ask(doc);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(index_.records.size(), 1u);
  const std::string file = index_.records.begin()->second;
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "not a snapshot";
  }
  auto second = ask(doc);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->reused_snapshot);
  EXPECT_EQ(second->prefill_tokens_computed, second->prompt_tokens);
  EXPECT_EQ(second->answer, first->answer);
  EXPECT_NE(notes_.find("saved KV not usable"), std::string::npos) << notes_;
  // Saved again: the next ask reuses it.
  auto third = ask(doc);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE(third->reused_snapshot);

  // The file gone (its record kept): prefilled again, with a note, and saved again.
  fs::remove(file);
  auto fourth = ask(doc);
  ASSERT_TRUE(fourth) << fourth.error().message;
  EXPECT_FALSE(fourth->reused_snapshot);
  EXPECT_NE(notes_.find("saved KV not usable"), std::string::npos) << notes_;
  EXPECT_TRUE(fs::exists(file));
}

TEST_F(AskDocument, ContextTooSmallSaysSoWithTheNumbers) {
  sp_.n_ctx = 128;
  const DocumentText doc = story_doc(6);
  auto r = ask(doc);
  ASSERT_FALSE(r);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("the document is longer than the context"), std::string::npos) << m;
  EXPECT_NE(m.find("the context holds 128 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("--map-reduce"), std::string::npos) << m;
  EXPECT_NE(m.find("12-token answer"), std::string::npos) << m;
}

TEST_F(AskDocument, MapReduceAnswersOverPartsThenCombines) {
  sp_.n_ctx = 512;
  params_.map_reduce = true;
  const DocumentText doc = story_doc(9);
  auto r = ask(doc);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->map_reduce);
  ASSERT_GE(r->parts.size(), 2u);
  EXPECT_GT(r->prompt_tokens, 512);
  EXPECT_EQ(r->parts.front().first_page, 1);
  EXPECT_EQ(r->parts.back().last_page, 9);
  int64_t computed = 0;
  for (size_t k = 0; k < r->parts.size(); ++k) {
    if (k > 0) EXPECT_EQ(r->parts[k].first_page, r->parts[k - 1].last_page + 1);
    EXPECT_LE(r->parts[k].run.prompt_tokens + 12, 512);
    EXPECT_EQ(r->parts[k].run.generated_tokens, 12);
    computed += r->parts[k].run.prefill_tokens_computed;
  }
  EXPECT_GT(r->prefill_tokens_computed, computed);  // plus the combining prompt
  EXPECT_FALSE(r->reused_snapshot);
  EXPECT_NE(notes_.find("map-reduce: "), std::string::npos) << notes_;

  // Asked again: every part's document prefix comes from its snapshot.
  auto again = ask(doc);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->reused_snapshot);
  EXPECT_EQ(again->answer, r->answer);
  EXPECT_EQ(index_.records.size(), r->parts.size());
}

// An answer longer than a part keeps room for (at 512 tokens: 64) is refused before the first
// part runs, with the numbers; at the limit it runs.
TEST_F(AskDocument, MapReduceRefusesAnAnswerLongerThanAPartHoldsBeforeAnyPart) {
  sp_.n_ctx = 512;
  params_.map_reduce = true;
  const DocumentText doc = story_doc(9);
  for (const int32_t n : {65, 300, -1}) {
    params_.n_predict = n;
    auto r = ask(doc);
    ASSERT_FALSE(r) << n;
    const std::string& m = r.error().message;
    EXPECT_NE(m.find(fmt::format("-n {}{}: a map-reduce part keeps room for an answer of 64 "
                                 "tokens in the 512-token context",
                                 n, n < 0 ? " (no limit)" : "")),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("give -n 64 or less, or a larger -c"), std::string::npos) << m;
    EXPECT_EQ(notes_.find("map-reduce: "), std::string::npos) << "no part planned: " << notes_;
    EXPECT_TRUE(index_.records.empty()) << "no part's KV saved";
  }
  params_.n_predict = 64;
  auto ok = ask(doc);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_TRUE(ok->map_reduce);
}

// The parts are planned with a fixed question budget: a second question of another length gets
// the same parts (pages), and every part's prefix comes from the first question's snapshots.
TEST_F(AskDocument, MapReducePartsDoNotDependOnTheQuestion) {
  sp_.n_ctx = 512;
  params_.map_reduce = true;
  params_.question = "Who?";
  const DocumentText doc = story_doc(9);
  auto a = ask(doc);
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_GE(a->n_parts, 2);
  EXPECT_EQ(a->n_parts, static_cast<int>(a->parts.size()));
  EXPECT_EQ(a->parts_reused, 0);
  EXPECT_EQ(a->part_question_budget, part_question_budget(512));
  EXPECT_EQ(part_question_budget(512), 32);
  EXPECT_EQ(part_answer_reserve(512), 64);
  EXPECT_EQ(part_reserve(512, 5), 32 + 64);
  EXPECT_EQ(part_reserve(8192, 5), 128 + 256);

  params_.question = "What did Lily see under the big tree?";
  auto b = ask(doc);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_GT(b->question_tokens, a->question_tokens + 5);
  EXPECT_LE(b->question_tokens, 32);
  ASSERT_EQ(b->parts.size(), a->parts.size());
  int64_t question_only = 0;
  for (size_t k = 0; k < a->parts.size(); ++k) {
    EXPECT_EQ(b->parts[k].first_page, a->parts[k].first_page) << "part " << k + 1;
    EXPECT_EQ(b->parts[k].last_page, a->parts[k].last_page) << "part " << k + 1;
    EXPECT_TRUE(b->parts[k].run.reused_snapshot) << "part " << k + 1;
    EXPECT_EQ(b->parts[k].run.prompt_tokens - b->parts[k].run.reused_tokens,
              b->parts[k].run.prefill_tokens_computed);
    question_only += b->parts[k].run.prefill_tokens_computed;
  }
  EXPECT_EQ(question_only, b->question_tokens * static_cast<int64_t>(b->parts.size()));
  EXPECT_EQ(b->parts_reused, b->n_parts);
  EXPECT_TRUE(b->reused_snapshot);
  EXPECT_EQ(index_.records.size(), a->parts.size());

  // A question longer than the budget: its own partition, said in a note, and still answered.
  std::string longer;
  while (static_cast<int64_t>(tok_->encode(longer, false, false).size()) < 40)
    longer += "Where did Lily play with the red ball? ";
  params_.question = longer;
  auto c = ask(doc);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_GT(c->question_tokens, 32);
  EXPECT_EQ(c->part_question_budget, (c->question_tokens + 63) / 64 * 64);
  EXPECT_NE(notes_.find("more than the 32 the document's parts are planned with"),
            std::string::npos)
      << notes_;
  for (const PartAnswer& p : c->parts) EXPECT_LE(p.run.prompt_tokens + 64, 512);
}

// Stopped during part 3: the two finished parts are the result ("stopped after part 2 of N") and
// are stored; a continue request keeps them (same text) and answers as an uninterrupted ask.
TEST_F(AskDocument, StopKeepsFinishedPartsAndContinueResumesAtTheNext) {
  sp_.n_ctx = 512;
  params_.map_reduce = true;
  const DocumentText doc = story_doc(9);
  const SessionFactory factory = session_factory();
  auto whole = ask(doc);  // uninterrupted, no store
  ASSERT_TRUE(whole) << whole.error().message;
  ASSERT_GE(whole->n_parts, 3);
  EXPECT_EQ(whole->stopped, "length limit 12 tokens");
  EXPECT_EQ(stopped_mark(whole->stopped), "[stopped: length limit 12 tokens]");
  EXPECT_EQ(whole->parts.front().run.stopped, "length limit 12 tokens");

  MapPartStore store;
  bool stop = false;
  AskCallbacks cb;
  cb.part_start = [&](int part, int, int, int) { stop = part == 3; };
  cb.cancelled = [&] { return stop; };
  auto stopped = ask_document(*tok_, doc, params_, factory, &index_, cb, &store);
  ASSERT_TRUE(stopped) << stopped.error().message;
  EXPECT_TRUE(stopped->stopped_between_parts);
  EXPECT_EQ(stopped->stopped, fmt::format("stopped after part 2 of {}", whole->n_parts));
  EXPECT_TRUE(stopped->answer.empty());
  ASSERT_EQ(stopped->parts.size(), 2u);
  EXPECT_EQ(store.puts, 2);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(stopped->parts[k].run.text, whole->parts[k].run.text);

  params_.continue_parts = true;
  AskCallbacks quiet;
  quiet.note = [this](const std::string& s) { notes_ += s + "\n"; };
  notes_.clear();
  auto continued = ask_document(*tok_, doc, params_, factory, &index_, quiet, &store);
  ASSERT_TRUE(continued) << continued.error().message;
  EXPECT_EQ(continued->parts_kept, 2);
  EXPECT_FALSE(continued->stopped_between_parts);
  ASSERT_EQ(continued->parts.size(), whole->parts.size());
  for (size_t k = 0; k < whole->parts.size(); ++k) {
    EXPECT_EQ(continued->parts[k].kept, k < 2) << "part " << k + 1;
    EXPECT_EQ(continued->parts[k].run.text, whole->parts[k].run.text) << "part " << k + 1;
    EXPECT_EQ(continued->parts[k].first_page, whole->parts[k].first_page);
  }
  EXPECT_EQ(continued->answer, whole->answer);
  EXPECT_NE(notes_.find("part 1 of " + std::to_string(whole->n_parts) +
                        ": its answer is kept from an earlier ask"),
            std::string::npos)
      << notes_;
  EXPECT_EQ(store.puts, whole->n_parts);  // parts 3.. stored as they finished

  // Another question is another key: nothing kept.
  params_.question = "What did Lily see?";
  auto other = ask_document(*tok_, doc, params_, factory, &index_, {}, &store);
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->parts_kept, 0);
}

TEST_F(AskDocument, CancelStopsAfterTheCurrentToken) {
  const DocumentText doc = story_doc(2);
  int pieces = 0;
  const SessionFactory factory = session_factory();
  AskCallbacks cb;
  cb.piece = [&](int, const std::string&) { ++pieces; };
  cb.cancelled = [&] { return pieces >= 3; };
  auto r = ask_document(*tok_, doc, params_, factory, &index_, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "cancelled");
  EXPECT_EQ(pieces, 3);
}

TEST_F(AskDocument, ADocumentWithoutTextIsNeverAnswered) {
  DocumentText doc;
  doc.id = 5;
  doc.title = "scan";
  doc.pages = {{1, "", true, false, false, {}}, {2, "", true, false, false, {}}};
  auto r = ask(doc);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "document 5 (scan) has no text: all 2 of its pages are scanned images (or "
            "undecodable) without a text layer; they need OCR (ingest with --ocr); not answering");
  EXPECT_TRUE(index_.records.empty());
  doc.pages.resize(1);
  r = ask(doc);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("has no text: its one page is a scanned image"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace spw::app
