#include "ui/dashboard_dock.h"

#include <QApplication>
#include <QAreaSeries>
#include <QCategoryAxis>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QEvent>
#include <QFile>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QMessageBox>
#include <QPixmap>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace spw::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double mib(int64_t bytes) { return bytes < 0 ? 0 : static_cast<double>(bytes) / kMiB; }

QString mib_text(int64_t bytes) {
  if (bytes < 0) return QStringLiteral("unknown");
  return QStringLiteral("%1 MiB").arg(mib(bytes), 0, 'f', 1);
}

// Chart indices.
enum ChartId { kVram = 0, kRam, kDisk, kBlocks, kMoved, kSpeed };

// Height of a chart view: its plot area (kMinPlotHeight) plus the title, the x labels, the
// legend and the margins at the small fonts below.
constexpr int kChartViewHeight = DashboardDock::kMinPlotHeight + 120;
constexpr int kChartViewWidth = 220;

// 1, 2 or 5 times a power of ten, at least `raw` (> 0).
double nice_step(double raw) {
  if (!(raw > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

// Replaces `axis`'s categories by `ticks` (value, label), in increasing order, from `start`.
void set_ticks(QCategoryAxis* axis, double start, double end,
               const std::vector<std::pair<double, QString>>& ticks) {
  for (const QString& label : axis->categoriesLabels()) axis->remove(label);
  axis->setStartValue(start);
  for (const auto& [value, label] : ticks) axis->append(label, value);
  axis->setRange(start, end);
}

// Rounded y ticks for points up to `top` (>= 0), labelled in `unit`; returns the axis' top.
double set_y_ticks(QCategoryAxis* axis, DashboardDock::Unit unit, double top) {
  double step;
  if (unit == DashboardDock::Unit::MiB && top * 1.1 >= 1024)
    step = nice_step(top * 1.1 / 1024 / 3) * 1024;  // whole or half GiB, not 1000s of MiB
  else if (unit == DashboardDock::Unit::Bytes && top * 1.1 >= 1024)
    step = nice_step(top * 1.1 / 1024 / 3) * 1024;
  else
    step = nice_step(top > 0 ? top * 1.1 / 3 : 1.0 / 3);
  if (unit == DashboardDock::Unit::Blocks) step = std::max(step, 1.0);  // whole blocks
  const int n = std::max(1, static_cast<int>(std::ceil(top * 1.1 / step - 1e-9)));
  std::vector<std::pair<double, QString>> ticks;
  for (int i = 1; i <= n; ++i)
    ticks.emplace_back(step * i, DashboardDock::tickLabel(unit, step * i, 2));
  set_ticks(axis, 0, step * n, ticks);
  return step * n;
}

// "1.50" -> "1.5", "512.00" -> "512".
QString trimmed_number(double v, int decimals) {
  QString t = QString::number(v, 'f', decimals);
  if (t.contains(QLatin1Char('.'))) {
    while (t.endsWith(QLatin1Char('0'))) t.chop(1);
    if (t.endsWith(QLatin1Char('.'))) t.chop(1);
  }
  return t;
}

}  // namespace

DashboardDock::DashboardDock(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("dashboard"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(4, 4, 4, 4);

  auto* bar = new QHBoxLayout;
  summary_ = new QLabel(tr("No engine activity yet: the charts fill while a model runs."), this);
  summary_->setObjectName(QStringLiteral("dashboardSummary"));
  summary_->setWordWrap(true);  // a narrow dock wraps the line instead of widening the window
  bar->addWidget(summary_, 1);
  auto* png = new QPushButton(tr("Export PNG…"), this);
  auto* csv = new QPushButton(tr("Export CSV…"), this);
  png->setObjectName(QStringLiteral("exportPng"));
  csv->setObjectName(QStringLiteral("exportCsv"));
  connect(png, &QPushButton::clicked, this, [this] { chooseFile(true); });
  connect(csv, &QPushButton::clicked, this, [this] { chooseFile(false); });
  bar->addWidget(png);
  bar->addWidget(csv);
  outer->addLayout(bar);

  // The charts scroll: each keeps a readable plot area however small the dock is.
  scroll_ = new QScrollArea(this);
  scroll_->setObjectName(QStringLiteral("dashboardScroll"));
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  charts_host_ = new QWidget(scroll_);
  charts_host_->setObjectName(QStringLiteral("dashboardCharts"));
  auto* grid = new QGridLayout(charts_host_);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(2);
  scroll_->setWidget(charts_host_);
  outer->addWidget(scroll_, 1);

  using U = Unit;
  charts_.push_back(makeChart(tr("VRAM (GPU sessions only)"), U::MiB));
  charts_.push_back(makeChart(tr("Host RAM"), U::MiB));
  charts_.push_back(makeChart(tr("Disk tier"), U::MiB));
  charts_.push_back(makeChart(tr("KV blocks per tier"), U::Blocks));
  charts_.push_back(makeChart(tr("Bytes moved between tiers per token"), U::Bytes));
  charts_.push_back(makeChart(tr("Throughput"), U::TokensPerS));

  addLine(charts_[kVram], QStringLiteral("vram_weights"), tr("weights"));
  addLine(charts_[kVram], QStringLiteral("vram_window"), tr("KV window"));
  addLine(charts_[kVram], QStringLiteral("vram_scratch"), tr("scratch"));
  addLine(charts_[kVram], QStringLiteral("vram_free"), tr("free"));
  addLine(charts_[kRam], QStringLiteral("kv_host"), tr("KV host tier"));
  addLine(charts_[kRam], QStringLiteral("rss"), tr("process RSS"));
  addLine(charts_[kRam], QStringLiteral("available"), tr("system available (right axis)"), true);
  addLine(charts_[kDisk], QStringLiteral("disk"), tr("disk tier"));
  addStackedArea(charts_[kBlocks]);
  addLine(charts_[kMoved], QStringLiteral("moved_per_token"), tr("bytes per token"));
  addLine(charts_[kSpeed], QStringLiteral("prefill_tps"), tr("prefill"));
  addLine(charts_[kSpeed], QStringLiteral("decode_tps"), tr("decode"));

  for (size_t i = 0; i < charts_.size(); ++i) {
    grid->addWidget(charts_[i].view, static_cast<int>(i / 3), static_cast<int>(i % 3));
    styleChart(charts_[i]);
    rescale(charts_[i], 0);
  }
}

DashboardDock::~DashboardDock() = default;

QString DashboardDock::cpuVramTitle() { return tr("VRAM: none in use on this CPU session"); }

QString DashboardDock::vramTitle() const { return charts_[kVram].chart->title(); }

DashboardDock::Chart DashboardDock::makeChart(const QString& title, Unit unit) {
  Chart c;
  c.unit = unit;
  c.chart = new QChart;
  c.chart->setTitle(title);
  c.chart->setAnimationOptions(QChart::NoAnimation);
  c.chart->setMargins(QMargins(2, 2, 2, 2));
  c.chart->legend()->setAlignment(Qt::AlignBottom);
  c.x = new QCategoryAxis;
  c.x->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  c.x->setTitleText(tr("seconds ago"));
  c.x->setGridLineVisible(false);
  c.y = new QCategoryAxis;
  c.y->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  if (unit == Unit::TokensPerS) c.y->setTitleText(tr("t/s"));
  c.chart->addAxis(c.x, Qt::AlignBottom);
  c.chart->addAxis(c.y, Qt::AlignLeft);
  c.view = new QChartView(c.chart, charts_host_);  // the view owns the chart
  c.view->setRenderHint(QPainter::Antialiasing);
  c.view->setMinimumSize(kChartViewWidth, kChartViewHeight);
  return c;
}

void DashboardDock::styleChart(Chart& c) {
  // The chart theme resets fonts and colours: the small fonts go on after it.
  const bool dark = QApplication::palette().color(QPalette::Window).lightness() < 128;
  c.chart->setTheme(dark ? QChart::ChartThemeDark : QChart::ChartThemeLight);
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));
  c.chart->legend()->setFont(small);
  QFont labels = font();
  labels.setPointSizeF(std::max(6.0, labels.pointSizeF() - 1.5));
  for (QCategoryAxis* a : {c.x, c.y, c.y2}) {
    if (a == nullptr) continue;
    a->setLabelsFont(labels);
    a->setTitleFont(labels);
  }
  QFont title_font = font();
  title_font.setPointSizeF(std::max(7.0, title_font.pointSizeF() - 1));
  title_font.setBold(true);
  c.chart->setTitleFont(title_font);
}

QString DashboardDock::tickLabel(Unit unit, double value, int decimals) {
  switch (unit) {
    case Unit::MiB:
      if (value >= 1024) return trimmed_number(value / 1024, decimals) + QStringLiteral("G");
      return trimmed_number(value, decimals) + QStringLiteral("M");
    case Unit::Bytes:
      if (value >= kMiB) return trimmed_number(value / kMiB, decimals) + QStringLiteral("M");
      if (value >= 1024) return trimmed_number(value / 1024, decimals) + QStringLiteral("K");
      return trimmed_number(value, decimals) + QStringLiteral("B");
    case Unit::TokensPerS:  // the unit is the axis' title
      break;
    case Unit::Blocks:
      break;
  }
  return trimmed_number(value, decimals);
}

QList<QChart*> DashboardDock::charts() const {
  QList<QChart*> out;
  for (const Chart& c : charts_) out << c.chart;
  return out;
}

QStringList DashboardDock::xLabels(int index) const {
  if (index < 0 || index >= static_cast<int>(charts_.size())) return {};
  return charts_[static_cast<size_t>(index)].x->categoriesLabels();
}

QStringList DashboardDock::yLabels(int index) const {
  if (index < 0 || index >= static_cast<int>(charts_.size())) return {};
  return charts_[static_cast<size_t>(index)].y->categoriesLabels();
}

void DashboardDock::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  const QEvent::Type t = event->type();
  if (t == QEvent::PaletteChange || t == QEvent::ApplicationPaletteChange ||
      t == QEvent::StyleChange) {
    for (Chart& c : charts_) styleChart(c);
  }
}

