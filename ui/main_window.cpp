#include "ui/main_window.h"

#include <QFont>
#include <QIcon>
#include <QLabel>
#include <QStatusBar>
#include <QVBoxLayout>
#include <QWidget>

namespace spw::ui {

namespace {

QWidget* makePlaceholder(const MainWindowParams& params, QWidget* parent) {
  auto* page = new QWidget(parent);
  auto* layout = new QVBoxLayout(page);
  layout->addStretch(2);

  const QIcon icon = QIcon::fromTheme(QStringLiteral("spillway"),
                                      QIcon(QStringLiteral(":/spillway/spillway.svg")));
  if (!icon.isNull()) {
    auto* logo = new QLabel(page);
    logo->setPixmap(icon.pixmap(96, 96));
    logo->setAlignment(Qt::AlignHCenter);
    layout->addWidget(logo);
  }

  auto* title = new QLabel(QStringLiteral("Spillway"), page);
  QFont title_font = title->font();
  title_font.setPointSizeF(title_font.pointSizeF() * 2.6);
  title_font.setBold(true);
  title->setFont(title_font);
  title->setAlignment(Qt::AlignHCenter);
  layout->addWidget(title);

  auto* tagline =
      new QLabel(QStringLiteral("Ask whole documents on your own machine: answers cite pages, long "
                                "documents spill their KV cache from GPU to RAM to disk."),
                 page);
  QFont tagline_font = tagline->font();
  tagline_font.setPointSizeF(tagline_font.pointSizeF() * 1.25);
  tagline->setFont(tagline_font);
  tagline->setAlignment(Qt::AlignHCenter);
  tagline->setWordWrap(true);
  layout->addWidget(tagline);

  auto* detail = new QLabel(
      QStringLiteral("Version %1. The document library, page viewer, chat and memory dashboard "
                     "are being built; spillway-cli runs GGUF models today.")
          .arg(params.version),
      page);
  detail->setAlignment(Qt::AlignHCenter);
  detail->setWordWrap(true);
  detail->setObjectName(QStringLiteral("versionLabel"));
  layout->addWidget(detail);

  layout->addStretch(3);
  layout->setContentsMargins(96, 48, 96, 48);
  return page;
}

}  // namespace

MainWindow::MainWindow(const MainWindowParams& params, QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Spillway"));
  resize(kDefaultWidth, kDefaultHeight);
  setCentralWidget(makePlaceholder(params, this));

  status_label_ = new QLabel(this);
  statusBar()->addWidget(status_label_, 1);
  setStatusLine(QStringLiteral("No model loaded  |  Data folder: %1").arg(params.data_dir));
}

void MainWindow::setStatusLine(const QString& text) { status_label_->setText(text); }

}  // namespace spw::ui
