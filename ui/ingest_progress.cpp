#include "ui/ingest_progress.h"

#include <algorithm>

#include <QFileInfo>
#include <QFontMetrics>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QIcon>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QStyle>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/icons.h"

namespace spw::ui {

namespace {

constexpr int kAddedRowLingerMs = 4000;

QIcon outcomeIcon(const QStyle* style, IngestProgressPanel::Outcome o) {
  switch (o) {
    case IngestProgressPanel::Outcome::Added:
      return themed("emblem-ok", QStyle::SP_DialogApplyButton, style);
    case IngestProgressPanel::Outcome::Warning:
      return themed("dialog-warning", QStyle::SP_MessageBoxWarning, style);
    case IngestProgressPanel::Outcome::Failed:
      return themed("dialog-error", QStyle::SP_MessageBoxCritical, style);
    case IngestProgressPanel::Outcome::Cancelled:
      return themed("process-stop", QStyle::SP_BrowserStop, style);
  }
  return {};
}

}  // namespace

IngestProgressPanel::IngestProgressPanel(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("ingestPanel"));
  rows_layout_ = new QVBoxLayout(this);
  rows_layout_->setContentsMargins(0, 4, 0, 0);
  rows_layout_->setSpacing(6);

  // "3 earlier notices · Show · Dismiss all", over the rows.
  fold_ = new QFrame(this);
  fold_->setObjectName(QStringLiteral("noticeFold"));
  auto* fl = new QHBoxLayout(fold_);
  fl->setContentsMargins(4, 0, 0, 0);
  fl->setSpacing(4);
  fold_label_ = new QLabel(fold_);
  fold_label_->setEnabled(false);
  fl->addWidget(fold_label_, 1);
  fold_toggle_ = new QToolButton(fold_);
  fold_toggle_->setObjectName(QStringLiteral("noticeFoldToggle"));
  fold_toggle_->setAutoRaise(true);
  connect(fold_toggle_, &QToolButton::clicked, this, [this] { setNoticesUnfolded(!unfolded_); });
  fl->addWidget(fold_toggle_);
  auto* dismiss = new QToolButton(fold_);
  dismiss->setObjectName(QStringLiteral("dismissAllButton"));
  dismiss->setAutoRaise(true);
  dismiss->setText(tr("Dismiss all"));
  connect(dismiss, &QToolButton::clicked, this, &IngestProgressPanel::dismissAllNotices);
  fl->addWidget(dismiss);
  rows_layout_->addWidget(fold_);
  fold_->hide();
  hide();
}

void IngestProgressPanel::addJob(qint64 id, const QString& path) {
  if (rows_.contains(id)) return;
  Row row;
  row.frame = new QFrame(this);
  row.frame->setFrameShape(QFrame::StyledPanel);
  row.frame->setToolTip(path);
  auto* grid = new QGridLayout(row.frame);
  grid->setContentsMargins(8, 6, 6, 6);
  grid->setHorizontalSpacing(6);
  grid->setVerticalSpacing(3);

  row.icon = new QLabel(row.frame);
  row.icon->setPixmap((QIcon::hasThemeIcon(QStringLiteral("application-pdf"))
                           ? QIcon::fromTheme(QStringLiteral("application-pdf"))
                           : themed("x-office-document", QStyle::SP_FileIcon, style()))
                          .pixmap(16, 16));
  grid->addWidget(row.icon, 0, 0);

  auto* name = new QLabel(row.frame);
  const QString file = QFileInfo(path).fileName();
  QFont bold = name->font();
  bold.setBold(true);
  name->setFont(bold);
  // Elided short enough for the library dock of an 800-px window; the whole name on hover.
  name->setText(QFontMetrics(bold).elidedText(file, Qt::ElideMiddle, 140));
  name->setToolTip(file);
  grid->addWidget(name, 0, 1);

  row.close = new QToolButton(row.frame);
  row.close->setAutoRaise(true);
  row.close->setIcon(themed("process-stop", QStyle::SP_BrowserStop, style()));
  row.close->setToolTip(tr("Cancel"));
  row.close->setObjectName(QStringLiteral("cancelButton"));
  connect(row.close, &QToolButton::clicked, this, [this, id] {
    auto it = rows_.find(id);
    if (it == rows_.end()) return;
    if (it->running) {
      it->close->setEnabled(false);
      it->status->setText(tr("Cancelling…"));
      emit cancelRequested(id);
    } else {
      removeJob(id);
    }
  });
  grid->addWidget(row.close, 0, 2);

  row.bar = new QProgressBar(row.frame);
  row.bar->setRange(0, 0);  // busy until the page count is known
  row.bar->setTextVisible(false);
  row.bar->setMaximumHeight(8);
  grid->addWidget(row.bar, 1, 0, 1, 3);

  row.status = new QLabel(tr("Waiting…"), row.frame);
  row.status->setWordWrap(true);
  row.status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont small = row.status->font();
  small.setPointSizeF(small.pointSizeF() * 0.9);
  row.status->setFont(small);
  grid->addWidget(row.status, 2, 0, 1, 3);
  grid->setColumnStretch(1, 1);

  rows_layout_->addWidget(row.frame);
  row.frame->show();  // now, not from the event loop: rowShown() and the fold count it
  rows_.insert(id, row);
  updateVisibility();
}