QLineSeries* DashboardDock::addLine(Chart& c, const QString& key, const QString& name, bool right) {
  auto* s = new QLineSeries;
  s->setName(name);
  c.chart->addSeries(s);
  s->attachAxis(c.x);
  if (right) {
    // The system's available RAM (GiB) beside MiB of KV and RSS: its own axis, so the small
    // ones stay readable. Only that series uses it.
    if (!c.y2) {
      c.y2 = new QCategoryAxis;
      c.y2->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
      c.y2->setLabelsFont(c.y->labelsFont());
      c.chart->addAxis(c.y2, Qt::AlignRight);
    }
    s->attachAxis(c.y2);
    c.lines2.push_back(s);
  } else {
    s->attachAxis(c.y);
    c.lines.push_back(s);
  }
  series_.insert(key, s);
  chart_of_.insert(key, static_cast<int>(&c - charts_.data()));
  connectHover(s, key);
  return s;
}

void DashboardDock::addStackedArea(Chart& c) {
  // Cumulative upper lines: window, window + host, window + host + disk; each area lies
  // between its upper line and the one below (the axis for the first).
  const QString keys[] = {QStringLiteral("blocks_window"), QStringLiteral("blocks_host"),
                          QStringLiteral("blocks_disk")};
  const QString names[] = {tr("window"), tr("host (RAM)"), tr("disk")};
  QLineSeries* below = nullptr;
  const int index = static_cast<int>(&c - charts_.data());
  for (int i = 0; i < 3; ++i) {
    auto* upper = new QLineSeries(this);
    auto* area = new QAreaSeries(upper, below);
    area->setName(names[i]);
    c.chart->addSeries(area);
    area->attachAxis(c.x);
    area->attachAxis(c.y);
    c.lines.push_back(upper);
    series_.insert(keys[i], upper);
    chart_of_.insert(keys[i], index);
    const QString key = keys[i];
    connect(area, &QAreaSeries::hovered, this, [this, key](const QPointF& p, bool state) {
      if (state)
        QToolTip::showText(QCursor::pos(), valuesAt(key, p.x()));
      else
        QToolTip::hideText();
    });
    below = upper;
  }
}

