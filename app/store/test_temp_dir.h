// For the app/store and app/ingest tests: a temporary folder removed with its contents.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace spw::app::testing {

class TempDir final {
 public:
  explicit TempDir(const std::string& prefix = "spillway-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path_ = std::filesystem::path(::mkdtemp(tmpl.data()));
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace spw::app::testing
