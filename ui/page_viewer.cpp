#include "ui/page_viewer.h"

#include <algorithm>
#include <cmath>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QIcon>
#include <QKeySequence>
#include <QLabel>
#include <QPainter>
#include <QPointer>
#include <QPushButton>
#include <QRegularExpression>
#include <QResizeEvent>
#include <QScrollArea>
#include <QScrollBar>
#include <QShortcut>
#include <QSpinBox>
#include <QStackedWidget>
#include <QStyle>
#include <QTextEdit>
#include <QThreadPool>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <poppler-qt6.h>

#include "ui/icons.h"
#include "ui/page_canvas.h"
#include "ui/password_dialog.h"

namespace spw::ui {

namespace {

constexpr double kLogicalDpi = 96.0;  // 100% zoom
constexpr int kPageMargin = PageCanvas::kMargin;
constexpr int kCacheBytes = 192 << 20;  // rendered pages kept
constexpr double kZoomStep = 1.2;
constexpr int kMaxHighlightRects = 400;
constexpr int kWheelNotch = 120;  // angleDelta of one wheel step

// The words of a highlight request, without quotes and punctuation at the ends.
QStringList words(const QString& text) {
  QStringList out;
  static const QRegularExpression ws(QStringLiteral("\\s+"));
  for (QString w : text.split(ws, Qt::SkipEmptyParts)) {
    while (!w.isEmpty() && !w.front().isLetterOrNumber()) w.remove(0, 1);
    while (!w.isEmpty() && !w.back().isLetterOrNumber()) w.chop(1);
    if (!w.isEmpty()) out << w;
  }
  return out;
}

// Where `highlight` is on `page`, in points: the whole phrase when the page has it (across line
// ends); for a longer quote that does not match as a whole (different hyphenation, a ligature)
// its runs of four words, never single words (a quote's "of" and "and" would light up the whole
// page); for a search of a few words, each word as a prefix (the index matches stems too).
QList<QRectF> highlightRects(Poppler::Page& page, const QString& highlight) {
  QList<QRectF> rects;
  const QStringList ws = words(highlight);
  if (ws.isEmpty()) return rects;
  const auto flags = Poppler::Page::IgnoreCase | Poppler::Page::IgnoreDiacritics;
  rects = page.search(ws.join(QLatin1Char(' ')), flags | Poppler::Page::AcrossLines);
  if (!rects.isEmpty() || ws.size() == 1) return rects;
  if (ws.size() > 4) {
    for (qsizetype i = 0; i < ws.size() && rects.size() < kMaxHighlightRects; i += 4) {
      const qsizetype from = std::min(i, std::max<qsizetype>(0, ws.size() - 4));
      rects +=
          page.search(ws.mid(from, 4).join(QLatin1Char(' ')), flags | Poppler::Page::AcrossLines);
    }
    return rects;
  }
  for (const QString& w : ws) {
    if (w.size() < 2) continue;
    rects += page.search(w, flags);
    if (rects.size() >= kMaxHighlightRects) break;
  }
  return rects;
}

QList<QRectF> scaled(const QList<QRectF>& points, double scale) {
  QList<QRectF> out;
  out.reserve(points.size());
  for (const QRectF& r : points) {
    out << QRectF(r.x() * scale, r.y() * scale, r.width() * scale, r.height() * scale);
  }
  return out;
}

void setRenderHints(Poppler::Document& doc) {
  doc.setRenderHint(Poppler::Document::Antialiasing);
  doc.setRenderHint(Poppler::Document::TextAntialiasing);
  doc.setRenderHint(Poppler::Document::TextHinting);
}

// One page rendered on the render thread, from its own Poppler::Document (a Document must not be
// shared between threads).
struct RenderResult {
  bool ok = false;
  QImage image;
  QList<QRectF> rects_pt;
};

RenderResult renderPage(const QString& path, const QByteArray& password, int page_index, double dpi,
                        double dpr, const QString& highlight) {
  RenderResult r;
  std::unique_ptr<Poppler::Document> doc = Poppler::Document::load(path);
  if (!doc) return r;
  if (doc->isLocked() && (password.isEmpty() || doc->unlock(password, password))) return r;
  setRenderHints(*doc);
  std::unique_ptr<Poppler::Page> page(doc->page(page_index));
  if (!page) return r;
  r.image = page->renderToImage(dpi, dpi);
  if (r.image.isNull()) return r;
  r.image.setDevicePixelRatio(dpr);
  r.rects_pt = highlightRects(*page, highlight);
  r.ok = true;
  return r;
}

// The page's words in reading order, as the canvas selects them.
QList<PageCanvas::Word> pageWords(Poppler::Page& page) {
  QList<PageCanvas::Word> out;
  const std::vector<std::unique_ptr<Poppler::TextBox>> boxes = page.textList();
  out.reserve(qsizetype(boxes.size()));
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Poppler::TextBox& b = *boxes[i];
    PageCanvas::Word w;
    w.rect_pt = b.boundingBox();
    w.text = b.text();
    w.space_after = b.hasSpaceAfter();
    w.line_end = i + 1 < boxes.size() && b.nextWord() != boxes[i + 1].get();
    out << w;
  }
  return out;
}

}  // namespace

