#include "app/runtime/progress.h"

#include <gtest/gtest.h>

#include <vector>

namespace spw::app {
namespace {

TEST(Progress, MeterRateAndEtaFromFakeClock) {
  ProgressMeter m(ProgressPhase::Prefill, 73167, 100.0);
  const ProgressEvent e = m.at(12288, 100.0 + 256.0);  // 48 t/s
  EXPECT_EQ(e.done, 12288);
  EXPECT_EQ(e.total, 73167);
  EXPECT_DOUBLE_EQ(e.tokens_per_s, 48.0);
  EXPECT_NEAR(e.eta_s, (73167.0 - 12288.0) / 48.0, 1e-9);
  EXPECT_EQ(progress_line(e), "prefill 12,288/73,167 tokens (16%) 48 t/s ETA 21m08s");
}

TEST(Progress, RestoredTokensAreNotPartOfTheRate) {
  ProgressMeter m(ProgressPhase::Prefill, 20000, 0.0, 16000);
  const ProgressEvent e = m.at(18000, 10.0);  // 2,000 new tokens in 10 s
  EXPECT_DOUBLE_EQ(e.tokens_per_s, 200.0);
  EXPECT_DOUBLE_EQ(e.eta_s, 10.0);
}

// A prefill whose later tokens cost more: the ETA scales the time spent by the cost left over
// the cost done. Pure p^2 cost: half the tokens in 10 s is a quarter of the cost, so 30 s are
// left (the token count alone said 10 s).
TEST(Progress, APrefillCostShapesTheEta) {
  const PrefillCost square = [](int64_t p) { return static_cast<double>(p) * p; };
  const ProgressMeter m(ProgressPhase::Prefill, 100, 0.0, 0, square);
  const ProgressEvent e = m.at(50, 10.0);
  EXPECT_DOUBLE_EQ(e.tokens_per_s, 5.0);  // the rate stays tokens over seconds
  EXPECT_DOUBLE_EQ(e.eta_s, 30.0);
  // Resumed at 50: the cost done is that of 50..75, (5625 - 2500) in 10 s; 10000 - 5625 left.
  const ProgressMeter r(ProgressPhase::Prefill, 100, 0.0, 50, square);
  EXPECT_DOUBLE_EQ(r.at(75, 10.0).eta_s, 10.0 * (10000.0 - 5625.0) / (5625.0 - 2500.0));
  // AnswerProgress passes the cost to its prefill events.
  std::vector<ProgressEvent> events;
  double now = 0;
  AnswerProgress a([&](const ProgressEvent& ev) { events.push_back(ev); }, [&] { return now; });
  a.set_prefill_cost(square);
  a.prompt_begin(100, 0);
  now = 10;
  a.prefill_at(50);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_DOUBLE_EQ(events[0].eta_s, 30.0);
}

TEST(Progress, UnknownEtaBeforeAnyWorkAndJsonNull) {
  ProgressMeter m(ProgressPhase::Part, 5, 0.0);
  const ProgressEvent e = m.at(0, 3.0);
  EXPECT_LT(e.eta_s, 0);
  EXPECT_EQ(progress_json(e),
            "{\"phase\": \"part\", \"done\": 0, \"total\": 5, \"tokens_per_s\": 0.000, "
            "\"eta_s\": null}");
  const ProgressEvent f = m.at(2, 60.0, 3000);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 50.0);
  EXPECT_DOUBLE_EQ(f.eta_s, 90.0);
  EXPECT_EQ(progress_line(f), "part 2/5 (40%) 50 t/s ETA 1m30s");
}

TEST(Progress, EtaFormats) {
  EXPECT_EQ(format_eta(45.4), "45s");
  EXPECT_EQ(format_eta(3 * 3600 + 125), "3h02m");
  EXPECT_EQ(format_eta(-1), "0s");
}

// Two parts of 100 prompt tokens, answers of at most 10 tokens, on a fake clock: the prefill
// events per ubatch, the decode events per token, and the whole answer's ETA from the tokens
// left (both parts' prompts and answers, the combination's 3 answers) at the computed rate.
TEST(AnswerProgress, PrefillDecodeAndTheWholeAnswersEta) {
  std::vector<ProgressEvent> ev;
  double now = 0;
  AnswerProgress p([&](const ProgressEvent& e) { ev.push_back(e); }, [&] { return now; });
  p.plan_parts({100, 100}, 10);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].phase, ProgressPhase::Part);
  EXPECT_EQ(ev[0].done, 0);
  EXPECT_EQ(ev[0].total, 2);
  EXPECT_LT(ev[0].eta_s, 0);  // nothing measured yet

  p.prompt_begin(100, 10);
  // The session's own hook (cancellation) still runs, and its answer is returned.
  int outer_calls = 0;
  const EvalProgress hook = p.prefill_hook(
      [&](int64_t, int64_t) {
        ++outer_calls;
        return false;
      },
      100);
  now = 5;
  EXPECT_FALSE(hook(50, 100));
  now = 10;
  EXPECT_FALSE(hook(100, 100));
  EXPECT_EQ(outer_calls, 2);
  p.prefill_done();  // already at 100 of 100: no second event
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].phase, ProgressPhase::Prefill);
  EXPECT_EQ(ev[1].done, 50);
  EXPECT_EQ(ev[1].total, 100);
  EXPECT_DOUBLE_EQ(ev[1].tokens_per_s, 10.0);
  EXPECT_DOUBLE_EQ(ev[1].eta_s, 5.0);
  EXPECT_EQ(ev[2].done, 100);
  EXPECT_DOUBLE_EQ(ev[2].eta_s, 0.0);
  for (int i = 1; i <= 10; ++i) {
    now = 10 + i;
    p.decode_at(i);
  }
  ASSERT_EQ(ev.size(), 13u);
  EXPECT_EQ(ev[12].phase, ProgressPhase::Decode);
  EXPECT_EQ(ev[12].done, 10);
  EXPECT_EQ(ev[12].total, 10);
  EXPECT_DOUBLE_EQ(ev[12].tokens_per_s, 1.0);  // 10 tokens in the 10 s since the prefill ended
  EXPECT_DOUBLE_EQ(ev[3].eta_s, 9.0);

  p.part_done(1);  // 110 of 250 tokens in 20 s
  ASSERT_EQ(ev.size(), 14u);
  EXPECT_EQ(ev[13].phase, ProgressPhase::Part);
  EXPECT_EQ(ev[13].done, 1);
  EXPECT_DOUBLE_EQ(ev[13].tokens_per_s, 110.0 / 20.0);
  EXPECT_NEAR(ev[13].eta_s, (250.0 - 110.0) / (110.0 / 20.0), 1e-9);

  // Part 2: 90 of its 100 prompt tokens restored; only 10 computed.
  p.prompt_begin(100, 10);
  p.prompt_restored(90);
  now = 22;
  (void)p.prefill_hook({}, 100)(10, 10);
  ASSERT_EQ(ev.size(), 15u);
  EXPECT_EQ(ev[14].done, 100);
  EXPECT_DOUBLE_EQ(ev[14].tokens_per_s, 5.0);  // 10 computed tokens in 2 s
  p.prefill_done();
  p.part_done(2);
  EXPECT_EQ(ev.back().done, 2);
  // 120 computed tokens in 22 s; 210 of 250 done.
  EXPECT_NEAR(ev.back().eta_s, 40.0 / (120.0 / 22.0), 1e-9);
  p.answer_done();
  EXPECT_EQ(ev.back().phase, ProgressPhase::Part);
  EXPECT_EQ(ev.back().done, 2);
  EXPECT_DOUBLE_EQ(ev.back().eta_s, 0.0);
}

TEST(AnswerProgress, ASessionWithoutUbatchReportsStillEndsAtTheTotal) {
  std::vector<ProgressEvent> ev;
  AnswerProgress p([&](const ProgressEvent& e) { ev.push_back(e); }, [] { return 1.0; });
  p.prompt_begin(37, 0);
  p.prefill_done();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].done, 37);
  EXPECT_EQ(ev[0].total, 37);
  p.decode_at(1);
  EXPECT_EQ(ev.back().total, 0);  // unbounded
  EXPECT_LT(ev.back().eta_s, 0);
  AnswerProgress off(nullptr);
  off.prompt_begin(5, 5);
  off.prefill_done();  // no sink: nothing happens
  EXPECT_FALSE(off.enabled());
}

}  // namespace
}  // namespace spw::app
