// PDF ingest: a PDF file -> a document in the Library (pages in reading order, normalised).
//
// ingest_file() hashes the file (sha256); a file already in the library is not read again
// (already_present, same id, nothing stored) unless IngestOptions::reread_doc_id asks for it
// (OCR of a stored document: its pages are replaced in place). Otherwise poppler opens it (the
// empty user password first, then IngestOptions::password), each page is extracted in reading order
// and released before the next (bounded memory: one page's text boxes at a time, plus the text),
// the whole document is normalised (ligatures, soft hyphens, hyphenation, padding, running
// headers/footers) and stored in one transaction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "app/store/library.h"
#include "engine/common/expected.h"

namespace spw::app {

/// Pages done / total; return false to cancel (ingest_file then fails with "... cancelled",
/// storing nothing). Called once with (0, total) before the first page and after every page.
using IngestProgressFn = std::function<bool(int pages_done, int n_pages)>;

struct IngestOptions {
  std::string password;  // user (or owner) password of an encrypted PDF; never stored
  bool ocr = false;      // OCR pages without a text layer with tesseract (language "eng")
  std::string ocr_language = "eng";  // tesseract language (its traineddata must be installed)
  int ocr_dpi = 300;                 // rendering resolution of a page for OCR
  /// Re-read in place: the file is the one document `reread_doc_id` was read from (the same
  /// bytes), read again (with `ocr`) and its pages replaced (Library::replace_pages): the id,
  /// its name, chats and jobs stay. 0: a plain ingest.
  int64_t reread_doc_id = 0;
  /// Test hook: called inside the storing transaction after each page row (see Library).
  Library::PageStoredHook page_stored_hook = nullptr;
  void* page_stored_user = nullptr;
};

/// A note about one page (page_no 0: the whole document), for the user.
struct PageWarning {
  int page_no = 0;
  std::string message;  // e.g. "no text layer (scanned); run with --ocr to read it"
};

struct IngestResult {
  int64_t doc_id = 0;
  bool already_present = false;  // the same file bytes were already in the library
  DocumentRecord document;       // as stored (or as found, when already_present)
  std::vector<PageWarning> warnings;
};

/// Ingests one PDF into `lib`. Errors (nothing stored), each naming the file:
///  - the file cannot be read, or is not a PDF poppler can open ("cannot open PDF 'X': ...");
///  - encrypted and neither the empty password nor `opts.password` opens it
///    ("'X' is encrypted: a password is needed (--password)" /
///     "'X': wrong password");
///  - cancelled through `progress`;
///  - opts.reread_doc_id names no document, or the file's bytes are no longer the ones that
///    document was read from ("... add it as a new document");
///  - the database write failed.
/// Warnings (the document is still stored): a page without a text layer (scanned; OCR'd with
/// opts.ocr), an unreliable page (PageRecord::undecodable: unmapped glyphs, symbol or letter
/// soup, see TextQuality; OCR'd with opts.ocr, else its normalised text left empty), a damaged file
/// that poppler repaired (page 0), no page with text at all (page 0: DocumentRecord::no_text, never
/// answer from it). A blank page (no text, no ink) is neither scanned nor warned about. opts.ocr
/// without tesseract in the build is an error. Progress and cancel: see IngestProgressFn.
Expected<IngestResult> ingest_file(Library& lib, const std::filesystem::path& pdf,
                                   const IngestOptions& opts = {},
                                   const IngestProgressFn& progress = {});

}  // namespace spw::app
