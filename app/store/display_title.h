// The title a document is shown under, from what its PDF says. The library keeps the PDF's own
// title (DocumentRecord::title, as ingest read it); lists, the window and `docs list` show this
// cleaned form, the original stays in tooltips and `docs show`.
//
//   "Microsoft Word - Lease_Agreement_2024.docx"  -> "Lease Agreement 2024"
//   "C:\Users\kim\Desktop\NDA final.doc"           -> "NDA final"
//   "Untitled", "Document1", "" (file q3_report.pdf) -> "q3 report"
//   "Master Services Agreement"                    -> unchanged
//
// Rules, in order: whitespace runs become one space and the ends are trimmed; an office
// program's "Microsoft Word - " (PowerPoint, Excel, Visio, Publisher; '-' or '–') prefix goes;
// a title that is a path keeps its last component; a trailing document-file extension (.doc,
// .docx, .odt, .rtf, .txt, .pdf, .xls(x), .ppt(x), .pages, .wpd) goes; a placeholder
// ("Untitled", "Document1", "Title", "PowerPoint Presentation", "Slide 1", punctuation only...)
// or nothing left means the file name without its extension is used instead. A title that came
// from a file name (one without spaces holding underscores, or the fallback) has its
// underscores shown as spaces.
#pragma once

#include <string>
#include <string_view>

namespace spw::app {

/// `pdf_title`: the title the library holds; `file_path`: the document's path (its file name is
/// the fallback). UTF-8 in and out.
std::string display_title(std::string_view pdf_title, std::string_view file_path);

}  // namespace spw::app
