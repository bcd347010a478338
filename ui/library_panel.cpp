#include "ui/library_panel.h"

#include <functional>

#include <QAbstractTextDocumentLayout>
#include <QApplication>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QStackedWidget>
#include <QStyle>
#include <QStyledItemDelegate>
#include <QTextDocument>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "app/store/display_title.h"
#include "app/store/library.h"
#include "ui/icons.h"
#include "ui/ingest_progress.h"

namespace spw::ui {

namespace {

constexpr int kDocIdRole = Qt::UserRole;
constexpr int kBadgesRole = Qt::UserRole + 1;
constexpr int kSubtitleRole = Qt::UserRole + 2;
constexpr int kHitPageRole = Qt::UserRole + 3;
// The badges the document itself has (scanned, repaired, ...), before the model's "over context".
constexpr int kOwnBadgesRole = Qt::UserRole + 4;
constexpr int kSearchDelayMs = 250;
constexpr int kMaxHits = 50;

QString fromStd(const std::string& s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

QColor badgeColor(const QString& badge) {
  if (badge.startsWith(QStringLiteral("no text"))) return QColor(0xc6, 0x28, 0x28);
  if (badge.contains(QStringLiteral("scanned"))) return QColor(0xe0, 0x7b, 0x00);
  if (badge.startsWith(QStringLiteral("OCR"))) return QColor(0x2e, 0x7d, 0x32);
  if (badge == QStringLiteral("repaired")) return QColor(0x15, 0x65, 0xc0);
  if (badge == QStringLiteral("encrypted")) return QColor(0x6a, 0x1b, 0x9a);
  if (badge.startsWith(QStringLiteral("over context"))) return QColor(0x00, 0x69, 0x7c);
  return QColor(0x61, 0x61, 0x61);
}

// Column 0 of the document list: the title, then "N pages" and coloured badges. Renaming (F2,
// the context menu) edits the title line in place; the new name goes to `renamed`, not into the
// model (the window stores it and reloads the list).
class DocumentDelegate final : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  std::function<void(qint64 doc_id, const QString& name)> renamed;

  QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem&,
                        const QModelIndex&) const override {
    auto* edit = new QLineEdit(parent);
    edit->setObjectName(QStringLiteral("renameEditor"));
    edit->setMaxLength(int(app::kMaxDocumentName));
    edit->setPlaceholderText(tr("Empty: the title from the PDF"));
    return edit;
  }
  void setEditorData(QWidget* editor, const QModelIndex& index) const override {
    auto* edit = static_cast<QLineEdit*>(editor);
    edit->setText(index.data(Qt::DisplayRole).toString());
    edit->selectAll();
  }
  void setModelData(QWidget* editor, QAbstractItemModel*, const QModelIndex& index) const override {
    const QString name = static_cast<QLineEdit*>(editor)->text();
    if (name != index.data(Qt::DisplayRole).toString() && renamed)
      renamed(index.data(kDocIdRole).toLongLong(), name);
  }
  void updateEditorGeometry(QWidget* editor, const QStyleOptionViewItem& option,
                            const QModelIndex&) const override {
    // Over the title line, right of the icon.
    const QRect r = option.rect.adjusted(6 + 30 - 4, 3, -4, 0);
    editor->setGeometry(r.left(), r.top(), r.width(), editor->sizeHint().height());
  }

  QSize sizeHint(const QStyleOptionViewItem& opt, const QModelIndex& index) const override {
    QSize s = QStyledItemDelegate::sizeHint(opt, index);
    const int line = opt.fontMetrics.height();
    s.setHeight(line * 2 + 14);
    return s;
  }

  void paint(QPainter* p, const QStyleOptionViewItem& option,
             const QModelIndex& index) const override {
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QString title = opt.text;
    opt.text.clear();
    opt.icon = QIcon();
    QStyle* style = opt.widget ? opt.widget->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &opt, p, opt.widget);

    const bool selected = opt.state & QStyle::State_Selected;
    const QPalette::ColorGroup cg =
        opt.state & QStyle::State_Active ? QPalette::Active : QPalette::Inactive;
    const QColor text =
        opt.palette.color(cg, selected ? QPalette::HighlightedText : QPalette::Text);
    QRect r = opt.rect.adjusted(6, 6, -4, -6);

