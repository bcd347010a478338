// The password prompt for an encrypted PDF. The password goes to one ingest request and is never
// stored (not in the library, not in settings).
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
  /// `file`: the PDF's path (its name is shown); `wrong`: the last password given did not open
  /// it (the prompt says so).
  PasswordDialog(const QString& file, bool wrong, QWidget* parent = nullptr);
  QString password() const;

  /// Runs the dialog modally; std::nullopt when the user cancels.
  static std::optional<QString> ask(QWidget* parent, const QString& file, bool wrong);

 private:
  QLineEdit* edit_ = nullptr;
};

}  // namespace spw::ui
