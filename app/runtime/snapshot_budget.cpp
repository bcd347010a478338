#include "app/runtime/snapshot_budget.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "engine/common/size.h"
#include "engine/kv/snapshot.h"
#include "engine/kv/spill_file.h"

namespace spw::app {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kDefaultBudget = int64_t{4} << 30;

bool is_saved_kv(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_regular_file(ec) && e.path().extension() == ".kv";
}

int64_t mtime_ms(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return 0;
  // file_clock to system_clock without clock_cast (libstdc++ 12 has it, others may not): the
  // offset between the two clocks now.
  const auto now_file = fs::file_time_type::clock::now();
  const auto now_sys = std::chrono::system_clock::now();
  const auto sys =
      now_sys + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - now_file);
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

}  // namespace

int64_t default_snapshot_budget(const fs::path& dir) {
  fs::path at = dir;
  std::error_code ec;
  while (!at.empty() && !fs::exists(at, ec)) at = at.parent_path();
  if (at.empty()) return kDefaultBudget;
  const fs::space_info sp = fs::space(at, ec);
  if (ec) return kDefaultBudget;
  return std::min<int64_t>(kDefaultBudget, static_cast<int64_t>(sp.available / 10));
}

int64_t effective_snapshot_budget(int64_t budget, const fs::path& dir) {
  return budget > 0 ? budget : default_snapshot_budget(dir);
}

SnapshotUsage snapshot_usage(const fs::path& dir) {
  SnapshotUsage u;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!is_saved_kv(*it)) continue;
    std::error_code sz;
    const auto n = it->file_size(sz);
    if (sz) continue;
    ++u.files;
    u.bytes += static_cast<int64_t>(n);
  }
  return u;
}

Expected<Eviction> enforce_snapshot_budget(Library& lib, const fs::path& dir, int64_t budget,
                                           const std::string& keep) {
  auto records = lib.snapshots();
  if (!records) return records.error();
  std::map<std::string, const SnapshotRecord*> by_path;
  for (const SnapshotRecord& r : *records) by_path[fs::path(r.path).lexically_normal()] = &r;

  struct File {
    fs::path path;
    int64_t bytes = 0;
    int64_t last_used_ms = 0;
    const SnapshotRecord* record = nullptr;
  };
  std::vector<File> files;
  Eviction ev;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!is_saved_kv(*it)) continue;
    std::error_code sz;
    const auto n = it->file_size(sz);
    if (sz) continue;
    File f;
    f.path = it->path().lexically_normal();
    f.bytes = static_cast<int64_t>(n);
    auto rec = by_path.find(f.path.string());
    if (rec != by_path.end()) {
      f.record = rec->second;
      f.last_used_ms = rec->second->last_used_ms;
    } else {
      f.last_used_ms = mtime_ms(f.path);
    }
    ev.after.files += 1;
    ev.after.bytes += f.bytes;
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) {
    return a.last_used_ms != b.last_used_ms ? a.last_used_ms < b.last_used_ms : a.path < b.path;
  });
  const fs::path kept = keep.empty() ? fs::path() : fs::path(keep).lexically_normal();
  for (const File& f : files) {
    if (ev.after.bytes <= budget) break;
    if (!kept.empty() && f.path == kept) continue;
    std::error_code rm;
    if (!fs::remove(f.path, rm) || rm) continue;
    if (f.record) {
      if (auto st = lib.remove_snapshot(f.record->model_fingerprint, f.record->prefix_hash); !st)
        return st.error();
    }
    ev.files_removed += 1;
    ev.bytes_removed += f.bytes;
    ev.after.files -= 1;
    ev.after.bytes -= f.bytes;
  }
  return ev;
}

StaleFiles remove_stale_files(const fs::path& snapshot_dir, const fs::path& spill_dir) {
  StaleFiles out;
  if (!snapshot_dir.empty()) out.snapshot_temps = kv::remove_stale_snapshot_temps(snapshot_dir);
  if (!spill_dir.empty()) out.spill_files = kv::remove_stale_spill_files(spill_dir);
  return out;
}

std::string snapshot_usage_text(const SnapshotUsage& u, int64_t budget) {
  return fmt::format("saved KV: {} {}, {} of a {} budget", u.files, u.files == 1 ? "file" : "files",
                     format_size(u.bytes), format_size(budget));
}

}  // namespace spw::app
