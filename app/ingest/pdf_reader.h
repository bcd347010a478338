// Reads a PDF with poppler-qt6, one page at a time: words in reading order (layout.h), form
// fields, whether the page has ink, and a rendering for OCR. Poppler types stay in the .cpp.
#pragma once

#include <QImage>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/ingest/layout.h"
#include "engine/common/expected.h"

namespace spw::app {

/// One page as extracted (upright: the page's /Rotate applied, rotated text turned).
struct ExtractedPage {
  std::vector<LayoutLine> lines;        // reading order
  std::vector<std::string> form_lines;  // "name: value" per AcroForm field on the page
  double width = 0, height = 0;         // points, upright
  bool has_text = false;                // the text layer has any non-space character
  int rotated_text = 0;                 // 0, 90, 180, 270: how far the text was turned to read it
};

class PdfReader final {
 public:
  /// Opens `file`: the empty user password first, then `password` (as user and owner).
  /// Errors: "cannot open PDF '<file>': <reason>", "'<file>' is encrypted: a password is needed
  /// (--password)", "'<file>': wrong password". The password is not kept.
  static Expected<std::unique_ptr<PdfReader>> open(const std::filesystem::path& file,
                                                   const std::string& password);
  ~PdfReader();
  PdfReader(const PdfReader&) = delete;
  PdfReader& operator=(const PdfReader&) = delete;

  int n_pages() const;
  bool encrypted() const;
  /// The file was damaged and poppler reconstructed it (cross-reference table, trailer,
  /// truncation), as seen so far: pages read later may add to it.
  bool repaired() const;
  /// What was wrong, for the user ("" when not repaired): poppler's first message about it, or
  /// "startxref does not point at a cross-reference table".
  std::string repair_note() const;
  /// The Title entry of the document information, else "".
  std::string title() const;

  /// Page `index` (0-based). Errors name the page.
  Expected<ExtractedPage> page(int index);
  /// Renders page `index` upright at `dpi`; a null image on failure.
  QImage render(int index, double dpi);
  /// True when page `index` renders with visible marks (a scanned image, drawings).
  bool has_ink(int index);
  /// The share (0..1) of a 12 x 12 grid over page `index` whose cells have marks outside the
  /// boxes of `lines` (upright page points): near 0 for a text page, large for the image of a
  /// page. Rendered at 18 dpi.
  double ink_outside_text(int index, const std::vector<LayoutLine>& lines);

 private:
  struct Impl;
  explicit PdfReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spw::app
