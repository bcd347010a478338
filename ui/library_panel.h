// The library side of the window (left): a search box over the library's full-text index, the
// documents (title, pages, tokens for the current model, badges for scanned / OCR / repaired /
// encrypted / no-text documents), the search hits when a query is typed, and the ingest list
// (IngestProgressPanel) at the bottom.
//
// A document is renamed in place (F2 or the context menu's Rename…): renameRequested carries the
// name, the window stores it. Reads the Library given (the GUI thread's connection); never
// writes to it.
#pragma once

#include <QHash>
#include <QList>
#include <QString>
#include <QWidget>

class QLabel;
class QPushButton;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class QStackedWidget;
class QTimer;
class QToolButton;
class QTreeWidget;
class QTreeWidgetItem;

namespace spw::app {
class Library;
}

namespace spw::ui {

class IngestProgressPanel;

class LibraryPanel final : public QWidget {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(LibraryPanel)

 public:
  /// `lib` must outlive the panel (may be null: an empty panel that says the library is closed).
  explicit LibraryPanel(app::Library* lib, QWidget* parent = nullptr);

  /// Re-reads the document list (keeps the selection where the documents still exist).
  void reload();
  /// Fills the Tokens column: doc id -> tokens of its text for the current model. Documents not
  /// in `counts` show "—".
  void setTokenCounts(const QHash<qint64, qint64>& counts);
  /// The loaded model's context in tokens (0: none loaded): a document with more tokens gets
  /// the "over context" badge.
  void setModelContext(qint64 n_ctx);
  /// Runs a search now (the box's text is replaced); returns the number of hits listed.
  int search(const QString& query);

  QList<qint64> selectedDocuments() const;
  /// Selects one document (no signal loop; emits selectionChanged once).
  void selectDocument(qint64 doc_id);
  /// Documents listed, in order (tests).
  QList<qint64> listedDocuments() const;
  /// A listed document's title and badges ("2 scanned", "repaired", ...), for tests.
  QString documentTitle(qint64 doc_id) const;
  QStringList documentBadges(qint64 doc_id) const;
  /// The row's tooltip (title, file, the PDF's own title when it differs, badges).
  QString documentToolTip(qint64 doc_id) const;
  /// Opens the in-place name editor on a document's title (what F2 and Rename… do); false
  /// when the document is not listed.
  bool startRename(qint64 doc_id);
  /// "12 pages" (the row's second line) and the Tokens column's text ("—" when unknown).
  QString documentSubtitle(qint64 doc_id) const;
  QString documentTokens(qint64 doc_id) const;
  /// Search hits listed: (doc id, page) in order.
  QList<QPair<qint64, int>> listedHits() const;
  /// Activates hit `row` as a click would (tests).
  void activateHit(int row);

  IngestProgressPanel* ingestPanel() const { return ingest_; }
  /// The text of the line over the list (counts, errors).
  QString summaryText() const;

 signals:
  void selectionChanged(QList<qint64> doc_ids);
  /// A document was double-clicked / chosen: open it.
  void documentActivated(qint64 doc_id);
  /// A search hit was clicked: open `page_no` of `doc_id`, highlighting `highlight`.
  void hitActivated(qint64 doc_id, int page_no, QString highlight);
  void addRequested();
  void removeRequested(qint64 doc_id);
  void ocrRequested(qint64 doc_id);
  /// The user gave a document a new name ("" : back to the title from the PDF).
  void renameRequested(qint64 doc_id, QString name);

 private:
  void runSearch();
  void showContextMenu(const QPoint& pos);
  QTreeWidgetItem* itemFor(qint64 doc_id) const;

  app::Library* lib_ = nullptr;
  QLineEdit* search_ = nullptr;
  QTimer* search_timer_ = nullptr;
  QLabel* summary_ = nullptr;
  QStackedWidget* stack_ = nullptr;
  QTreeWidget* docs_ = nullptr;
  QListWidget* hits_ = nullptr;
  QWidget* empty_ = nullptr;
  QLabel* empty_text_ = nullptr;      // "No documents yet", or why none can be added
  QPushButton* empty_add_ = nullptr;  // Add PDF files…, hidden while the library is not open
  IngestProgressPanel* ingest_ = nullptr;
  QHash<qint64, qint64> tokens_;
  qint64 n_ctx_ = 0;
  QString last_query_;
  bool in_reload_ = false;
};

}  // namespace spw::ui