void DashboardDock::connectHover(QXYSeries* s, const QString& key) {
  connect(s, &QXYSeries::hovered, this, [this, key](const QPointF& p, bool state) {
    if (state)
      QToolTip::showText(QCursor::pos(), valuesAt(key, p.x()));
    else
      QToolTip::hideText();
  });
}

const QXYSeries* DashboardDock::series(const QString& key) const { return series_.value(key); }

QString DashboardDock::valuesAt(const QString& key, double seconds) const {
  if (samples_.empty()) return {};
  const int64_t t = t0_ms_ + static_cast<int64_t>(std::llround(seconds * 1000));
  const auto it =
      std::min_element(samples_.begin(), samples_.end(),
                       [t](const app::TelemetrySample& a, const app::TelemetrySample& b) {
                         return std::llabs(a.t_ms - t) < std::llabs(b.t_ms - t);
                       });
  const app::TelemetrySample& s = *it;
  const QString at = tr("at %1 s").arg(static_cast<double>(s.t_ms - t0_ms_) / 1000.0, 0, 'f', 1);
  switch (chart_of_.value(key, -1)) {
    case kVram:
      if (!s.gpu) return tr("CPU session: no VRAM %1").arg(at);
      return tr("VRAM %1\nweights %2\nKV window %3\nscratch %4\nfree %5")
          .arg(at, mib_text(s.vram_weights), mib_text(s.vram_window), mib_text(s.vram_scratch),
               mib_text(s.vram_free));
    case kRam:
      return tr("Host RAM %1\nKV host tier %2\nprocess RSS %3\nsystem available %4")
          .arg(at, mib_text(s.host_bytes), mib_text(s.rss_bytes), mib_text(s.available_bytes));
    case kDisk:
      return tr("Disk tier %1\n%2").arg(at, mib_text(s.disk_bytes));
    case kBlocks: {
      QString text = tr("KV blocks %1\nwindow %2\nhost %3\ndisk %4\n(%5 of %6 tokens)")
                         .arg(at)
                         .arg(s.window_blocks)
                         .arg(s.host_blocks)
                         .arg(s.disk_blocks)
                         .arg(s.n_past)
                         .arg(s.n_ctx);
      if (s.dropped_blocks > 0) {
        text += tr("\ndropped %1 (%2): sliding-window layers keep only their window")
                    .arg(s.dropped_blocks)
                    .arg(mib_text(s.dropped_bytes));
      }
      return text;
    }
    case kMoved:
      return tr("Moved between tiers %1\n%2 bytes per token\n%3 in all")
          .arg(at)
          .arg(s.moved_bytes_per_token, 0, 'f', 0)
          .arg(mib_text(s.moved_bytes));
    case kSpeed:
      return tr("Throughput %1\nprefill %2 tokens/s\ndecode %3 tokens/s")
          .arg(at)
          .arg(s.prefill_tokens_per_s, 0, 'f', 1)
          .arg(s.decode_tokens_per_s, 0, 'f', 1);
    default:
      return {};
  }
}

