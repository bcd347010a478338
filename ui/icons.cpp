#include "ui/icons.h"

#include <QString>

namespace spw::ui {

QIcon themed(const char* name, QStyle::StandardPixmap fallback, const QStyle* style) {
  const QString n = QString::fromLatin1(name);
  const QString symbolic = n + QStringLiteral("-symbolic");
  if (QIcon::hasThemeIcon(symbolic)) return QIcon::fromTheme(symbolic);
  if (QIcon::hasThemeIcon(n)) return QIcon::fromTheme(n);
  return style->standardIcon(fallback);
}

}  // namespace spw::ui
