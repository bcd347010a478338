#include "ui/question_box.h"

#include <QKeyEvent>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>
#include <algorithm>

namespace spw::ui {

QuestionBox::QuestionBox(QWidget* parent) : QPlainTextEdit(parent) {
  setTabChangesFocus(true);  // Tab leaves for the Ask button, as in a line edit
  setLineWrapMode(QPlainTextEdit::WidgetWidth);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  connect(this, &QPlainTextEdit::textChanged, this, &QuestionBox::fitHeight);
  fitHeight();
}

QuestionBox::~QuestionBox() = default;

int QuestionBox::heightForLines(int lines) const {
  const QMargins m = contentsMargins();
  return fontMetrics().lineSpacing() * lines + static_cast<int>(2 * document()->documentMargin()) +
         2 * frameWidth() + m.top() + m.bottom();
}

QSize QuestionBox::sizeHint() const {
  return {QPlainTextEdit::sizeHint().width(), heightForLines(1)};
}

QSize QuestionBox::minimumSizeHint() const {
  return {QPlainTextEdit::minimumSizeHint().width(), heightForLines(1)};
}

void QuestionBox::fitHeight() {
  // Visual lines (wrapped ones count), 1 to kMaxLines.
  int lines = 0;
  for (QTextBlock b = document()->begin(); b.isValid(); b = b.next())
    lines += std::max(1, b.layout() != nullptr ? b.layout()->lineCount() : 1);
  setFixedHeight(heightForLines(std::clamp(lines, 1, kMaxLines)));
  // A scroll bar only once the box has stopped growing.
  setVerticalScrollBarPolicy(lines > kMaxLines ? Qt::ScrollBarAsNeeded : Qt::ScrollBarAlwaysOff);
}

void QuestionBox::keyPressEvent(QKeyEvent* event) {
  const bool enter = event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter;
  if (enter && !(event->modifiers() & Qt::ShiftModifier)) {
    event->accept();
    emit submitted();
    return;
  }
  if (enter) {  // Shift+Enter: a new paragraph (QPlainTextEdit would insert a line separator)
    event->accept();
    textCursor().insertText(QStringLiteral("\n"));
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

}  // namespace spw::ui
