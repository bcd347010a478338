// The memory dashboard (docs/DESIGN.md §6 and §4.6, a dock of the main window): the engine's
// telemetry over the last five minutes, one chart per quantity (Qt Charts):
//   VRAM: weights, KV window, scratch, free (GPU sessions only; on the CPU a line says so)
//   host RAM: KV host tier, process RSS, system available
//   disk tier bytes
//   KV blocks per tier as a stacked area (window, host, disk)
//   bytes moved between tiers per token
//   prefill and decode tokens/s
// Samples come from EngineWorker::telemetry (2-4 per second) through addSample(). Hovering a
// series shows the values at that time; Export PNG writes the charts (not the buttons), Export
// CSV writes every sample received (not only the last five minutes).
//
// Readability: the charts scroll inside the dock (three columns), each tall enough for a plot
// area of at least kMinPlotHeight pixels; the x axis counts seconds ago (0 at the right: the
// latest sample); the y axes have rounded ticks with short units ("512M", "1.5G", "4K"; t/s in
// the axis title), so a chart a third of a 1280-px window wide draws them whole; the charts
// take the light or dark chart theme of the palette, again when the palette changes.
#pragma once

#include <QHash>
#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "app/worker/telemetry.h"

class QCategoryAxis;
class QChart;
class QChartView;
class QLabel;
class QScrollArea;
class QLineSeries;
class QXYSeries;

namespace spw::ui {

class DashboardDock final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(DashboardDock)

 public:
  /// Seconds of history the charts show.
  static constexpr double kHistorySeconds = 300;
  /// The x axis spans at least this many seconds (it grows to kHistorySeconds, then slides).
  static constexpr double kMinSpanSeconds = 30;
  /// Each chart's plot area is at least this tall (pixels).
  static constexpr int kMinPlotHeight = 120;
  /// What a y axis counts (its tick labels' unit).
  enum class Unit { MiB, Blocks, Bytes, TokensPerS };
  /// A tick label, short enough for a narrow chart's axis: "512M", "1.5G" (from 1024 MiB on;
  /// powers of 1024, as the hover values' MiB), "4K" and "200B" (bytes), "40" (tokens/s: the
  /// axis title says "t/s"), "64" (blocks); with `decimals` digits after the point at most.
  static QString tickLabel(Unit unit, double value, int decimals);

  explicit DashboardDock(QWidget* parent = nullptr);
  ~DashboardDock() override;

  /// Samples received so far (all of them: what Export CSV writes).
  int sampleCount() const { return static_cast<int>(samples_.size()); }
  /// The series of `key`, or nullptr: vram_weights, vram_window, vram_scratch, vram_free,
  /// kv_host, rss, available, disk, blocks_window, blocks_host, blocks_disk (the stacked
  /// areas' upper lines: cumulative block counts), moved_per_token, prefill_tps, decode_tps.
  /// X is seconds since the first sample; byte series are in MiB.
  const QXYSeries* series(const QString& key) const;
  /// The VRAM chart's title: cpuVramTitle() once a CPU session's sample came.
  QString vramTitle() const;
  static QString cpuVramTitle();
  /// The values of the sample nearest `seconds` (since the first sample) as tooltip text for
  /// the chart holding `key`; empty without samples.
  QString valuesAt(const QString& key, double seconds) const;
  /// The charts, in the grid's order (VRAM, host RAM, disk, blocks, moved, throughput).
  QList<QChart*> charts() const;
  /// The widget holding the charts (what Export PNG writes).
  QWidget* chartsWidget() const { return charts_host_; }
  /// Tick labels of chart `index`'s x axis (seconds ago, left to right) and y axis (bottom up).
  QStringList xLabels(int index) const;
  QStringList yLabels(int index) const;

 public slots:
  /// Appends a sample (EngineWorker::telemetry); drops points older than five minutes.
  void addSample(const spw::app::TelemetrySample& sample);
  /// Writes the dashboard as a PNG image. False (with `error` set) when it cannot be written.
  bool exportPng(const QString& path, QString* error = nullptr);
  /// Writes every sample as CSV (app/worker/telemetry.h columns). False (with `error` set)
  /// when the file cannot be written.
  bool exportCsv(const QString& path, QString* error = nullptr);
  /// Forgets every sample and point.
  void clear();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Chart {
    QChart* chart = nullptr;
    QChartView* view = nullptr;
    QCategoryAxis* x = nullptr;   // seconds ago, labels at rounded steps
    QCategoryAxis* y = nullptr;   // rounded ticks with units
    QCategoryAxis* y2 = nullptr;  // right-hand axis (system available RAM), or null
    Unit unit = Unit::MiB;
    std::vector<QXYSeries*> lines;   // whose points decide the y range
    std::vector<QXYSeries*> lines2;  // on y2
  };
  Chart makeChart(const QString& title, Unit unit);
  void styleChart(Chart& c);
  QLineSeries* addLine(Chart& c, const QString& key, const QString& name, bool right = false);
  void addStackedArea(Chart& c);
  void connectHover(QXYSeries* s, const QString& key);
  void rescale(Chart& c, double now);
  void chooseFile(bool png);

  std::vector<app::TelemetrySample> samples_;
  int64_t t0_ms_ = -1;
  QHash<QString, QXYSeries*> series_;
  QHash<QString, int> chart_of_;  // key -> index into charts_
  std::vector<Chart> charts_;
  QLabel* summary_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  QWidget* charts_host_ = nullptr;
};

}  // namespace spw::ui
