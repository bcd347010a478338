// The PDF page viewer (centre of the window): one page at a time, rendered by poppler at the
// zoom's resolution (device pixel ratio included), with prev/next, a page number box, zoom in/out
// and fit width, and highlighted text (a citation's quote or a search's words) drawn as
// translucent yellow rectangles from poppler's text search. Pages render on a thread of their own
// (pageShown says when one is on screen) and are cached (LRU, by page and resolution). When the PDF
// file has moved or cannot be opened, the page's stored text (from the library) is shown instead,
// with a note saying why.
//
// Reading: the wheel goes on to the next page past the bottom of one (and back to the previous
// page's bottom past the top); Home and End go to the first and last page. Each document opens
// at the zoom it was last read at (ZoomLookup; fit width when none), documentZoomChanged says
// when the user changes it. Text is selected on the page by dragging over it (page_canvas.h);
// Ctrl+C copies it, Ctrl+A selects the page's text.
//
// An encrypted PDF shows its stored text with an Unlock… button until its password is given
// (or was given when it was added: rememberPassword); the password is kept in this object's
// memory for the session, never written anywhere.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include <QByteArray>
#include <QCache>
#include <QHash>
#include <QImage>
#include <QList>
#include <QRectF>
#include <QString>
#include <QWidget>

class QAction;
class QLabel;
class QPushButton;
class QScrollArea;
class QScrollBar;
class QSpinBox;
class QStackedWidget;
class QTextEdit;
class QThreadPool;
class QTimer;
class QToolBar;

namespace Poppler {
class Document;
}

namespace spw::ui {

class PageCanvas;

class PageViewer final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(PageViewer)

 public:
  /// What the viewer needs to know about a library document.
  struct DocumentInfo {
    qint64 id = 0;
    QString path;  // the PDF as ingested (may have moved since)
    QString title;
    int n_pages = 0;
  };
  /// The stored text of a page (1-based), for the fallback view; empty when unknown.
  using TextProvider = std::function<QString(qint64 doc_id, int page_no)>;
  /// The zoom a document was last read at (1.0 = 100%); 0: none (fit width).
  using ZoomLookup = std::function<double(qint64 doc_id)>;
  /// Asks for an encrypted PDF's password (`wrong`: the last one failed); nullopt: cancelled.
  using PasswordPrompt = std::function<std::optional<QString>(const QString& file, bool wrong)>;

  static constexpr double kMinZoom = 0.25, kMaxZoom = 5.0;

  explicit PageViewer(QWidget* parent = nullptr);
  ~PageViewer() override;

  void setTextProvider(TextProvider provider) { text_provider_ = std::move(provider); }
  void setZoomLookup(ZoomLookup lookup) { zoom_lookup_ = std::move(lookup); }
  /// The default shows PasswordDialog; tests inject their own.
  void setPasswordPrompt(PasswordPrompt prompt) { password_prompt_ = std::move(prompt); }
  /// The password of an encrypted document, for this session only (memory; never stored). The
  /// document is shown with it at once when it is the one on screen.
  void rememberPassword(qint64 doc_id, const QString& password);
  /// An encrypted document on screen without its password (the stored text is shown).
  bool isLocked() const { return locked_ != nullptr; }
  /// Asks for the on-screen document's password (again after a wrong one) and shows its pages
  /// with it. False when cancelled or nothing is locked.
  bool unlock();
  /// The text selected on the page ("" : none) and copying it to the clipboard (false: none).
  QString selectedText() const;
  bool copySelection();
  PageCanvas* canvas() const { return canvas_; }

  /// Shows `page_no` (clamped to 1..n_pages) of `doc` with `highlight` marked (see
  /// setHighlight). Re-opening the same document keeps its loaded PDF and only changes the page.
  void openDocument(const DocumentInfo& doc, int page_no = 1, const QString& highlight = {});
  /// Back to the empty state.
  void closeDocument();
  /// Moves to page `page_no` (clamped) of the open document; clears no highlight.
  void showPage(int page_no);
  /// Highlights `text` on the current (and every later shown) page: the whole phrase when the
  /// page has it (across lines), otherwise its runs of words or, for a search, each word.
  /// Empty clears.
  void setHighlight(const QString& text);

