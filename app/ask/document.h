// The document as the ask pipeline sees it: plain page texts with the flags ingest set. Kept
// apart from the library's records (app/store) so prompt building and citation checks are pure
// functions that tests feed directly; app/cli/ask.cpp fills it from the library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spw::app {

/// One page. `text` is the normalised text (what the model and the citation check see).
struct PageText {
  int page_no = 0;           // 1-based, as in the PDF: the N of "[p. N]"
  std::string text;          // normalised UTF-8
  bool scanned = false;      // no text layer (an image); text is the OCR result when `ocr`
  bool ocr = false;          // text came from OCR
  bool undecodable = false;  // the font's glyphs map to nothing usable: never fed to the model
  /// Byte ranges [begin, end) of running headers/footers in `text`, left out of prompts.
  std::vector<std::pair<int64_t, int64_t>> boilerplate;
};

struct DocumentText {
  int64_t id = 0;
  std::string title;            // the PDF's own (what prompts name the document by)
  std::string shown_title;      // what the app shows (DocumentRecord::shown_title); may be empty
  std::vector<PageText> pages;  // in page order
};

/// Whether the page gives the model text: not undecodable, not an un-OCR'd scan, and some
/// non-whitespace text outside the running headers/footers.
bool page_has_text(const PageText& page);

/// The page's text without its boilerplate ranges (out-of-range or overlapping ranges are
/// clamped and merged), trimmed of whitespace at both ends.
std::string page_prompt_text(const PageText& page);

}  // namespace spw::app
