// ChatPanel's Markdown: Export chat and each answer's Copy (chat_panel.h).
#include <QApplication>
#include <QClipboard>
#include <QFile>
#include <QFileDialog>
#include <QMessageBox>
#include <QRegularExpression>
#include <QStandardPaths>

#include "ui/chat_panel.h"

namespace spw::ui {

namespace {

// "- p. 3: “quote” (verified)" / "- p. 3: “quote” (unverified: quote not found on page 3)".
QString citation_line(const app::CitationInfo& c) {
  QString line = QStringLiteral("- p. %1").arg(c.page);
  if (!c.quote.isEmpty()) line += QStringLiteral(": “%1”").arg(c.quote);
  if (c.verified) {
    line += ChatPanel::tr(" (verified)");
  } else {
    QString why = c.reason.isEmpty() ? ChatPanel::tr("not checked") : c.reason;
    if (c.found_on_page > 0) why += ChatPanel::tr("; the quote is on page %1").arg(c.found_on_page);
    line += ChatPanel::tr(" (unverified: %1)").arg(why);
  }
  return line;
}

}  // namespace

QString ChatPanel::answerText(int entry) const {
  if (entry < 0 || entry >= static_cast<int>(entries_.size())) return {};
  const Entry& e = entries_[static_cast<size_t>(entry)];
  if (e.kind != Entry::Assistant) return {};
  QString out = e.text.trimmed();
  if (e.stopped) out += QStringLiteral("\n\n") + QLatin1String(app::kStoppedMarker);
  if (!e.citations.isEmpty()) {
    out += QStringLiteral("\n\n") + tr("Citations (%1):").arg(e.doc_title) + QLatin1Char('\n');
    for (const app::CitationInfo& c : e.citations) out += citation_line(c) + QLatin1Char('\n');
    out.chop(1);
  }
  return out;
}

QString ChatPanel::toMarkdown() const {
  QString md = QStringLiteral("# %1\n").arg(
      doc_titles_.isEmpty() ? tr("Chat") : doc_titles_.join(QStringLiteral(", ")));
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    switch (e.kind) {
      case Entry::User:
        md += QStringLiteral("\n## %1\n\n%2\n").arg(tr("You"), e.text.trimmed());
        break;
      case Entry::Assistant:
        md += QStringLiteral("\n## %1\n\n").arg(e.doc_title);
        if (!e.header.isEmpty()) md += QStringLiteral("*%1*\n\n").arg(e.header);
        md += answerText(static_cast<int>(i)) + QLatin1Char('\n');
        break;
      case Entry::Error:
        md += QStringLiteral("\n> ⚠ %1\n").arg(e.text.trimmed());
        break;
      case Entry::Note:
        break;  // the run's log, not the conversation
    }
  }
  return md;
}

bool ChatPanel::exportMarkdown(const QString& file, QString* error) const {
  QFile f(file);
  const QByteArray bytes = toMarkdown().toUtf8();
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(bytes) != bytes.size() ||
      !f.flush()) {
    if (error) *error = QStringLiteral("%1: %2").arg(file, f.errorString());
    return false;
  }
  return true;
}

void ChatPanel::copyAnswer(int entry) {
  const QString text = answerText(entry);
  if (!text.isEmpty()) QApplication::clipboard()->setText(text);
}

void ChatPanel::exportChat() {
  QString name = doc_titles_.isEmpty() ? tr("chat") : doc_titles_.first();
  name.replace(QRegularExpression(QStringLiteral("[/\\\\:*?\"<>|]")), QStringLiteral("_"));
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
  const QString file = QFileDialog::getSaveFileName(
      this, tr("Export chat"), dir + QLatin1Char('/') + name + QStringLiteral(" - chat.md"),
      tr("Markdown (*.md)"));
  if (file.isEmpty()) return;
  QString error;
  if (!exportMarkdown(file, &error))
    QMessageBox::warning(this, tr("Export chat"), tr("The chat could not be saved: %1").arg(error));
}

}  // namespace spw::ui
