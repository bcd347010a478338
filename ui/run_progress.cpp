#include "ui/run_progress.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace spw::ui {

namespace {

QString qs(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// The log's height when expanded: a few lines, the chat keeps the rest.
constexpr int kLogLines = 6;

}  // namespace

RunProgress::RunProgress(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("runProgress"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);

  auto* row = new QHBoxLayout;
  bar_ = new QProgressBar(this);
  bar_->setObjectName(QStringLiteral("runProgressBar"));
  bar_->setRange(0, 100);
  bar_->setTextVisible(false);
  bar_->setMaximumHeight(fontMetrics().height());
  log_toggle_ = new QToolButton(this);
  log_toggle_->setObjectName(QStringLiteral("runLogToggle"));
  log_toggle_->setCheckable(true);
  log_toggle_->setAutoRaise(true);
  log_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  log_toggle_->setArrowType(Qt::RightArrow);
  row->addWidget(bar_, 1);
  row->addWidget(log_toggle_);
  layout->addLayout(row);

  label_ = new QLabel(this);
  label_->setObjectName(QStringLiteral("runProgressLabel"));
  label_->setWordWrap(true);
  layout->addWidget(label_);

  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("runLog"));
  log_->setReadOnly(true);
  log_->setMaximumHeight(fontMetrics().lineSpacing() * kLogLines + 8);
  log_->hide();
  layout->addWidget(log_);
  connect(log_toggle_, &QToolButton::toggled, this, [this](bool on) {
    log_->setVisible(on);
    log_toggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
  });

  bar_->hide();
  label_->hide();
  updateToggle();
  hide();
}

RunProgress::~RunProgress() = default;

QString RunProgress::describe(const app::ProgressEvent& e) {
  // "73,167": the grouping of the CLI's progress line, whatever the locale.
  const QLocale english(QLocale::English);
  const auto num = [&](int64_t n) { return english.toString(static_cast<qlonglong>(n)); };
  QString text;
  switch (e.phase) {
    case app::ProgressPhase::Prefill:
      text = e.total > 0 ? tr("Reading the document: %1/%2 tokens").arg(num(e.done), num(e.total))
                         : tr("Reading the document: %1 tokens").arg(num(e.done));
      break;
    case app::ProgressPhase::Part:
      text = e.total > 0 && e.done >= e.total
                 ? tr("Combining the answers of %1 parts").arg(e.total)
                 : tr("Part %1 of %2")
                       .arg(std::min(e.done + 1, std::max<int64_t>(e.total, 1)))
                       .arg(e.total);
      break;
    case app::ProgressPhase::Decode:
      text = e.total > 0 ? tr("Answering: %1/%2 tokens").arg(num(e.done), num(e.total))
                         : tr("Answering: %1 tokens").arg(num(e.done));
      break;
    case app::ProgressPhase::Document:
      text = tr("Document %1 of %2").arg(e.done + 1).arg(e.total);
      break;
  }
  if (e.total > 0) {
    const int pct = static_cast<int>(
        std::floor(100.0 * static_cast<double>(std::min(e.done, e.total)) / double(e.total)));
    text += QStringLiteral(" (%1%)").arg(pct);
  }
  if (e.tokens_per_s > 0) text += QStringLiteral(" · %1 t/s").arg(e.tokens_per_s, 0, 'f', 0);
  if (e.eta_s >= 0) text += QStringLiteral(" · ") + tr("ETA %1").arg(qs(app::format_eta(e.eta_s)));
  return text;
}

void RunProgress::reset() {
  lines_.clear();
  log_->clear();
  bar_->setRange(0, 0);  // busy until the first event
  bar_->show();
  label_->setText(tr("Starting…"));
  label_->show();
  updateToggle();
  show();
}

void RunProgress::setProgress(const app::ProgressEvent& e) {
  if (e.total > 0) {
    bar_->setRange(0, 100);
    const double f = static_cast<double>(std::min(e.done, e.total)) / double(e.total);
    bar_->setValue(static_cast<int>(std::floor(100.0 * f)));
  } else {
    bar_->setRange(0, 0);
  }
  bar_->show();
  label_->setText(describe(e));
  label_->show();
  show();
}

void RunProgress::addLogLine(const QString& line) {
  lines_ << line;
  log_->appendPlainText(line);
  updateToggle();
  show();
}

void RunProgress::finish() {
  bar_->hide();
  label_->hide();
  updateToggle();
  setVisible(!lines_.isEmpty());
}

void RunProgress::updateToggle() {
  log_toggle_->setText(tr("Log (%1)").arg(lines_.size()));
  log_toggle_->setVisible(!lines_.isEmpty());
}

}  // namespace spw::ui