PageViewer::PageViewer(QWidget* parent)
    : QWidget(parent),
      render_pool_(new QThreadPool(this)),
      latest_(std::make_shared<std::atomic<quint64>>(0)),
      cache_(kCacheBytes >> 10) {
  render_pool_->setMaxThreadCount(1);  // one page at a time, newest request wins
  setObjectName(QStringLiteral("pageViewer"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);

  bar_ = new QToolBar(this);
  bar_->setIconSize(QSize(18, 18));
  bar_->setObjectName(QStringLiteral("viewerToolbar"));
  title_ = new QLabel(this);
  title_->setContentsMargins(8, 0, 12, 0);
  QFont tf = title_->font();
  tf.setBold(true);
  title_->setFont(tf);
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar_->addWidget(title_);

  auto* spacer = new QWidget(this);
  spacer->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Preferred);
  spacer->setFixedWidth(4);

  prev_ = bar_->addAction(themed("go-previous", QStyle::SP_ArrowBack, style()), tr("Previous page"),
                          this, [this] { showPage(page_ - 1); });
  prev_->setShortcut(QKeySequence::MoveToPreviousPage);
  page_box_ = new QSpinBox(this);
  page_box_->setObjectName(QStringLiteral("pageNumber"));
  page_box_->setRange(1, 1);
  page_box_->setButtonSymbols(QAbstractSpinBox::NoButtons);
  page_box_->setAlignment(Qt::AlignCenter);
  page_box_->setKeyboardTracking(false);
  page_box_->setFixedWidth(52);
  connect(page_box_, &QSpinBox::valueChanged, this, [this](int v) {
    if (v != page_) showPage(v);
  });
  bar_->addWidget(page_box_);
  of_label_ = new QLabel(this);
  of_label_->setContentsMargins(6, 0, 6, 0);
  bar_->addWidget(of_label_);
  next_ = bar_->addAction(themed("go-next", QStyle::SP_ArrowForward, style()), tr("Next page"),
                          this, [this] { showPage(page_ + 1); });
  next_->setShortcut(QKeySequence::MoveToNextPage);
  bar_->addSeparator();
  zoom_out_ = bar_->addAction(themed("zoom-out", QStyle::SP_ArrowDown, style()), tr("Zoom out"),
                              this, [this] { setZoom(zoom_ / kZoomStep); });
  zoom_out_->setShortcut(QKeySequence::ZoomOut);
  zoom_label_ = new QLabel(this);
  zoom_label_->setMinimumWidth(46);
  zoom_label_->setAlignment(Qt::AlignCenter);
  bar_->addWidget(zoom_label_);
  zoom_in_ = bar_->addAction(themed("zoom-in", QStyle::SP_ArrowUp, style()), tr("Zoom in"), this,
                             [this] { setZoom(zoom_ * kZoomStep); });
  zoom_in_->setShortcut(QKeySequence::ZoomIn);
  fit_ = bar_->addAction(themed("zoom-fit-best", QStyle::SP_TitleBarMaxButton, style()),
                         tr("Fit width"), this, [this](bool on) { setFitWidth(on); });
  fit_->setCheckable(true);
  fit_->setChecked(true);
  layout->addWidget(bar_);

  stack_ = new QStackedWidget(this);
  empty_ = new QWidget(stack_);
  {
    auto* el = new QVBoxLayout(empty_);
    el->addStretch(2);
    auto* logo = new QLabel(empty_);
    // The app's icon is a resource of the executable (absent in the widget tests).
    const QString bundled = QStringLiteral(":/spillway/spillway.svg");
    const QIcon icon = QIcon::hasThemeIcon(QStringLiteral("spillway"))
                           ? QIcon::fromTheme(QStringLiteral("spillway"))
                       : QFile::exists(bundled) ? QIcon(bundled)
                                                : style()->standardIcon(QStyle::SP_FileIcon);
    logo->setPixmap(icon.pixmap(72, 72));
    logo->setAlignment(Qt::AlignHCenter);
    el->addWidget(logo);
    auto* head = new QLabel(tr("No document open"), empty_);
    QFont hf = head->font();
    hf.setPointSizeF(hf.pointSizeF() * 1.5);
    hf.setBold(true);
    head->setFont(hf);
    head->setAlignment(Qt::AlignHCenter);
    el->addWidget(head);
    auto* hint = new QLabel(tr("Choose a document in the library, or drop PDF files anywhere on "
                               "the window to add them."),
                            empty_);
    hint->setAlignment(Qt::AlignHCenter);
    hint->setWordWrap(true);
    el->addWidget(hint);
    el->addStretch(3);
    el->setContentsMargins(48, 24, 48, 24);
  }
  stack_->addWidget(empty_);

  scroll_ = new QScrollArea(stack_);
  scroll_->setObjectName(QStringLiteral("pageScroll"));
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setAlignment(Qt::AlignHCenter | Qt::AlignTop);
  scroll_->setBackgroundRole(QPalette::Mid);
  canvas_ = new PageCanvas(scroll_);
  canvas_->setWordsProvider([this] {
    // Not while another page renders: the words must be those of the page on screen.
    if (!pdf_ || page_ <= 0 || rendering_) return QList<PageCanvas::Word>();
    std::unique_ptr<Poppler::Page> page(pdf_->page(page_ - 1));
    return page ? pageWords(*page) : QList<PageCanvas::Word>();
  });
  // Copy and select the page's text: the keys and the page's context menu.
  copy_ = new QAction(themed("edit-copy", QStyle::SP_FileDialogContentsView, style()), tr("Copy"),
                      this);
  copy_->setShortcut(QKeySequence::Copy);
  copy_->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  copy_->setEnabled(false);
  connect(copy_, &QAction::triggered, this, &PageViewer::copySelection);
  auto* select_all = new QAction(tr("Select all text on this page"), this);
  select_all->setShortcut(QKeySequence::SelectAll);
  select_all->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  connect(select_all, &QAction::triggered, canvas_, &PageCanvas::selectAll);
  canvas_->addAction(copy_);
  canvas_->addAction(select_all);
  canvas_->setContextMenuPolicy(Qt::ActionsContextMenu);
  addAction(copy_);
  addAction(select_all);
  connect(canvas_, &PageCanvas::selectionChanged, this,
          [this](const QString& text) { copy_->setEnabled(!text.isEmpty()); });
  scroll_->setWidget(canvas_);
  scroll_->setWidgetResizable(false);
  scroll_->viewport()->installEventFilter(this);
  stack_->addWidget(scroll_);

  text_view_ = new QWidget(stack_);
  {
    auto* tl = new QVBoxLayout(text_view_);
    tl->setContentsMargins(0, 0, 0, 0);
    tl->setSpacing(0);
    text_note_ = new QLabel(text_view_);
    text_note_->setObjectName(QStringLiteral("storedTextNote"));
    text_note_->setWordWrap(true);
    text_note_->setContentsMargins(12, 8, 12, 8);
    auto* note_row = new QFrame(text_view_);
    note_row->setObjectName(QStringLiteral("storedTextNoteRow"));
    note_row->setStyleSheet(
        QStringLiteral("#storedTextNoteRow { background: #fff4d6; border-bottom: 1px solid "
                       "#e8d29a; } #storedTextNoteRow QLabel { color: #5d4200; }"));
    auto* nl = new QHBoxLayout(note_row);
    nl->setContentsMargins(0, 0, 8, 0);
    nl->addWidget(text_note_, 1);
    // An encrypted PDF: its pages are shown once its password is given (kept in memory only).
    unlock_ = new QPushButton(tr("Unlock…"), note_row);
    unlock_->setObjectName(QStringLiteral("unlockButton"));
    unlock_->setToolTip(
        tr("Enter the PDF's password to show its pages (kept in memory until "
           "Spillway closes, never saved)"));
    unlock_->hide();
    connect(unlock_, &QPushButton::clicked, this, [this] { unlock(); });
    nl->addWidget(unlock_, 0, Qt::AlignVCenter);
    tl->addWidget(note_row);
    text_ = new QTextEdit(text_view_);
    text_->setReadOnly(true);
    text_->setObjectName(QStringLiteral("storedText"));
    text_->setFrameShape(QFrame::NoFrame);
    text_->document()->setDocumentMargin(24);
    text_->viewport()->installEventFilter(this);
    tl->addWidget(text_, 1);
  }
  stack_->addWidget(text_view_);
  layout->addWidget(stack_, 1);

  // Home and End: the first and the last page (while the focus is in the viewer).
  for (const auto& [key, to_last] :
       {std::pair{Qt::Key_Home, false}, std::pair{Qt::Key_End, true}}) {
    auto* sc = new QShortcut(QKeySequence(key), this);
    sc->setContext(Qt::WidgetWithChildrenShortcut);
    connect(sc, &QShortcut::activated, this, [this, last = to_last] {
      if (doc_.id != 0) showPage(last ? doc_.n_pages : 1);
    });
  }

  refit_timer_ = new QTimer(this);
  refit_timer_->setSingleShot(true);
  refit_timer_->setInterval(80);
  connect(refit_timer_, &QTimer::timeout, this, [this] {
    if (fit_width_ && pdf_ && page_ > 0) render();
  });
  updateControls();
}

