#include "ui/result_links.h"

#include <QRegularExpression>
#include <QStringList>
#include <QUrlQuery>

#include "app/ask/citations.h"

namespace spw::ui {

namespace {

const QString kScheme = QStringLiteral("spillway-page");

// Text shown inside a Markdown link: its brackets and the characters Markdown reads escaped.
QString escapedLinkText(const QString& text) {
  QString out;
  for (const QChar c : text) {
    if (QStringLiteral("\\[]*_`<>").contains(c)) out += QLatin1Char('\\');
    out += c;
  }
  return out;
}

}  // namespace

QUrl pageLink(qint64 doc_id, int page_no, const QString& quote) {
  QUrl url;
  url.setScheme(kScheme);
  url.setPath(QStringLiteral("%1/%2").arg(doc_id).arg(page_no));
  if (!quote.isEmpty()) {
    QUrlQuery q;
    q.addQueryItem(QStringLiteral("q"), quote);
    url.setQuery(q);
  }
  return url;
}

bool parsePageLink(const QUrl& url, qint64* doc_id, int* page_no, QString* quote) {
  if (url.scheme() != kScheme) return false;
  const QStringList parts = url.path().split(QLatin1Char('/'));
  if (parts.size() != 2) return false;
  bool ok_doc = false, ok_page = false;
  const qint64 doc = parts[0].toLongLong(&ok_doc);
  const int page = parts[1].toInt(&ok_page);
  if (!ok_doc || !ok_page || doc <= 0 || page <= 0) return false;
  *doc_id = doc;
  *page_no = page;
  *quote = QUrlQuery(url).queryItemValue(QStringLiteral("q"), QUrl::FullyDecoded);
  return true;
}

QString linkCitations(const std::string& markdown) {
  static const QRegularExpression heading(QStringLiteral(R"(^## \d+\. .* \(document (\d+)\)$)"));
  const QStringList lines = QString::fromStdString(markdown).split(QLatin1Char('\n'));
  QStringList out;
  out.reserve(lines.size());
  qint64 doc = 0;
  for (const QString& line : lines) {
    if (const QRegularExpressionMatch m = heading.match(line); m.hasMatch()) {
      doc = m.captured(1).toLongLong();
      out << line;
      continue;
    }
    if (line.startsWith(QLatin1String("# "))) doc = 0;  // the report's own heading
    const std::string bytes = line.toStdString();
    const std::vector<app::Citation> cites =
        doc > 0 ? app::parse_citations(bytes) : std::vector<app::Citation>{};
    if (cites.empty()) {
      out << line;
      continue;
    }
    QString linked;
    size_t pos = 0;
    for (const app::Citation& c : cites) {
      const auto begin = static_cast<size_t>(c.answer_begin);
      const auto end = static_cast<size_t>(c.answer_end);
      if (begin < pos || end > bytes.size() || end <= begin) continue;
      linked += QString::fromStdString(bytes.substr(pos, begin - pos));
      const QString text = QString::fromStdString(bytes.substr(begin, end - begin));
      QString href =
          pageLink(doc, c.page, QString::fromStdString(c.quote)).toString(QUrl::FullyEncoded);
      href.replace(QLatin1Char('('), QLatin1String("%28"))
          .replace(QLatin1Char(')'), QLatin1String("%29"));
      linked += QStringLiteral("[%1](%2)").arg(escapedLinkText(text), href);
      pos = end;
    }
    linked += QString::fromStdString(bytes.substr(pos));
    out << linked;
  }
  return out.join(QLatin1Char('\n'));
}

}  // namespace spw::ui