    const QIcon icon = index.data(Qt::DecorationRole).value<QIcon>();
    if (!icon.isNull()) {
      icon.paint(p, QRect(r.left(), r.top() + 2, 22, 22));
      r.setLeft(r.left() + 30);
    }
    p->save();
    QFont bold = opt.font;
    bold.setBold(true);
    p->setFont(bold);
    p->setPen(text);
    const QFontMetrics fm(bold);
    p->drawText(QRect(r.left(), r.top(), r.width(), fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
                fm.elidedText(title, Qt::ElideRight, r.width()));

    QFont small = opt.font;
    small.setPointSizeF(small.pointSizeF() * 0.88);
    p->setFont(small);
    const QFontMetrics sfm(small);
    int x = r.left();
    const int y = r.top() + fm.height() + 3;
    // The badges (warnings: over context, scanned) before the page count: in a narrow list the
    // count is elided, or left out, to keep them in view.
    const QStringList badge_list = index.data(kBadgesRole).toStringList();
    int badges_w = 0;
    for (const QString& badge : badge_list) badges_w += sfm.horizontalAdvance(badge) + 16;
    QString subtitle = index.data(kSubtitleRole).toString();
    const int room = r.width() - badges_w - 8;
    if (sfm.horizontalAdvance(subtitle) > room)
      subtitle = room > sfm.horizontalAdvance(QStringLiteral("4 p…"))
                     ? sfm.elidedText(subtitle, Qt::ElideRight, room)
                     : QString();
    QColor dim = text;
    dim.setAlphaF(0.7f);
    p->setPen(dim);
    p->drawText(QRect(x, y, r.width(), sfm.height() + 2), Qt::AlignLeft | Qt::AlignVCenter,
                subtitle);
    if (!subtitle.isEmpty()) x += sfm.horizontalAdvance(subtitle) + 8;
    p->setRenderHint(QPainter::Antialiasing);
    for (const QString& badge : badge_list) {
      const int w = sfm.horizontalAdvance(badge) + 12;
      if (x + w > r.right()) break;
      const QRectF pill(x, y, w, sfm.height() + 2);
      QPainterPath path;
      path.addRoundedRect(pill, pill.height() / 2, pill.height() / 2);
      const QColor c = badgeColor(badge);
      p->fillPath(path, c);
      p->setPen(Qt::white);
      p->drawText(pill, Qt::AlignCenter, badge);
      x += w + 4;
    }
    p->restore();
  }
};

// A search hit: "Title · p. N" and the snippet with the matched words in bold (rich text).
class HitDelegate final : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;

  static void setup(QTextDocument& doc, const QStyleOptionViewItem& opt, const QString& html,
                    int width) {
    doc.setDefaultFont(opt.font);
    doc.setDocumentMargin(6);
    doc.setHtml(html);
    doc.setTextWidth(width);
  }

  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    QTextDocument doc;
    const int width = opt.widget ? opt.widget->width() - 24 : 280;
    setup(doc, opt, index.data(Qt::DisplayRole).toString(), width);
    return QSize(width, int(doc.size().height()) + 4);
  }

  void paint(QPainter* p, const QStyleOptionViewItem& option,
             const QModelIndex& index) const override {
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QString html = opt.text;
    opt.text.clear();
    QStyle* style = opt.widget ? opt.widget->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &opt, p, opt.widget);
    QTextDocument doc;
    setup(doc, opt, html, opt.rect.width());
    QAbstractTextDocumentLayout::PaintContext ctx;
    const bool selected = opt.state & QStyle::State_Selected;
    ctx.palette.setColor(QPalette::Text,
                         opt.palette.color(selected ? QPalette::HighlightedText : QPalette::Text));
    p->save();
    p->translate(opt.rect.topLeft());
    doc.documentLayout()->draw(p, ctx);
    p->restore();
  }
};

// "**word**" (the library's highlight markers) -> <b>word</b>, the rest HTML-escaped.
QString snippetHtml(const QString& snippet) {
  const QString open = QString::fromLatin1(app::kHighlightOpen);
  const QString close = QString::fromLatin1(app::kHighlightClose);
  QString out;
  qsizetype pos = 0;
  bool in_match = false;
  while (pos < snippet.size()) {
    const QString& marker = in_match ? close : open;
    const qsizetype next = snippet.indexOf(marker, pos);
    const qsizetype end = next < 0 ? snippet.size() : next;
    out += snippet.mid(pos, end - pos).toHtmlEscaped();
    if (next < 0) break;
    out += in_match ? QStringLiteral("</b>")
                    : QStringLiteral("<b style=\"background:#fff3a0;color:#000\">");
    in_match = !in_match;
    pos = next + marker.size();
  }
  if (in_match) out += QStringLiteral("</b>");
  return out;
}

}  // namespace