void DashboardDock::addSample(const app::TelemetrySample& s) {
  if (t0_ms_ < 0) t0_ms_ = s.t_ms;
  samples_.push_back(s);
  const double x = static_cast<double>(s.t_ms - t0_ms_) / 1000.0;
  const auto add = [&](const char* key, double y) {
    if (QXYSeries* line = series_.value(QLatin1String(key))) line->append(x, y);
  };
  if (s.gpu) {
    add("vram_weights", mib(s.vram_weights));
    add("vram_window", mib(s.vram_window));
    add("vram_scratch", mib(s.vram_scratch));
    add("vram_free", mib(s.vram_free));
  }
  add("kv_host", mib(s.host_bytes));
  add("rss", mib(s.rss_bytes));
  add("available", mib(s.available_bytes));
  add("disk", mib(s.disk_bytes));
  add("blocks_window", static_cast<double>(s.window_blocks));
  add("blocks_host", static_cast<double>(s.window_blocks + s.host_blocks));
  add("blocks_disk", static_cast<double>(s.window_blocks + s.host_blocks + s.disk_blocks));
  add("moved_per_token", s.moved_bytes_per_token);
  add("prefill_tps", s.prefill_tokens_per_s);
  add("decode_tps", s.decode_tokens_per_s);
  // The VRAM note follows the last run's session kind; idle samples keep what was shown.
  if (s.running) {
    const QString title = s.gpu ? tr("VRAM (MiB)") : cpuVramTitle();
    if (charts_[kVram].chart->title() != title) charts_[kVram].chart->setTitle(title);
  }
  for (Chart& c : charts_) rescale(c, x);

  summary_->setText(s.running
                        ? tr("%1 of %2 tokens in context · KV window %3, host %4, disk %5 blocks · "
                             "decode %6 tokens/s · RSS %7")
                              .arg(s.n_past)
                              .arg(s.n_ctx)
                              .arg(s.window_blocks)
                              .arg(s.host_blocks)
                              .arg(s.disk_blocks)
                              .arg(s.decode_tokens_per_s, 0, 'f', 1)
                              .arg(mib_text(s.rss_bytes))
                        : tr("Idle · RSS %1 · system available %2")
                              .arg(mib_text(s.rss_bytes), mib_text(s.available_bytes)));
}

