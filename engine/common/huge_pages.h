// Transparent huge pages for the host KV tier's arena (docs/DESIGN.md §4.1): the kernel's THP
// mode and how many bytes of a set of mappings are backed by huge pages, as /proc/self/smaps
// says (its AnonHugePages lines).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace spw {

/// 2 MiB: the x86-64 and arm64 (4 KiB base pages) PMD size THP uses.
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

/// /sys/kernel/mm/transparent_hugepage/enabled: "always [madvise] never" names the mode in use.
enum class ThpMode : uint8_t { Always, Madvise, Never, Unknown };

/// The bracketed word of that file's text; Unknown when there is none.
ThpMode parse_thp_mode(std::string_view text);
/// The mode now (Unknown where the file is missing: no THP in this kernel).
ThpMode read_thp_mode(const std::string& path = "/sys/kernel/mm/transparent_hugepage/enabled");
/// "always", "madvise", "never" or "unknown".
std::string_view thp_mode_name(ThpMode m);
/// Whether madvise(MADV_HUGEPAGE) gets huge pages in this mode (always or madvise).
inline bool thp_usable(ThpMode m) { return m == ThpMode::Always || m == ThpMode::Madvise; }

/// A mapping's address range [begin, end), bytes.
struct AddressRange {
  uintptr_t begin = 0, end = 0;
};

/// Bytes of `ranges` backed by huge pages in smaps text (/proc/self/smaps): for each mapping
/// that overlaps them, its AnonHugePages (kB, i.e. KiB), at most the bytes of the overlap (the
/// kernel may merge adjacent mappings of the same flags into one, and smaps reports per
/// mapping). Ranges must not overlap each other.
int64_t anon_huge_bytes(std::string_view smaps, std::span<const AddressRange> ranges);

/// /proc/self/smaps now; empty where unreadable. Reading it walks every mapping's page tables
/// (a few milliseconds with a large model mapped): callers keep it off the per-token path.
std::string read_self_smaps();

}  // namespace spw
