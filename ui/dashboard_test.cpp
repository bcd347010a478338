// DashboardDock: points per series as samples arrive, the five-minute window, CSV and PNG export
// (the charts only), readable axes (seconds ago, rounded ticks with units), plot areas of at
// least kMinPlotHeight pixels in a small dock, charts that follow a theme change.
#include "ui/dashboard_dock.h"

#include <gtest/gtest.h>
#include <QApplication>
#include <QChart>
#include <QFile>
#include <QImage>
#include <QTemporaryDir>
#include <QTest>
#include <QXYSeries>

#include "app/worker/telemetry.h"
#include "ui/theme.h"

namespace spw::ui {
namespace {

app::TelemetrySample cpu_sample(int i) {
  app::TelemetrySample s;
  s.t_ms = 1'700'000'000'000 + int64_t{i} * 300;  // 300 ms apart
  s.running = true;
  s.n_past = 100 * (i + 1);
  s.n_ctx = 4096;
  s.window_blocks = 2;
  s.host_blocks = i;
  s.disk_blocks = i / 2;
  s.host_bytes = int64_t{i} << 20;  // i MiB
  s.disk_bytes = int64_t{i / 2} << 20;
  s.moved_bytes_per_token = 512.0 * i;
  s.rss_bytes = int64_t{200 + i} << 20;
  s.available_bytes = int64_t{8} << 30;
  s.prefill_tokens_per_s = 900;
  s.decode_tokens_per_s = 40 + i;
  return s;
}

TEST(Dashboard, SeriesGetPointsAsSamplesArrive) {
  DashboardDock d;
  d.resize(900, 600);
  d.show();
  for (int i = 0; i < 10; ++i) d.addSample(cpu_sample(i));
  EXPECT_EQ(d.sampleCount(), 10);
  for (const char* key : {"kv_host", "rss", "available", "disk", "blocks_window", "blocks_host",
                          "blocks_disk", "moved_per_token", "prefill_tps", "decode_tps"}) {
    ASSERT_NE(d.series(QLatin1String(key)), nullptr) << key;
    EXPECT_EQ(d.series(QLatin1String(key))->count(), 10) << key;
  }
  // X: seconds since the first sample; bytes in MiB; block areas stacked (cumulative).
  const QXYSeries* rss = d.series(QStringLiteral("rss"));
  EXPECT_DOUBLE_EQ(rss->at(0).x(), 0.0);
  EXPECT_DOUBLE_EQ(rss->at(9).x(), 2.7);
  EXPECT_DOUBLE_EQ(rss->at(9).y(), 209.0);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("blocks_host"))->at(9).y(), 2.0 + 9);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("blocks_disk"))->at(9).y(), 2.0 + 9 + 4);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("decode_tps"))->at(3).y(), 43.0);
  // A CPU session: no VRAM points, and the chart says why.
  EXPECT_EQ(d.series(QStringLiteral("vram_weights"))->count(), 0);
  EXPECT_EQ(d.vramTitle(), DashboardDock::cpuVramTitle());
  // Hover text: the values of the nearest sample.
  const QString tip = d.valuesAt(QStringLiteral("kv_host"), 0.31);
  EXPECT_TRUE(tip.contains(QStringLiteral("KV host tier 1.0 MiB"))) << tip.toStdString();
  EXPECT_TRUE(d.valuesAt(QStringLiteral("blocks_host"), 2.7).contains(QStringLiteral("host 9")));
}

TEST(Dashboard, DroppedSlidingWindowBlocksShowInTheBlocksChart) {
  DashboardDock d;
  app::TelemetrySample s = cpu_sample(3);
  d.addSample(s);
  EXPECT_FALSE(d.valuesAt(QStringLiteral("blocks_host"), 0).contains(QStringLiteral("dropped")));
  s.t_ms += 300;
  s.dropped_blocks = 40;
  s.dropped_bytes = int64_t{5} << 20;
  d.addSample(s);
  const QString tip = d.valuesAt(QStringLiteral("blocks_host"), 0.3);
  EXPECT_TRUE(tip.contains(QStringLiteral("dropped 40 (5.0 MiB)"))) << tip.toStdString();
}

