// The application theme: the system's look, or an explicit light or dark palette (Settings >
// Folders & look). Light and dark use the Fusion style, which draws every widget from the
// palette; "system" returns to the style and palette the application started with.
#pragma once

#include <QPalette>
#include <QString>

class QApplication;

namespace spw::ui {

enum class Theme { System, Light, Dark };

/// "system" | "light" | "dark" (the settings' spellings); anything else is System.
Theme parse_theme(const QString& name);
/// The settings' spelling of `t`.
QString theme_name(Theme t);

/// The palette of a theme. System: the starting style's standard palette.
QPalette theme_palette(Theme t);

/// Applies the theme to the whole application (style and palette). Call on the GUI thread.
/// The first call remembers the starting style, so "system" can restore it later.
void apply_theme(QApplication& app, Theme t);
void apply_theme(QApplication& app, const QString& name);

}  // namespace spw::ui
