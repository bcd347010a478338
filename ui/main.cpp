// spillway: the desktop app.
//   spillway [FILE.pdf...] [--model PATH] [--data-dir DIR] [--ask QUESTION]
//            [--screenshot OUT.png] [--screenshot-delay MS] [--window-size WxH]
//            [--theme light|dark|system]
// Files given are added to the library (in the background) and the first one is opened.
// --screenshot renders the main window to a PNG once the first page is on screen (or start-up
// ended with nothing to show) and the delay has passed, then exits (headless checks:
// QT_QPA_PLATFORM=offscreen or xvfb-run). --ask puts a question to the first document once its
// page is shown; with --screenshot the screenshot then waits for the answer. --window-size sets
// the window's size for this run (the saved layout's size otherwise, made to fit the screen; a
// screenshot without it is 1280x800 whatever the screen); --theme overrides the
// theme of Settings for this run (not stored). A second launch on the same library (data
// folder) hands its files to the running window, which comes forward, and exits (0).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QIcon>
#include <QMessageBox>
#include <QPixmap>
#include <QPushButton>
#include <QSettings>
#include <QSize>
#include <QTimer>

#include "app/paths.h"
#include "app/version.h"
#include "app/worker/engine_worker.h"
#include "ui/app_controller.h"
#include "ui/chat_panel.h"
#include "ui/icons.h"
#include "ui/main_window.h"
#include "ui/single_instance.h"
#include "ui/theme.h"

