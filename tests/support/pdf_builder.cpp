#include "tests/support/pdf_builder.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace spw::test {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '(' || c == ')' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// cos/sin of multiples of 90 degrees, exactly.
std::pair<int, int> cos_sin(int angle) {
  switch (((angle % 360) + 360) % 360) {
    case 90:
      return {0, 1};
    case 180:
      return {-1, 0};
    case 270:
      return {0, -1};
    default:
      return {1, 0};
  }
}

std::string content_stream(const PdfPage& page) {
  std::ostringstream s;
  for (size_t i = 0; i < page.images.size(); ++i) {
    const PdfImage& im = page.images[i];
    s << "q " << num(im.w) << " 0 0 " << num(im.h) << ' ' << num(im.x) << ' ' << num(im.y)
      << " cm /Im" << i << " Do Q\n";
  }
  for (const PdfTextRun& r : page.runs) {
    const auto [c, sn] = cos_sin(r.angle);
    s << "BT /F" << (r.font == 1 ? 2 : 1) << ' ' << num(r.size) << " Tf ";
    if (r.char_spacing != 0) s << num(r.char_spacing) << " Tc ";
    s << c << ' ' << sn << ' ' << -sn << ' ' << c << ' ' << num(r.x) << ' ' << num(r.y) << " Tm ("
      << escape(r.text) << ") Tj ET\n";
  }
  return s.str();
}

std::string to_unicode_cmap(const std::vector<std::pair<unsigned char, char32_t>>& map) {
  std::ostringstream s;
  s << "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
       "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
       "/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
       "1 begincodespacerange\n<00> <FF>\nendcodespacerange\n";
  s << map.size() << " beginbfchar\n";
  for (const auto& [code, cp] : map) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "<%02X> <%04X>\n", code, static_cast<unsigned>(cp));
    s << buf;
  }
  s << "endbfchar\nendcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n";
  return s.str();
}

}  // namespace

std::string build_pdf(const PdfDoc& doc) {
  // Objects: 1 catalog, 2 pages, 3 info, 4 font F1, 5 font F2, 6 F2's ToUnicode, then per page.
  std::vector<std::string> objs(6);
  std::vector<std::string> field_refs;
  std::string kids;
  auto add = [&](std::string body) {
    objs.push_back(std::move(body));
    return static_cast<int>(objs.size());
  };
  auto stream = [](const std::string& dict_extra, const std::string& data) {
    return "<< " + dict_extra + " /Length " + std::to_string(data.size()) + " >>\nstream\n" + data +
           "\nendstream";
  };
  for (const PdfPage& page : doc.pages) {
    const int content = add(stream("", content_stream(page)));
    std::string xobjects;
    for (size_t i = 0; i < page.images.size(); ++i) {
      const PdfImage& im = page.images[i];
      const int id = add(
          stream("/Type /XObject /Subtype /Image /Width " + std::to_string(im.width) + " /Height " +
                     std::to_string(im.height) + " /ColorSpace /DeviceGray /BitsPerComponent 8",
                 im.gray));
      xobjects += "/Im" + std::to_string(i) + ' ' + std::to_string(id) + " 0 R ";
    }
    const int page_id = static_cast<int>(objs.size()) + 1 + static_cast<int>(page.fields.size());
    std::string annots;
    for (const PdfTextField& f : page.fields) {
      const int id =
          add("<< /Type /Annot /Subtype /Widget /FT /Tx /T (" + escape(f.name) + ") /V (" +
              escape(f.value) + ") /DA (/F1 10 Tf 0 g) /F 4 /Rect [" + num(f.x0) + ' ' + num(f.y0) +
              ' ' + num(f.x1) + ' ' + num(f.y1) + "] /P " + std::to_string(page_id) + " 0 R >>");
      annots += std::to_string(id) + " 0 R ";
      field_refs.push_back(std::to_string(id) + " 0 R");
    }
    std::string p = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 " + num(page.width) + ' ' +
                    num(page.height) + "] /Contents " + std::to_string(content) +
                    " 0 R /Resources << /Font << /F1 4 0 R /F2 5 0 R >>";
    if (!xobjects.empty()) p += " /XObject << " + xobjects + ">>";
    p += " >>";
    if (page.rotate != 0) p += " /Rotate " + std::to_string(page.rotate);
    if (!annots.empty()) p += " /Annots [" + annots + "]";
    p += " >>";
    const int id = add(p);
    kids += std::to_string(id) + " 0 R ";
  }
  std::string catalog = "<< /Type /Catalog /Pages 2 0 R";
  if (!field_refs.empty()) {
    catalog += " /AcroForm << /Fields [";
    for (const std::string& r : field_refs) catalog += r + ' ';
    catalog += "] /DR << /Font << /F1 4 0 R >> >> /DA (/F1 10 Tf 0 g) >>";
  }
  objs[0] = catalog + " >>";
  objs[1] =
      "<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(doc.pages.size()) + " >>";
  objs[2] = doc.title.empty() ? "<< /Producer (spillway pdf_builder) >>"
                              : "<< /Title (" + escape(doc.title) + ") >>";
  objs[3] = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>";
  std::string diffs;
  for (const auto& [code, cp] : doc.custom_map) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%u /uni%04X ", static_cast<unsigned>(code),
                  static_cast<unsigned>(cp));
    diffs += cp == 0xFB01 ? std::to_string(code) + " /fi " : buf;
  }
  objs[4] =
      "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Type /Encoding "
      "/BaseEncoding /WinAnsiEncoding /Differences [" +
      diffs + "] >> /ToUnicode 6 0 R >>";
  objs[5] = stream("", to_unicode_cmap(doc.custom_map));

  std::string out = "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n";
  std::vector<size_t> offsets;
  for (size_t i = 0; i < objs.size(); ++i) {
    offsets.push_back(out.size());
    out += std::to_string(i + 1) + " 0 obj\n" + objs[i] + "\nendobj\n";
  }
  const size_t xref = out.size();
  out += "xref\n0 " + std::to_string(objs.size() + 1) + "\n0000000000 65535 f \n";
  for (const size_t off : offsets) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%010zu 00000 n \n", off);
    out += buf;
  }
  out += "trailer\n<< /Size " + std::to_string(objs.size() + 1) +
         " /Root 1 0 R /Info 3 0 R >>\nstartxref\n" + std::to_string(xref) + "\n%%EOF\n";
  return out;
}

void write_file(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<PdfTextRun> words_at(const std::vector<std::pair<double, std::string>>& words, double y,
                                 double size) {
  std::vector<PdfTextRun> out;
  for (const auto& [x, w] : words) out.push_back(PdfTextRun{x, y, size, w, 0, 0});
  return out;
}

std::vector<PdfTextRun> column(const std::vector<std::string>& lines, double x, double top_y,
                               double size, double leading) {
  std::vector<PdfTextRun> out;
  for (size_t i = 0; i < lines.size(); ++i)
    out.push_back(PdfTextRun{x, top_y - leading * static_cast<double>(i), size, lines[i], 0, 0});
  return out;
}

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::filesystem::path candidate =
        std::filesystem::path(dirs.substr(start, end - start)) / tool;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace spw::test
