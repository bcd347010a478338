// Hand-written PDFs for the ingest tests: text at exact positions (so a test knows which words
// form which column), page /Rotate, rotated text, a font whose ToUnicode map sends chosen codes
// to chosen code points (U+FB01, private use), image-only pages and AcroForm text fields.
// Plain C++ (no Qt, no poppler): the bytes are written by hand, with a correct xref table.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace spw::test {

/// A run of text. Coordinates are PDF user space: points, origin bottom-left, y up.
struct PdfTextRun {
  double x = 0, y = 0;  // start of the baseline
  double size = 10;     // font size in points
  std::string text;     // bytes in the font's encoding (ASCII for Helvetica); '(' ')' '\' escaped
  int font = 0;         // 0: Helvetica; 1: Helvetica with PdfDoc::custom_map as its ToUnicode
  int angle = 0;        // text direction, degrees counterclockwise: 0, 90, 180, 270
  double char_spacing = 0;  // Tc: extra space after each glyph, in unscaled text space units
};

/// An 8-bit grey image drawn at [x, x+w] x [y, y+h] (points).
struct PdfImage {
  int width = 0, height = 0;
  std::string gray;  // width * height bytes, top row first
  double x = 0, y = 0, w = 0, h = 0;
};

/// An AcroForm text field with its widget on the page.
struct PdfTextField {
  std::string name, value;  // ASCII
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

struct PdfPage {
  double width = 612, height = 792;
  int rotate = 0;  // the page's /Rotate
  std::vector<PdfTextRun> runs;
  std::vector<PdfImage> images;
  std::vector<PdfTextField> fields;
};

struct PdfDoc {
  std::vector<PdfPage> pages;
  std::string title;  // /Title in the document information ("" : none)
  // Font 1: code -> Unicode code point (BMP) in its ToUnicode CMap; other codes as Helvetica.
  std::vector<std::pair<unsigned char, char32_t>> custom_map;
};

/// The PDF file's bytes.
std::string build_pdf(const PdfDoc& doc);

/// Writes bytes to a file (throws std::runtime_error on failure).
void write_file(const std::filesystem::path& file, const std::string& bytes);
std::string read_file(const std::filesystem::path& file);

/// Runs for one line of words placed at explicit x positions (one run per word).
std::vector<PdfTextRun> words_at(const std::vector<std::pair<double, std::string>>& words, double y,
                                 double size = 10);

/// Runs for the lines of a column: `lines` from the top baseline `top_y` down, `leading` apart.
std::vector<PdfTextRun> column(const std::vector<std::string>& lines, double x, double top_y,
                               double size = 10, double leading = 12);

/// Whether `tool` is an executable in $PATH (tests that build PDFs with qpdf or need tesseract
/// skip without it). Looks at the directories only; runs nothing.
bool on_path(const std::string& tool);

}  // namespace spw::test
