#include "ui/plan_banner.h"

#include <algorithm>
#include <vector>

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLayout>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QStyle>
#include <QTextDocumentFragment>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/icons.h"

namespace spw::ui {

namespace {

constexpr int kMaxTextLines = 10;  // the banner's text scrolls beyond this

// Left to right, wrapping onto another row where the width runs out; its minimum width is its
// widest item's, so a row of buttons never holds a dock wider than it is. It reports no
// height-for-width (that would make the chat's layout ask for the banner's full preferred
// height); PlanBanner sets the rows' height as the minimum for the width it has.
class WrapLayout final : public QLayout {
 public:
  explicit WrapLayout(QWidget* parent) : QLayout(parent) { setContentsMargins(0, 0, 0, 0); }
  ~WrapLayout() override {
    for (QLayoutItem* item : items_) delete item;
  }

  void addItem(QLayoutItem* item) override { items_.push_back(item); }
  int count() const override { return int(items_.size()); }
  QLayoutItem* itemAt(int i) const override {
    return i >= 0 && i < count() ? items_[size_t(i)] : nullptr;
  }
  QLayoutItem* takeAt(int i) override {
    if (i < 0 || i >= count()) return nullptr;
    QLayoutItem* item = items_[size_t(i)];
    items_.erase(items_.begin() + i);
    return item;
  }
  Qt::Orientations expandingDirections() const override { return {}; }
  /// The height of the rows at `width`.
  int rowsHeight(int width) const { return arrange(QRect(0, 0, width, 0), false); }
  QSize sizeHint() const override {
    QSize s;
    for (QLayoutItem* item : items_) {
      if (item->isEmpty()) continue;
      s.rwidth() += item->sizeHint().width() + spacing();
      s.setHeight(std::max(s.height(), item->sizeHint().height()));
    }
    return s;
  }
  QSize minimumSize() const override {
    QSize s;
    for (QLayoutItem* item : items_) {
      if (!item->isEmpty()) s = s.expandedTo(item->minimumSize());
    }
    return s;
  }
  void setGeometry(const QRect& rect) override {
    QLayout::setGeometry(rect);
    arrange(rect, true);
  }

 private:
  // Rows right-aligned (as a dialog's buttons are); returns the height used.
  int arrange(const QRect& rect, bool place) const {
    const int gap = std::max(0, spacing());
    int y = rect.y(), row_h = 0;
    std::vector<QLayoutItem*> row;
    int row_w = 0;
    const auto flush = [&] {
      if (row.empty()) return;
      int x = rect.right() + 1 - row_w;
      for (QLayoutItem* item : row) {
        const QSize s = item->sizeHint().boundedTo(QSize(rect.width(), 1 << 20));
        if (place) item->setGeometry(QRect(QPoint(std::max(rect.x(), x), y), s));
        x += s.width() + gap;
      }
      y += row_h + gap;
      row.clear();
      row_w = row_h = 0;
    };
    for (QLayoutItem* item : items_) {
      if (item->isEmpty()) continue;
      const QSize s = item->sizeHint();
      const int w = std::min(s.width(), rect.width());
      if (!row.empty() && row_w + gap + w > rect.width()) flush();
      row_w += (row.empty() ? 0 : gap) + w;
      row_h = std::max(row_h, s.height());
      row.push_back(item);
    }
    flush();
    return std::max(0, y - rect.y() - gap);
  }