TEST(Dashboard, GpuSamplesFillTheVramChart) {
  DashboardDock d;
  app::TelemetrySample s = cpu_sample(0);
  s.gpu = true;
  s.vram_weights = int64_t{300} << 20;
  s.vram_window = int64_t{64} << 20;
  s.vram_scratch = int64_t{16} << 20;
  s.vram_free = int64_t{100} << 30;
  d.addSample(s);
  ASSERT_EQ(d.series(QStringLiteral("vram_weights"))->count(), 1);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("vram_weights"))->at(0).y(), 300.0);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("vram_free"))->at(0).y(), 100.0 * 1024);
  EXPECT_NE(d.vramTitle(), DashboardDock::cpuVramTitle());
}

TEST(Dashboard, PointsOlderThanFiveMinutesLeaveTheChartsButNotTheCsv) {
  DashboardDock d;
  app::TelemetrySample a = cpu_sample(0), b = cpu_sample(1);
  b.t_ms = a.t_ms + 400'000;  // 400 s later
  d.addSample(a);
  d.addSample(b);
  EXPECT_EQ(d.sampleCount(), 2);
  ASSERT_EQ(d.series(QStringLiteral("rss"))->count(), 1);
  EXPECT_DOUBLE_EQ(d.series(QStringLiteral("rss"))->at(0).x(), 400.0);
}

TEST(Dashboard, CsvExportWritesEverySample) {
  DashboardDock d;
  for (int i = 0; i < 5; ++i) d.addSample(cpu_sample(i));
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("telemetry.csv"));
  QString error;
  ASSERT_TRUE(d.exportCsv(path, &error)) << error.toStdString();
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly | QIODevice::Text));
  const QStringList lines =
      QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  ASSERT_EQ(lines.size(), 6);
  EXPECT_EQ(lines[0].toStdString(), app::telemetry_csv_header());
  EXPECT_EQ(lines[3].toStdString(), app::telemetry_csv_row(cpu_sample(2)));
  EXPECT_TRUE(lines[3].startsWith(QStringLiteral("1700000000600,1,0,300,4096,2,2,1,")))
      << lines[3].toStdString();

  // A folder that does not exist: an error naming the file, no crash.
  EXPECT_FALSE(d.exportCsv(dir.filePath(QStringLiteral("no/such/dir/t.csv")), &error));
  EXPECT_TRUE(error.contains(QStringLiteral("t.csv"))) << error.toStdString();
}

TEST(Dashboard, PngExportWritesAnImageOfTheDashboard) {
  DashboardDock d;
  d.resize(800, 500);
  d.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&d));
  for (int i = 0; i < 20; ++i) d.addSample(cpu_sample(i));
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("dashboard.png"));
  QString error;
  ASSERT_TRUE(d.exportPng(path, &error)) << error.toStdString();
  EXPECT_GT(QFile(path).size(), 1000);
  QImage img(path);
  ASSERT_FALSE(img.isNull());
  // The charts, all of them (scrolled out of view or not), without the buttons above them.
  EXPECT_EQ(img.size(), d.chartsWidget()->size() * d.devicePixelRatio());
  EXPECT_FALSE(d.chartsWidget()->isAncestorOf(d.findChild<QWidget*>(QStringLiteral("exportPng"))));
  // Not blank: more than a handful of distinct colours (axes, lines, text).
  QSet<QRgb> colours;
  for (int y = 0; y < img.height(); y += 4)
    for (int x = 0; x < img.width(); x += 4) colours.insert(img.pixel(x, y));
  EXPECT_GT(colours.size(), 10);
}