LibraryPanel::LibraryPanel(app::Library* lib, QWidget* parent) : QWidget(parent), lib_(lib) {
  setObjectName(QStringLiteral("libraryPanel"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 8);
  layout->setSpacing(6);

  auto* top = new QHBoxLayout;
  top->setSpacing(4);
  search_ = new QLineEdit(this);
  search_->setObjectName(QStringLiteral("librarySearch"));
  search_->setPlaceholderText(tr("Search all documents"));
  search_->setClearButtonEnabled(true);
  search_->addAction(themed("edit-find", QStyle::SP_FileDialogContentsView, style()),
                     QLineEdit::LeadingPosition);
  top->addWidget(search_, 1);
  auto* add = new QToolButton(this);
  add->setIcon(themed("document-open", QStyle::SP_DialogOpenButton, style()));
  add->setToolTip(tr("Add PDF files… (or drop them on the window)"));
  add->setAutoRaise(true);
  connect(add, &QToolButton::clicked, this, &LibraryPanel::addRequested);
  top->addWidget(add);
  layout->addLayout(top);

  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("librarySummary"));
  QFont small = summary_->font();
  small.setPointSizeF(small.pointSizeF() * 0.9);
  summary_->setFont(small);
  summary_->setEnabled(false);
  layout->addWidget(summary_);

  stack_ = new QStackedWidget(this);
  docs_ = new QTreeWidget(stack_);
  docs_->setObjectName(QStringLiteral("documentList"));
  // Pages are on each row's second line, so the title gets the width.
  docs_->setColumnCount(2);
  docs_->setHeaderLabels({tr("Document"), tr("Tokens")});
  docs_->setRootIsDecorated(false);
  docs_->setUniformRowHeights(true);
  docs_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  auto* delegate = new DocumentDelegate(docs_);
  // From the event loop: the window reloads the list, which must not delete the editor while
  // the view is still closing it.
  delegate->renamed = [this](qint64 id, const QString& name) {
    QMetaObject::invokeMethod(
        this, [this, id, name] { emit renameRequested(id, name); }, Qt::QueuedConnection);
  };
  docs_->setItemDelegateForColumn(0, delegate);
  docs_->setEditTriggers(QAbstractItemView::EditKeyPressed);  // F2 (and the context menu)
  docs_->setContextMenuPolicy(Qt::CustomContextMenu);
  docs_->header()->setStretchLastSection(false);
  docs_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  docs_->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  stack_->addWidget(docs_);

  hits_ = new QListWidget(stack_);
  hits_->setObjectName(QStringLiteral("searchHits"));
  hits_->setItemDelegate(new HitDelegate(hits_));
  hits_->setWordWrap(true);
  hits_->setVerticalScrollMode(QAbstractItemView::ScrollPerPixel);
  stack_->addWidget(hits_);

  // Shown instead of an empty list: what to do first.
  empty_ = new QWidget(stack_);
  auto* el = new QVBoxLayout(empty_);
  el->addStretch(1);
  auto* eicon = new QLabel(empty_);
  eicon->setPixmap(themed("document-new", QStyle::SP_FileDialogNewFolder, style()).pixmap(40, 40));
  eicon->setAlignment(Qt::AlignHCenter);
  el->addWidget(eicon);
  empty_text_ = new QLabel(empty_);
  empty_text_->setObjectName(QStringLiteral("emptyText"));
  empty_text_->setAlignment(Qt::AlignHCenter);
  empty_text_->setWordWrap(true);
  el->addWidget(empty_text_);
  empty_add_ = new QPushButton(tr("Add PDF files…"), empty_);
  empty_add_->setObjectName(QStringLiteral("emptyAdd"));
  connect(empty_add_, &QPushButton::clicked, this, &LibraryPanel::addRequested);
  el->addWidget(empty_add_, 0, Qt::AlignHCenter);
  el->addStretch(2);
  stack_->addWidget(empty_);
  layout->addWidget(stack_, 1);

  ingest_ = new IngestProgressPanel(this);
  layout->addWidget(ingest_);

  search_timer_ = new QTimer(this);
  search_timer_->setSingleShot(true);
  search_timer_->setInterval(kSearchDelayMs);
  connect(search_timer_, &QTimer::timeout, this, &LibraryPanel::runSearch);
  connect(search_, &QLineEdit::textChanged, this, [this] { search_timer_->start(); });
  connect(search_, &QLineEdit::returnPressed, this, [this] {
    search_timer_->stop();
    runSearch();
  });
  connect(docs_, &QTreeWidget::itemSelectionChanged, this, [this] {
    if (!in_reload_) emit selectionChanged(selectedDocuments());
  });
  connect(docs_, &QTreeWidget::itemActivated, this, [this](QTreeWidgetItem* item) {
    emit documentActivated(item->data(0, kDocIdRole).toLongLong());
  });
  connect(docs_, &QTreeWidget::itemClicked, this, [this](QTreeWidgetItem* item) {
    emit documentActivated(item->data(0, kDocIdRole).toLongLong());
  });
  connect(docs_, &QTreeWidget::customContextMenuRequested, this, &LibraryPanel::showContextMenu);
  connect(hits_, &QListWidget::itemClicked, this,
          [this](QListWidgetItem* item) { activateHit(hits_->row(item)); });
  connect(hits_, &QListWidget::itemActivated, this,
          [this](QListWidgetItem* item) { activateHit(hits_->row(item)); });

  reload();
}

