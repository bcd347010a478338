#include "app/runtime/progress.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace spw::app
