// Prints sample-contract.html to spillway-sample-contract.pdf (A4, DejaVu fonts, page numbers in
// the footer): the sample document the app adds to an empty library. Not part of the build; the
// PDF is committed beside this file. Rebuild it with:
//   g++ -std=c++20 -fPIC make_sample.cpp $(pkg-config --cflags --libs Qt6Gui) -o /tmp/make_sample
//   QT_QPA_PLATFORM=offscreen /tmp/make_sample sample-contract.html spillway-sample-contract.pdf
#include <cstdio>

#include <QAbstractTextDocumentLayout>
#include <QFile>
#include <QFont>
#include <QGuiApplication>
#include <QPageLayout>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QTextDocument>

int main(int argc, char** argv) {
  QGuiApplication app(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_sample IN.html OUT.pdf\n");
    return 1;
  }
  QFile in(QString::fromLocal8Bit(argv[1]));
  if (!in.open(QIODevice::ReadOnly)) {
    std::fprintf(stderr, "make_sample: cannot read %s\n", argv[1]);
    return 1;
  }
  const QString html = QString::fromUtf8(in.readAll());

  QPdfWriter pdf(QString::fromLocal8Bit(argv[2]));
  pdf.setTitle(QStringLiteral("Master Services Agreement (Spillway sample)"));
  pdf.setCreator(QStringLiteral("Spillway resources/sample/make_sample.cpp"));
  pdf.setResolution(300);
  pdf.setPageLayout(QPageLayout(QPageSize(QPageSize::A4), QPageLayout::Portrait,
                                QMarginsF(22, 20, 22, 22), QPageLayout::Millimeter));

  QTextDocument doc;
  QFont font(QStringLiteral("DejaVu Serif"));
  font.setPointSizeF(10.5);
  doc.setDefaultFont(font);
  doc.setDefaultStyleSheet(
      QStringLiteral("h1 { font-family: 'DejaVu Sans'; font-size: 17pt; }"
                     "h2 { font-family: 'DejaVu Sans'; font-size: 12.5pt; margin-top: 12px; }"
                     "p { margin-bottom: 6px; }"));
  doc.setHtml(html);

  // Lay the text out on the page's printable area (in device pixels at 300 dpi), leaving room
  // for a footer, then paint page by page with "Page N of M" under each.
  QPainter painter(&pdf);
  const QRectF page = pdf.pageLayout().paintRectPixels(pdf.resolution());
  const double footer = 60;  // pixels at 300 dpi (~5 mm)
  // QTextDocument lays out in its own logical DPI; scale it to the writer's.
  doc.documentLayout()->setPaintDevice(&pdf);
  doc.setPageSize(QSizeF(page.width(), page.height() - footer));
  const int n_pages = doc.pageCount();
  QFont foot_font(QStringLiteral("DejaVu Sans"));
  foot_font.setPointSizeF(8);
  for (int i = 0; i < n_pages; ++i) {
    if (i > 0) pdf.newPage();
    painter.save();
    painter.translate(0, -i * (page.height() - footer));
    const QRectF clip(0, i * (page.height() - footer), page.width(), page.height() - footer);
    doc.drawContents(&painter, clip);
    painter.restore();
    painter.setFont(foot_font);
    painter.drawText(
        QRectF(0, page.height() - footer * 0.8, page.width(), footer * 0.8), Qt::AlignCenter,
        QStringLiteral("Master Services Agreement  -  Page %1 of %2").arg(i + 1).arg(n_pages));
  }
  painter.end();
  std::printf("make_sample: %d pages written to %s\n", n_pages, argv[2]);
  return 0;
}
