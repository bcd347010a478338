#include "ui/activity_label.h"

#include <QResizeEvent>
#include <QTimer>

namespace spw::ui {

ActivityLabel::ActivityLabel(QWidget* parent) : QLabel(parent) {
  setObjectName(QStringLiteral("activityStatus"));
  // The status bar never grows past the window for a long message: elided by the width given.
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  timer_ = new QTimer(this);
  timer_->setSingleShot(true);
  timer_->setInterval(kDefaultNoticeMs);
  connect(timer_, &QTimer::timeout, this, &ActivityLabel::clearNotice);
}

void ActivityLabel::setState(const QString& text) {
  state_ = text;
  refresh();
}

void ActivityLabel::showNotice(const QString& text) {
  if (text.isEmpty()) return;
  if (text == notice_) {
    ++repeats_;
  } else {
    notice_ = text;
    repeats_ = 1;
  }
  timer_->start();
  refresh();
}

void ActivityLabel::clearNotice() {
  timer_->stop();
  notice_.clear();
  repeats_ = 0;
  refresh();
}

QString ActivityLabel::notice() const {
  if (notice_.isEmpty()) return {};
  return repeats_ > 1 ? tr("%1 (×%2)").arg(notice_).arg(repeats_) : notice_;
}

void ActivityLabel::setNoticeTimeout(int ms) { timer_->setInterval(ms); }

int ActivityLabel::noticeTimeout() const { return timer_->interval(); }

void ActivityLabel::resizeEvent(QResizeEvent* event) {
  QLabel::resizeEvent(event);
  refresh();
}

void ActivityLabel::refresh() {
  const QString text = shownText();
  const int width = contentsRect().width();
  setText(width > 0 ? fontMetrics().elidedText(text, Qt::ElideRight, width) : text);
  setToolTip(text);
}

}  // namespace spw::ui
