// A one-line label that elides its text to the width it is given (the whole text in its
// tooltip), so a long title never makes a dock wider or, wrapped, taller than its neighbours.
#pragma once

#include <QLabel>
#include <QString>

namespace spw::ui {

class ElidedLabel final : public QLabel {
 public:
  explicit ElidedLabel(QWidget* parent = nullptr, Qt::TextElideMode mode = Qt::ElideRight);

  /// The whole text (what text() shows elided).
  void setFullText(const QString& text);
  QString fullText() const { return full_; }

  QSize minimumSizeHint() const override;
  QSize sizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void updateText();

  QString full_;
  Qt::TextElideMode mode_;
};

}  // namespace spw::ui