void LibraryPanel::reload() {
  const QList<qint64> selected = selectedDocuments();
  in_reload_ = true;
  docs_->clear();
  std::vector<app::DocumentRecord> docs;
  // Without a library nothing can be added: the empty page says so instead of inviting a drop.
  empty_text_->setText(lib_ ? tr("No documents yet.\nDrop PDF files here or use File › Open.")
                            : tr("The library could not be opened (the error is in the chat "
                                 "panel), so no document can be added. Start Spillway with "
                                 "another --data-dir, or move the damaged library.sqlite3 away."));
  empty_add_->setVisible(lib_ != nullptr);
  if (!lib_) {
    summary_->setText(tr("The library is not open."));
  } else if (auto r = lib_->documents(); !r) {
    summary_->setText(tr("Cannot read the library: %1").arg(fromStd(r.error().message)));
  } else {
    docs = std::move(*r);
  }
  const QIcon pdf_icon = (QIcon::hasThemeIcon(QStringLiteral("application-pdf"))
                              ? QIcon::fromTheme(QStringLiteral("application-pdf"))
                              : themed("x-office-document", QStyle::SP_FileIcon, style()));
  int64_t total_pages = 0;
  for (const app::DocumentRecord& d : docs) {
    auto* item = new QTreeWidgetItem(docs_);
    const QString title = fromStd(d.shown_title());
    item->setText(0, title);
    item->setIcon(0, pdf_icon);
    item->setData(0, kDocIdRole, qint64(d.id));
    item->setFlags(item->flags() | Qt::ItemIsEditable);
    item->setTextAlignment(1, Qt::AlignRight | Qt::AlignVCenter);
    QStringList badges;
    if (d.no_text) badges << tr("no text");
    const int unread = d.n_scanned - d.n_ocr;
    if (unread > 0 && !d.no_text) badges << tr("%1 scanned").arg(unread);  // no text says it
    if (d.n_ocr > 0) badges << tr("OCR %1").arg(d.n_ocr);
    if (d.repaired) badges << tr("repaired");
    if (d.encrypted) badges << tr("encrypted");
    item->setData(0, kOwnBadgesRole, badges);  // kBadgesRole: setTokenCounts() below
    item->setData(0, kSubtitleRole, d.n_pages == 1 ? tr("1 page") : tr("%1 pages").arg(d.n_pages));
    QString tip = QStringLiteral("<b>%1</b><br/>%2")
                      .arg(title.toHtmlEscaped(), fromStd(d.path).toHtmlEscaped());
    // The PDF's own title (and the cleaned one a name replaced) are kept: said here.
    const QString cleaned = fromStd(app::display_title(d.title, d.path));
    if (!d.custom_title.empty() && cleaned != fromStd(d.title))
      tip += QStringLiteral("<br/>") + tr("Title before renaming: %1").arg(cleaned.toHtmlEscaped());
    if (!d.title.empty() && fromStd(d.title) != title)
      tip += QStringLiteral("<br/>") + tr("PDF title: %1").arg(fromStd(d.title).toHtmlEscaped());
    if (!badges.isEmpty()) tip += QStringLiteral("<br/>") + badges.join(QStringLiteral(", "));
    item->setToolTip(0, tip);
    total_pages += d.n_pages;
  }
  setTokenCounts(tokens_);
  for (qint64 id : selected) {
    if (QTreeWidgetItem* it = itemFor(id)) it->setSelected(true);
  }
  in_reload_ = false;
  if (lib_ && !docs.empty()) {
    const QString pages = total_pages == 1 ? tr("1 page") : tr("%1 pages").arg(total_pages);
    summary_->setText(docs.size() == 1 ? tr("1 document · %1").arg(pages)
                                       : tr("%1 documents · %2").arg(docs.size()).arg(pages));
  } else if (lib_) {
    summary_->setText(tr("Library is empty"));
  }
  if (search_->text().trimmed().isEmpty()) stack_->setCurrentWidget(docs.empty() ? empty_ : docs_);
  if (selected != selectedDocuments()) emit selectionChanged(selectedDocuments());
}

