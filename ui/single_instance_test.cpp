// One window per library (single_instance.h): the second launch on a data folder hands its
// files to the first and gets "ok"; another folder is its own; a dead holder's lock is taken
// over; a holder that does not answer gives an error naming the folder.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QLockFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "ui/single_instance.h"

namespace spw::ui {
namespace {

// Runs forward() on a thread of its own (it blocks; the first instance answers from this
// thread's event loop) and spins the event loop until it returns.
bool forwardFromAnotherThread(const SingleInstance& later, const QStringList& files, QString* error,
                              int timeout_ms = 5000) {
  std::atomic<bool> done{false};
  bool ok = false;
  std::thread t([&] {
    ok = later.forward(files, error, timeout_ms);
    done = true;
  });
  while (!done) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  t.join();
  return ok;
}

TEST(SingleInstance, ASecondLaunchHandsItsFilesToTheFirst) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  SingleInstance first(dir.path());
  ASSERT_TRUE(first.claim());
  QSignalSpy activated(&first, &SingleInstance::activated);

  SingleInstance second(dir.path());
  EXPECT_FALSE(second.claim());
  QString error;
  const QString relative = QStringLiteral("relative/report.pdf");
  ASSERT_TRUE(forwardFromAnotherThread(
      second, {QStringLiteral("/srv/docs/contract one.pdf"), relative}, &error))
      << error.toStdString();
  QTRY_COMPARE(activated.count(), 1);
  const QStringList files = activated.front().front().toStringList();
  ASSERT_EQ(files.size(), 2);
  EXPECT_EQ(files[0], QStringLiteral("/srv/docs/contract one.pdf"));
  EXPECT_EQ(files[1], QDir::current().absoluteFilePath(relative));

  // A launch with no files only brings the window forward.
  ASSERT_TRUE(forwardFromAnotherThread(second, {}, &error)) << error.toStdString();
  QTRY_COMPARE(activated.count(), 2);
  EXPECT_TRUE(activated.at(1).front().toStringList().isEmpty());
}

TEST(SingleInstance, AnotherLibraryIsItsOwnAndAClosedOneIsFree) {
  QTemporaryDir a, b;
  ASSERT_TRUE(a.isValid() && b.isValid());
  EXPECT_NE(SingleInstance::socketName(a.path()), SingleInstance::socketName(b.path()));
  EXPECT_LE(QDir::temp().filePath(SingleInstance::socketName(a.path())).toUtf8().size(), 107);
  {
    SingleInstance on_a(a.path()), on_b(b.path());
    EXPECT_TRUE(on_a.claim());
    EXPECT_TRUE(on_b.claim());
  }
  SingleInstance again(a.path());
  EXPECT_TRUE(again.claim());  // the first window closed: its lock is gone
}

TEST(SingleInstance, ALockLeftByADeadProcessIsTakenOver) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString lock_path = QDir(dir.path()).filePath(QStringLiteral("spillway.lock"));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // takes the lock and dies without releasing it, as a crash would
    QLockFile lock(lock_path);
    lock.setStaleLockTime(0);
    ::_exit(lock.tryLock(0) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(QFileInfo::exists(lock_path));  // left behind

  SingleInstance next(dir.path());
  EXPECT_TRUE(next.claim());
}

TEST(SingleInstance, AHolderThatDoesNotAnswerIsNamedInTheError) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  QLockFile held(QDir(dir.path()).filePath(QStringLiteral("spillway.lock")));
  held.setStaleLockTime(0);
  ASSERT_TRUE(held.tryLock(0));  // a live holder with nothing listening

  SingleInstance later(dir.path());
  EXPECT_FALSE(later.claim());
  QString error;
  EXPECT_FALSE(later.forward({}, &error, 300));
  EXPECT_TRUE(error.contains(QDir::toNativeSeparators(dir.path()))) << error.toStdString();
  EXPECT_TRUE(error.contains(QString::number(QCoreApplication::applicationPid())))
      << error.toStdString();
  EXPECT_TRUE(error.contains(QStringLiteral("--data-dir"))) << error.toStdString();
}

}  // namespace
}  // namespace spw::ui
