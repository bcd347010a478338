// The chat's run progress (fake ProgressEvents: bar value, label with counts, rate and ETA, the
// log collapsed under it) and its question box (Shift+Enter a new line, Enter submits).
#include <gtest/gtest.h>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTest>
#include <QToolButton>

#include "ui/question_box.h"
#include "ui/run_progress.h"

namespace spw::ui {
namespace {

app::ProgressEvent event(app::ProgressPhase phase, int64_t done, int64_t total, double tps,
                         double eta) {
  app::ProgressEvent e;
  e.phase = phase;
  e.done = done;
  e.total = total;
  e.tokens_per_s = tps;
  e.eta_s = eta;
  return e;
}

TEST(RunProgress, ABarWithCountsRateAndEtaFollowsFakeEvents) {
  RunProgress r;
  r.resize(400, 200);
  r.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&r));
  r.reset();
  EXPECT_TRUE(r.bar()->isVisible());
  EXPECT_EQ(r.bar()->maximum(), 0);  // busy until the first event
  EXPECT_EQ(r.label()->text(), QStringLiteral("Starting…"));

  // Prefill: 12,288 of 73,167 tokens at 48 t/s, 1,267 s left.
  r.setProgress(event(app::ProgressPhase::Prefill, 12288, 73167, 48.0, 1267.0));
  EXPECT_EQ(r.bar()->maximum(), 100);
  EXPECT_EQ(r.bar()->value(), 16);  // floor(100 * 12288 / 73167) = floor(16.79)
  EXPECT_EQ(
      r.label()->text(),
      QStringLiteral("Reading the document: 12,288/73,167 tokens (16%) · 48 t/s · ETA 21m07s"));
  r.setProgress(event(app::ProgressPhase::Prefill, 36584, 73167, 50.4, 731.0));
  EXPECT_EQ(r.bar()->value(), 50);
  EXPECT_EQ(
      r.label()->text(),
      QStringLiteral("Reading the document: 36,584/73,167 tokens (50%) · 50 t/s · ETA 12m11s"));

  // Map-reduce: 2 of 12 parts done (part 3 starts), an hour and two minutes left; no rate.
  r.setProgress(event(app::ProgressPhase::Part, 2, 12, 0, 3720.0));
  EXPECT_EQ(r.bar()->value(), 16);
  EXPECT_EQ(r.label()->text(), QStringLiteral("Part 3 of 12 (16%) · ETA 1h02m"));
  r.setProgress(event(app::ProgressPhase::Part, 12, 12, 0, 0));
  EXPECT_EQ(r.bar()->value(), 100);
  EXPECT_EQ(r.label()->text(), QStringLiteral("Combining the answers of 12 parts (100%) · ETA 0s"));

  // Decode with no known end: a busy bar, no percentage, no ETA.
  r.setProgress(event(app::ProgressPhase::Decode, 40, 0, 9.5, -1));
  EXPECT_EQ(r.bar()->maximum(), 0);
  EXPECT_EQ(r.label()->text(), QStringLiteral("Answering: 40 tokens · 10 t/s"));

  // The log is collapsed under the bar: a toggle with its count, the lines hidden until asked.
  r.addLogLine(QStringLiteral("part 1 of 12: pages 1-3"));
  r.addLogLine(QStringLiteral("saved KV of the document prefix: 1739 tokens"));
  EXPECT_TRUE(r.logToggle()->isVisible());
  EXPECT_EQ(r.logToggle()->text(), QStringLiteral("Log (2)"));
  EXPECT_FALSE(r.log()->isVisible());
  QTest::mouseClick(r.logToggle(), Qt::LeftButton);
  EXPECT_TRUE(r.log()->isVisible());
  EXPECT_EQ(
      r.log()->toPlainText(),
      QStringLiteral("part 1 of 12: pages 1-3\nsaved KV of the document prefix: 1739 tokens"));

  // The run ends: the bar goes, the log stays; the next run starts with an empty log.
  r.finish();
  EXPECT_FALSE(r.bar()->isVisible());
  EXPECT_TRUE(r.isVisible());
  EXPECT_EQ(r.logLines().size(), 2);
  r.reset();
  EXPECT_TRUE(r.logLines().isEmpty());
  EXPECT_FALSE(r.logToggle()->isVisible());
  r.finish();
  EXPECT_FALSE(r.isVisible());  // nothing to show
}

TEST(QuestionBox, ShiftEnterStartsANewLineAndEnterSubmits) {
  QuestionBox box;
  box.resize(300, box.sizeHint().height());
  box.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&box));
  QSignalSpy submitted(&box, &QuestionBox::submitted);
  const int one_line = box.height();

  QTest::keyClicks(&box, QStringLiteral("Which clauses"));
  QTest::keyClick(&box, Qt::Key_Return, Qt::ShiftModifier);
  QTest::keyClicks(&box, QStringLiteral("survive termination?"));
  EXPECT_EQ(box.toPlainText(), QStringLiteral("Which clauses\nsurvive termination?"));
  EXPECT_EQ(submitted.count(), 0);
  EXPECT_GT(box.height(), one_line);  // grew to two lines

  QTest::keyClick(&box, Qt::Key_Return);
  EXPECT_EQ(submitted.count(), 1);
  QTest::keyClick(&box, Qt::Key_Enter, Qt::KeypadModifier);
  EXPECT_EQ(submitted.count(), 2);
  // Submitting adds no line; the owner clears the box.
  EXPECT_EQ(box.toPlainText(), QStringLiteral("Which clauses\nsurvive termination?"));

  // Many lines: the box stops growing at kMaxLines.
  box.clear();
  EXPECT_EQ(box.height(), one_line);
  for (int i = 0; i < 12; ++i) QTest::keyClick(&box, Qt::Key_Return, Qt::ShiftModifier);
  const int max_height = box.height();
  QTest::keyClick(&box, Qt::Key_Return, Qt::ShiftModifier);
  EXPECT_EQ(box.height(), max_height);
  EXPECT_GT(max_height, one_line * 3);
}

}  // namespace
}  // namespace spw::ui
