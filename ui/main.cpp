// spillway: the desktop app.
//   spillway [--data-dir DIR] [--screenshot PATH]
// --screenshot renders the main window to a PNG once it is shown and exits (headless checks:
// QT_QPA_PLATFORM=offscreen or xvfb-run).
#include <cstdlib>
#include <cstdio>

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QMessageBox>
#include <QPixmap>
#include <QTimer>

#include "app/paths.h"
#include "app/version.h"
#include "ui/main_window.h"

namespace {

// Time for the first layout and paint after show() before grabbing; grab() renders the widget
// tree itself, so this only has to outlast the first event-loop turns.
constexpr int kScreenshotDelayMs = 300;

QString fromUtf8(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

}  // namespace

int main(int argc, char** argv) {
  // Without a display Qt aborts with a terse message; say what to do instead.
  const auto env_set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (!env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY") && !env_set("QT_QPA_PLATFORM")) {
    std::fprintf(stderr,
                 "spillway: no display found (DISPLAY and WAYLAND_DISPLAY are unset).\n"
                 "Run it under a desktop session, with `xvfb-run -a spillway`, or with "
                 "QT_QPA_PLATFORM=offscreen for --screenshot; spillway-cli needs no display.\n");
    return 1;
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Spillway"));
  QApplication::setApplicationDisplayName(QStringLiteral("Spillway"));
  QApplication::setOrganizationName(QStringLiteral("Spillway"));
  QApplication::setApplicationVersion(fromUtf8(spw::app::version()));
  QApplication::setDesktopFileName(QStringLiteral("spillway"));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/spillway/spillway.svg")));

  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("Spillway: local whole-document questions and answers with page citations."));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption data_dir_opt(
      QStringLiteral("data-dir"),
      QStringLiteral("Keep the library and caches in DIR instead of the XDG folders."),
      QStringLiteral("DIR"));
  const QCommandLineOption screenshot_opt(
      QStringLiteral("screenshot"),
      QStringLiteral("Render the main window to the PNG file PATH once shown, then exit."),
      QStringLiteral("PATH"));
  parser.addOption(data_dir_opt);
  parser.addOption(screenshot_opt);
  parser.process(app);

  spw::app::PathOverrides overrides;
  if (parser.isSet(data_dir_opt)) overrides.data_dir = parser.value(data_dir_opt).toStdString();
  auto paths = spw::app::prepare_paths(overrides);
  if (!paths) {
    const QString msg = fromUtf8(paths.error().message);
    std::fprintf(stderr, "spillway: %s\n", qPrintable(msg));
    if (!parser.isSet(screenshot_opt))
      QMessageBox::critical(nullptr, QStringLiteral("Spillway"), msg);
    return 1;
  }

  spw::ui::MainWindow window(spw::ui::MainWindowParams{
      .version = fromUtf8(spw::app::version()),
      .data_dir = QString::fromStdString(paths->data_dir.string()),
  });
  window.show();

  if (parser.isSet(screenshot_opt)) {
    const QString out = parser.value(screenshot_opt);
    QTimer::singleShot(kScreenshotDelayMs, &window, [&window, out] {
      const QPixmap shot = window.grab();
      if (shot.isNull() || !shot.save(out, "PNG")) {
        std::fprintf(stderr, "spillway: could not write the screenshot to %s\n", qPrintable(out));
        QApplication::exit(1);
        return;
      }
      std::printf("spillway: screenshot (%dx%d) written to %s\n", shot.width(), shot.height(),
                  qPrintable(out));
      QApplication::exit(0);
    });
  }
  return QApplication::exec();
}
