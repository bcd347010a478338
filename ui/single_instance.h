// One Spillway window per library: a second launch on the same data folder hands its files to
// the running window (which adds them and comes forward) and exits, instead of opening a second
// window that writes the same SQLite library.
//
// Who is first is decided by a lock file in the data folder (<data_dir>/spillway.lock, a
// QLockFile: a lock left by a process that died is taken over, so a crash never locks a library
// out). The first instance also listens on a local socket named after the data folder; a later
// one connects to it and sends one message: "open" and the absolute paths of its files, one per
// line, UTF-8, ended by an empty line; the first answers "ok\n" once it has taken them.
#pragma once

#include <memory>

#include <QLocalServer>
#include <QLockFile>
#include <QObject>
#include <QString>
#include <QStringList>

namespace spw::ui {

class SingleInstance : public QObject {
  Q_OBJECT

 public:
  /// For the library in `data_dir` (an existing folder).
  explicit SingleInstance(const QString& data_dir, QObject* parent = nullptr);
  ~SingleInstance() override;

  /// Takes the library: true when no live process holds it (this one is now the first and
  /// listens), false when another does. A lock file that cannot be written at all (a read-only
  /// folder) counts as taken by nobody: true, and nothing listens.
  bool claim();

  /// A later instance: sends `files` (made absolute) to the first one and waits up to
  /// `timeout_ms` for its answer. False with *error set when nothing answers (the holder is
  /// still starting, or hangs): the message names the folder and the holder's process id.
  bool forward(const QStringList& files, QString* error, int timeout_ms = 5000) const;

  /// The local socket's name for `data_dir`: "spillway-<uid>-<16 hex digits of the folder's
  /// canonical path>" (short enough for the 108-byte limit of a Unix socket path).
  static QString socketName(const QString& data_dir);

 signals:
  /// A later launch asked for the window, with these files to add (possibly none).
  void activated(const QStringList& files);

 private:
  void onConnection();

  QString data_dir_;
  std::unique_ptr<QLockFile> lock_;
  QLocalServer server_;
};

}  // namespace spw::ui