PageViewer::~PageViewer() {
  latest_->fetch_add(1);
  render_pool_->waitForDone();  // results posted after this find the viewer gone (QPointer)
}

void PageViewer::openDocument(const DocumentInfo& doc, int page_no, const QString& highlight) {
  highlight_ = highlight.trimmed();
  if (doc.id != doc_.id || doc.path != doc_.path || (!pdf_ && pdf_error_.isEmpty())) {
    doc_ = doc;
    pdf_.reset();
    locked_.reset();
    pdf_error_.clear();
    cache_.clear();
    // The zoom this document was read at last; fit width when none.
    const double remembered = zoom_lookup_ ? zoom_lookup_(doc.id) : 0.0;
    fit_width_ = !(remembered > 0);
    if (!fit_width_) zoom_ = std::clamp(remembered, kMinZoom, kMaxZoom);
    fit_->setChecked(fit_width_);
    const QFileInfo fi(doc.path);
    if (doc.path.isEmpty() || !fi.exists()) {
      pdf_error_ = tr("The PDF file is no longer at %1.").arg(doc.path);
    } else {
      pdf_ = Poppler::Document::load(doc.path);
      if (!pdf_) {
        pdf_error_ = tr("Poppler cannot open %1.").arg(doc.path);
      } else if (pdf_->isLocked()) {
        const QByteArray pw = passwords_.value(doc.id);
        if (pw.isEmpty() || pdf_->unlock(pw, pw)) {
          // Encrypted, no password this session: the stored text until it is unlocked.
          pdf_error_ = tr("%1 is encrypted.").arg(fi.fileName());
          locked_ = std::move(pdf_);
        }
      }
      if (pdf_) {
        setRenderHints(*pdf_);
        if (pdf_->numPages() != doc.n_pages && pdf_->numPages() > 0) {
          doc_.n_pages = pdf_->numPages();  // the file changed since ingest; trust the file
        }
      }
    }
    page_ = 0;
    canvas_->clear();  // not the previous document's page while the first one renders
  }
  title_->setText(doc_.title);
  title_->setToolTip(doc_.path);
  showPage(page_no);
}

