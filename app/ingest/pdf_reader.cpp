#include "app/ingest/pdf_reader.h"

#include <poppler-form.h>
#include <poppler-qt6.h>

#include <QFile>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>

namespace spw::app {
namespace {

// Poppler reports problems through one process-wide callback; each thread collects what its
// own reader triggers (a reader is used from one thread).
thread_local std::vector<std::string>* t_poppler_messages = nullptr;

void collect_poppler_message(const QString& message, const QVariant&) {
  if (t_poppler_messages && t_poppler_messages->size() < 1000)
    t_poppler_messages->push_back(message.toStdString());
}

void install_poppler_callback() {
  static std::once_flag once;
  std::call_once(once, [] { Poppler::setDebugErrorFunction(collect_poppler_message, QVariant()); });
}

// Messages poppler prints when it rebuilds a damaged file's cross-reference table.
bool is_repair_message(const std::string& m) {
  static const std::regex re("xref|trailer|reconstruct|startxref|PDF file is damaged",
                             std::regex::icase);
  return std::regex_search(m, re);
}

// A quick look at the file's end: "startxref N" must point at "xref" or at "<num> <gen> obj"
// (a cross-reference stream). Poppler silently rebuilds the table when it does not.
bool xref_pointer_ok(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff tail = std::min<std::streamoff>(size, 2048);
  std::string buf(static_cast<size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(buf.data(), tail);
  const size_t at = buf.rfind("startxref");
  if (at == std::string::npos) return false;
  size_t p = at + 9;
  while (p < buf.size() && std::isspace(static_cast<unsigned char>(buf[p]))) ++p;
  std::streamoff off = 0;
  size_t digits = 0;
  while (p < buf.size() && std::isdigit(static_cast<unsigned char>(buf[p])) && digits < 15) {
    off = off * 10 + (buf[p] - '0');
    ++p;
    ++digits;
  }
  if (digits == 0 || off <= 0 || off >= size) return false;
  std::string head(64, '\0');
  in.clear();
  in.seekg(off);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  static const std::regex obj(R"(^\s*(xref|\d+\s+\d+\s+obj))");
  return std::regex_search(head, obj);
}

Poppler::Page::Rotation to_rotation(int degrees) {
  switch (degrees) {
    case 90:
      return Poppler::Page::Rotate90;
    case 180:
      return Poppler::Page::Rotate180;
    case 270:
      return Poppler::Page::Rotate270;
    default:
      return Poppler::Page::Rotate0;
  }
}

struct Words {
  std::vector<WordBox> boxes;
  std::vector<bool> across;    // per box: its characters advance along y (turned text)
  std::vector<bool> backward;  // per box: its characters advance along -x (upside down here),
                               // not a right-to-left word
  int downward = 0;            // turned words of 2+ characters that read top to bottom
  int left_to_right = 0;       // words of 2+ characters whose characters advance along +x
  int measured = 0;            // words of 2+ characters
};

Words read_words(const Poppler::Page& page, int degrees) {
  Words out;
  for (const auto& tb : page.textList(to_rotation(degrees))) {
    const QString text = tb->text();
    const QRectF r = tb->boundingBox();
    out.boxes.push_back(WordBox{
        text.toStdString(), r.left(), r.top(), r.right(), r.bottom(), tb->hasSpaceAfter(), {}});
    // Glyph positions where the bidi reordering needs them (words with right-to-left letters):
    // poppler's character boxes are per code point.
    const bool rtl = std::any_of(text.begin(), text.end(), [](QChar c) {
      const auto d = c.direction();
      return d == QChar::DirR || d == QChar::DirAL;
    });
    if (rtl) {
      const auto n_cp = static_cast<int>(text.toUcs4().size());
      for (int i = 0; i < n_cp; ++i)
        out.boxes.back().char_x.push_back(tb->charBoundingBox(i).center().x());
    }
    bool across = false, backward = false;
    if (text.size() >= 2) {
      const QPointF a = tb->charBoundingBox(0).center();
      const QPointF b = tb->charBoundingBox(static_cast<int>(text.size()) - 1).center();
      ++out.measured;
      out.left_to_right += (b.x() - a.x()) > std::abs(b.y() - a.y());
      across = std::abs(b.y() - a.y()) > std::abs(b.x() - a.x());
      out.downward += across && b.y() > a.y();
      backward = !rtl && (a.x() - b.x()) > std::abs(b.y() - a.y());
    } else {
      across = r.width() > 1.2 * r.height();  // one turned glyph: its box lies on its side
    }
    out.across.push_back(across);
    out.backward.push_back(backward);
  }
  return out;
}

std::string field_value(const Poppler::FormField& f) {
  switch (f.type()) {
    case Poppler::FormField::FormText:
      return static_cast<const Poppler::FormFieldText&>(f).text().toStdString();
    case Poppler::FormField::FormButton: {
      const auto& b = static_cast<const Poppler::FormFieldButton&>(f);
      if (b.buttonType() == Poppler::FormFieldButton::Push) return {};
      return b.state() ? "checked" : "unchecked";
    }
    case Poppler::FormField::FormChoice: {
      const auto& c = static_cast<const Poppler::FormFieldChoice&>(f);
      const QStringList choices = c.choices();
      QStringList picked;
      for (const int i : c.currentChoices()) {
        if (i >= 0 && i < choices.size()) picked << choices[i];
      }
      if (picked.isEmpty() && c.isEditable()) return c.editChoice().toStdString();
      return picked.join(", ").toStdString();
    }
    default:
      return {};
  }
}

}  // namespace

struct PdfReader::Impl {
  std::unique_ptr<Poppler::Document> doc;
  std::vector<std::string> messages;
  bool xref_ok = true;
  bool encrypted = false;
};

// Routes poppler's messages to this reader for the duration of a call.
class MessageScope final {
 public:
  explicit MessageScope(std::vector<std::string>& sink) : prev_(t_poppler_messages) {
    t_poppler_messages = &sink;
  }
  ~MessageScope() { t_poppler_messages = prev_; }
  MessageScope(const MessageScope&) = delete;
  MessageScope& operator=(const MessageScope&) = delete;

