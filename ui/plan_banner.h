// The planner's verdict over the chat's question box when a question will not fit as it is: the
// plain-language headline first ("This 73,000-token document does not fit ... Answering over 3
// parts takes about 25 minutes."), the numbers behind a Details toggle, and the choices (Use
// map-reduce, Run anyway only where it can work; Cancel is the banner's ×). Where the document
// can be split, "Always answer this document over parts" goes with Use map-reduce: the chat
// remembers it for the document (ChatPanel).
//
// It fits a narrow chat dock: the text scrolls inside the banner (at most about ten lines tall)
// and the buttons wrap onto more rows, so the banner never makes the window taller or wider than
// the user made it.
#pragma once

#include <QFrame>
#include <QString>
#include <vector>

class QCheckBox;
class QLabel;
class QLayout;
class QResizeEvent;
class QPushButton;
class QScrollArea;
class QToolButton;

namespace spw::ui {

class PlanBanner final : public QFrame {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(PlanBanner)

 public:
  explicit PlanBanner(QWidget* parent = nullptr);

  /// Shows a verdict: the document's title, the headline (plain text), the details (plain text,
  /// lines), whether map-reduce can split it and whether "Run anyway" can work.
  void showVerdict(const QString& doc_title, const QString& headline, const QString& details,
                   bool can_split, bool can_run_anyway);

  QPushButton* runAnywayButton() const { return run_anyway_; }
  QPushButton* mapReduceButton() const { return map_reduce_; }
  QToolButton* cancelButton() const { return cancel_; }
  QToolButton* detailsButton() const { return details_toggle_; }
  /// "Always answer this document over parts": shown only where map-reduce can split the
  /// document, unchecked for each new verdict. In a narrow banner its text is a shorter form
  /// ("Always over parts", "Always") beside Use map-reduce; the tooltip has the sentence.
  QCheckBox* alwaysOverPartsBox() const { return always_parts_; }
  /// The box is shown and checked (read when Use map-reduce is clicked).
  bool alwaysOverParts() const;
  /// The headline's and the details' text as shown (tests).
  QString headlineText() const;
  QString detailsText() const;
  bool detailsShown() const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 signals:
  void runAnyway();
  void mapReduce();
  void cancelled();

 private:
  /// The buttons' rows need more height in a narrower banner: their minimum follows the width.
  void updateButtonRows();

  QScrollArea* scroll_ = nullptr;
  QWidget* buttons_ = nullptr;
  QLayout* rows_ = nullptr;  // a WrapLayout
  QLabel* headline_ = nullptr;
  QLabel* details_ = nullptr;
  QToolButton* details_toggle_ = nullptr;
  QCheckBox* always_parts_ = nullptr;
  struct Form {
    QString text;
    int width = 0;  // the box's width with it (pixels)
  };
  std::vector<Form> always_forms_;  // the box's text: the sentence first, then shorter forms
  QPushButton* run_anyway_ = nullptr;
  QPushButton* map_reduce_ = nullptr;
  QToolButton* cancel_ = nullptr;
};

}  // namespace spw::ui
