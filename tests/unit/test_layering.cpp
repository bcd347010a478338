// Layering (docs/DESIGN.md §2). Dependencies point down only: ui/ -> app/ -> engine/ -> kernels/,
// with formats/ (the GGUF block formats) the leaf under both engine/ and kernels/. Checked here:
// - engine/ and kernels/ are plain C++ and include no Qt header;
// - ui/ talks to app/ only and includes nothing from engine/; app/ includes nothing from ui/;
// - engine/ includes nothing from app/ or ui/, and of engine/ only engine/backend/cuda/ includes
//   kernels/ headers (app/ and ui/ include none either);
// - kernels/ includes only standard, CUDA, kernels/ and formats/ headers (nothing of engine/,
//   app/ or ui/), and formats/ includes standard headers only (no project header at all);
// - inside engine/, each folder includes only itself and the folders below it (kEngineOrder).
// Scans the source tree's #include lines, so a violation fails here with the file and line even
// when it would happen to compile.
#include <algorithm>
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

// Every `#include` line under `subdir` whose target matches `forbidden`, leaving out the files
// under `except` (a folder inside subdir, relative to the source tree; empty: none).
Scan scan_includes(const std::string& subdir, const std::regex& forbidden,
                   const std::string& except = {}) {
  Scan scan;
  const fs::path root = kSourceDir / subdir;
  if (!fs::is_directory(root)) return scan;
  const fs::path skipped = except.empty() ? fs::path() : kSourceDir / except;
  static const std::regex include_re(R"(^\s*#\s*include\s*([<"][^>"]*[>"]))");
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (!skipped.empty() && it->is_directory() && it->path() == skipped) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || !is_source_file(it->path())) continue;
    ++scan.n_files;
    std::ifstream in(it->path());
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      std::smatch m;
      if (std::regex_search(line, m, include_re) && std::regex_search(m[1].str(), forbidden)) {
        scan.offences.push_back(fs::relative(it->path(), kSourceDir).string() + ":" +
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
// The same for ui/, for app/ or ui/, and for kernels/.
const std::regex kUiHeader(R"(^[<"](\.\./)*ui/)");
const std::regex kAppOrUiHeader(R"(^[<"](\.\./)*(app|ui)/)");
const std::regex kKernelsHeader(R"(^[<"](\.\./)*kernels/)");
// Whatever kernels/ may not include: anything but a system header named without a folder
// (<cstdint>, <cuda_runtime.h>), a CUDA library header (<cub/cub.cuh>, <cuda/std/limits>) and
// the project's kernels/ and formats/ headers (without "..": a path climbing out of them leads
// somewhere else).
const std::regex kNotKernelsDependency(
    R"(^(?!<[A-Za-z0-9_]+(\.h)?>$)"
    R"(|<(cub|thrust|cuda|cooperative_groups|nv)/[^>.]*(\.[a-z]+)?>$)"
    R"(|["<](kernels|formats)/(?![^">]*\.\.)[^">]+[">]$))");
// Whatever formats/ may not include: anything but a C++ standard library header (<cstdint>,
// <string_view>), so no project header at all.
const std::regex kNotStandardHeader(R"(^(?!<[a-z_]+>$))");

TEST(Layering, SourceDirIsTheTree) {
  ASSERT_TRUE(fs::is_directory(kSourceDir / "engine"))
      << "SPILLWAY_SOURCE_DIR=" << kSourceDir << " has no engine/ folder";
  EXPECT_GT(scan_includes("engine", kQtHeader).n_files, 0) << "no source files found in engine/";
}

TEST(Layering, EngineIncludesNoQt) {
  const Scan scan = scan_includes("engine", kQtHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "engine/ must stay Qt-free (docs/DESIGN.md §2); Qt includes found:\n"
      << join(scan.offences);
}

TEST(Layering, KernelsIncludeNoQt) {
  const Scan scan = scan_includes("kernels", kQtHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "kernels/ must stay Qt-free (docs/DESIGN.md §2); Qt includes found:\n"
      << join(scan.offences);
}

TEST(Layering, UiIncludesNoEngineHeader) {
  const Scan scan = scan_includes("ui", kEngineHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "ui/ talks to app/ only, never to engine/ (docs/DESIGN.md §2); engine includes found:\n"
      << join(scan.offences);
}

TEST(Layering, AppIncludesNoUiHeader) {
  const Scan scan = scan_includes("app", kUiHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "app/ sits below ui/ and builds without Widgets (spillway-cli); ui includes found:\n"
      << join(scan.offences);
}

TEST(Layering, EngineIncludesNoAppOrUiHeader) {
  const Scan scan = scan_includes("engine", kAppOrUiHeader);
  EXPECT_TRUE(scan.offences.empty())
      << "engine/ sits below app/ and ui/ and builds without Qt; app or ui includes found:\n"
      << join(scan.offences);
}

TEST(Layering, OnlyTheCudaBackendIncludesKernels) {
  ASSERT_TRUE(fs::is_directory(kSourceDir / "engine/backend/cuda"));
  std::vector<std::string> offences;
  for (const Scan& scan :
       {scan_includes("engine", kKernelsHeader, "engine/backend/cuda"),
        scan_includes("app", kKernelsHeader), scan_includes("ui", kKernelsHeader)}) {
    offences.insert(offences.end(), scan.offences.begin(), scan.offences.end());
  }
  EXPECT_TRUE(offences.empty())
      << "kernels/ is the CUDA backend's (engine/backend/cuda): the rest of the engine, app/ and "
         "ui/ reach the GPU through it; kernels includes found:\n"
      << join(offences);
  // The pattern sees the includes it is meant to find, and the exception is what hides them.
  EXPECT_FALSE(scan_includes("engine/backend/cuda", kKernelsHeader).offences.empty());
  EXPECT_FALSE(scan_includes("engine", kKernelsHeader).offences.empty());
}

TEST(Layering, KernelsIncludeNothingOfEngineAppOrUi) {
  const Scan scan = scan_includes("kernels", kNotKernelsDependency);
  EXPECT_GT(scan.n_files, 0) << "no source files found in kernels/";
  EXPECT_TRUE(scan.offences.empty())
      << "kernels/ includes standard and CUDA headers, kernels/ and formats/ only (the GGUF "
         "block formats are in formats/ggml_format.h), never engine/, app/ or ui/; found:\n"
      << join(scan.offences);
}

TEST(Layering, FormatsIncludeNoProjectHeader) {
  const Scan scan = scan_includes("formats", kNotStandardHeader);
  EXPECT_GT(scan.n_files, 0) << "no source files found in formats/";
  EXPECT_TRUE(scan.offences.empty())
      << "formats/ is the leaf both engine/ and kernels/ include: C++ standard headers only, no "
         "project header; found:\n"
      << join(scan.offences);
}

// engine/'s folders bottom up: a folder may include itself and the folders before it.
const std::vector<std::string> kEngineOrder = {"common", "gguf", "tokenizer", "chat",    "sampling",
                                               "model",  "cpu",  "kv",        "session", "backend"};

// The engine folder an include names ("engine/kv/x.h" -> "kv"), or empty.
std::string engine_folder(const std::string& include) {
  static const std::regex re(R"(^[<"](?:\.\./)*engine/([a-z_]+)/)");
  std::smatch m;
  return std::regex_search(include, m, re) ? m[1].str() : std::string();
}

TEST(Layering, EngineFoldersIncludeOnlyTheFoldersBelowThem) {
  static const std::regex include_re(R"(^\s*#\s*include\s*([<"][^>"]*[>"]))");
  std::vector<std::string> offences;
  int n_files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kSourceDir / "engine")) {
    if (!entry.is_regular_file() || !is_source_file(entry.path())) continue;
    const fs::path rel = fs::relative(entry.path(), kSourceDir / "engine");
    const std::string own = rel.begin()->string();
    const auto own_at = std::find(kEngineOrder.begin(), kEngineOrder.end(), own);
    if (own_at == kEngineOrder.end()) {
      offences.push_back("engine/" + rel.string() + ": a folder not in kEngineOrder");
      continue;
    }
    ++n_files;
    std::ifstream in(entry.path());
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      const std::string target = engine_folder(m[1].str());
      if (target.empty()) continue;
      const auto target_at = std::find(kEngineOrder.begin(), kEngineOrder.end(), target);
      if (target_at == kEngineOrder.end() || target_at > own_at) {
        offences.push_back("engine/" + rel.string() + ":" + std::to_string(line_no) + ": " + line);
      }
    }
  }
  EXPECT_GT(n_files, 50);
  EXPECT_TRUE(offences.empty())
      << "engine/'s folders include only themselves and those below them (docs/DESIGN.md §2: "
      << "common, gguf, tokenizer, chat, sampling, model, cpu, kv, session, backend); found:\n"
      << join(offences);
}

