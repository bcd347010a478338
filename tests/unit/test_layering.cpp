// Layering (DESIGN.md §2): engine/ and kernels/ are plain C++ and include no Qt header; ui/ talks
// to app/ only and includes nothing from engine/. Scans the source tree, so a violation fails
// here with the file and line even when it would happen to compile.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {
namespace fs = std::filesystem;

const fs::path kSourceDir = SPILLWAY_SOURCE_DIR;

bool is_source_file(const fs::path& p) {
  static const std::vector<std::string> kExts = {".h",   ".hpp", ".hh",  ".c",   ".cc", ".cpp",
                                                 ".cxx", ".cu",  ".cuh", ".inl", ".inc"};
  const std::string ext = p.extension().string();
  for (const auto& e : kExts) {
    if (ext == e) return true;
  }
  return false;
}

struct Scan {
  int n_files = 0;
  std::vector<std::string> offences;  // "engine/x.cpp:12: #include <QString>"
};

// Every `#include` line under `subdir` whose target matches `forbidden`.
Scan scan_includes(const std::string& subdir, const std::regex& forbidden) {
  Scan scan;
  const fs::path root = kSourceDir / subdir;
  if (!fs::is_directory(root)) return scan;
  static const std::regex include_re(R"(^\s*#\s*include\s*([<"][^>"]*[>"]))");
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || !is_source_file(entry.path())) continue;
    ++scan.n_files;
    std::ifstream in(entry.path());
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      std::smatch m;
      if (std::regex_search(line, m, include_re) && std::regex_search(m[1].str(), forbidden)) {
        scan.offences.push_back(fs::relative(entry.path(), kSourceDir).string() + ":" +
                                std::to_string(line_no) + ": " + line);
      }
    }
  }
  return scan;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

// <QString>, "QObject", <QtCore/QString>, <Qt>: Qt's headers all start with Q.
const std::regex kQtHeader(R"(^[<"]Q[A-Za-z_])");
// "engine/...", <engine/...>, "../engine/...".
const std::regex kEngineHeader(R"(^[<"](\.\./)*engine/)");

TEST(Layering, SourceDirIsTheTree) {
  ASSERT_TRUE(fs::is_directory(kSourceDir / "engine"))
      << "SPILLWAY_SOURCE_DIR=" << kSourceDir << " has no engine/ folder";
  EXPECT_GT(scan_includes("engine", kQtHeader).n_files, 0) << "no source files found in engine/";
}

TEST(Layering, EngineIncludesNoQt) {
  const Scan scan = scan_includes("engine", kQtHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "engine/ must stay Qt-free (DESIGN.md §2); Qt includes found:\n"
      << join(scan.offences);
}

TEST(Layering, KernelsIncludeNoQt) {
  const Scan scan = scan_includes("kernels", kQtHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "kernels/ must stay Qt-free (DESIGN.md §2); Qt includes found:\n"
      << join(scan.offences);
}

TEST(Layering, UiIncludesNoEngineHeader) {
  const Scan scan = scan_includes("ui", kEngineHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "ui/ talks to app/ only, never to engine/ (DESIGN.md §2); engine includes found:\n"
      << join(scan.offences);
}

TEST(Layering, PatternsCatchWhatTheyShould) {
  EXPECT_TRUE(std::regex_search("<QString>", kQtHeader));
  EXPECT_TRUE(std::regex_search("<QtCore/QObject>", kQtHeader));
  EXPECT_TRUE(std::regex_search("\"QWidget\"", kQtHeader));
  EXPECT_FALSE(std::regex_search("<queue>", kQtHeader));
  EXPECT_FALSE(std::regex_search("\"engine/quant/q4_k.h\"", kQtHeader));
  EXPECT_TRUE(std::regex_search("\"engine/gguf/gguf.h\"", kEngineHeader));
  EXPECT_TRUE(std::regex_search("<engine/model/model.h>", kEngineHeader));
  EXPECT_TRUE(std::regex_search("\"../engine/kv/kv.h\"", kEngineHeader));
  EXPECT_FALSE(std::regex_search("\"app/engine_worker.h\"", kEngineHeader));
}

}  // namespace
