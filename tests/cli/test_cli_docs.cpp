// spillway-cli ingest and docs, black box: JSON shapes, exit codes, the library under
// --data-dir, re-ingest, search, remove, encrypted files.
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cli_runner.h"
#include "tests/support/json_output.h"
#include "tests/support/pdf_builder.h"

namespace spw {
namespace {

namespace fs = std::filesystem;
using test::on_path;
using test::PdfDoc;
using test::PdfPage;
using test::PdfTextRun;

fs::path tmp_dir() { return cli_test_dir("spillway-cli-docs-test"); }

CliResult run(const std::vector<std::string>& args) {
  return run_cli(SPILLWAY_CLI_PATH, args, tmp_dir().string());
}

// A fresh data folder per test.
fs::path data_dir(const std::string& name) {
  const fs::path d = tmp_dir() / ("data-" + name);
  fs::remove_all(d);
  return d;
}

std::vector<std::string> with_data(std::vector<std::string> args, const fs::path& dir) {
  args.push_back("--data-dir");
  args.push_back(dir.string());
  return args;
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    try {
      v.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "not one JSON object per line: " << e.what() << "\n" << out;
    }
  }
  return v;
}

// Three pages of text; the word "indemnification" only on page 2.
fs::path text_pdf(const std::string& name, const std::string& tag = "") {
  PdfDoc doc;
  doc.title = "Service Agreement" + tag;
  const std::vector<std::string> bodies = {"Introduction and background" + tag + ".",
                                           "The indemnification clause applies.",
                                           "Signatures of both parties."};
  for (const std::string& body : bodies) {
    PdfPage p;
    p.runs.push_back(PdfTextRun{72, 700, 12, body, 0, 0});
    doc.pages.push_back(p);
  }
  const fs::path f = tmp_dir() / name;
  test::write_file(f, test::build_pdf(doc));
  return f;
}

fs::path scanned_pdf(const std::string& name) {
  PdfPage scan;
  test::PdfImage im;
  im.width = im.height = 16;
  im.gray.assign(256, '\x10');
  im.x = 72;
  im.y = 400;
  im.w = im.h = 200;
  scan.images.push_back(im);
  PdfPage text;
  text.runs.push_back(PdfTextRun{72, 700, 12, "Typed second page.", 0, 0});
  const fs::path f = tmp_dir() / name;
  test::write_file(f, test::build_pdf(PdfDoc{{scan, text}, "", {}}));
  return f;
}

TEST(CliDocs, IngestJsonIsOneLinePerFileWithTheDocumentsNumbers) {
  const fs::path d = data_dir("ingest-json");
  const fs::path a = text_pdf("a.pdf");
  const fs::path b = scanned_pdf("b.pdf");
  const CliResult r = run(with_data({"ingest", a.string(), b.string(), "--json"}, d));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const auto& ja = lines[0];
  EXPECT_EQ(ja["file"], a.string());
  EXPECT_TRUE(ja["id"].is_number_integer());
  EXPECT_EQ(ja["pages"], 3);
  EXPECT_EQ(ja["characters"], 28 + 35 + 27);
  EXPECT_EQ(ja["title"], "Service Agreement");
  EXPECT_EQ(ja["already_present"], false);
  EXPECT_EQ(ja["encrypted"], false);
  EXPECT_EQ(ja["repaired"], false);
  EXPECT_EQ(ja["scanned_pages"], 0);
  EXPECT_EQ(ja["warnings"], nlohmann::json::array());
  const auto& jb = lines[1];
  EXPECT_NE(jb["id"], ja["id"]);
  EXPECT_EQ(jb["pages"], 2);
  EXPECT_EQ(jb["scanned_pages"], 1);
  EXPECT_EQ(jb["no_text"], false);
  ASSERT_EQ(jb["warnings"].size(), 1u);
  EXPECT_EQ(jb["warnings"][0]["page"], 1);
  EXPECT_NE(jb["warnings"][0]["message"].get<std::string>().find("--ocr"), std::string::npos);
  // The user is told on stderr too; the database is where --data-dir says.
  EXPECT_NE(r.err.find("p. 1: no text layer"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(d / "library.sqlite3"));
}

TEST(CliDocs, ReingestPrintsTheSameIdAndStoresNothing) {
  const fs::path d = data_dir("reingest");
  const fs::path a = text_pdf("again.pdf");
  const CliResult first = run(with_data({"ingest", "--json", a.string()}, d));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CliResult second = run(with_data({"ingest", "--json", a.string()}, d));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto j1 = test::parse_one_object(first.out);
  const auto j2 = test::parse_one_object(second.out);
  EXPECT_EQ(j2["id"], j1["id"]);
  EXPECT_EQ(j2["already_present"], true);
  const CliResult text = run(with_data({"ingest", a.string()}, d));
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_EQ(text.out,
            "document " + j1["id"].dump() + ": " + a.string() + " (already in the library)\n");
  const CliResult list = run(with_data({"docs", "list", "--json"}, d));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const auto jl = test::parse_one_object(list.out);
  ASSERT_EQ(jl["documents"].size(), 1u);
  EXPECT_EQ(jl["documents"][0]["id"], j1["id"]);
  EXPECT_EQ(jl["documents"][0]["pages"], 3);
}

TEST(CliDocs, ShowTextPrintsEachPageAfterItsMarker) {
  const fs::path d = data_dir("show-text");
  const CliResult in = run(with_data({"ingest", "--json", text_pdf("show.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  const CliResult all = run(with_data({"docs", "show", id, "--text"}, d));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out,
            "[p. 1]\nIntroduction and background.\n\n[p. 2]\nThe indemnification clause "
            "applies.\n\n[p. 3]\nSignatures of both parties.\n");
  const CliResult one = run(with_data({"docs", "show", id, "--page", "2", "--text"}, d));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "[p. 2]\nThe indemnification clause applies.\n");
  const CliResult bad = run(with_data({"docs", "show", id, "--page", "9"}, d));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err, "error: document " + id + " has no page 9 (it has 3 pages)\n");
  const CliResult plain = run(with_data({"docs", "show", id}, d));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("title:      Service Agreement"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("pages:      3"), std::string::npos) << plain.out;
}

// A scan without any text, stored; `docs show` says how to read it, and `ingest --ocr` of the
// same file reads it again in place: the same id (its name kept), the page now OCR'd.
TEST(CliDocs, OcrOfAStoredScanReadsItInPlace) {
  const fs::path d = data_dir("ocr-in-place");
  PdfPage scan;
  test::PdfImage im;
  im.width = im.height = 16;
  im.gray.assign(256, '\x10');
  im.x = im.y = 72;
  im.w = im.h = 200;
  scan.images.push_back(im);
  const fs::path f = tmp_dir() / "all-scan.pdf";
  test::write_file(f, test::build_pdf(PdfDoc{{scan}, "", {}}));
  const CliResult in = run(with_data({"ingest", "--json", f.string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  const CliResult shown = run(with_data({"docs", "show", id}, d));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("characters: 0\nflags:      scanned:1,no-text\ntext:       none "
                           "(scanned, 0 tokens; OCR reads it in place: `spillway-cli ingest "
                           "--ocr " +
                           f.string() + "`)\n"),
            std::string::npos)
      << shown.out;
  const CliResult text = run(with_data({"docs", "show", id, "--text"}, d));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("(in place: same id, chats and jobs kept), `spillway-cli ingest --ocr " +
                          f.string() + "`"),
            std::string::npos)
      << text.err;
  ASSERT_EQ(run(with_data({"docs", "rename", id, "Board minutes 2019"}, d)).exit_code, 0);

  const CliResult again = run(with_data({"ingest", "--ocr", "--json", f.string()}, d));
  if (again.err.find("has no tesseract") != std::string::npos)
    GTEST_SKIP() << "this build has no OCR";
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const nlohmann::json j = test::parse_one_object(again.out);
  EXPECT_EQ(j["id"].dump(), id) << "read again in place, not added as a new document";
  EXPECT_TRUE(j["reread"].get<bool>());
  EXPECT_FALSE(j["already_present"].get<bool>());
  EXPECT_EQ(j["ocr_pages"].get<int>(), 1);
  EXPECT_EQ(j["name"], "Board minutes 2019");
  const CliResult list = run(with_data({"docs", "list", "--json"}, d));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(test::parse_one_object(list.out)["documents"].size(), 1u);
  // Read already: a third --ocr finds nothing left to read and leaves it as it is.
  const CliResult third = run(with_data({"ingest", "--ocr", "--json", f.string()}, d));
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_TRUE(test::parse_one_object(third.out)["already_present"].get<bool>());
  EXPECT_FALSE(test::parse_one_object(third.out)["reread"].get<bool>());
}

// docs rename: the name is shown by list, show and search; the PDF's title is kept; "" goes
// back to the cleaned title; an unknown id and an over-long name are errors with the numbers.
TEST(CliDocs, RenameShowsTheNameAndKeepsThePdfTitle) {
  const fs::path d = data_dir("rename");
  const CliResult in = run(with_data({"ingest", "--json", text_pdf("rename.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  const CliResult ren = run(with_data({"docs", "rename", id, "  Acme   services\tcontract "}, d));
  ASSERT_EQ(ren.exit_code, 0) << ren.err;
  EXPECT_EQ(ren.out, "document " + id +
                         ": renamed to \"Acme services contract\" (PDF title: \"Service "
                         "Agreement\")\n");
  const CliResult list = run(with_data({"docs", "list"}, d));
  EXPECT_NE(list.out.find("  Acme services contract\n"), std::string::npos) << list.out;
  const CliResult show = run(with_data({"docs", "show", id}, d));
  EXPECT_NE(show.out.find("title:      Acme services contract\npdf title:  Service Agreement\n"),
            std::string::npos)
      << show.out;
  const CliResult hits = run(with_data({"docs", "search", "--json", "indemnification"}, d));
  ASSERT_EQ(hits.exit_code, 0) << hits.err;
  EXPECT_EQ(test::parse_one_object(hits.out)["hits"][0]["title"], "Acme services contract");
  const nlohmann::json shown_json =
      test::parse_one_object(run(with_data({"docs", "show", "--json", id}, d)).out);
  EXPECT_EQ(shown_json["title"], "Service Agreement");
  EXPECT_EQ(shown_json["name"], "Acme services contract");
  EXPECT_EQ(shown_json["display_title"], "Acme services contract");

  const CliResult back = run(with_data({"docs", "rename", id, ""}, d));
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out,
            "document " + id + ": shown as \"Service Agreement\" (its own title; no name given)\n");
  const CliResult missing = run(with_data({"docs", "rename", "99", "x"}, d));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "error: cannot rename document 99: no document with id 99\n");
  const CliResult long_name = run(with_data({"docs", "rename", id, std::string(301, 'x')}, d));
  EXPECT_EQ(long_name.exit_code, 1);
  EXPECT_EQ(long_name.err, "error: cannot rename document " + id +
                               ": a document name is at most 300 characters; this one has 301\n");
}

TEST(CliDocs, ShowJsonHasPerPageObjectsWithTheScannedFlag) {
  const fs::path d = data_dir("show-json");
  const CliResult in = run(with_data({"ingest", "--json", scanned_pdf("s.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  const CliResult r = run(with_data({"docs", "show", id, "--json"}, d));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = test::parse_one_object(r.out);
  EXPECT_EQ(j["id"].dump(), id);
  EXPECT_EQ(j["scanned_pages"], 1);
  ASSERT_EQ(j["pages"].size(), 2u);
  EXPECT_EQ(j["pages"][0]["page"], 1);
  EXPECT_EQ(j["pages"][0]["scanned"], true);
  EXPECT_EQ(j["pages"][0]["ocr"], false);
  EXPECT_EQ(j["pages"][0]["characters"], 0);
  EXPECT_EQ(j["pages"][1]["page"], 2);
  EXPECT_EQ(j["pages"][1]["scanned"], false);
  EXPECT_EQ(j["pages"][1]["characters"], 18);
  EXPECT_FALSE(j["pages"][1].contains("text"));
  const CliResult t = run(with_data({"docs", "show", id, "--json", "--text"}, d));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(test::parse_one_object(t.out)["pages"][1]["text"], "Typed second page.");
}

TEST(CliDocs, SearchReturnsDocumentPageAndHighlightedSnippet) {
  const fs::path d = data_dir("search");
  const CliResult in = run(with_data({"ingest", "--json", text_pdf("q.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const auto id = test::parse_one_object(in.out)["id"];
  const CliResult r = run(with_data({"docs", "search", "Indemnification", "--json"}, d));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = test::parse_one_object(r.out);
  EXPECT_EQ(j["query"], "Indemnification");
  ASSERT_EQ(j["hits"].size(), 1u);
  EXPECT_EQ(j["hits"][0]["document"], id);
  EXPECT_EQ(j["hits"][0]["page"], 2);
  EXPECT_EQ(j["hits"][0]["snippet"], "The **indemnification** clause applies.");
  const CliResult text = run(with_data({"docs", "search", "indemnification"}, d));
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_EQ(text.out,
            id.dump() + " p. 2  Service Agreement: The **indemnification** clause applies.\n");
  const CliResult none = run(with_data({"docs", "search", "zebra", "--json"}, d));
  ASSERT_EQ(none.exit_code, 0);
  EXPECT_EQ(test::parse_one_object(none.out)["hits"], nlohmann::json::array());
  // The query is normalised as the page text is: the U+FB01 ligature in "indemni\uFB01cation".
  const CliResult lig = run(with_data({"docs", "search",
                                       "indemni\xEF\xAC\x81"
                                       "cation",
                                       "--json"},
                                      d));
  ASSERT_EQ(lig.exit_code, 0) << lig.err;
  EXPECT_EQ(test::parse_one_object(lig.out)["hits"].size(), 1u) << lig.out;
  // Page numbers are 1 or more, said plainly.
  const CliResult p0 = run(with_data({"docs", "show", id.dump(), "--page", "0"}, d));
  EXPECT_EQ(p0.exit_code, 2);  // refused while the command line is parsed
  EXPECT_NE(p0.err.find("a page number is 1 or more, not '0'"), std::string::npos) << p0.err;
}

// Four pages in other scripts, drawn with a font whose ToUnicode map sends ASCII letters to
// Hebrew, Arabic, Chinese and Japanese code points: the Hebrew line in one run as displayed
// (visual order), the Arabic word glyph by glyph from the right as a shaper places them (the
// fatha over its letter), the others left to right.
fs::path scripts_pdf(const std::string& name) {
  PdfDoc doc;
  doc.title = "Scripts";
  // Hebrew: a=ש b=ל c=ו d=ם e=ע. Arabic: f=ح g=ب h=ي i=fatha.
  doc.custom_map = {{'a', 0x05E9}, {'b', 0x05DC}, {'c', 0x05D5}, {'d', 0x05DD}, {'e', 0x05E2},
                    {'f', 0x062D}, {'g', 0x0628}, {'h', 0x064A}, {'i', 0x064E}};
  // Chinese: 东北电气发展股份有限公司 as A..L; Japanese: 東京都の人口は増えている。 as M..Y.
  const char32_t chinese[] = {0x4E1C, 0x5317, 0x7535, 0x6C14, 0x53D1, 0x5C55,
                              0x80A1, 0x4EFD, 0x6709, 0x9650, 0x516C, 0x53F8};
  const char32_t japanese[] = {0x6771, 0x4EAC, 0x90FD, 0x306E, 0x4EBA, 0x53E3, 0x306F,
                               0x5897, 0x3048, 0x3066, 0x3044, 0x308B, 0x3002};
  for (int k = 0; k < 12; ++k) doc.custom_map.emplace_back('A' + k, chinese[k]);
  for (int k = 0; k < 13; ++k) doc.custom_map.emplace_back('M' + k, japanese[k]);
  const char* lines[] = {"dbce dcba",  // ם ל ו ע, ם ו ל ש left to right: שלום עולם
                         "", "ABCDEFGHIJKL", "MNOPQRSTUVWXY"};
  for (const char* line : lines) {
    PdfPage p;
    p.runs.push_back(PdfTextRun{72, 700, 14, line, 1, 0});
    doc.pages.push_back(p);
  }
  // حَبيبي: ح, its fatha, ب ي ب ي, each glyph 1 pt left of the one before (the mapped codes
  // have no width in this font, so poppler's boxes are points: 1 pt is no word gap).
  PdfPage& arabic = doc.pages[1];
  arabic.runs.clear();
  const std::pair<double, const char*> glyphs[] = {{0, "f"}, {0, "i"}, {1, "g"},
                                                   {2, "h"}, {3, "g"}, {4, "h"}};
  for (const auto& [k, g] : glyphs)
    arabic.runs.push_back(PdfTextRun{200 - 1.0 * k, 700, 14, g, 1, 0});
  const fs::path f = tmp_dir() / name;
  test::write_file(f, test::build_pdf(doc));
  return f;
}

TEST(CliDocs, SearchFindsHebrewArabicWithAndWithoutHarakatAndCjkSubPhrases) {
  const fs::path d = data_dir("scripts");
  const CliResult in = run(with_data({"ingest", "--json", scripts_pdf("scripts.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  // Stored in logical order, the harakat kept in the text.
  const CliResult show = run(with_data({"docs", "show", id, "--text"}, d));
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.out,
            "[p. 1]\n\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D\n\n"
            "[p. 2]\n\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A\n\n"
            "[p. 3]\n\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94\xE5\x8F\x91\xE5\xB1\x95\xE8"
            "\x82\xA1\xE4\xBB\xBD\xE6\x9C\x89\xE9\x99\x90\xE5\x85\xAC\xE5\x8F\xB8\n\n"
            "[p. 4]\n\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\xE3\x81\xAE\xE4\xBA\xBA\xE5\x8F\xA3\xE3"
            "\x81\xAF\xE5\xA2\x97\xE3\x81\x88\xE3\x81\xA6\xE3\x81\x84\xE3\x82\x8B\xE3\x80\x82\n");
  // Each query: the pages it must hit (none: no hit).
  const std::vector<std::pair<std::string, std::vector<int>>> queries = {
      {"\xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D", {1}},                  // עולם
      {"\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D", {1}},                  // שלום
      {"\xD8\xAD\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A", {2}},          // حبيبي, without harakat
      {"\xD8\xAD\xD9\x8E\xD8\xA8\xD9\x8A\xD8\xA8\xD9\x8A", {2}},  // حَبيبي, as written
      {"\xE4\xB8\x9C\xE5\x8C\x97\xE7\x94\xB5\xE6\xB0\x94", {3}},  // 东北电气, inside the name
      {"\xE8\x82\xA1\xE4\xBB\xBD\xE6\x9C\x89\xE9\x99\x90", {3}},  // 股份有限
      {"\xE4\xBA\xBA\xE5\x8F\xA3\xE3\x81\xAF", {4}},              // 人口は
      {"\xE5\xA2\x97\xE3\x81\x88\xE3\x81\xA6", {4}},              // 増えて
      {"\xE4\xB8\x9C\xE5\x8C\x97\xE5\x85\xAC\xE5\x8F\xB8", {}},   // 东北公司: not adjacent
      {"\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D\xD7\x99\xD7\x9D", {}},   // שלומים: not on any page
  };
  for (const auto& [q, want] : queries) {
    const CliResult r = run(with_data({"docs", "search", q, "--json"}, d));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = test::parse_one_object(r.out);
    std::vector<int> got;
    for (const auto& hit : j["hits"]) got.push_back(hit["page"].get<int>());
    EXPECT_EQ(got, want) << q << ": " << r.out;
  }
}

// A query that starts with '-' reads as an option: the error says to put -- before it, and
// with -- it is searched (the '-' is not a word character, so it finds the word).
TEST(CliDocs, AQueryStartingWithADashNeedsDoubleDashAndTheErrorSaysSo) {
  const fs::path d = data_dir("dash");
  ASSERT_EQ(run(with_data({"ingest", text_pdf("dash.pdf").string()}, d)).exit_code, 0);
  const CliResult r = run(with_data({"docs", "search", "-indemnification"}, d));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "error: '-indemnification' reads as an option of docs search; to search for words "
            "that start with '-', put -- before the query: spillway-cli docs search -- "
            "-indemnification\n");
  EXPECT_EQ(r.out, "");
  const CliResult ok =
      run({"--data-dir", d.string(), "docs", "search", "--limit", "5", "--", "-indemnification"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.rfind("1 p. 2  Service Agreement: ", 0), 0u) << ok.out;
}

TEST(CliDocs, RemoveDeletesTheDocument) {
  const fs::path d = data_dir("remove");
  const CliResult in = run(with_data({"ingest", "--json", text_pdf("r.pdf").string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const std::string id = test::parse_one_object(in.out)["id"].dump();
  const CliResult r = run(with_data({"docs", "remove", id, "--json"}, d));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::parse_one_object(r.out)["removed"].dump(), id);
  const CliResult list = run(with_data({"docs", "list", "--json"}, d));
  EXPECT_EQ(test::parse_one_object(list.out)["documents"], nlohmann::json::array());
  const CliResult again = run(with_data({"docs", "remove", id}, d));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.err, "error: no document with id " + id + "\n");
  const CliResult search = run(with_data({"docs", "search", "indemnification", "--json"}, d));
  EXPECT_EQ(test::parse_one_object(search.out)["hits"], nlohmann::json::array());
}

TEST(CliDocs, AFailedFileExitsOneAndTheOthersAreStillIngested) {
  const fs::path d = data_dir("partial");
  const fs::path junk = tmp_dir() / "junk.pdf";
  test::write_file(junk, "not a pdf\n");
  const fs::path a = text_pdf("p1.pdf", " one");
  const fs::path b = text_pdf("p2.pdf", " two");
  const CliResult r =
      run(with_data({"ingest", "--json", a.string(), junk.string(), b.string()}, d));
  EXPECT_EQ(r.exit_code, 1);
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_TRUE(lines[0].contains("id"));
  EXPECT_EQ(lines[1]["file"], junk.string());
  EXPECT_EQ(lines[1]["error"],
            "cannot open PDF '" + junk.string() + "': not a PDF, or damaged beyond repair");
  EXPECT_FALSE(lines[1].contains("id"));
  EXPECT_TRUE(lines[2].contains("id"));
  EXPECT_NE(r.err.find("error: cannot open PDF '" + junk.string() + "'"), std::string::npos);
  const CliResult list = run(with_data({"docs", "list", "--json"}, d));
  EXPECT_EQ(test::parse_one_object(list.out)["documents"].size(), 2u);
}

TEST(CliDocs, EncryptedFileNeedsPasswordAndSaysSo) {
  if (!on_path("qpdf")) GTEST_SKIP() << "qpdf not installed (needed to encrypt the test PDF)";
  const fs::path d = data_dir("encrypted");
  const fs::path plain = text_pdf("plain-enc.pdf");
  const fs::path locked = tmp_dir() / "locked.pdf";
  const std::string cmd = "qpdf --encrypt pw-user pw-owner 256 -- " + shell_quote(plain.string()) +
                          " " + shell_quote(locked.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const CliResult none = run(with_data({"ingest", locked.string()}, d));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("error: '" + locked.string() +
                          "' is encrypted: a password is needed (--password)"),
            std::string::npos)
      << none.err;
  const CliResult wrong = run(with_data({"ingest", locked.string(), "--password", "x"}, d));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("wrong password"), std::string::npos) << wrong.err;
  const CliResult ok =
      run(with_data({"ingest", "--json", "--password", "pw-user", locked.string()}, d));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const auto j = test::parse_one_object(ok.out);
  EXPECT_EQ(j["encrypted"], true);
  EXPECT_EQ(j["pages"], 3);
  // Stored now: a wrong password is still an error; the right one or none is "already in the
  // library".
  const CliResult stored_wrong = run(with_data({"ingest", locked.string(), "--password", "x"}, d));
  EXPECT_EQ(stored_wrong.exit_code, 1);
  EXPECT_EQ(stored_wrong.out, "");
  EXPECT_EQ(stored_wrong.err, "error: '" + locked.string() +
                                  "': wrong password (the file is already in the library as "
                                  "document 1: its stored text is read without a password)\n");
  for (const std::vector<std::string>& pw :
       {std::vector<std::string>{"--password", "pw-user"}, std::vector<std::string>{}}) {
    std::vector<std::string> args = {"ingest", locked.string()};
    args.insert(args.end(), pw.begin(), pw.end());
    const CliResult again = run(with_data(args, d));
    EXPECT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(again.out, "document 1: " + locked.string() + " (already in the library)\n");
  }
}

TEST(CliDocs, DataDirIsAcceptedAnywhereOnTheLine) {
  const fs::path d = data_dir("anywhere");
  const CliResult in = run({"--data-dir", d.string(), "ingest", text_pdf("w.pdf").string()});
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const CliResult before = run({"--data-dir", d.string(), "docs", "list", "--json"});
  const CliResult after = run({"docs", "list", "--json", "--data-dir", d.string()});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(before.out, after.out);
  EXPECT_EQ(test::parse_one_object(after.out)["documents"].size(), 1u);
  EXPECT_TRUE(fs::exists(d / "library.sqlite3"));
}

TEST(CliDocs, ErrorsForUnknownIdsAndMissingCommands) {
  const fs::path d = data_dir("errors");
  const CliResult show = run(with_data({"docs", "show", "999"}, d));
  EXPECT_EQ(show.exit_code, 1);
  EXPECT_EQ(show.out, "");
  EXPECT_EQ(show.err, "error: no document with id 999\n");
  const CliResult bare = run(with_data({"docs"}, d));
  EXPECT_EQ(bare.exit_code, 1);
  for (const char* limit : {"0", "-1"}) {
    const CliResult lim = run(with_data({"docs", "search", "x", "--limit", limit}, d));
    EXPECT_EQ(lim.exit_code, 2) << limit << ": a value out of range, refused while parsing";
    EXPECT_EQ(lim.err, std::string("error: --limit must be 1..2147483647, got ") + limit + "\n");
  }
  const CliResult no_files = run(with_data({"ingest"}, d));
  EXPECT_EQ(no_files.exit_code, 1);
  const CliResult empty = run(with_data({"docs", "list"}, d));
  EXPECT_EQ(empty.exit_code, 0);
  EXPECT_EQ(empty.out, "");
  EXPECT_NE(empty.err.find("the library is empty"), std::string::npos);
}

TEST(CliDocs, SharedTracemonkeyTextThroughTheCli) {
  const fs::path pdf = fs::path(SPILLWAY_SHARED_DIR) / "pdfs" / "tracemonkey.pdf";
  if (!fs::exists(pdf)) GTEST_SKIP() << "shared test PDFs not found at " << pdf;
  const fs::path d = data_dir("tracemonkey");
  const CliResult in = run(with_data({"ingest", "--json", pdf.string()}, d));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  const auto j = test::parse_one_object(in.out);
  EXPECT_EQ(j["pages"], 14);
  const CliResult t = run(with_data({"docs", "show", j["id"].dump(), "--page", "1", "--text"}, d));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.rfind(
                "[p. 1]\nTrace-based Just-in-Time Type Specialization for Dynamic\nLanguages\n", 0),
            0u)
      << t.out.substr(0, 200);
  EXPECT_NE(t.out.find("We present an alternative\ncompilation technique"), std::string::npos);
}

}  // namespace
}  // namespace spw
