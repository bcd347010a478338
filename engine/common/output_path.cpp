#include "engine/common/output_path.h"

#include <filesystem>
#include <system_error>

namespace spw {

Expected<std::string> resolve_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return make_error("no output path given");
  std::error_code ec;
  fs::path target(path);
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40) return make_error("{}: too many levels of symbolic links", path);
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) return make_error("{}: cannot read the link: {}", path, ec.message());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const auto st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    return make_error("{}: exists and is not a regular file; refusing to replace it", path);
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) return make_error("{}: {} is not a folder", path, dir.string());
    return make_error("{}: folder {} does not exist", path, dir.string());
  }
  return target.string();
}

}  // namespace spw
