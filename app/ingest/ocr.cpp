#include "app/ingest/ocr.h"

#ifdef SPILLWAY_HAVE_TESSERACT
#include <tesseract/baseapi.h>
#endif

namespace spw::app {

#ifdef SPILLWAY_HAVE_TESSERACT

struct OcrEngine::Impl {
  tesseract::TessBaseAPI api;
  ~Impl() { api.End(); }
};

bool OcrEngine::available() { return true; }

Expected<std::unique_ptr<OcrEngine>> OcrEngine::create(const std::string& language) {
  auto impl = std::make_unique<Impl>();
  if (impl->api.Init(nullptr, language.c_str(), tesseract::OEM_DEFAULT) != 0) {
    return make_error("OCR: tesseract cannot load language '{}' (is tesseract-ocr-{} installed?)",
                      language, language);
  }
  impl->api.SetPageSegMode(tesseract::PSM_AUTO);
  return std::unique_ptr<OcrEngine>(new OcrEngine(std::move(impl)));
}

Expected<std::string> OcrEngine::recognize(const QImage& image, int dpi) {
  if (image.isNull()) return make_error("OCR: the page could not be rendered");
  const QImage grey = image.convertToFormat(QImage::Format_Grayscale8);
  impl_->api.SetImage(grey.constBits(), grey.width(), grey.height(), 1,
                      static_cast<int>(grey.bytesPerLine()));
  impl_->api.SetSourceResolution(dpi);
  std::unique_ptr<char[]> text(impl_->api.GetUTF8Text());
  impl_->api.Clear();
  if (!text) return make_error("OCR: tesseract failed on the page");
  return std::string(text.get());
}

#else

struct OcrEngine::Impl {};

bool OcrEngine::available() { return false; }

Expected<std::unique_ptr<OcrEngine>> OcrEngine::create(const std::string&) {
  return make_error(
      "OCR is not available: this build of Spillway has no tesseract "
      "(install libtesseract-dev and rebuild)");
}

Expected<std::string> OcrEngine::recognize(const QImage&, int) {
  return make_error("OCR is not available");
}

#endif

OcrEngine::OcrEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OcrEngine::~OcrEngine() = default;

}  // namespace spw::app
