#include "app/ingest/ingest.h"

#include <QCryptographicHash>
#include <QFile>

#include "app/ingest/normalize.h"
#include "app/ingest/ocr.h"
#include "app/ingest/pdf_reader.h"

namespace spw::app {
namespace {

// A page whose text layer has fewer characters than this, over an image that covers at least
// kScanInkShare of the page outside that text, is a scanned page (a stamp, a page number).
constexpr int64_t kMaxStampChars = 40;
constexpr double kScanInkShare = 0.25;

Expected<std::string> sha256_file(const std::filesystem::path& file) {
  QFile f(QFile::decodeName(file.c_str()));
  if (!f.open(QIODevice::ReadOnly)) {
    return make_error("cannot read '{}': {}", file.string(), f.errorString().toStdString());
  }
  QCryptographicHash h(QCryptographicHash::Sha256);
  if (!h.addData(&f)) {
    return make_error("cannot read '{}': {}", file.string(), f.errorString().toStdString());
  }
  return h.result().toHex().toStdString();
}

// OCR output as position-less lines; a blank line starts a new block.
std::vector<LayoutLine> text_lines(const std::string& text) {
  std::vector<LayoutLine> out;
  bool block = true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    if (line.find_first_not_of(" \t\r\f") == std::string::npos) {
      block = true;
    } else {
      LayoutLine l;
      l.text = std::move(line);
      l.y0 = l.y1 = -1;
      l.block_start = block;
      block = false;
      out.push_back(std::move(l));
    }
    pos = nl + 1;
  }
  return out;
}

}  // namespace

