#include "engine/kv/spill_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "engine/common/size.h"
#include "engine/kv/kv_cache.h"

namespace spw::kv {
namespace {

constexpr std::string_view kPrefix = "spillway-spill-";
constexpr std::string_view kSuffix = ".kv";

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Distinct names for the caches of one process (several sessions, tests).
std::atomic<uint64_t> g_spill_counter{0};

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The paths of this process's open spill files, for unlink_spill_files_for_signal(): fixed
// buffers claimed with an atomic flag, so a signal handler can read them without locks or
// allocation. A process holding more spill files than slots still removes them at exit.
constexpr int kSignalSlots = 32;
struct SignalSlot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 holds a path
  char path[4096];
};
SignalSlot g_signal_slots[kSignalSlots];

int register_for_signal(const std::string& path) {
  if (path.size() >= sizeof g_signal_slots[0].path) return -1;
  for (int i = 0; i < kSignalSlots; ++i) {
    int expected = 0;
    if (g_signal_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_signal_slots[i].path, path.c_str(), path.size() + 1);
      g_signal_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_for_signal(int slot) {
  if (slot >= 0) g_signal_slots[slot].state.store(0, std::memory_order_release);
}

}  // namespace

void unlink_spill_files_for_signal() noexcept {
  for (SignalSlot& s : g_signal_slots) {
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  }
}

int64_t spill_file_pid(const std::string& file_name) {
  std::string_view s = file_name;
  if (s.size() <= kPrefix.size() + kSuffix.size() || s.substr(0, kPrefix.size()) != kPrefix ||
      s.substr(s.size() - kSuffix.size()) != kSuffix) {
    return -1;
  }
  s = s.substr(kPrefix.size(), s.size() - kPrefix.size() - kSuffix.size());
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return -1;
  const std::string_view pid = s.substr(0, dash);
  if (!all_digits(pid) || !all_digits(s.substr(dash + 1)) || pid.size() > 9) return -1;
  return std::stoll(std::string(pid));
}

Expected<std::unique_ptr<SpillFile>> SpillFile::create(const std::string& dir, int64_t n_slots,
                                                       int64_t slot_bytes, int64_t budget) {
  const int64_t size = n_slots * slot_bytes;
  std::string path;
  int fd = -1;
  // O_EXCL: a leftover of an earlier process with our pid is never reused; take the next name.
  for (int attempt = 0; attempt < 1000 && fd < 0; ++attempt) {
    path = fmt::format("{}/{}{}-{}{}", dir, kPrefix, static_cast<long>(getpid()),
                       g_spill_counter.fetch_add(1), kSuffix);
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return make_error("cannot create the spill file in {}: {} (--spill-dir sets the folder)", dir,
                      errno_text(errno));
  }

  const auto fail = [&](Error e) {
    ::close(fd);
    ::unlink(path.c_str());
    return e;
  };
  uint8_t* map = nullptr;
  if (size > 0) {
    // posix_fallocate returns the error number (it does not set errno).
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (err == ENOSPC || err == EDQUOT) {
      // The file holds what the context can use, which may be less than the budget.
      return fail(
          make_error("not enough disk space in {} for the {} spill file (--disk-budget {}): {}",
                     dir, format_size(size), format_size(budget), errno_text(err)));
    }
    if (err != 0)
      return fail(make_error("cannot create the spill file in {}: {}", dir, errno_text(err)));
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return fail(
          make_error("cannot create the spill file in {}: mmap: {}", dir, errno_text(errno)));
    }
    map = static_cast<uint8_t*>(p);
  }
  return std::unique_ptr<SpillFile>(new SpillFile(std::move(path), fd, n_slots, slot_bytes, map));
}

SpillFile::SpillFile(std::string path, int fd, int64_t n_slots, int64_t slot_bytes, uint8_t* map)
    : path_(std::move(path)), fd_(fd), n_slots_(n_slots), slot_bytes_(slot_bytes), map_(map) {
  signal_slot_ = register_for_signal(path_);
}

SpillFile::~SpillFile() {
  unregister_for_signal(signal_slot_);
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(n_slots_ * slot_bytes_));
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

const uint8_t* SpillFile::slot(int64_t i) const {
  assert(i >= 0 && i < n_slots_);
  return map_ + i * slot_bytes_;
}

Error SpillFile::write_error(int err) const {
  return make_error("writing the spill file {} failed: {}", path_, errno_text(err));
}

Status SpillFile::write_slot(int64_t i, const uint8_t* src) const {
  assert(i >= 0 && i < n_slots_);
  int64_t done = 0;
  while (done < slot_bytes_) {
    const ssize_t w = ::pwrite(fd_, src + done, static_cast<size_t>(slot_bytes_ - done),
                               static_cast<off_t>(i * slot_bytes_ + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return write_error(errno);
    }
    if (w == 0) return write_error(EIO);  // no progress: would loop for ever
    done += w;
  }
  return Status::Ok();
}

int remove_stale_spill_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return 0;
  const int64_t self = getpid();
  int removed = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const int64_t pid = spill_file_pid(it->path().filename().string());
    if (pid <= 0 || pid == self) continue;
    // ESRCH: no such process. EPERM means it runs under another user: keep its file.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm_ec;
    if (fs::remove(it->path(), rm_ec)) ++removed;
  }
  return removed;
}

}  // namespace spw::kv