void LibraryPanel::setTokenCounts(const QHash<qint64, qint64>& counts) {
  tokens_ = counts;
  for (int i = 0; i < docs_->topLevelItemCount(); ++i) {
    QTreeWidgetItem* item = docs_->topLevelItem(i);
    const auto it = tokens_.find(item->data(0, kDocIdRole).toLongLong());
    item->setText(1, it == tokens_.end() ? QStringLiteral("—") : QLocale().toString(it.value()));
    // Longer than the model's context: answered over parts (or not at all), said before asking.
    QStringList badges = item->data(0, kOwnBadgesRole).toStringList();
    const bool over = it != tokens_.end() && n_ctx_ > 0 && it.value() > n_ctx_;
    if (over) badges << tr("over context");
    item->setData(0, kBadgesRole, badges);
    item->setToolTip(1, over ? tr("%1 tokens for the current model, whose context holds %2: "
                                  "questions about it are answered over parts")
                                   .arg(QLocale().toString(it.value()), QLocale().toString(n_ctx_))
                             : tr("Tokens of the document's text for the current model"));
  }
  docs_->viewport()->update();
}

void LibraryPanel::setModelContext(qint64 n_ctx) {
  n_ctx_ = n_ctx;
  setTokenCounts(tokens_);
}

int LibraryPanel::search(const QString& query) {
  search_timer_->stop();
  {
    const QSignalBlocker block(search_);
    search_->setText(query);
  }
  runSearch();
  return hits_->count();
}

void LibraryPanel::runSearch() {
  const QString query = search_->text().trimmed();
  last_query_ = query;
  hits_->clear();
  if (query.isEmpty()) {
    stack_->setCurrentWidget(docs_->topLevelItemCount() == 0 ? empty_ : docs_);
    reload();
    return;
  }
  stack_->setCurrentWidget(hits_);
  if (!lib_) return;
  auto hits = lib_->search(query.toStdString(), kMaxHits);
  if (!hits) {
    summary_->setText(tr("Search failed: %1").arg(fromStd(hits.error().message)));
    return;
  }
  for (const app::SearchHit& h : *hits) {
    auto* item = new QListWidgetItem(hits_);
    item->setText(QStringLiteral("<b>%1</b> &nbsp;·&nbsp; p. %2<br/><span>%3</span>")
                      .arg(fromStd(h.title).toHtmlEscaped())
                      .arg(h.page_no)
                      .arg(snippetHtml(fromStd(h.snippet))));
    item->setData(kDocIdRole, qint64(h.doc_id));
    item->setData(kHitPageRole, h.page_no);
  }
  if (hits->empty()) {
    summary_->setText(tr("No page matches “%1”").arg(query));
  } else {
    summary_->setText(hits->size() == 1 ? tr("1 page matches")
                                        : tr("%1 pages match").arg(hits->size()));
  }
}

void LibraryPanel::activateHit(int row) {
  QListWidgetItem* item = hits_->item(row);
  if (!item) return;
  emit hitActivated(item->data(kDocIdRole).toLongLong(), item->data(kHitPageRole).toInt(),
                    last_query_);
}

QList<qint64> LibraryPanel::selectedDocuments() const {
  QList<qint64> ids;
  for (int i = 0; i < docs_->topLevelItemCount(); ++i) {
    QTreeWidgetItem* item = docs_->topLevelItem(i);
    if (item->isSelected()) ids << item->data(0, kDocIdRole).toLongLong();
  }
  return ids;
}

