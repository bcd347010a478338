// Citations in a batch job's result (the job's Markdown report, app/jobs/export.h) as links
// that open the cited page: under each "## k. Title (document ID)" heading, every "[p. N]"
// (with the quote after it, when there is one) becomes a link to page N of document ID with the
// quote to highlight, as a citation in the chat does.
#pragma once

#include <string>

#include <QString>
#include <QUrl>

namespace spw::ui {

/// The report with its citations as Markdown links to pageLink() URLs.
QString linkCitations(const std::string& markdown);

/// "spillway-page:ID/N?q=QUOTE".
QUrl pageLink(qint64 doc_id, int page_no, const QString& quote);
/// A pageLink() URL's parts; false for any other URL.
bool parsePageLink(const QUrl& url, qint64* doc_id, int* page_no, QString* quote);

}  // namespace spw::ui
