// The password prompt for an encrypted PDF: to add it to the library (one ingest request), or to
// show its pages in the viewer. The password is kept in memory while the window runs (the
// viewer shows the pages with it) and never stored (not in the library, not in settings).
#pragma once

#include <optional>

#include <QDialog>
#include <QString>

class QLineEdit;

namespace spw::ui {

class PasswordDialog final : public QDialog {
  Q_OBJECT
  Q_DISABLE_COPY_MOVE(PasswordDialog)

 public:
  enum class Purpose { Add, View };
  /// `file`: the PDF's path (its name is shown); `wrong`: the last password given did not open
  /// it (the prompt says so).
  PasswordDialog(const QString& file, bool wrong, QWidget* parent = nullptr,
                 Purpose purpose = Purpose::Add);
  QString password() const;

  /// Runs the dialog modally; std::nullopt when the user cancels.
  static std::optional<QString> ask(QWidget* parent, const QString& file, bool wrong,
                                    Purpose purpose = Purpose::Add);

 private:
  QLineEdit* edit_ = nullptr;
};

}  // namespace spw::ui
