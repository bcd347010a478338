// The widget tests' main: one QApplication for the whole run (QT_QPA_PLATFORM=offscreen is set
// by ctest; set here too so a direct run needs no display).
#include <cstdlib>

#include <gtest/gtest.h>
#include <QApplication>

int main(int argc, char** argv) {
  if (std::getenv("QT_QPA_PLATFORM") == nullptr) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Spillway"));
  QApplication::setOrganizationName(QStringLiteral("Spillway"));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
