// Icons from the desktop's theme, with the style's standard icons as the fallback.
#pragma once

#include <QIcon>
#include <QStyle>

namespace spw::ui {

/// The theme icon `name` (a freedesktop icon name), its flat "-symbolic" variant first (the
/// full-colour one of some themes is a legacy bitmap), else `style`'s standard icon `fallback`.
QIcon themed(const char* name, QStyle::StandardPixmap fallback, const QStyle* style);

}  // namespace spw::ui