  /// A new title for the open document (it was renamed).
  void setDocumentTitle(const QString& title);
  qint64 documentId() const { return doc_.id; }
  QString documentTitle() const { return doc_.title; }
  int currentPage() const { return page_; }
  int pageCount() const { return doc_.n_pages; }
  QString highlight() const { return highlight_; }
  /// Highlight rectangles on the current page (PDF mode) or matches (stored-text mode).
  int highlightCount() const;
  /// Whether a page is being rendered (pageShown follows).
  bool isRendering() const { return rendering_; }
  /// Whether the stored text is shown because the PDF could not be opened.
  bool showingStoredText() const;
  /// 1.0 = 100% (96 logical dpi).
  double zoom() const { return zoom_; }
  void setZoom(double zoom);
  bool fitWidth() const { return fit_width_; }
  void setFitWidth(bool on);
  /// The page toolbar (previous, page number, next, zoom), for tests.
  QToolBar* toolBar() const { return bar_; }

 signals:
  /// A page was put on screen (rendered or stored text).
  void pageShown(qint64 doc_id, int page_no);
  /// The zoom changed (user or fit width); 1.0 = 100%.
  void zoomChanged(double zoom);
  /// The user set a document's zoom (0: fit width), to be remembered for it.
  void documentZoomChanged(qint64 doc_id, double zoom);

 protected:
  void resizeEvent(QResizeEvent* event) override;
  /// Ctrl + wheel over the page zooms.
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void render();
  void renderStoredText();
  /// After a page is on screen: scroll (top of a new page, the first highlight), emit pageShown.
  void present();
  void updateControls();
  double fitWidthZoom() const;
  /// A wheel step at the top or bottom of the page turns it; true when the event is used.
  bool wheelAtEdge(QScrollBar* bar, int dy);

  QToolBar* bar_ = nullptr;
  QLabel* title_ = nullptr;
  QAction* prev_ = nullptr;
  QAction* next_ = nullptr;
  QAction* zoom_in_ = nullptr;
  QAction* zoom_out_ = nullptr;
  QAction* fit_ = nullptr;
  QAction* copy_ = nullptr;
  QPushButton* unlock_ = nullptr;
  QSpinBox* page_box_ = nullptr;
  QLabel* of_label_ = nullptr;
  QLabel* zoom_label_ = nullptr;
  QStackedWidget* stack_ = nullptr;
  QWidget* empty_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  PageCanvas* canvas_ = nullptr;
  QWidget* text_view_ = nullptr;
  QLabel* text_note_ = nullptr;
  QTextEdit* text_ = nullptr;
  QTimer* refit_timer_ = nullptr;

  DocumentInfo doc_;
  std::unique_ptr<Poppler::Document> pdf_;
  std::unique_ptr<Poppler::Document> locked_;  // an encrypted PDF waiting for its password
  QHash<qint64, QByteArray> passwords_;        // this session's, by document; never stored
  ZoomLookup zoom_lookup_;
  PasswordPrompt password_prompt_;
  int wheel_rest_ = 0;           // wheel delta past the page's edge, not yet a page turn
  bool land_at_bottom_ = false;  // the next page shown is read from its bottom
  QString pdf_error_;            // why the PDF could not be opened (stored-text mode)
  TextProvider text_provider_;
  int page_ = 0;
  double zoom_ = 1.0;
  bool fit_width_ = true;
  QString highlight_;
  int text_matches_ = 0;
  QThreadPool* render_pool_ = nullptr;  // one thread
  /// The newest render request; a render whose number is older is dropped.
  std::shared_ptr<std::atomic<quint64>> latest_;
  bool rendering_ = false;
  bool scroll_to_top_ = false;
  QCache<QString, QImage> cache_;  // "page@dpi" -> image, cost in KiB
};

}  // namespace spw::ui