void LibraryPanel::selectDocument(qint64 doc_id) {
  QTreeWidgetItem* item = itemFor(doc_id);
  if (!item) return;
  if (selectedDocuments() == QList<qint64>{doc_id}) return;
  in_reload_ = true;
  docs_->clearSelection();
  item->setSelected(true);
  docs_->scrollToItem(item);
  in_reload_ = false;
  emit selectionChanged(selectedDocuments());
}

QList<qint64> LibraryPanel::listedDocuments() const {
  QList<qint64> ids;
  for (int i = 0; i < docs_->topLevelItemCount(); ++i)
    ids << docs_->topLevelItem(i)->data(0, kDocIdRole).toLongLong();
  return ids;
}

QString LibraryPanel::documentTitle(qint64 doc_id) const {
  QTreeWidgetItem* item = itemFor(doc_id);
  return item ? item->text(0) : QString();
}

QString LibraryPanel::documentSubtitle(qint64 doc_id) const {
  QTreeWidgetItem* item = itemFor(doc_id);
  return item ? item->data(0, kSubtitleRole).toString() : QString();
}

QString LibraryPanel::documentTokens(qint64 doc_id) const {
  QTreeWidgetItem* item = itemFor(doc_id);
  return item ? item->text(1) : QString();
}

QStringList LibraryPanel::documentBadges(qint64 doc_id) const {
  QTreeWidgetItem* item = itemFor(doc_id);
  return item ? item->data(0, kBadgesRole).toStringList() : QStringList();
}

QList<QPair<qint64, int>> LibraryPanel::listedHits() const {
  QList<QPair<qint64, int>> out;
  for (int i = 0; i < hits_->count(); ++i) {
    out.append({hits_->item(i)->data(kDocIdRole).toLongLong(),
                hits_->item(i)->data(kHitPageRole).toInt()});
  }
  return out;
}

QString LibraryPanel::summaryText() const { return summary_->text(); }

bool LibraryPanel::startRename(qint64 doc_id) {
  QTreeWidgetItem* item = itemFor(doc_id);
  if (!item) return false;
  stack_->setCurrentWidget(docs_);
  docs_->setCurrentItem(item, 0);
  docs_->scrollToItem(item);
  docs_->editItem(item, 0);
  return docs_->findChild<QLineEdit*>(QStringLiteral("renameEditor")) != nullptr;
}

QString LibraryPanel::documentToolTip(qint64 doc_id) const {
  QTreeWidgetItem* item = itemFor(doc_id);
  return item ? item->toolTip(0) : QString();
}

QTreeWidgetItem* LibraryPanel::itemFor(qint64 doc_id) const {
  for (int i = 0; i < docs_->topLevelItemCount(); ++i) {
    QTreeWidgetItem* item = docs_->topLevelItem(i);
    if (item->data(0, kDocIdRole).toLongLong() == doc_id) return item;
  }
  return nullptr;
}

void LibraryPanel::showContextMenu(const QPoint& pos) {
  QTreeWidgetItem* item = docs_->itemAt(pos);
  if (!item) return;
  const qint64 id = item->data(0, kDocIdRole).toLongLong();
  QMenu menu(this);
  menu.addAction(QIcon::fromTheme(QStringLiteral("document-open")), tr("Open"), this,
                 [this, id] { emit documentActivated(id); });
  QAction* rename =
      menu.addAction(themed("edit-rename", QStyle::SP_FileDialogDetailedView, style()),
                     tr("Rename…"), this, [this, id] { startRename(id); });
  rename->setShortcut(QKeySequence(Qt::Key_F2));
  const QStringList badges = item->data(0, kBadgesRole).toStringList();
  const bool has_scanned = std::any_of(badges.begin(), badges.end(), [](const QString& b) {
    return b.contains(QStringLiteral("scanned"));
  });
  QAction* ocr =
      menu.addAction(QIcon::fromTheme(QStringLiteral("scanner")), tr("Read scanned pages with OCR"),
                     this, [this, id] { emit ocrRequested(id); });
  ocr->setEnabled(has_scanned);
  menu.addSeparator();
  menu.addAction(themed("edit-delete", QStyle::SP_TrashIcon, style()), tr("Remove from library…"),
                 this, [this, id] { emit removeRequested(id); });
  menu.exec(docs_->viewport()->mapToGlobal(pos));
}

}  // namespace spw::ui