void IngestProgressPanel::setProgress(qint64 id, int done, int total, qint64 eta_ms) {
  auto it = rows_.find(id);
  if (it == rows_.end() || !it->running) return;
  it->bar->setRange(0, std::max(total, 1));
  it->bar->setValue(done);
  QString text = tr("%1 of %2 pages").arg(done).arg(total);
  if (eta_ms >= 0 && done < total) text += tr(" · %1 left").arg(formatEta(eta_ms));
  if (it->close->isEnabled()) it->status->setText(text);
}

void IngestProgressPanel::finishJob(qint64 id, Outcome outcome, const QString& message,
                                    const QString& action) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  Row& row = *it;
  row.running = false;
  row.finished = next_finished_++;
  row.bar->hide();
  row.icon->setPixmap(outcomeIcon(style(), outcome).pixmap(16, 16));
  row.close->setEnabled(true);
  row.close->setIcon(themed("window-close", QStyle::SP_TitleBarCloseButton, style()));
  row.close->setToolTip(tr("Dismiss"));
  row.close->setObjectName(QStringLiteral("dismissButton"));
  QString text = message;
  if (text.isEmpty()) {
    text = outcome == Outcome::Cancelled ? tr("Cancelled") : tr("Added");
  }
  row.status->setText(text);
  row.status->setToolTip(text);
  if (!action.isEmpty()) {
    row.action = new QPushButton(action, row.frame);
    row.action->setObjectName(QStringLiteral("actionButton"));
    connect(row.action, &QPushButton::clicked, this, [this, id] {
      emit actionTriggered(id);
      removeJob(id);
    });
    static_cast<QGridLayout*>(row.frame->layout())
        ->addWidget(row.action, 3, 0, 1, 3, Qt::AlignLeft);
  }
  if ((outcome == Outcome::Added || outcome == Outcome::Cancelled) && message.isEmpty() &&
      action.isEmpty()) {
    QTimer::singleShot(kAddedRowLingerMs, this, [this, id] { removeJob(id); });
  }
  updateVisibility();
}

QList<qint64> IngestProgressPanel::finishedRows() const {
  QList<qint64> ids;
  for (auto it = rows_.begin(); it != rows_.end(); ++it) {
    if (!it->running) ids << it.key();
  }
  std::sort(ids.begin(), ids.end(),
            [this](qint64 a, qint64 b) { return rows_[a].finished > rows_[b].finished; });
  return ids;
}

bool IngestProgressPanel::rowShown(qint64 id) const {
  auto it = rows_.find(id);
  return it != rows_.end() && !it->frame->isHidden();
}

int IngestProgressPanel::foldedNotices() const {
  if (unfolded_) return 0;
  return std::max(0, int(finishedRows().size()) - kShownNotices);
}

void IngestProgressPanel::setNoticesUnfolded(bool on) {
  unfolded_ = on;
  updateVisibility();
}

void IngestProgressPanel::dismissAllNotices() {
  for (qint64 id : finishedRows()) removeJob(id);
  unfolded_ = false;
  updateVisibility();
}

void IngestProgressPanel::removeJob(qint64 id) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  it->frame->deleteLater();
  rows_.erase(it);
  updateVisibility();
}

QString IngestProgressPanel::statusText(qint64 id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? QString() : it->status->text();
}

std::pair<int, int> IngestProgressPanel::barValue(qint64 id) const {
  auto it = rows_.find(id);
  if (it == rows_.end()) return {-1, -1};
  return {it->bar->value(), it->bar->maximum()};
}

QString IngestProgressPanel::formatEta(qint64 ms) {
  const qint64 s = (ms + 999) / 1000;
  if (s < 60) return tr("%1 s").arg(s);
  return tr("%1 min %2 s").arg(s / 60).arg(s % 60);
}

void IngestProgressPanel::updateVisibility() {
  const QList<qint64> finished = finishedRows();
  const int older = std::max(0, int(finished.size()) - kShownNotices);
  for (int i = 0; i < finished.size(); ++i)
    rows_[finished[i]].frame->setVisible(i < kShownNotices || unfolded_);
  if (older == 0) unfolded_ = false;
  fold_->setVisible(older > 0);
  fold_label_->setText(older == 1 ? tr("1 earlier notice") : tr("%1 earlier notices").arg(older));
  fold_toggle_->setText(unfolded_ ? tr("Fold") : tr("Show"));
  setVisible(!rows_.isEmpty());
}

}  // namespace spw::ui