 private:
  std::vector<std::string>* prev_;
};

PdfReader::PdfReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PdfReader::~PdfReader() = default;

Expected<std::unique_ptr<PdfReader>> PdfReader::open(const std::filesystem::path& file,
                                                     const std::string& password) {
  install_poppler_callback();
  const std::string name = file.string();
  {
    std::ifstream probe(file, std::ios::binary);
    if (!probe) return make_error("cannot open PDF '{}': {}", name, std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>();
  MessageScope scope(impl->messages);
  impl->doc = Poppler::Document::load(QFile::decodeName(file.c_str()));
  if (!impl->doc) {
    return make_error("cannot open PDF '{}': not a PDF, or damaged beyond repair", name);
  }
  impl->encrypted = impl->doc->isEncrypted() || impl->doc->isLocked();
  if (impl->doc->isLocked()) {
    if (password.empty()) {
      return make_error("'{}' is encrypted: a password is needed (--password)", name);
    }
    const QByteArray pw = QByteArray::fromStdString(password);
    if (impl->doc->unlock(pw, pw) || impl->doc->isLocked()) {
      return make_error("'{}': wrong password", name);
    }
  }
  if (impl->doc->numPages() <= 0) {
    return make_error("cannot open PDF '{}': no page could be read (damaged beyond repair)", name);
  }
  impl->doc->setRenderHint(Poppler::Document::Antialiasing);
  impl->doc->setRenderHint(Poppler::Document::TextAntialiasing);
  impl->xref_ok = xref_pointer_ok(file);
  return std::unique_ptr<PdfReader>(new PdfReader(std::move(impl)));
}

int PdfReader::n_pages() const { return impl_->doc->numPages(); }
bool PdfReader::encrypted() const { return impl_->encrypted; }

bool PdfReader::repaired() const {
  if (!impl_->xref_ok) return true;
  for (const std::string& m : impl_->messages) {
    if (is_repair_message(m)) return true;
  }
  return false;
}

std::string PdfReader::repair_note() const {
  for (const std::string& m : impl_->messages) {
    if (is_repair_message(m)) return m;
  }
  return impl_->xref_ok ? std::string() : "startxref does not point at a cross-reference table";
}

std::string PdfReader::title() const {
  return impl_->doc->info(QStringLiteral("Title")).trimmed().toStdString();
}

Expected<ExtractedPage> PdfReader::page(int index) {
  MessageScope scope(impl_->messages);
  std::unique_ptr<Poppler::Page> pg = impl_->doc->page(index);
  if (!pg) return make_error("page {} cannot be read", index + 1);
  ExtractedPage out;
  const QSizeF size = pg->pageSizeF();
  Words words = read_words(*pg, 0);
  // Text that mostly does not run left to right is turned until it does (rotated text on an
  // unrotated page; the page's own /Rotate is already applied by poppler).
  if (words.measured >= 3 && words.left_to_right * 2 < words.measured) {
    for (const int deg : {90, 270, 180}) {
      Words turned = read_words(*pg, deg);
      if (turned.left_to_right * 2 > turned.measured &&
          turned.left_to_right > words.left_to_right) {
        words = std::move(turned);
        out.rotated_text = deg;
        break;
      }
    }
  }
  const bool swap = out.rotated_text == 90 || out.rotated_text == 270;
  out.width = swap ? size.height() : size.width();
  out.height = swap ? size.width() : size.height();
  for (const WordBox& w : words.boxes) {
    if (w.text.find_first_not_of(" \t\r\n") != std::string::npos) {
      out.has_text = true;
      break;
    }
  }
  // Text turned against the page's own (a margin stamp, a sideways label) would cut across the
  // rows: it is laid out apart and follows the page's text.
  std::vector<WordBox> main, turned, upside_down;
  for (size_t k = 0; k < words.boxes.size(); ++k) {
    (words.across[k]     ? turned
     : words.backward[k] ? upside_down
                         : main)
        .push_back(std::move(words.boxes[k]));
  }
  out.lines = layout_page(main);
  // Words upside down against the page's text (an upright scanner stamp on a page read turned
  // by 180 degrees) would read last word first: they are laid out turned, apart, after it.
  if (!upside_down.empty()) {
    const double w = out.width, h = out.height;
    for (WordBox& b : upside_down)
      b = WordBox{b.text, w - b.x1, h - b.y1, w - b.x0, h - b.y0, b.space_after, {}};
    std::vector<LayoutLine> lines = layout_page(upside_down);
    for (LayoutLine& l : lines) {
      l = LayoutLine{l.text,   w - l.x1,      h - l.y1,        w - l.x0,
                     h - l.y0, l.block_start, l.margin_number, l.margin_mark};
    }
    if (!lines.empty()) lines.front().block_start = true;
    for (LayoutLine& l : lines) out.lines.push_back(std::move(l));
  }
  if (!turned.empty()) {
    // In reading order along the turned baseline.
    const bool down = 2 * words.downward >= static_cast<int>(turned.size());
    std::stable_sort(turned.begin(), turned.end(), [&](const WordBox& a, const WordBox& b) {
      return down ? a.y0 < b.y0 : a.y1 > b.y1;
    });
    LayoutLine line;
    line.block_start = true;
    line.x0 = turned.front().x0;
    line.y0 = turned.front().y0;
    line.x1 = turned.front().x1;
    line.y1 = turned.front().y1;
    for (const WordBox& t : turned) {
      if (!line.text.empty()) line.text += ' ';
      line.text += t.text;
      line.x0 = std::min(line.x0, t.x0);
      line.y0 = std::min(line.y0, t.y0);
      line.x1 = std::max(line.x1, t.x1);
      line.y1 = std::max(line.y1, t.y1);
    }
    out.lines.push_back(std::move(line));
  }
  for (const auto& field : pg->formFields()) {
    if (!field || field->type() == Poppler::FormField::FormSignature) continue;
    if (field->type() == Poppler::FormField::FormButton &&
        static_cast<const Poppler::FormFieldButton&>(*field).buttonType() ==
            Poppler::FormFieldButton::Push)
      continue;
    QString name = field->fullyQualifiedName();
    if (name.isEmpty()) name = field->name();
    out.form_lines.push_back(name.toStdString() + ": " + field_value(*field));
  }
  return out;
}

QImage PdfReader::render(int index, double dpi) {
  MessageScope scope(impl_->messages);
  std::unique_ptr<Poppler::Page> pg = impl_->doc->page(index);
  if (!pg) return {};
  return pg->renderToImage(dpi, dpi);
}

bool PdfReader::has_ink(int index) {
  const QImage img = render(index, 18).convertToFormat(QImage::Format_Grayscale8);
  for (int y = 0; y < img.height(); ++y) {
    const uchar* row = img.constScanLine(y);
    for (int x = 0; x < img.width(); ++x) {
      if (row[x] < 200) return true;
    }
  }
  return false;
}

double PdfReader::ink_outside_text(int index, const std::vector<LayoutLine>& lines) {
  constexpr double kDpi = 18;
  constexpr int kGrid = 12;
  const QImage img = render(index, kDpi).convertToFormat(QImage::Format_Grayscale8);
  if (img.isNull() || img.width() <= 0 || img.height() <= 0) return 0;
  const double scale = kDpi / 72.0;
  std::vector<bool> covered(static_cast<size_t>(img.width()) * img.height(), false);
  for (const LayoutLine& l : lines) {
    if (l.y1 < 0) continue;
    const int x0 = std::max(0, static_cast<int>(l.x0 * scale) - 1);
    const int y0 = std::max(0, static_cast<int>(l.y0 * scale) - 1);
    const int x1 = std::min(img.width() - 1, static_cast<int>(l.x1 * scale) + 1);
    const int y1 = std::min(img.height() - 1, static_cast<int>(l.y1 * scale) + 1);
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) covered[static_cast<size_t>(y) * img.width() + x] = true;
    }
  }
  std::vector<bool> cell(kGrid * kGrid, false);
  for (int y = 0; y < img.height(); ++y) {
    const uchar* row = img.constScanLine(y);
    for (int x = 0; x < img.width(); ++x) {
      if (row[x] >= 200 || covered[static_cast<size_t>(y) * img.width() + x]) continue;
      cell[static_cast<size_t>((y * kGrid / img.height()) * kGrid + x * kGrid / img.width())] =
          true;
    }
  }
  return static_cast<double>(std::count(cell.begin(), cell.end(), true)) / (kGrid * kGrid);
}

}  // namespace spw::app
