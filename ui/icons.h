// Icons from the desktop's theme, with the style's standard icons as the fallback.
//
// Flat "-symbolic" theme icons are drawn in one colour (Adwaita's dark grey), which vanishes on
// a dark background: themed() recolours them with the application palette's text colour at the
// time they are drawn (disabled: the disabled text colour; selected: the highlighted text), so
// they stay visible in the dark theme and follow a theme change at once. Status icons keep their
// meaning instead: error and stop red, warning amber, OK green (semantic_icon_colour), in a shade
// for each theme. Full-colour icons and the style's fallbacks are drawn as they are.
#pragma once

#include <QColor>
#include <QIcon>
#include <QStyle>

namespace spw::ui {

/// The theme icon `name` (a freedesktop icon name), its flat "-symbolic" variant first (the
/// full-colour one of some themes is a legacy bitmap; the symbolic one is recoloured, see
/// above), else `style`'s standard icon `fallback`.
QIcon themed(const char* name, QStyle::StandardPixmap fallback, const QStyle* style);

/// `base` drawn in the palette's text colour of each mode (what themed() does to symbolic
/// icons).
QIcon recoloured(const QIcon& base);

/// The colour recoloured() icons get in `mode` from the application palette now.
QColor icon_colour(QIcon::Mode mode);

/// The colour themed() draws status icon `name` in now (red for dialog-error and process-stop,
/// amber for dialog-warning, green for emblem-ok; a shade for the light or dark palette);
/// invalid for any other icon (those follow the text colour).
QColor semantic_icon_colour(const QString& name);

/// Icon themes for a process outside a desktop session (xvfb-run, offscreen), where Qt knows no
/// theme and no system icon folder: the XDG icon folders, Adwaita as the fallback theme, hicolor
/// when no theme is set. Call once after the QApplication exists.
void use_installed_icon_themes();

}  // namespace spw::ui