TEST(Layering, EngineFolderPatternNamesTheFolder) {
  EXPECT_EQ(engine_folder("\"engine/kv/kv_cache.h\""), "kv");
  EXPECT_EQ(engine_folder("<engine/backend/device.h>"), "backend");
  EXPECT_EQ(engine_folder("\"../engine/cpu/ops.h\""), "cpu");
  EXPECT_EQ(engine_folder("\"formats/ggml_format.h\""), "");
  EXPECT_EQ(engine_folder("<vector>"), "");
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

TEST(Layering, FolderPatternsCatchWhatTheyShould) {
  EXPECT_TRUE(std::regex_search("\"ui/main_window.h\"", kUiHeader));
  EXPECT_TRUE(std::regex_search("<ui/chat/chat_view.h>", kUiHeader));
  EXPECT_TRUE(std::regex_search("\"../../ui/theme.h\"", kUiHeader));
  EXPECT_FALSE(std::regex_search("\"app/ui_state.h\"", kUiHeader));
  EXPECT_FALSE(std::regex_search("\"app/gui/x.h\"", kUiHeader));

  EXPECT_TRUE(std::regex_search("\"app/runtime/runtime.h\"", kAppOrUiHeader));
  EXPECT_TRUE(std::regex_search("\"ui/main_window.h\"", kAppOrUiHeader));
  EXPECT_TRUE(std::regex_search("<app/paths.h>", kAppOrUiHeader));
  EXPECT_TRUE(std::regex_search("\"../app/paths.h\"", kAppOrUiHeader));
  EXPECT_FALSE(std::regex_search("\"engine/app_info.h\"", kAppOrUiHeader));
  EXPECT_FALSE(std::regex_search("<apply.h>", kAppOrUiHeader));

  EXPECT_TRUE(std::regex_search("\"kernels/launch.h\"", kKernelsHeader));
  EXPECT_TRUE(std::regex_search("<kernels/quant_math.h>", kKernelsHeader));
  EXPECT_TRUE(std::regex_search("\"../../kernels/launch.h\"", kKernelsHeader));
  EXPECT_FALSE(std::regex_search("\"engine/backend/cuda/kernels.h\"", kKernelsHeader));
}

TEST(Layering, LeafPatternsCatchWhatTheyShould) {
  // kernels/: standard, CUDA, kernels/ and formats/ headers pass; the rest is caught.
  for (const char* ok :
       {"<cstdint>", "<cstring>", "<string_view>", "<math.h>", "<cuda_runtime.h>", "<cuda_fp16.h>",
        "<cub/cub.cuh>", "<cuda/std/limits>", "<cooperative_groups/reduce.h>",
        "\"kernels/launch.h\"", "\"kernels/quant_math.h\"", "\"formats/ggml_format.h\""}) {
    EXPECT_FALSE(std::regex_search(ok, kNotKernelsDependency)) << ok;
  }
  for (const char* bad :
       {"\"engine/gguf/ggml_types.h\"", "<engine/common/fp16.h>", "\"../engine/kv/kv.h\"",
        "\"app/paths.h\"", "\"ui/main_window.h\"", "\"tests/support/quant_blocks.h\"",
        "\"launch.h\"", "\"kernels/../engine/gguf/ggml_types.h\"", "<fmt/format.h>",
        "<gtest/gtest.h>", "<cub/../engine/x.h>"}) {
    EXPECT_TRUE(std::regex_search(bad, kNotKernelsDependency)) << bad;
  }
  // formats/: C++ standard headers only.
  for (const char* ok : {"<cstdint>", "<cstddef>", "<string_view>", "<type_traits>"}) {
    EXPECT_FALSE(std::regex_search(ok, kNotStandardHeader)) << ok;
  }
  for (const char* bad :
       {"\"engine/gguf/ggml_types.h\"", "\"kernels/common.h\"", "\"formats/other.h\"",
        "<formats/other.h>", "\"cstdint\"", "<cuda_fp16.h>", "<QString>", "<fmt/format.h>"}) {
    EXPECT_TRUE(std::regex_search(bad, kNotStandardHeader)) << bad;
  }
}

}  // namespace
