// For the widget tests: a link of the chat view clicked as a user would.
#pragma once

#include <QString>
#include <QTest>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTextFragment>

#include "ui/chat_panel.h"

namespace spw::ui {

/// Clicks the first link of `p`'s view whose href starts with `href_prefix` ("continue:");
/// false when there is none.
inline bool clickLink(ChatPanel& p, const QString& href_prefix) {
  for (QTextBlock b = p.view()->document()->begin(); b.isValid(); b = b.next()) {
    for (auto it = b.begin(); !it.atEnd(); ++it) {
      const QTextFragment f = it.fragment();
      if (!f.charFormat().isAnchor() || !f.charFormat().anchorHref().startsWith(href_prefix))
        continue;
      QTextCursor c(p.view()->document());
      c.setPosition(f.position() + 1);
      p.view()->setTextCursor(c);
      p.view()->ensureCursorVisible();
      QTest::mouseClick(p.view()->viewport(), Qt::LeftButton, Qt::NoModifier,
                        p.view()->cursorRect(c).center());
      return true;
    }
  }
  return false;
}

}  // namespace spw::ui
