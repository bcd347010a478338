#include "ui/page_canvas.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <QMouseEvent>
#include <QPainter>

namespace spw::ui {

namespace {

const QColor kHighlight(255, 214, 0, 110);  // translucent yellow
const QColor kHighlightEdge(230, 160, 0, 200);

// A word as it is copied: the Latin ligature characters a PDF's text layer often has (U+FB00
// "ﬀ" .. U+FB06 "ﬆ") as their letters, so "Eﬀective" pastes as "Effective".
QString plainLetters(const QString& word) {
  static const char* const kLigatures[] = {"ff", "fi", "fl", "ffi", "ffl", "st", "st"};
  QString out;
  out.reserve(word.size());
  for (const QChar c : word) {
    const char16_t u = c.unicode();
    if (u >= 0xFB00 && u <= 0xFB06) {
      out += QLatin1String(kLigatures[u - 0xFB00]);
    } else {
      out += c;
    }
  }
  return out;
}

double distanceTo(const QRectF& r, const QPointF& p) {
  const double dx = std::max({r.left() - p.x(), 0.0, p.x() - r.right()});
  const double dy = std::max({r.top() - p.y(), 0.0, p.y() - r.bottom()});
  return std::hypot(dx, dy);
}

}  // namespace

PageCanvas::PageCanvas(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("pageCanvas"));
  setAttribute(Qt::WA_OpaquePaintEvent);
  setCursor(Qt::IBeamCursor);
}

void PageCanvas::setPage(const QImage& image, QList<QRectF> highlights, double px_per_pt) {
  image_ = image;
  rects_ = std::move(highlights);
  px_per_pt_ = px_per_pt;
  words_.clear();
  words_loaded_ = false;
  const bool had = hasSelection();
  sel_first_ = sel_last_ = anchor_ = -1;
  dragging_ = false;
  const QSizeF logical = image_.deviceIndependentSize();
  setFixedSize(int(std::ceil(logical.width())) + 2 * kMargin,
               int(std::ceil(logical.height())) + 2 * kMargin);
  update();
  if (had) emit selectionChanged(QString());
}

void PageCanvas::setHighlights(QList<QRectF> highlights) {
  rects_ = std::move(highlights);
  update();
}

void PageCanvas::clear() {
  image_ = QImage();
  rects_.clear();
  words_.clear();
  words_loaded_ = false;
  const bool had = hasSelection();
  sel_first_ = sel_last_ = anchor_ = -1;
  update();
  if (had) emit selectionChanged(QString());
}

QRect PageCanvas::firstRect() const {
  if (rects_.isEmpty()) return {};
  return rects_.front().translated(pageOrigin()).toAlignedRect();
}

const QList<PageCanvas::Word>& PageCanvas::words() {
  if (!words_loaded_ && !image_.isNull()) {
    words_loaded_ = true;
    if (words_provider_) words_ = words_provider_();
  }
  return words_;
}

QRect PageCanvas::wordRect(int i) {
  const QList<Word>& ws = words();
  if (i < 0 || i >= ws.size()) return {};
  const QRectF& r = ws[i].rect_pt;
  return QRectF(pageOrigin() + r.topLeft() * px_per_pt_, r.size() * px_per_pt_).toAlignedRect();
}

QString PageCanvas::selectedText() const {
  if (sel_first_ < 0) return {};
  QString out;
  for (int i = sel_first_; i <= sel_last_; ++i) {
    const Word& w = words_[i];
    out += plainLetters(w.text);
    if (i == sel_last_) break;
    if (w.line_end) {
      out += QLatin1Char('\n');
    } else if (w.space_after) {
      out += QLatin1Char(' ');
    }
  }
  return out;
}

void PageCanvas::selectWords(int first, int last) {
  const int n = int(words().size());
  if (first < 0 || last < 0 || n == 0) {
    clearSelection();
    return;
  }
  if (first > last) std::swap(first, last);
  first = std::min(first, n - 1);
  last = std::min(last, n - 1);
  if (first == sel_first_ && last == sel_last_) return;
  sel_first_ = first;
  sel_last_ = last;
  update();
  emitSelection();
}