void PageViewer::setDocumentTitle(const QString& title) {
  doc_.title = title;
  title_->setText(title);
}

void PageViewer::rememberPassword(qint64 doc_id, const QString& password) {
  if (doc_id <= 0 || password.isEmpty()) return;
  passwords_.insert(doc_id, password.toUtf8());
  if (doc_id == doc_.id && locked_) {
    // Open now: the document on screen is the one just unlocked.
    const int page = page_;
    doc_.id = 0;
    DocumentInfo info{doc_id, doc_.path, doc_.title, doc_.n_pages};
    openDocument(info, page, highlight_);
  }
}

bool PageViewer::unlock() {
  if (!locked_ || doc_.id == 0) return false;
  const PasswordPrompt ask =
      password_prompt_ ? password_prompt_ : [this](const QString& file, bool wrong) {
        return PasswordDialog::ask(this, file, wrong, PasswordDialog::Purpose::View);
      };
  bool wrong = false;
  for (;;) {
    const std::optional<QString> pw = ask(doc_.path, wrong);
    if (!pw || pw->isEmpty() || !locked_) return false;
    const QByteArray bytes = pw->toUtf8();
    if (!locked_->unlock(bytes, bytes)) {
      rememberPassword(doc_.id, *pw);
      return true;
    }
    wrong = true;
  }
}

