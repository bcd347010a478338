// The status bar's first field: what the window is doing (a state: "Ready", "Adding 2
// documents…", "Generating an answer…") and, over it for a while, a notice (a document that
// could not be opened, a name the library refused). A notice clears itself after
// noticeTimeout() and the state shows again; a new notice replaces the one shown, the same one
// again is counted ("… (×3)") instead of piling up. The tooltip holds the whole text.
#pragma once

#include <QLabel>
#include <QString>

class QTimer;

namespace spw::ui {

class ActivityLabel final : public QLabel {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(ActivityLabel)

 public:
  static constexpr int kDefaultNoticeMs = 12'000;

  explicit ActivityLabel(QWidget* parent = nullptr);

  /// What the window is doing; shown now unless a notice is up (then when it clears).
  void setState(const QString& text);
  /// A notice shown for noticeTimeout() over the state.
  void showNotice(const QString& text);
  /// Clears the notice now (the state shows).
  void clearNotice();

  QString state() const { return state_; }
  /// The notice shown ("" : none), with its count.
  QString notice() const;
  /// The text on screen: the notice, else the state.
  QString shownText() const { return notice_.isEmpty() ? state_ : notice(); }
  void setNoticeTimeout(int ms);
  int noticeTimeout() const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void refresh();

  QString state_;
  QString notice_;
  int repeats_ = 0;
  QTimer* timer_ = nullptr;
};

}  // namespace spw::ui
