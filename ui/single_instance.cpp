#include "ui/single_instance.h"

#include <algorithm>

#include <QCryptographicHash>
#include <QDeadlineTimer>
#include <QDir>
#include <QFileInfo>
#include <QLocalSocket>
#include <QThread>

#include <unistd.h>

namespace spw::ui {

namespace {

QString lockPath(const QString& data_dir) {
  return QDir(data_dir).filePath(QStringLiteral("spillway.lock"));
}

}  // namespace

SingleInstance::SingleInstance(const QString& data_dir, QObject* parent)
    : QObject(parent), data_dir_(data_dir) {
  connect(&server_, &QLocalServer::newConnection, this, &SingleInstance::onConnection);
}

SingleInstance::~SingleInstance() {
  server_.close();
  if (lock_) lock_->unlock();
}

QString SingleInstance::socketName(const QString& data_dir) {
  const QFileInfo info(data_dir);
  const QString canonical =
      info.canonicalFilePath().isEmpty() ? info.absoluteFilePath() : info.canonicalFilePath();
  const QByteArray digest =
      QCryptographicHash::hash(canonical.toUtf8(), QCryptographicHash::Sha256).left(8);
  return QStringLiteral("spillway-%1-%2")
      .arg(static_cast<qulonglong>(::getuid()))
      .arg(QString::fromLatin1(digest.toHex()));
}

bool SingleInstance::claim() {
  lock_ = std::make_unique<QLockFile>(lockPath(data_dir_));
  // Only a dead holder makes the lock stale, never its age: a window stays open for days.
  lock_->setStaleLockTime(0);
  if (!lock_->tryLock(0)) {
    if (lock_->error() == QLockFile::LockFailedError) return false;
    return true;  // cannot write the lock (a read-only folder): nobody to defer to
  }
  const QString name = socketName(data_dir_);
  QLocalServer::removeServer(name);  // ours now: a socket file left there is a dead one's
  server_.setSocketOptions(QLocalServer::UserAccessOption);
  server_.listen(name);  // failing to listen leaves the lock: later launches then say so
  return true;
}

bool SingleInstance::forward(const QStringList& files, QString* error, int timeout_ms) const {
  qint64 pid = 0;
  QString host, app;
  if (lock_) lock_->getLockInfo(&pid, &host, &app);
  const auto fail = [&](const QString& why) {
    if (error != nullptr) {
      *error = QStringLiteral(
                   "the library in %1 is open in another Spillway window (process %2) that %3: "
                   "close that window, or start this one with --data-dir for another library")
                   .arg(QDir::toNativeSeparators(data_dir_))
                   .arg(pid)
                   .arg(why);
    }
    return false;
  };
  QByteArray message = "open\n";
  for (const QString& f : files) message += QFileInfo(f).absoluteFilePath().toUtf8() + '\n';
  message += '\n';

  QLocalSocket socket;
  const QDeadlineTimer deadline(timeout_ms);
  const auto left_ms = [&] {
    return static_cast<int>(std::max<qint64>(1, deadline.remainingTime()));
  };
  // The first window may be starting: it listens right after taking the lock.
  for (;;) {
    socket.connectToServer(socketName(data_dir_));
    if (socket.waitForConnected(left_ms())) break;
    if (deadline.hasExpired()) return fail(QStringLiteral("does not answer"));
    QThread::msleep(50);
  }
  socket.write(message);
  if (!socket.waitForBytesWritten(left_ms()))
    return fail(QStringLiteral("does not take the request"));
  QByteArray reply;
  while (!reply.contains('\n')) {
    if (deadline.hasExpired() || !socket.waitForReadyRead(left_ms()))
      return fail(QStringLiteral("does not answer"));
    reply += socket.readAll();
  }
  if (!reply.startsWith("ok\n")) return fail(QStringLiteral("refused the request"));
  return true;
}

void SingleInstance::onConnection() {
  while (QLocalSocket* socket = server_.nextPendingConnection()) {
    connect(socket, &QLocalSocket::disconnected, socket, &QObject::deleteLater);
    // A request is small; a client that sends more than this or never ends it is dropped.
    constexpr qsizetype kMaxRequest = 1 << 20;
    connect(socket, &QLocalSocket::readyRead, this, [this, socket] {
      QByteArray buffer = socket->property("request").toByteArray() + socket->readAll();
      if (buffer.size() > kMaxRequest) {
        socket->abort();
        return;
      }
      const qsizetype end = buffer.indexOf("\n\n");
      if (end < 0) {
        socket->setProperty("request", buffer);
        return;
      }
      QList<QByteArray> lines = buffer.left(end).split('\n');
      if (lines.isEmpty() || lines.front() != "open") {
        socket->write("error\n");
        socket->disconnectFromServer();
        return;
      }
      lines.removeFirst();
      QStringList files;
      for (const QByteArray& line : lines) {
        if (!line.isEmpty()) files << QString::fromUtf8(line);
      }
      socket->write("ok\n");
      socket->flush();
      socket->disconnectFromServer();
      emit activated(files);
    });
  }
}

}  // namespace spw::ui