void PageCanvas::selectAll() { selectWords(0, int(words().size()) - 1); }

void PageCanvas::clearSelection() {
  if (sel_first_ < 0) return;
  sel_first_ = sel_last_ = -1;
  update();
  emitSelection();
}

void PageCanvas::emitSelection() { emit selectionChanged(selectedText()); }

QPointF PageCanvas::pageOrigin() const {
  const QSizeF s = image_.deviceIndependentSize();
  return {std::max<double>(kMargin, (width() - s.width()) / 2), double(kMargin)};
}

int PageCanvas::wordAt(const QPointF& pos) {
  const QList<Word>& ws = words();
  if (ws.isEmpty()) return -1;
  const QPointF pt = (pos - pageOrigin()) / px_per_pt_;
  int best = -1;
  double best_d = std::numeric_limits<double>::max();
  for (int i = 0; i < ws.size(); ++i) {
    const double d = distanceTo(ws[i].rect_pt, pt);
    if (d < best_d) {
      best_d = d;
      best = i;
      if (d == 0) break;
    }
  }
  return best;
}

void PageCanvas::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || image_.isNull()) {
    QWidget::mousePressEvent(event);
    return;
  }
  setFocus(Qt::MouseFocusReason);
  const int w = wordAt(event->position());
  anchor_ = w;
  dragging_ = w >= 0;
  // A click selects nothing (it clears); a drag selects from here.
  clearSelection();
  event->accept();
}

void PageCanvas::mouseMoveEvent(QMouseEvent* event) {
  if (!dragging_) {
    QWidget::mouseMoveEvent(event);
    return;
  }
  const int w = wordAt(event->position());
  if (w >= 0) selectWords(anchor_, w);
  event->accept();
}

void PageCanvas::mouseReleaseEvent(QMouseEvent* event) {
  if (dragging_ && event->button() == Qt::LeftButton) {
    dragging_ = false;
    event->accept();
    return;
  }
  QWidget::mouseReleaseEvent(event);
}

void PageCanvas::mouseDoubleClickEvent(QMouseEvent* event) {
  // A double click selects the word.
  const int w = event->button() == Qt::LeftButton ? wordAt(event->position()) : -1;
  if (w >= 0 &&
      distanceTo(words_[w].rect_pt, (event->position() - pageOrigin()) / px_per_pt_) < 4.0) {
    selectWords(w, w);
    event->accept();
    return;
  }
  QWidget::mouseDoubleClickEvent(event);
}

void PageCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Mid).lighter(125));
  if (image_.isNull()) return;
  const QPointF o = pageOrigin();
  const QRectF page(o, image_.deviceIndependentSize());
  // A soft shadow under the sheet.
  for (int i = 1; i <= 4; ++i) p.fillRect(page.translated(i * 0.5, i * 0.75), QColor(0, 0, 0, 14));
  p.drawImage(page, image_);
  p.setRenderHint(QPainter::Antialiasing);
  p.setCompositionMode(QPainter::CompositionMode_Multiply);
  p.setPen(QPen(kHighlightEdge, 1));
  p.setBrush(kHighlight);
  for (const QRectF& r : rects_) p.drawRoundedRect(r.translated(o).adjusted(-1, -1, 1, 1), 2, 2);
  if (sel_first_ >= 0) {
    QColor sel = palette().color(QPalette::Highlight);
    sel.setAlpha(90);
    p.setPen(Qt::NoPen);
    p.setBrush(sel);
    for (int i = sel_first_; i <= sel_last_; ++i) {
      const QRectF& r = words_[i].rect_pt;
      // Across the space after a word of the same line, so a selected line reads as one band.
      double right = r.right();
      if (i < sel_last_ && !words_[i].line_end)
        right = std::max(right, words_[i + 1].rect_pt.left());
      p.drawRect(QRectF(o + r.topLeft() * px_per_pt_,
                        QSizeF((right - r.left()) * px_per_pt_, r.height() * px_per_pt_)));
    }
  }
}

}  // namespace spw::ui
