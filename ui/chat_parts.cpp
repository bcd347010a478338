// ChatPanel's "always answer this document over parts" (chat_panel.h): stored in the document's
// row of the library (Library::set_answer_over_parts), so it survives a restart and goes with
// the document.
#include "app/store/library.h"
#include "ui/chat_panel.h"

namespace spw::ui {

bool ChatPanel::answersOverParts(qint64 doc_id) const {
  if (!lib_ || doc_id <= 0) return false;
  auto d = lib_->document(doc_id);
  return d && d->answer_over_parts;
}

bool ChatPanel::setAnswerOverParts(qint64 doc_id, bool always, QString* error) {
  if (!lib_) {
    if (error) *error = tr("the library is not open");
    return false;
  }
  if (Status st = lib_->set_answer_over_parts(doc_id, always); !st) {
    if (error) *error = QString::fromStdString(st.error().message);
    return false;
  }
  render();  // the notes' Undo links follow
  return true;
}

void ChatPanel::rememberOverParts(qint64 doc_id, const QString& title) {
  QString error;
  if (setAnswerOverParts(doc_id, true, &error))
    addPartsNote(doc_id,
                 tr("“%1” is answered over parts from now on, without asking first.").arg(title));
  else
    addNotice(tr("“Always over parts” could not be stored: %1").arg(error), true);
}

void ChatPanel::undoAnswerOverParts(qint64 doc_id) {
  QString error;
  if (setAnswerOverParts(doc_id, false, &error))
    addNotice(tr("Questions on this document show the planner's verdict first again."), false);
  else
    addNotice(tr("“Always over parts” could not be undone: %1").arg(error), true);
}

void ChatPanel::addPartsNote(qint64 doc_id, const QString& text) {
  Entry n = Entry::of(Entry::Note, text);
  n.parts_doc = doc_id;
  entries_.push_back(n);
  render();
}

QString ChatPanel::partsNoteLink(qint64 doc_id) const {
  if (!answersOverParts(doc_id)) return QLatin1Char(' ') + tr("(undone)").toHtmlEscaped();
  return QStringLiteral(" <a href=\"parts-ask:%1\">%2</a>").arg(doc_id).arg(tr("Undo"));
}

}  // namespace spw::ui