void PageViewer::closeDocument() {
  latest_->fetch_add(1);
  rendering_ = false;
  doc_ = {};
  locked_.reset();
  pdf_.reset();
  pdf_error_.clear();
  cache_.clear();
  page_ = 0;
  highlight_.clear();
  canvas_->clear();
  title_->clear();
  stack_->setCurrentWidget(empty_);
  updateControls();
}

void PageViewer::showPage(int page_no) {
  if (doc_.id == 0 || doc_.n_pages <= 0) return;
  const int p = std::clamp(page_no, 1, doc_.n_pages);
  if (p != page_) scroll_to_top_ = true;
  page_ = p;
  updateControls();
  if (pdf_) {
    render();  // presents now (cached) or when the render thread is done
  } else {
    renderStoredText();
    present();
  }
}

void PageViewer::setHighlight(const QString& text) {
  highlight_ = text.trimmed();
  if (page_ > 0) showPage(page_);
}

int PageViewer::highlightCount() const { return pdf_ ? canvas_->rectCount() : text_matches_; }

bool PageViewer::showingStoredText() const { return stack_->currentWidget() == text_view_; }

void PageViewer::setZoom(double zoom) {
  zoom = std::clamp(zoom, kMinZoom, kMaxZoom);
  fit_width_ = false;
  fit_->setChecked(false);
  if (doc_.id != 0) emit documentZoomChanged(doc_.id, zoom);
  if (std::abs(zoom - zoom_) < 1e-6) {
    updateControls();
    return;
  }
  zoom_ = zoom;
  if (pdf_ && page_ > 0) render();
  updateControls();
  emit zoomChanged(zoom_);
}

void PageViewer::setFitWidth(bool on) {
  fit_width_ = on;
  fit_->setChecked(on);
  if (doc_.id != 0) emit documentZoomChanged(doc_.id, on ? 0.0 : zoom_);
  if (on && pdf_ && page_ > 0) render();
  updateControls();
}

QString PageViewer::selectedText() const { return canvas_->selectedText(); }

bool PageViewer::copySelection() {
  const QString text = canvas_->selectedText();
  if (text.isEmpty()) return false;
  QGuiApplication::clipboard()->setText(text);
  return true;
}