Expected<IngestResult> ingest_file(Library& lib, const std::filesystem::path& pdf,
                                   const IngestOptions& opts, const IngestProgressFn& progress) {
  const std::string name = pdf.string();
  IngestResult result;
  {
    // A FIFO or a device (/dev/zero) would never end the hash; a folder is no PDF.
    std::error_code ec;
    const auto st = std::filesystem::status(pdf, ec);
    if (ec) return make_error("cannot open PDF '{}': {}", name, ec.message());
    if (!std::filesystem::is_regular_file(st))
      return make_error("cannot open PDF '{}': not a regular file", name);
  }
  auto sha = sha256_file(pdf);
  if (!sha) return sha.error();
  auto found = lib.find_document_by_sha256(*sha);
  if (!found) return found.error();
  if (opts.reread_doc_id > 0) {
    auto doc = lib.document(opts.reread_doc_id);
    if (!doc) return make_error("cannot read '{}' again: {}", name, doc.error().message);
    if (!*found || **found != doc->id) {
      return make_error(
          "cannot read document {} again from '{}': the file's bytes are not the ones it was "
          "read from (the file changed or is another one); add it as a new document instead",
          doc->id, name);
    }
  } else if (*found) {
    auto doc = lib.document(**found);
    if (!doc) return doc.error();
    // The stored text needs no password, but a password given for it is checked: a wrong one
    // is an error, as it is for a file not stored yet.
    if (!opts.password.empty() && doc->encrypted) {
      auto reader = PdfReader::open(pdf, opts.password);
      if (!reader) {
        return make_error(
            "{} (the file is already in the library as document {}: its stored "
            "text is read without a password)",
            reader.error().message, doc->id);
      }
    }
    result.doc_id = doc->id;
    result.already_present = true;
    result.document = std::move(*doc);
    return result;
  }
  if (opts.ocr && !OcrEngine::available()) {
    return make_error("cannot OCR '{}': this build of Spillway has no tesseract", name);
  }

  auto reader = PdfReader::open(pdf, opts.password);
  if (!reader) return reader.error();
  PdfReader& r = **reader;
  const int n = r.n_pages();
  if (progress && !progress(0, n)) return make_error("ingest of '{}' cancelled", name);

  std::unique_ptr<OcrEngine> ocr;
  std::vector<PageLines> layout(static_cast<size_t>(n));
  std::vector<PageRecord> pages(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    PageRecord& rec = pages[static_cast<size_t>(i)];
    PageLines& pl = layout[static_cast<size_t>(i)];
    rec.page_no = i + 1;
    auto page = r.page(i);
    if (!page) {
      result.warnings.push_back({i + 1, page.error().message + "; stored empty"});
    } else {
      pl.lines = std::move(page->lines);
      pl.height = page->height;
      // A text layer that is not text (unmapped glyphs, symbol or letter soup) is read by OCR
      // when asked, as a scan is; otherwise it is flagged after normalisation.
      bool unreliable = false;
      if (page->has_text && opts.ocr) {
        std::string raw;
        for (const LayoutLine& l : pl.lines) raw += l.text + '\n';
        unreliable = looks_undecodable(raw);
      }
      // The image of a page with a stamp or a page number in its text layer ("Scan 0042") is
      // a scan too.
      bool stamped_scan = false;
      if (page->has_text && !unreliable && page->rotated_text == 0) {
        int64_t n_chars = 0;
        for (const LayoutLine& l : pl.lines) {
          for (const char c : l.text)
            n_chars += c != ' ' && (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        }
        stamped_scan = n_chars < kMaxStampChars && r.ink_outside_text(i, pl.lines) >= kScanInkShare;
      }
      if (unreliable || stamped_scan || (!page->has_text && r.has_ink(i))) {
        rec.scanned = !unreliable;
        if (opts.ocr) {
          if (!ocr) {
            auto engine = OcrEngine::create(opts.ocr_language);
            if (!engine) return make_error("cannot OCR '{}': {}", name, engine.error().message);
            ocr = std::move(*engine);
          }
          auto text = ocr->recognize(r.render(i, opts.ocr_dpi), opts.ocr_dpi);
          if (!text) return make_error("'{}' page {}: {}", name, i + 1, text.error().message);
          pl.lines = text_lines(*text);
          pl.height = 0;
          rec.ocr = true;
          result.warnings.push_back(
              {i + 1, unreliable ? "text layer unreliable (unmapped glyphs, symbols or letter "
                                   "soup): text read by OCR"
                                 : "no text layer (scanned): text read by OCR"});
        } else if (stamped_scan) {
          result.warnings.push_back({i + 1,
                                     "an image of a page with only a few characters of text "
                                     "(scanned): not read; run with --ocr to read it"});
        } else if (!unreliable) {
          result.warnings.push_back(
              {i + 1, "no text layer (scanned): no text stored; run with --ocr to read it"});
        }
      }
      bool first = true;
      for (const std::string& f : page->form_lines) {
        LayoutLine l;
        l.text = f;
        l.y0 = l.y1 = -1;
        l.block_start = first;
        first = false;
        pl.lines.push_back(std::move(l));
      }
    }
    if (progress && !progress(i + 1, n)) return make_error("ingest of '{}' cancelled", name);
  }

  std::vector<NormalizedPage> norm = normalize_document(layout);
  layout.clear();
  int n_undecodable = 0;
  for (int i = 0; i < n; ++i) {
    PageRecord& rec = pages[static_cast<size_t>(i)];
    NormalizedPage& np = norm[static_cast<size_t>(i)];
    rec.original_text = std::move(np.original_text);
    rec.text = std::move(np.text);
    rec.boilerplate = std::move(np.boilerplate);
    if (!rec.ocr && looks_undecodable(rec.original_text)) {
      // Garbage must not reach the model or the index: the original stays for inspection.
      rec.undecodable = true;
      rec.text.clear();
      rec.boilerplate.clear();
      ++n_undecodable;
      result.warnings.push_back({i + 1,
                                 "text layer unreliable (unmapped glyphs, symbols or letter "
                                 "soup): not used; run with --ocr to read it"});
    }
  }

  DocumentRecord doc;
  doc.title = r.title();
  if (doc.title.empty()) doc.title = pdf.stem().string();
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(pdf, ec);
  doc.path = ec ? name : abs.lexically_normal().string();
  doc.sha256 = *sha;
  doc.encrypted = r.encrypted();
  doc.repaired = r.repaired();
  if (doc.repaired) {
    result.warnings.insert(
        result.warnings.begin(),
        {0, "the file is damaged (" + r.repair_note() + "): stored what poppler could recover"});
  }
  bool any_text = false;
  for (const PageRecord& p : pages) {
    any_text |= !p.undecodable && p.text.find_first_not_of(" \n") != std::string::npos;
  }
  if (!any_text) {
    result.warnings.push_back(
        {0, opts.ocr ? "no page has text: the document will not be answered from"
                     : "no page has text: the document will not be answered from (try --ocr)"});
  }

  if (opts.reread_doc_id > 0) {
    auto stored =
        lib.replace_pages(opts.reread_doc_id, pages, opts.page_stored_hook, opts.page_stored_user);
    if (!stored) {
      return make_error("cannot store '{}' in the library: {}", name, stored.error().message);
    }
    result.doc_id = stored->id;
    result.document = std::move(*stored);
    return result;
  }
  auto id = lib.add_document(doc, pages, opts.page_stored_hook, opts.page_stored_user);
  if (!id) {
    // Another process may have stored the same file meanwhile: that is "already present".
    auto again = lib.find_document_by_sha256(*sha);
    if (again && *again) {
      auto d = lib.document(**again);
      if (!d) return d.error();
      result.doc_id = d->id;
      result.already_present = true;
      result.document = std::move(*d);
      result.warnings.clear();
      return result;
    }
    return make_error("cannot store '{}' in the library: {}", name, id.error().message);
  }
  auto stored = lib.document(*id);
  if (!stored) return stored.error();
  result.doc_id = *id;
  result.document = std::move(*stored);
  return result;
}

}  // namespace spw::app
