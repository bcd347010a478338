// The page of the PDF viewer (page_viewer.h): the rendered page image centred on a neutral
// background, highlight rectangles (a citation's quote, a search's words) and the user's text
// selection over it.
//
// Selecting: press on a word and drag to another; every word between them in reading order
// (poppler's text boxes, as the page's text list orders them) is selected and drawn in the
// palette's highlight colour. selectedText() joins the selected words as the page has them: a
// space where poppler saw one, a line break between lines; ligature characters ("ﬁ") are given
// as their letters. The words are asked for on the first
// press (WordsProvider), not at every page change.
#pragma once

#include <functional>

#include <QImage>
#include <QList>
#include <QRectF>
#include <QString>
#include <QWidget>

namespace spw::ui {

class PageCanvas final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(PageCanvas)

 public:
  /// Logical pixels around the page.
  static constexpr int kMargin = 16;

  /// One word of the page (poppler's TextBox), in reading order.
  struct Word {
    QRectF rect_pt;  // in points (1/72 in) from the page's top-left
    QString text;
    bool space_after = false;  // poppler saw a space after it
    bool line_end = false;     // the next word of the list starts another line (or block)
  };
  using WordsProvider = std::function<QList<Word>()>;

  explicit PageCanvas(QWidget* parent = nullptr);

  /// A new page: its image (device pixel ratio set), highlight rectangles in logical pixels
  /// from the page's top-left, and the scale (logical pixels per point). Clears the selection.
  void setPage(const QImage& image, QList<QRectF> highlights, double px_per_pt);
  /// The same page at the same scale with other highlights (the selection stays).
  void setHighlights(QList<QRectF> highlights);
  void clear();
  void setWordsProvider(WordsProvider provider) { words_provider_ = std::move(provider); }

  bool hasPage() const { return !image_.isNull(); }
  int rectCount() const { return int(rects_.size()); }
  /// The first highlight rectangle in widget coordinates (null when none).
  QRect firstRect() const;

  /// The selected words' text ("" : nothing selected).
  QString selectedText() const;
  bool hasSelection() const { return sel_first_ >= 0; }
  /// Selects words `first`..`last` (reading order, inclusive; clamped); -1: none.
  void selectWords(int first, int last);
  void selectAll();
  void clearSelection();
  /// The page's words (asks the provider once per page).
  const QList<Word>& words();
  /// Where word `i` is drawn, in widget coordinates (null when there is no such word).
  QRect wordRect(int i);

 signals:
  /// The selection changed (empty: cleared).
  void selectionChanged(const QString& text);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;

 private:
  QPointF pageOrigin() const;
  /// The word under (or nearest to) a widget position; -1 when the page has no words.
  int wordAt(const QPointF& pos);
  void emitSelection();

  QImage image_;
  QList<QRectF> rects_;  // highlights, logical pixels relative to the page's top-left
  double px_per_pt_ = 96.0 / 72.0;
  WordsProvider words_provider_;
  QList<Word> words_;
  bool words_loaded_ = false;
  int sel_first_ = -1, sel_last_ = -1;
  int anchor_ = -1;  // the word a drag started on
  bool dragging_ = false;
};

}  // namespace spw::ui