bool PageViewer::wheelAtEdge(QScrollBar* bar, int dy) {
  // Past the bottom of a page (or the top), the wheel goes on to the next (previous) one: the
  // first notch beyond the edge turns the page, so a page reads into the next as one scroll.
  const bool down = dy < 0;
  const bool at_edge = down ? bar->value() >= bar->maximum() : bar->value() <= bar->minimum();
  const bool more = down ? page_ < doc_.n_pages : page_ > 1;
  if (dy == 0 || !at_edge || !more) {
    wheel_rest_ = 0;
    return false;
  }
  if ((wheel_rest_ < 0) != down) wheel_rest_ = 0;  // turned around
  wheel_rest_ += dy;
  if (std::abs(wheel_rest_) >= kWheelNotch) {
    wheel_rest_ = 0;
    land_at_bottom_ = !down;
    showPage(down ? page_ + 1 : page_ - 1);
  }
  return true;
}

void PageViewer::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (fit_width_) refit_timer_->start();
}

bool PageViewer::eventFilter(QObject* watched, QEvent* event) {
  const bool page_view = watched == scroll_->viewport();
  if ((page_view || watched == text_->viewport()) && event->type() == QEvent::Wheel) {
    auto* wheel = static_cast<QWheelEvent*>(event);
    if (wheel->modifiers() & Qt::ControlModifier) {
      if (!page_view) return QWidget::eventFilter(watched, event);
      const int steps = wheel->angleDelta().y() / kWheelNotch;
      if (steps != 0 && pdf_) setZoom(zoom_ * std::pow(kZoomStep, steps));
      return true;
    }
    if (doc_.id != 0 && page_ > 0 && wheel->angleDelta().x() == 0) {
      QScrollBar* bar = page_view ? scroll_->verticalScrollBar() : text_->verticalScrollBar();
      if (wheelAtEdge(bar, wheel->angleDelta().y())) return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

double PageViewer::fitWidthZoom() const {
  if (!pdf_ || page_ <= 0) return zoom_;
  std::unique_ptr<Poppler::Page> page(pdf_->page(page_ - 1));
  if (!page) return zoom_;
  const double width_pt = page->pageSizeF().width();
  const int avail = scroll_->viewport()->width() - 2 * kPageMargin -
                    scroll_->verticalScrollBar()->sizeHint().width();
  if (width_pt <= 0 || avail <= 50) return zoom_;
  return std::clamp(avail / (width_pt / 72.0 * kLogicalDpi), kMinZoom, kMaxZoom);
}

void PageViewer::render() {
  if (!pdf_ || page_ <= 0) return;
  stack_->setCurrentWidget(scroll_);
  if (fit_width_) {
    const double z = fitWidthZoom();
    if (std::abs(z - zoom_) > 1e-4) {
      zoom_ = z;
      emit zoomChanged(zoom_);
    }
  }
  const double dpr = devicePixelRatioF();
  const double dpi = kLogicalDpi * zoom_ * dpr;
  // Poppler's search rectangles are in points (1/72 in); the image is drawn at dpi/dpr logical.
  const double scale = kLogicalDpi * zoom_ / 72.0;
  const QString key = QStringLiteral("%1@%2").arg(page_).arg(qRound(dpi * 10));
  if (QImage* cached = cache_.object(key)) {
    latest_->fetch_add(1);  // a render still running for another page is no longer wanted
    rendering_ = false;
    std::unique_ptr<Poppler::Page> page(pdf_->page(page_ - 1));
    canvas_->setPage(
        *cached, page ? scaled(highlightRects(*page, highlight_), scale) : QList<QRectF>(), scale);
    present();
    return;
  }
  // Not rendered yet: on the render thread, so the window stays responsive; the previous page
  // stays on screen until this one arrives.
  const quint64 gen = latest_->fetch_add(1) + 1;
  rendering_ = true;
  const QPointer<PageViewer> self(this);
  const std::shared_ptr<std::atomic<quint64>> latest = latest_;
  const QString path = doc_.path;
  const QByteArray password = passwords_.value(doc_.id);
  const QString highlight = highlight_;
  const qint64 doc_id = doc_.id;
  const int page_index = page_ - 1;
  render_pool_->start([=] {
    if (latest->load() != gen) return;  // superseded before it started
    RenderResult r = renderPage(path, password, page_index, dpi, dpr, highlight);
    QMetaObject::invokeMethod(
        qApp,
        [=] {
          if (!self || self->doc_.id != doc_id) return;
          PageViewer* v = self.data();
          if (r.ok)
            v->cache_.insert(key, new QImage(r.image), int(r.image.sizeInBytes() >> 10) + 1);
          if (v->latest_->load() != gen) return;  // the user moved on meanwhile
          v->rendering_ = false;
          if (!r.ok) {
            v->pdf_error_ = tr("Poppler could not render page %1.").arg(page_index + 1);
            v->renderStoredText();
          } else {
            v->canvas_->setPage(r.image, scaled(r.rects_pt, scale), scale);
          }
          v->present();
        },
        Qt::QueuedConnection);
  });
}

void PageViewer::present() {
  QScrollBar* bar = showingStoredText() ? text_->verticalScrollBar() : scroll_->verticalScrollBar();
  if (land_at_bottom_) {
    // Wheeled up from the top of the next page: this one is read from its bottom.
    bar->setValue(bar->maximum());
  } else if (scroll_to_top_ && !(showingStoredText() && text_matches_ > 0)) {
    bar->setValue(0);
  }
  land_at_bottom_ = scroll_to_top_ = false;
  if (!showingStoredText() && canvas_->rectCount() > 0) {
    const QRect r = canvas_->firstRect();
    scroll_->ensureVisible(r.center().x(), r.center().y(), 40, scroll_->viewport()->height() / 3);
  }
  updateControls();
  emit pageShown(doc_.id, page_);
}

void PageViewer::renderStoredText() {
  stack_->setCurrentWidget(text_view_);
  const QString text = text_provider_ ? text_provider_(doc_.id, page_) : QString();
  text_note_->setText(
      locked_ ? tr("%1 Showing the text stored in the library for page %2; unlock it to see the "
                   "page itself.")
                    .arg(pdf_error_)
                    .arg(page_)
              : tr("%1 Showing the text stored in the library for page %2.")
                    .arg(pdf_error_)
                    .arg(page_));
  unlock_->setVisible(locked_ != nullptr);
  text_->setPlainText(text.isEmpty() ? tr("(no text stored for this page)") : text);
  QList<QTextEdit::ExtraSelection> marks;
  if (!highlight_.isEmpty()) {
    QTextCharFormat fmt;
    fmt.setBackground(QColor(255, 214, 0, 140));
    const QStringList ws = words(highlight_);
    QStringList needles{ws.join(QLatin1Char(' '))};
    auto find_all = [&](const QString& needle) {
      QTextCursor c(text_->document());
      int n = 0;
      while (!(c = text_->document()->find(needle, c)).isNull() && marks.size() < 400) {
        marks.append({c, fmt});
        ++n;
      }
      return n;
    };
    if (find_all(needles.front()) == 0) {
      for (const QString& w : ws) {
        if (w.size() >= 2) find_all(w);
      }
    }
  }
  text_->setExtraSelections(marks);
  text_matches_ = int(marks.size());
  if (!marks.isEmpty()) {
    text_->setTextCursor(marks.front().cursor);
    text_->ensureCursorVisible();
  }
}

void PageViewer::updateControls() {
  const bool open = doc_.id != 0 && doc_.n_pages > 0;
  const bool pdf = open && pdf_ != nullptr;
  prev_->setEnabled(open && page_ > 1);
  next_->setEnabled(open && page_ < doc_.n_pages);
  page_box_->setEnabled(open);
  {
    const QSignalBlocker block(page_box_);
    page_box_->setRange(1, std::max(1, doc_.n_pages));
    page_box_->setValue(std::max(1, page_));
  }
  of_label_->setText(open ? tr("of %1").arg(doc_.n_pages) : QString());
  zoom_in_->setEnabled(pdf && zoom_ < kMaxZoom);
  zoom_out_->setEnabled(pdf && zoom_ > kMinZoom);
  fit_->setEnabled(pdf);
  zoom_label_->setText(pdf ? QStringLiteral("%1%").arg(qRound(zoom_ * 100)) : QString());
  bar_->setVisible(open);  // no page controls over the empty state
  if (!open) stack_->setCurrentWidget(empty_);
}

}  // namespace spw::ui