void DashboardDock::rescale(Chart& c, double now) {
  const double from = std::max(0.0, now - kHistorySeconds);
  // Points older than the history leave the chart (they stay in samples_ for the CSV); the
  // top of each y axis follows the highest point shown.
  const auto trim_and_top = [from](const std::vector<QXYSeries*>& lines) {
    double top = 0;
    for (QXYSeries* s : lines) {
      int old = 0;
      while (old < s->count() && s->at(old).x() < from) ++old;
      if (old > 0) s->removePoints(0, old);
      const QList<QPointF> pts = s->points();
      for (const QPointF& p : pts) top = std::max(top, p.y());
    }
    return top;
  };
  // The x axis ends at the latest sample (0 seconds ago) and spans what is shown: at least
  // kMinSpanSeconds, at most the history; labels at rounded steps of seconds ago.
  const double span = std::clamp(now - from, kMinSpanSeconds, kHistorySeconds);
  const double step = nice_step(span / 4);
  std::vector<std::pair<double, QString>> ticks;
  for (int k = static_cast<int>(std::floor(span / step + 1e-9)); k >= 0; --k)
    ticks.emplace_back(now - k * step, QString::number(k * step, 'g', 6));
  set_ticks(c.x, now - span, now, ticks);
  set_y_ticks(c.y, c.unit, trim_and_top(c.lines));
  if (c.y2) set_y_ticks(c.y2, c.unit, trim_and_top(c.lines2));
}

bool DashboardDock::exportPng(const QString& path, QString* error) {
  const QPixmap image = charts_host_->grab();  // every chart, scrolled out of view or not
  if (image.isNull() || !image.save(path, "PNG")) {
    if (error) *error = tr("Could not write the image %1").arg(path);
    return false;
  }
  return true;
}

bool DashboardDock::exportCsv(const QString& path, QString* error) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) {
    if (error) *error = tr("Could not write %1: %2").arg(path, f.errorString());
    return false;
  }
  std::string text = app::telemetry_csv_header() + "\n";
  for (const app::TelemetrySample& s : samples_) text += app::telemetry_csv_row(s) + "\n";
  f.write(text.data(), static_cast<qint64>(text.size()));
  if (!f.commit()) {
    if (error) *error = tr("Could not write %1: %2").arg(path, f.errorString());
    return false;
  }
  return true;
}

void DashboardDock::clear() {
  samples_.clear();
  t0_ms_ = -1;
  for (QXYSeries* s : series_) s->clear();
  for (Chart& c : charts_) rescale(c, 0);
}

void DashboardDock::chooseFile(bool png) {
  const QString path = QFileDialog::getSaveFileName(
      this, png ? tr("Export the dashboard as PNG") : tr("Export the samples as CSV"),
      png ? QStringLiteral("spillway-dashboard.png") : QStringLiteral("spillway-telemetry.csv"),
      png ? tr("PNG image (*.png)") : tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  QString error;
  if (!(png ? exportPng(path, &error) : exportCsv(path, &error)))
    QMessageBox::warning(this, tr("Export"), error);
}

}  // namespace spw::ui
