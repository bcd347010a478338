// OCR of rendered pages with tesseract (Debian's tesseract-ocr), when the build has it.
#pragma once

#include <QImage>

#include <memory>
#include <string>

#include "engine/common/expected.h"

namespace spw::app {

class OcrEngine final {
 public:
  /// Whether this build links tesseract.
  static bool available();
  /// Loads `language` ("eng"; the traineddata must be installed). Errors name the language.
  static Expected<std::unique_ptr<OcrEngine>> create(const std::string& language);
  ~OcrEngine();
  OcrEngine(const OcrEngine&) = delete;
  OcrEngine& operator=(const OcrEngine&) = delete;

  /// The text of `image` (any format; converted to 8-bit grey), UTF-8, lines separated by
  /// '\n'. `dpi` is the resolution the page was rendered at.
  Expected<std::string> recognize(const QImage& image, int dpi);

 private:
  struct Impl;
  explicit OcrEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spw::app