namespace {

constexpr int kDefaultScreenshotDelayMs = 300;
// A screenshot run that never gets a page on screen ends with an error instead of hanging.
constexpr int kScreenshotWatchdogMs = 120'000;

QString fromUtf8(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// Smaller than this the docks cannot all be laid out; larger than this is a typo.
constexpr int kMinWindowSide = 320;
constexpr int kMaxWindowSide = 16384;

// "1280x800" (or "1280X800"): the size, or nullopt when it is not WxH within the limits.
std::optional<QSize> parseWindowSize(const QString& text) {
  const QStringList wh = text.trimmed().toLower().split(QLatin1Char('x'));
  if (wh.size() != 2) return std::nullopt;
  bool ok_w = false, ok_h = false;
  const int w = wh[0].toInt(&ok_w), h = wh[1].toInt(&ok_h);
  if (!ok_w || !ok_h) return std::nullopt;
  if (w < kMinWindowSide || h < kMinWindowSide || w > kMaxWindowSide || h > kMaxWindowSide)
    return std::nullopt;
  return QSize(w, h);
}

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
  // The offscreen platform warns on every dock layout ("does not support propagateSizeHints()");
  // those lines say nothing to a user and bury the ones that do.
  static QtMessageHandler previous = nullptr;
  previous =
      qInstallMessageHandler([](QtMsgType type, const QMessageLogContext& ctx, const QString& msg) {
        if (msg.contains(QLatin1String("propagateSizeHints"))) return;
        if (previous != nullptr) previous(type, ctx, msg);
      });
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Spillway"));
  QApplication::setApplicationDisplayName(QStringLiteral("Spillway"));
  QApplication::setOrganizationName(QStringLiteral("Spillway"));
  QApplication::setApplicationVersion(fromUtf8(spw::app::version()));
  QApplication::setDesktopFileName(QStringLiteral("spillway"));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/spillway/spillway.svg")));
  spw::ui::use_installed_icon_themes();

  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("Spillway: local whole-document questions and answers with page citations."));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("files"),
                               QStringLiteral("PDF files to add to the library; the first opens."),
                               QStringLiteral("[FILE.pdf...]"));
  const QCommandLineOption model_opt(QStringLiteral("model"),
                                     QStringLiteral("The GGUF model to answer with."),
                                     QStringLiteral("PATH"));
  const QCommandLineOption data_dir_opt(
      QStringLiteral("data-dir"),
      QStringLiteral("Keep the library and caches in DIR instead of the XDG folders."),
      QStringLiteral("DIR"));
  const QCommandLineOption screenshot_opt(
      QStringLiteral("screenshot"),
      QStringLiteral("Render the main window to the PNG file OUT once the first page is shown, "
                     "then exit."),
      QStringLiteral("OUT.png"));
  const QCommandLineOption delay_opt(
      QStringLiteral("screenshot-delay"),
      QStringLiteral("Wait MS milliseconds after the first page is shown before the screenshot "
                     "(default %1).")
          .arg(kDefaultScreenshotDelayMs),
      QStringLiteral("MS"), QString::number(kDefaultScreenshotDelayMs));
  const QCommandLineOption ask_opt(
      QStringLiteral("ask"),
      QStringLiteral("Once the first page is shown, ask QUESTION about it in the chat (with "
                     "--screenshot: the screenshot is taken when the answer is complete)."),
      QStringLiteral("QUESTION"));
  const QCommandLineOption size_opt(
      QStringLiteral("window-size"),
      QStringLiteral("Open the window at WxH pixels (e.g. 1024x640) instead of the saved size."),
      QStringLiteral("WxH"));
  const QCommandLineOption theme_opt(
      QStringLiteral("theme"),
      QStringLiteral("Use the light, dark or system theme for this run (Settings keep theirs)."),
      QStringLiteral("light|dark|system"));
  parser.addOption(model_opt);
  parser.addOption(size_opt);
  parser.addOption(theme_opt);
  parser.addOption(ask_opt);
  parser.addOption(data_dir_opt);
  parser.addOption(screenshot_opt);
  parser.addOption(delay_opt);
  parser.process(app);

  const bool screenshot = parser.isSet(screenshot_opt);
  const auto fail = [screenshot](const QString& msg) {
    std::fprintf(stderr, "spillway: %s\n", qPrintable(msg));
    if (!screenshot) QMessageBox::critical(nullptr, QStringLiteral("Spillway"), msg);
    return 1;
  };
  bool delay_ok = false;
  const int delay_ms = parser.value(delay_opt).toInt(&delay_ok);
  if (!delay_ok || delay_ms < 0) {
    return fail(QStringLiteral("--screenshot-delay: '%1' is not a number of milliseconds")
                    .arg(parser.value(delay_opt)));
  }
  std::optional<QSize> window_size;
  if (parser.isSet(size_opt)) {
    window_size = parseWindowSize(parser.value(size_opt));
    if (!window_size) {
      return fail(QStringLiteral("--window-size: '%1' is not WxH (two whole numbers of pixels "
                                 "from %2 to %3, e.g. 1024x640)")
                      .arg(parser.value(size_opt))
                      .arg(kMinWindowSide)
                      .arg(kMaxWindowSide));
    }
  }
  QString theme;
  if (parser.isSet(theme_opt)) {
    theme = parser.value(theme_opt).trimmed().toLower();
    if (theme != QLatin1String("light") && theme != QLatin1String("dark") &&
        theme != QLatin1String("system")) {
      return fail(QStringLiteral("--theme: '%1' is not light, dark or system")
                      .arg(parser.value(theme_opt)));
    }
  }
  // A missing file among several is skipped with a note (the others still open); none there
  // at all is an error.
  QStringList files;
  QStringList missing;
  for (const QString& f : parser.positionalArguments())
    (QFileInfo(f).isFile() ? files : missing) << f;
  if (!missing.isEmpty() && files.isEmpty()) {
    return fail(QStringLiteral("no such file: %1").arg(missing.join(QStringLiteral(", "))));
  }
  for (const QString& f : missing)
    std::fprintf(stderr, "spillway: no such file: %s (skipped)\n", qPrintable(f));

  spw::app::PathOverrides overrides;
  if (parser.isSet(data_dir_opt)) {
    overrides.data_dir = parser.value(data_dir_opt).toStdString();
  } else {
    // Folders chosen in Settings (kept in the user's Qt settings: the library lives in them).
    const QSettings folders;
    overrides.data_dir = folders.value(QStringLiteral("data_dir")).toString().toStdString();
    overrides.cache_dir = folders.value(QStringLiteral("cache_dir")).toString().toStdString();
  }
  auto paths = spw::app::prepare_paths(overrides);
  if (!paths) return fail(fromUtf8(paths.error().message));
  // One window per library: a second launch on it hands its files to the first and ends.
  spw::ui::SingleInstance instance(QString::fromStdString(paths->data_dir.string()));
  if (!instance.claim()) {
    if (screenshot) {
      return fail(QStringLiteral("the library in %1 is open in another Spillway window; a "
                                 "screenshot run needs a library of its own: --data-dir DIR")
                      .arg(QString::fromStdString(paths->data_dir.string())));
    }
    for (const QCommandLineOption* o : {&model_opt, &ask_opt, &size_opt, &theme_opt}) {
      if (parser.isSet(*o)) {
        std::fprintf(stderr, "spillway: --%s is not passed on: the running window keeps its own\n",
                     qPrintable(o->names().front()));
      }
    }
    QString error;
    if (!instance.forward(files, &error)) return fail(error);
    std::printf("spillway: the library in %s is open in another window: %s\n",
                paths->data_dir.c_str(),
                files.isEmpty() ? "brought it forward" : "the files were handed to it");
    return 0;
  }
  // Kept in the settings and read at later starts, maybe from another folder: absolute.
  const QString model_path = parser.value(model_opt).isEmpty()
                                 ? QString()
                                 : QFileInfo(parser.value(model_opt)).absoluteFilePath();

  spw::ui::MainWindow window(spw::ui::MainWindowParams{
      .version = fromUtf8(spw::app::version()),
      .data_dir = QString::fromStdString(paths->data_dir.string()),
      .model_path = model_path,
      .files = files,
      // The sample contract comes with a first start that brings no documents of its own.
      .add_sample = files.isEmpty(),
  });
  if (window_size) {
    window.resize(*window_size);
  } else if (screenshot) {
    window.resize(spw::ui::MainWindow::kDefaultWidth, spw::ui::MainWindow::kDefaultHeight);
  }
  window.show();
  QObject::connect(&instance, &spw::ui::SingleInstance::activated, &window,
                   [&window](const QStringList& more) {
                     if (!more.isEmpty()) window.addFiles(more, true);
                     if (window.isMinimized()) window.showNormal();
                     window.raise();
                     window.activateWindow();
                   });

  // The engine worker, chat, dashboard, jobs and Settings; destroyed before the window.
  spw::ui::AppController controller(
      window, spw::ui::AppControllerParams{
                  .data_dir = QString::fromStdString(paths->data_dir.string()),
                  .cache_dir = QString::fromStdString(paths->cache_dir.string()),
                  .model_path = model_path,
              });
  // After the controller, which applies the theme of Settings.
  if (!theme.isEmpty()) spw::ui::apply_theme(app, theme);

  const QString question = parser.value(ask_opt);
  const QString out = parser.value(screenshot_opt);
  const bool want_page = !files.isEmpty();
  if (screenshot) {
    // Nobody can answer a password dialog in a screenshot run: an encrypted file is skipped.
    window.setPasswordProvider([](const QString& file, bool) -> std::optional<QString> {
      std::fprintf(stderr,
                   "spillway: %s is encrypted; skipped (no password prompt with --screenshot)\n",
                   qPrintable(file));
      return std::nullopt;
    });
  }
  // A screenshot run that gets nothing on screen ends with an error instead of hanging (stopped
  // once a question is asked: an answer may take long).
  auto* watchdog = new QTimer(&window);
  watchdog->setSingleShot(true);
  QObject::connect(watchdog, &QTimer::timeout, &window, [] {
    std::fprintf(stderr, "spillway: nothing to show within %d s; no screenshot taken\n",
                 kScreenshotWatchdogMs / 1000);
    QApplication::exit(1);
  });
  if (screenshot) watchdog->start(kScreenshotWatchdogMs);

  // Takes the screenshot (when asked for) `delay_ms` after now, then exits with `rc` (1 also
  // when files were given and none could be shown).
  const auto shoot = [&window, out, delay_ms, want_page, watchdog](bool page_shown, int rc) {
    watchdog->stop();
    QTimer::singleShot(delay_ms, &window, [&window, out, want_page, page_shown, rc] {
      const QPixmap shot = window.grab();
      if (shot.isNull() || !shot.save(out, "PNG")) {
        const QFileInfo dir(QFileInfo(out).absolutePath());
        std::fprintf(stderr, "spillway: could not write the screenshot to %s%s\n", qPrintable(out),
                     !dir.exists()       ? " (its folder does not exist)"
                     : !dir.isWritable() ? " (its folder is not writable)"
                                         : "");
        QApplication::exit(1);
        return;
      }
      std::printf("spillway: screenshot (%dx%d) written to %s\n", shot.width(), shot.height(),
                  qPrintable(out));
      if (want_page && !page_shown) {
        std::fprintf(stderr,
                     "spillway: no page was shown: the files given could not be added (see the "
                     "screenshot)\n");
        QApplication::exit(1);
        return;
      }
      QApplication::exit(rc);
    });
  };
  if (!question.isEmpty()) {
    // The question goes to the first document once its page is on screen AND the model is
    // loaded; a model that fails (or none chosen) ends a screenshot run with the error shown.
    struct AskState {
      bool page = false, page_shown = false, asked = false;
      int model = 0;  // 0: loading, 1: loaded, -1: none or failed
    };
    auto state = std::make_shared<AskState>();
    if (!controller.modelRequested()) state->model = -1;
    const auto proceed = [state, &controller, question, shoot, screenshot, watchdog] {
      if (!state->page || state->model == 0 || state->asked) return;
      state->asked = true;
      if (state->model < 0 || !state->page_shown) {
        if (state->model < 0)
          std::fprintf(stderr, "spillway: --ask: no model to answer with (see the chat)\n");
        if (screenshot) shoot(state->page_shown, 1);
        return;
      }
      watchdog->stop();
      controller.chat()->askQuestion(question);
    };
    QObject::connect(&window, &spw::ui::MainWindow::readyForScreenshot, &window,
                     [state, proceed](bool page_shown) {
                       state->page = true;
                       state->page_shown = page_shown;
                       proceed();
                     });
    QObject::connect(controller.worker(), &spw::app::EngineWorker::modelLoaded, &window,
                     [state, proceed](const spw::app::ModelLoadedInfo&) {
                       state->model = 1;
                       proceed();
                     });
    QObject::connect(controller.worker(), &spw::app::EngineWorker::modelFailed, &window,
                     [state, proceed](const QString& message) {
                       std::fprintf(stderr, "spillway: the model did not load: %s\n",
                                    qPrintable(message));
                       state->model = -1;
                       proceed();
                     });
    // A document longer than the context: answer over parts (the chat's "Use map-reduce").
    QObject::connect(
        controller.worker(), &spw::app::EngineWorker::planReady, &window,
        [&controller](const spw::app::PlanSummary& plan, const spw::app::AskRequest& request) {
          // A document the user chose to answer over parts is already asked that way.
          if (!plan.needs_choice() || request.map_reduce || request.skip_plan) return;
          std::fprintf(stderr,
                       "spillway: --ask: the prompt (document, instructions and question) needs "
                       "%lld tokens, the context holds "
                       "%lld; answering over parts (map-reduce)\n",
                       static_cast<long long>(plan.prompt_tokens),
                       static_cast<long long>(plan.n_ctx));
          QTimer::singleShot(0, controller.chat()->mapReduceButton(), &QPushButton::click);
        },
        Qt::SingleShotConnection);
    if (screenshot) {
      QObject::connect(
          controller.worker(), &spw::app::EngineWorker::answerFinished, &window,
          [shoot](const spw::app::AnswerResult&) { shoot(true, 0); }, Qt::SingleShotConnection);
      QObject::connect(
          controller.worker(), &spw::app::EngineWorker::answerFailed, &window,
          [shoot](const QString& message) {
            std::fprintf(stderr, "spillway: the answer failed: %s\n", qPrintable(message));
            shoot(true, 1);
          },
          Qt::SingleShotConnection);
    }
  } else if (screenshot) {
    QObject::connect(&window, &spw::ui::MainWindow::readyForScreenshot, &window,
                     [shoot](bool page_shown) { shoot(page_shown, 0); });
  }
  return QApplication::exec();
}
