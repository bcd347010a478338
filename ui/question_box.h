// The chat's question box: multi-line text, Enter asks (submitted()), Shift+Enter starts a new
// line. It grows with its text from one line up to kMaxLines lines, then scrolls. GUI thread.
#pragma once

#include <QPlainTextEdit>

namespace spw::ui {

class QuestionBox final : public QPlainTextEdit {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(QuestionBox)

 public:
  static constexpr int kMaxLines = 6;

  explicit QuestionBox(QWidget* parent = nullptr);
  ~QuestionBox() override;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  /// Enter (or keypad Enter) without Shift was pressed.
  void submitted();

 protected:
  void keyPressEvent(QKeyEvent* event) override;

 private:
  int heightForLines(int lines) const;
  void fitHeight();
};

}  // namespace spw::ui
