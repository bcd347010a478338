#include "ui/icons.h"

#include <QApplication>
#include <QIconEngine>
#include <QImage>
#include <QPainter>
#include <QPalette>
#include <QPixmap>
#include <QStandardPaths>
#include <QString>
#include <QStringList>

namespace spw::ui {

namespace {

// Draws its base icon with every pixel's colour replaced by icon_colour(mode), alpha kept.
// Reads the palette each time it draws, so a theme change needs no new icons.
class RecolouredEngine final : public QIconEngine {
 public:
  explicit RecolouredEngine(QIcon base) : base_(std::move(base)) {}

  void paint(QPainter* painter, const QRect& rect, QIcon::Mode mode, QIcon::State state) override {
    const qreal dpr = painter->device() != nullptr ? painter->device()->devicePixelRatioF() : 1.0;
    painter->drawPixmap(rect, scaledPixmap(rect.size(), mode, state, dpr));
  }

  QPixmap pixmap(const QSize& size, QIcon::Mode mode, QIcon::State state) override {
    return scaledPixmap(size, mode, state, 1.0);
  }

  QPixmap scaledPixmap(const QSize& size, QIcon::Mode mode, QIcon::State state,
                       qreal scale) override {
    const QPixmap src = base_.pixmap(size, scale, QIcon::Normal, state);
    if (src.isNull()) return src;
    QImage img = src.toImage().convertToFormat(QImage::Format_ARGB32_Premultiplied);
    QPainter p(&img);
    p.setCompositionMode(QPainter::CompositionMode_SourceIn);
    p.fillRect(img.rect(), icon_colour(mode));
    p.end();
    QPixmap out = QPixmap::fromImage(std::move(img));
    out.setDevicePixelRatio(src.devicePixelRatio());
    return out;
  }

  QSize actualSize(const QSize& size, QIcon::Mode mode, QIcon::State state) override {
    return base_.actualSize(size, mode, state);
  }
  QList<QSize> availableSizes(QIcon::Mode mode, QIcon::State state) override {
    return base_.availableSizes(mode, state);
  }
  QIconEngine* clone() const override { return new RecolouredEngine(base_); }
  QString key() const override { return QStringLiteral("spillway-recoloured"); }
  QString iconName() override { return base_.name(); }
  bool isNull() override { return base_.isNull(); }

 private:
  QIcon base_;
};

}  // namespace

QColor icon_colour(QIcon::Mode mode) {
  const QPalette pal = QApplication::palette();
  switch (mode) {
    case QIcon::Disabled:
      return pal.color(QPalette::Disabled, QPalette::WindowText);
    case QIcon::Selected:
      return pal.color(QPalette::Active, QPalette::HighlightedText);
    case QIcon::Normal:
    case QIcon::Active:
      break;
  }
  return pal.color(QPalette::Active, QPalette::WindowText);
}

QIcon recoloured(const QIcon& base) { return QIcon(new RecolouredEngine(base)); }

QIcon themed(const char* name, QStyle::StandardPixmap fallback, const QStyle* style) {
  const QString n = QString::fromLatin1(name);
  const QString symbolic = n + QStringLiteral("-symbolic");
  if (QIcon::hasThemeIcon(symbolic)) return recoloured(QIcon::fromTheme(symbolic));
  if (QIcon::hasThemeIcon(n)) return QIcon::fromTheme(n);
  return style->standardIcon(fallback);
}

void use_installed_icon_themes() {
  QStringList paths = QIcon::themeSearchPaths();
  for (const QString& dir :
       QStandardPaths::locateAll(QStandardPaths::GenericDataLocation, QStringLiteral("icons"),
                                 QStandardPaths::LocateDirectory)) {
    if (!paths.contains(dir)) paths << dir;
  }
  QIcon::setThemeSearchPaths(paths);
  QIcon::setFallbackThemeName(QStringLiteral("Adwaita"));
  if (QIcon::themeName().isEmpty()) QIcon::setThemeName(QStringLiteral("hicolor"));
}

}  // namespace spw::ui
