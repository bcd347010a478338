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

// Draws its base icon with every pixel's colour replaced by icon_colour(mode) — or, for the
// status icons, semantic_icon_colour(name) — alpha kept. Reads the palette each time it draws,
// so a theme change needs no new icons.
class RecolouredEngine final : public QIconEngine {
 public:
  explicit RecolouredEngine(QIcon base, QString semantic = {})
      : base_(std::move(base)), semantic_(std::move(semantic)) {}

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
    const QColor semantic =
        semantic_.isEmpty() || mode == QIcon::Disabled ? QColor() : semantic_icon_colour(semantic_);
    p.fillRect(img.rect(), semantic.isValid() ? semantic : icon_colour(mode));
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
  QIconEngine* clone() const override { return new RecolouredEngine(base_, semantic_); }
  QString key() const override { return QStringLiteral("spillway-recoloured"); }
  QString iconName() override { return base_.name(); }
  bool isNull() override { return base_.isNull(); }

 private:
  QIcon base_;
  QString semantic_;  // the icon name when it is a status icon, else empty
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

QColor semantic_icon_colour(const QString& name) {
  // Shades that keep 3:1 against the light theme's window and the dark theme's.
  const bool dark = QApplication::palette().color(QPalette::Window).lightness() < 128;
  if (name == QLatin1String("dialog-error") || name == QLatin1String("process-stop"))
    return dark ? QColor(0xff, 0x6b, 0x6b) : QColor(0xc6, 0x28, 0x28);  // red
  if (name == QLatin1String("dialog-warning"))
    return dark ? QColor(0xff, 0xb7, 0x4d) : QColor(0xa6, 0x5f, 0x00);  // amber
  if (name == QLatin1String("emblem-ok") || name == QLatin1String("emblem-default"))
    return dark ? QColor(0x5c, 0xc4, 0x62) : QColor(0x2e, 0x7d, 0x32);  // green
  return {};
}

QIcon themed(const char* name, QStyle::StandardPixmap fallback, const QStyle* style) {
  const QString n = QString::fromLatin1(name);
  const QString symbolic = n + QStringLiteral("-symbolic");
  if (QIcon::hasThemeIcon(symbolic)) {
    const bool semantic = semantic_icon_colour(n).isValid();
    return QIcon(new RecolouredEngine(QIcon::fromTheme(symbolic), semantic ? n : QString()));
  }
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
