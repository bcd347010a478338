#include "ui/password_dialog.h"

#include <QDialogButtonBox>
#include <QFileInfo>
#include <QGridLayout>
#include <QIcon>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QStyle>

#include "ui/icons.h"

namespace spw::ui {

PasswordDialog::PasswordDialog(const QString& file, bool wrong, QWidget* parent, Purpose purpose)
    : QDialog(parent) {
  setWindowTitle(tr("Password needed"));
  setObjectName(QStringLiteral("passwordDialog"));
  auto* grid = new QGridLayout(this);
  grid->setHorizontalSpacing(16);

  auto* icon = new QLabel(this);
  const QIcon lock = themed("dialog-password", QStyle::SP_MessageBoxQuestion, style());
  icon->setPixmap(lock.pixmap(48, 48));
  icon->setAlignment(Qt::AlignTop);
  grid->addWidget(icon, 0, 0, 3, 1);

  const QString name = QFileInfo(file).fileName();
  auto* text = new QLabel(
      wrong ? tr("<b>%1</b> did not open with that password. Try again:").arg(name.toHtmlEscaped())
      : purpose == Purpose::View
          ? tr("<b>%1</b> is encrypted. Enter its password to show its pages:")
                .arg(name.toHtmlEscaped())
          : tr("<b>%1</b> is encrypted. Enter its password to add it to the library:")
                .arg(name.toHtmlEscaped()),
      this);
  text->setWordWrap(true);
  grid->addWidget(text, 0, 1);

  edit_ = new QLineEdit(this);
  edit_->setEchoMode(QLineEdit::Password);
  edit_->setObjectName(QStringLiteral("passwordEdit"));
  edit_->setMinimumWidth(280);
  grid->addWidget(edit_, 1, 1);

  auto* note = new QLabel(tr("Spillway keeps it in memory until it closes, to show the pages; it "
                             "is never saved."),
                          this);
  note->setWordWrap(true);
  note->setEnabled(false);
  grid->addWidget(note, 2, 1);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Open"));
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  grid->addWidget(buttons, 3, 0, 1, 2);
}

QString PasswordDialog::password() const { return edit_->text(); }

std::optional<QString> PasswordDialog::ask(QWidget* parent, const QString& file, bool wrong,
                                           Purpose purpose) {
  PasswordDialog dialog(file, wrong, parent, purpose);
  if (dialog.exec() != QDialog::Accepted) return std::nullopt;
  return dialog.password();
}

}  // namespace spw::ui