TEST(Dashboard, TickLabelsAreRoundedWithUnits) {
  using U = DashboardDock::Unit;
  EXPECT_EQ(DashboardDock::tickLabel(U::MiB, 512, 2), QStringLiteral("512M"));
  EXPECT_EQ(DashboardDock::tickLabel(U::MiB, 100, 2), QStringLiteral("100M"));
  EXPECT_EQ(DashboardDock::tickLabel(U::MiB, 1536, 2), QStringLiteral("1.5G"));
  EXPECT_EQ(DashboardDock::tickLabel(U::MiB, 0.25, 2), QStringLiteral("0.25M"));
  EXPECT_EQ(DashboardDock::tickLabel(U::Bytes, 4096, 2), QStringLiteral("4K"));
  EXPECT_EQ(DashboardDock::tickLabel(U::Bytes, 3 * 1024 * 1024, 2), QStringLiteral("3M"));
  EXPECT_EQ(DashboardDock::tickLabel(U::Bytes, 200, 2), QStringLiteral("200B"));
  EXPECT_EQ(DashboardDock::tickLabel(U::TokensPerS, 42.5, 1), QStringLiteral("42.5"));
  EXPECT_EQ(DashboardDock::tickLabel(U::Blocks, 64, 2), QStringLiteral("64"));
}

TEST(Dashboard, AxesCountSecondsAgoAndHaveRoundedTicksWithUnits) {
  DashboardDock d;
  d.resize(900, 400);
  d.show();
  // Two minutes of samples, one a second: RSS 3 GiB, 8 GiB available, 900 t/s prefill.
  for (int i = 0; i <= 120; ++i) {
    app::TelemetrySample s = cpu_sample(i);
    s.t_ms = 1'700'000'000'000 + int64_t{i} * 1000;
    s.rss_bytes = int64_t{3} << 30;
    d.addSample(s);
  }
  const QList<QChart*> charts = d.charts();
  ASSERT_EQ(charts.size(), 6);
  for (QChart* c : charts) {
    ASSERT_FALSE(c->axes(Qt::Horizontal).isEmpty());
    EXPECT_EQ(c->axes(Qt::Horizontal).first()->titleText(), QStringLiteral("seconds ago"));
  }
  // 120 s shown, labels every 50 s, 0 at the latest sample (the right end).
  EXPECT_EQ(d.xLabels(1), (QStringList{"100", "50", "0"}));
  // Host RAM: 3 GiB of RSS (x 1.1 headroom) on 2 GiB ticks.
  EXPECT_EQ(d.yLabels(1), (QStringList{"2G", "4G"}));
  // Throughput: 900 t/s on 500 t/s ticks, the unit in the axis title; blocks: whole numbers.
  EXPECT_EQ(d.yLabels(5), (QStringList{"500", "1000"}));
  ASSERT_FALSE(charts[5]->axes(Qt::Vertical).isEmpty());
  EXPECT_EQ(charts[5]->axes(Qt::Vertical).first()->titleText(), QStringLiteral("t/s"));
  for (const QString& l : d.yLabels(3))
    EXPECT_FALSE(l.contains(QLatin1Char('.'))) << l.toStdString();
}

TEST(Dashboard, PlotAreasStayReadableInASmallDock) {
  DashboardDock d;
  d.resize(1000, 220);  // a bottom dock at its starting height
  d.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&d));
  for (int i = 0; i < 5; ++i) d.addSample(cpu_sample(i));
  QApplication::processEvents();
  for (QChart* c : d.charts()) {
    EXPECT_GE(c->plotArea().height(), DashboardDock::kMinPlotHeight) << c->title().toStdString();
    EXPECT_GE(c->plotArea().width(), 120) << c->title().toStdString();
    // The legend is laid out whole (not cut by the chart's edge).
    EXPECT_LE(c->legend()->geometry().bottom(), c->size().height() + 0.5)
        << c->title().toStdString();
  }
}

TEST(Dashboard, ChartsFollowAThemeChangeAtOnce) {
  apply_theme(*qApp, Theme::Light);
  QWidget window;  // inside a window, as in its dock
  auto* d = new DashboardDock(&window);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  for (QChart* c : d->charts()) EXPECT_EQ(c->theme(), QChart::ChartThemeLight);
  apply_theme(*qApp, Theme::Dark);
  QApplication::processEvents();
  for (QChart* c : d->charts()) EXPECT_EQ(c->theme(), QChart::ChartThemeDark);
  apply_theme(*qApp, Theme::Light);
  QApplication::processEvents();
  for (QChart* c : d->charts()) EXPECT_EQ(c->theme(), QChart::ChartThemeLight);
  apply_theme(*qApp, Theme::System);
}

}  // namespace
}  // namespace spw::ui