  std::vector<QLayoutItem*> items_;
};

QPushButton* narrowButton(const QString& text, QWidget* parent) {
  auto* b = new QPushButton(text, parent);
  // As narrow as their words (the style's minimum is 80 px each).
  b->setMinimumWidth(b->fontMetrics().horizontalAdvance(text) + 24);
  return b;
}

}  // namespace

PlanBanner::PlanBanner(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("planBanner"));
  setFrameShape(QFrame::StyledPanel);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 4, 6, 4);
  layout->setSpacing(4);

  auto* text = new QWidget(this);
  auto* tl = new QVBoxLayout(text);
  tl->setContentsMargins(0, 0, 0, 0);
  headline_ = new QLabel(text);
  headline_->setObjectName(QStringLiteral("planHeadline"));
  headline_->setWordWrap(true);
  headline_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  tl->addWidget(headline_);
  details_ = new QLabel(text);
  details_->setObjectName(QStringLiteral("planDetails"));
  details_->setWordWrap(true);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->hide();
  tl->addWidget(details_);
  tl->addStretch(1);
  scroll_ = new QScrollArea(this);
  scroll_->setObjectName(QStringLiteral("planText"));
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setWidgetResizable(true);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setWidget(text);
  scroll_->viewport()->setAutoFillBackground(false);
  text->setAutoFillBackground(false);
  // Two lines at least (it scrolls), about ten at most.
  const int line = fontMetrics().lineSpacing();
  scroll_->setMinimumHeight(2 * line + 4);
  scroll_->setMaximumHeight(kMaxTextLines * line + 4);
  // Cancel: not asking, as the × of a notice (a third button would need another row).
  cancel_ = new QToolButton(this);
  cancel_->setObjectName(QStringLiteral("planCancel"));
  cancel_->setAutoRaise(true);
  cancel_->setIcon(themed("window-close", QStyle::SP_TitleBarCloseButton, style()));
  cancel_->setToolTip(tr("Cancel: do not ask this question"));
  auto* top = new QHBoxLayout;
  top->setContentsMargins(0, 0, 0, 0);
  top->addWidget(scroll_, 1);
  top->addWidget(cancel_, 0, Qt::AlignTop);
  layout->addLayout(top, 1);

  buttons_ = new QWidget(this);
  auto* buttons = buttons_;
  auto* row = new WrapLayout(buttons);
  rows_ = row;
  row->setSpacing(6);
  details_toggle_ = new QToolButton(buttons);
  details_toggle_->setObjectName(QStringLiteral("planDetailsToggle"));
  details_toggle_->setText(tr("Details"));
  details_toggle_->setCheckable(true);
  details_toggle_->setAutoRaise(true);
  details_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  details_toggle_->setArrowType(Qt::RightArrow);
  details_toggle_->setToolTip(
      tr("The numbers behind the verdict: tokens, KV per tier, the "
         "predicted speeds and what would fit"));
  connect(details_toggle_, &QToolButton::toggled, this, [this](bool on) {
    details_->setVisible(on);
    details_toggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
  });
  // The whole sentence where a row holds it; in a narrower banner a shorter form that shares a
  // row with Use map-reduce (a check box's text does not wrap, and another row of buttons would
  // make the chat taller than a small window's dock). Its minimum width is the shortest form's.
  always_parts_ = new QCheckBox(buttons);
  for (const QString& text :
       {tr("Always answer this document over parts"), tr("Always over parts"), tr("Always")}) {
    always_parts_->setText(text);
    always_forms_.push_back({text, always_parts_->sizeHint().width()});
  }
  always_parts_->setMinimumWidth(always_forms_.back().width);
  always_parts_->setText(always_forms_.front().text);
  always_parts_->setObjectName(QStringLiteral("planAlwaysParts"));
  always_parts_->setToolTip(
      tr("Always answer this document over parts: with Use map-reduce, later questions on it "
         "are answered over parts without this verdict first (the chat's note has an Undo)"));
  run_anyway_ = narrowButton(tr("Run anyway"), buttons);
  map_reduce_ = narrowButton(tr("Use map-reduce"), buttons);
  // The box next to the button it goes with (it wraps onto a row of its own when narrow).
  for (QWidget* w : {static_cast<QWidget*>(details_toggle_), static_cast<QWidget*>(run_anyway_),
                     static_cast<QWidget*>(always_parts_), static_cast<QWidget*>(map_reduce_)})
    row->addWidget(w);
  layout->addWidget(buttons);
  connect(run_anyway_, &QPushButton::clicked, this, &PlanBanner::runAnyway);
  connect(map_reduce_, &QPushButton::clicked, this, &PlanBanner::mapReduce);
  connect(cancel_, &QToolButton::clicked, this, [this] {
    hide();
    emit cancelled();
  });
}

void PlanBanner::showVerdict(const QString& doc_title, const QString& headline,
                             const QString& details, bool can_split, bool can_run_anyway) {
  headline_->setText(tr("<b>This question will not fit as it is (“%1”).</b><br>%2")
                         .arg(doc_title.toHtmlEscaped(), headline.toHtmlEscaped()));
  details_->setText(details.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>")));
  details_toggle_->setChecked(false);
  details_toggle_->setVisible(!details.isEmpty());
  map_reduce_->setEnabled(can_split);
  always_parts_->setChecked(false);
  always_parts_->setVisible(can_split);
  run_anyway_->setVisible(can_run_anyway);  // only a run that can work
  scroll_->verticalScrollBar()->setValue(0);
  show();
  updateButtonRows();
}

void PlanBanner::resizeEvent(QResizeEvent* event) {
  QFrame::resizeEvent(event);
  updateButtonRows();
}

void PlanBanner::updateButtonRows() {
  const QMargins m = layout()->contentsMargins();
  const int width = contentsRect().width() - m.left() - m.right();
  // The sentence on a row of its own, else the longest form beside Use map-reduce.
  const int beside = width - rows_->spacing() - map_reduce_->sizeHint().width();
  const QString* text = &always_forms_.back().text;
  if (always_forms_[0].width <= width) {
    text = &always_forms_[0].text;
  } else {
    for (size_t i = 1; i < always_forms_.size(); ++i) {
      if (always_forms_[i].width <= beside) {
        text = &always_forms_[i].text;
        break;
      }
    }
  }
  if (always_parts_->text() != *text) always_parts_->setText(*text);
  const int h = static_cast<WrapLayout*>(rows_)->rowsHeight(width);
  if (h > 0 && h != buttons_->minimumHeight()) buttons_->setMinimumHeight(h);
}

QString PlanBanner::headlineText() const {
  return QTextDocumentFragment::fromHtml(headline_->text()).toPlainText();
}

QString PlanBanner::detailsText() const {
  return QTextDocumentFragment::fromHtml(details_->text()).toPlainText();
}

bool PlanBanner::alwaysOverParts() const {
  return !always_parts_->isHidden() && always_parts_->isChecked();
}

bool PlanBanner::detailsShown() const { return details_->isVisible(); }

}  // namespace spw::ui
