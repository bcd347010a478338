// Dark-theme icons: every toolbar icon of the page viewer, and the icons of the document list,
// the notices and their dismiss buttons, stand out from the background they are drawn on, in the
// light and the dark theme (WCAG contrast ratio of the icon's most distinct pixels to the
// background >= 3, over a few dozen pixels at least).
#include <gtest/gtest.h>
#include <QAction>
#include <QApplication>
#include <QImage>
#include <QPainter>
#include <QTest>
#include <QToolBar>
#include <QToolButton>
#include <cmath>
#include <map>

#include "ui/icons.h"
#include "ui/page_viewer.h"
#include "ui/theme.h"

namespace spw::ui {
namespace {

double luminance(QRgb c) {
  const auto lin = [](int v) {
    const double s = v / 255.0;
    return s <= 0.04045 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(qRed(c)) + 0.7152 * lin(qGreen(c)) + 0.0722 * lin(qBlue(c));
}

double contrast(QRgb a, QRgb b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

// The most frequent colour of `img` (the background of a button or of a painted cell).
QRgb background(const QImage& img) {
  std::map<QRgb, int> count;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) ++count[img.pixel(x, y) | 0xff000000u];
  return std::max_element(count.begin(), count.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

// Pixels of `img` whose contrast to its background is at least 3 (text-like, WCAG's bar for
// graphics), and the best ratio found.
struct Contrast {
  int strong_pixels = 0;
  double best = 1;
};
Contrast measure(const QImage& img) {
  const QRgb bg = background(img);
  Contrast c;
  for (int y = 0; y < img.height(); ++y) {
    for (int x = 0; x < img.width(); ++x) {
      const double r = contrast(img.pixel(x, y) | 0xff000000u, bg);
      c.best = std::max(c.best, r);
      if (r >= 3.0) ++c.strong_pixels;
    }
  }
  return c;
}

// `icon` painted at 18 px on a 26 px square of `bg`.
QImage onBackground(const QIcon& icon, const QColor& bg) {
  QImage img(26, 26, QImage::Format_ARGB32);
  img.fill(bg);
  QPainter p(&img);
  icon.paint(&p, QRect(4, 4, 18, 18));
  p.end();
  return img;
}

class IconContrast : public ::testing::TestWithParam<Theme> {
 protected:
  void SetUp() override {
    use_installed_icon_themes();
    apply_theme(*qApp, GetParam());
  }
  void TearDown() override { apply_theme(*qApp, Theme::System); }
};

TEST_P(IconContrast, EveryViewerToolbarIconStandsOutFromItsButton) {
  PageViewer viewer;
  viewer.resize(700, 500);
  viewer.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&viewer));
  QToolBar* bar = viewer.toolBar();
  ASSERT_NE(bar, nullptr);
  int checked = 0;
  for (QAction* a : bar->actions()) {
    if (a->icon().isNull()) continue;
    a->setEnabled(true);  // without a document they are disabled; the enabled look is checked
    auto* button = qobject_cast<QToolButton*>(bar->widgetForAction(a));
    ASSERT_NE(button, nullptr) << a->text().toStdString();
    QApplication::processEvents();
    const QImage img = button->grab().toImage().convertToFormat(QImage::Format_RGB32);
    const Contrast c = measure(img);
    EXPECT_GE(c.strong_pixels, 20)
        << theme_name(GetParam()).toStdString() << ": " << a->text().toStdString()
        << " is faint (best contrast " << c.best << ":1)";
    ++checked;
  }
  EXPECT_EQ(checked, 5);  // previous, next, zoom out, zoom in, fit width
}

TEST_P(IconContrast, DocumentListAndNoticeIconsStandOutFromTheirBackground) {
  const QPalette pal = QApplication::palette();
  const QStyle* style = QApplication::style();
  struct Case {
    const char* name;
    QStyle::StandardPixmap fallback;
    QColor bg;
  };
  const Case cases[] = {
      {"x-office-document", QStyle::SP_FileIcon, pal.color(QPalette::Base)},  // document list
      {"document-open", QStyle::SP_DialogOpenButton, pal.color(QPalette::Window)},
      {"edit-find", QStyle::SP_FileDialogContentsView, pal.color(QPalette::Base)},
      {"dialog-warning", QStyle::SP_MessageBoxWarning, pal.color(QPalette::Window)},  // notices
      {"dialog-error", QStyle::SP_MessageBoxCritical, pal.color(QPalette::Window)},
      {"emblem-ok", QStyle::SP_DialogApplyButton, pal.color(QPalette::Window)},
      {"window-close", QStyle::SP_TitleBarCloseButton, pal.color(QPalette::Window)},  // dismiss
      {"process-stop", QStyle::SP_BrowserStop, pal.color(QPalette::Window)},
  };
  for (const Case& k : cases) {
    const Contrast c = measure(onBackground(themed(k.name, k.fallback, style), k.bg));
    EXPECT_GE(c.strong_pixels, 20) << theme_name(GetParam()).toStdString() << ": " << k.name
                                   << " is faint (best contrast " << c.best << ":1)";
  }
}

TEST(RecolouredIcons, FollowAThemeChangeAtOnce) {
  use_installed_icon_themes();
  if (!QIcon::hasThemeIcon(QStringLiteral("go-next-symbolic")))
    GTEST_SKIP() << "no symbolic icon theme installed (Adwaita)";
  const QIcon icon = themed("go-next", QStyle::SP_ArrowForward, QApplication::style());
  apply_theme(*qApp, Theme::Light);
  const QImage light = icon.pixmap(18, 18).toImage();
  apply_theme(*qApp, Theme::Dark);
  const QImage dark = icon.pixmap(18, 18).toImage();
  apply_theme(*qApp, Theme::System);
  // The same icon object, drawn in each palette's text colour.
  QRgb light_ink = 0, dark_ink = 0;
  for (int y = 0; y < 18; ++y) {
    for (int x = 0; x < 18; ++x) {
      if (qAlpha(light.pixel(x, y)) == 255) light_ink = light.pixel(x, y);
      if (qAlpha(dark.pixel(x, y)) == 255) dark_ink = dark.pixel(x, y);
    }
  }
  EXPECT_EQ(QColor(light_ink), theme_palette(Theme::Light).color(QPalette::WindowText));
  EXPECT_EQ(QColor(dark_ink), theme_palette(Theme::Dark).color(QPalette::WindowText));
}

// Status icons keep red/amber/green in both themes; other symbolic icons take the text colour.
TEST(RecolouredIcons, StatusIconsKeepTheirSemanticColourInBothThemes) {
  use_installed_icon_themes();
  if (!QIcon::hasThemeIcon(QStringLiteral("dialog-warning-symbolic")))
    GTEST_SKIP() << "no symbolic icon theme installed (Adwaita)";
  const QStyle* style = QApplication::style();
  const QIcon warning = themed("dialog-warning", QStyle::SP_MessageBoxWarning, style);
  const QIcon error = themed("dialog-error", QStyle::SP_MessageBoxCritical, style);
  const QIcon ok = themed("emblem-ok", QStyle::SP_DialogApplyButton, style);
  const QIcon next = themed("go-next", QStyle::SP_ArrowForward, style);
  // The colour of an icon's opaque pixels (they are all one colour).
  const auto ink = [](const QIcon& icon) {
    const QImage img = icon.pixmap(18, 18).toImage();
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x)
        if (qAlpha(img.pixel(x, y)) == 255) return QColor(img.pixel(x, y));
    return QColor();
  };
  for (Theme t : {Theme::Light, Theme::Dark}) {
    apply_theme(*qApp, t);
    const std::string name = theme_name(t).toStdString();
    const QColor w = ink(warning), e = ink(error), k = ink(ok);
    // Hues: amber 30-45 degrees, red below 10 (or above 350), green 100-140.
    EXPECT_GE(w.hue(), 30) << name;
    EXPECT_LE(w.hue(), 45) << name;
    EXPECT_TRUE(e.hue() <= 10 || e.hue() >= 350) << name << " " << e.hue();
    EXPECT_GE(k.hue(), 100) << name;
    EXPECT_LE(k.hue(), 140) << name;
    for (const QColor& c : {w, e, k}) {
      EXPECT_GT(c.saturation(), 120) << name;
      // Readable on the theme's window: WCAG 3:1 for graphics.
      EXPECT_GE(contrast(c.rgb(), theme_palette(t).color(QPalette::Window).rgb()), 3.0)
          << name << " " << c.name().toStdString();
    }
    EXPECT_EQ(w, semantic_icon_colour(QStringLiteral("dialog-warning"))) << name;
    EXPECT_EQ(ink(next), theme_palette(t).color(QPalette::WindowText)) << name;
    EXPECT_FALSE(semantic_icon_colour(QStringLiteral("go-next")).isValid());
  }
  apply_theme(*qApp, Theme::System);
}

INSTANTIATE_TEST_SUITE_P(Themes, IconContrast, ::testing::Values(Theme::Light, Theme::Dark),
                         [](const auto& info) { return theme_name(info.param).toStdString(); });

}  // namespace
}  // namespace spw::ui
