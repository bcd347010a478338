// Light and dark palettes for the Fusion style (see theme.h).
#include "ui/theme.h"

#include <QApplication>
#include <QColor>
#include <QStyle>
#include <QStyleFactory>

namespace spw::ui {
namespace {

// The style the application started with (its name), captured on the first apply.
QString& starting_style() {
  static QString name;
  return name;
}

void remember_starting_style(QApplication& app) {
  if (starting_style().isEmpty() && app.style() != nullptr) starting_style() = app.style()->name();
}

QPalette dark_palette() {
  const QColor window(0x2b, 0x2d, 0x30), base(0x1e, 0x1f, 0x22), text(0xdf, 0xe1, 0xe5);
  const QColor button(0x3c, 0x3f, 0x41), disabled(0x7f, 0x84, 0x8e);
  const QColor highlight(0x2f, 0x65, 0xca), link(0x6c, 0xa8, 0xff);
  QPalette p;
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, button);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, disabled);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, button);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x68));
  p.setColor(QPalette::Light, button.lighter(130));
  p.setColor(QPalette::Midlight, button.lighter(115));
  p.setColor(QPalette::Mid, button.darker(120));
  p.setColor(QPalette::Dark, base.darker(130));
  p.setColor(QPalette::Shadow, Qt::black);
  p.setColor(QPalette::Highlight, highlight);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, link);
  p.setColor(QPalette::LinkVisited, link.darker(120));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  p.setColor(QPalette::Disabled, QPalette::Highlight, button);
  return p;
}

QPalette light_palette() {
  const QColor window(0xf3, 0xf3, 0xf3), text(0x1f, 0x1f, 0x1f), disabled(0x9a, 0x9a, 0x9a);
  const QColor highlight(0x2f, 0x65, 0xca);
  QPalette p;
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, Qt::white);
  p.setColor(QPalette::AlternateBase, QColor(0xf7, 0xf7, 0xf7));
  p.setColor(QPalette::ToolTipBase, QColor(0xff, 0xff, 0xe1));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, disabled);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, QColor(0xfa, 0xfa, 0xfa));
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::red);
  p.setColor(QPalette::Light, Qt::white);
  p.setColor(QPalette::Midlight, QColor(0xe3, 0xe3, 0xe3));
  p.setColor(QPalette::Mid, QColor(0xb8, 0xb8, 0xb8));
  p.setColor(QPalette::Dark, QColor(0x9f, 0x9f, 0x9f));
  p.setColor(QPalette::Shadow, QColor(0x76, 0x76, 0x76));
  p.setColor(QPalette::Highlight, highlight);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, highlight);
  p.setColor(QPalette::LinkVisited, highlight.darker(130));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  return p;
}

}  // namespace

Theme parse_theme(const QString& name) {
  const QString n = name.trimmed().toLower();
  if (n == QLatin1String("light")) return Theme::Light;
  if (n == QLatin1String("dark")) return Theme::Dark;
  return Theme::System;
}

QString theme_name(Theme t) {
  switch (t) {
    case Theme::Light:
      return QStringLiteral("light");
    case Theme::Dark:
      return QStringLiteral("dark");
    case Theme::System:
      break;
  }
  return QStringLiteral("system");
}

QPalette theme_palette(Theme t) {
  switch (t) {
    case Theme::Light:
      return light_palette();
    case Theme::Dark:
      return dark_palette();
    case Theme::System:
      break;
  }
  const QString name = starting_style();
  QStyle* style = name.isEmpty() ? QApplication::style() : QStyleFactory::create(name);
  if (style == nullptr) return QPalette();
  const QPalette p = style->standardPalette();
  if (style != QApplication::style()) delete style;
  return p;
}

void apply_theme(QApplication& app, Theme t) {
  remember_starting_style(app);
  const QString style = t == Theme::System ? starting_style() : QStringLiteral("Fusion");
  if (!style.isEmpty() && app.style()->name().compare(style, Qt::CaseInsensitive) != 0) {
    if (QStyle* s = QStyleFactory::create(style)) app.setStyle(s);  // app takes ownership
  }
  app.setPalette(theme_palette(t));
}

void apply_theme(QApplication& app, const QString& name) { apply_theme(app, parse_theme(name)); }

}  // namespace spw::ui
