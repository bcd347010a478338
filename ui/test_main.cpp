// The widget tests' main: one QApplication for the whole run (QT_QPA_PLATFORM=offscreen is set
// by ctest; set here too so a direct run needs no display). The offscreen screen is a desktop
// monitor's, 1920x1200 (the plugin's own is 800x800, smaller than the window's default size,
// which the window would shrink to fit); a test that sets its own screen keeps it.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <QApplication>
#include <QCoreApplication>
#include <QDir>
#include <QFile>

int main(int argc, char** argv) {
  const char* platform = std::getenv("QT_QPA_PLATFORM");
  if (platform == nullptr || std::strcmp(platform, "offscreen") == 0) {
    // One file per process: ctest -j runs several test processes at once, and one truncating a
    // shared file while another's QApplication reads it gave "Platform config file parse error".
    const QString config = QDir::temp().filePath(
        QStringLiteral("spillway-ui-tests-screen-%1.json").arg(QCoreApplication::applicationPid()));
    QFile f(config);
    if (f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
      f.write(R"({"screens": [{"name": "Desktop", "x": 0, "y": 0, "width": 1920, "height": 1200, )"
              R"("logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})");
      f.close();
      const std::string value = "offscreen:configfile=" + config.toStdString();
      setenv("QT_QPA_PLATFORM", value.c_str(), 1);
    } else {
      setenv("QT_QPA_PLATFORM", "offscreen", 1);
    }
  }
  QApplication app(argc, argv);
  struct RemoveConfig {
    ~RemoveConfig() {
      QFile::remove(QDir::temp().filePath(QStringLiteral("spillway-ui-tests-screen-%1.json")
                                              .arg(QCoreApplication::applicationPid())));
    }
  } remove_config;
  QApplication::setApplicationName(QStringLiteral("Spillway"));
  QApplication::setOrganizationName(QStringLiteral("Spillway"));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
