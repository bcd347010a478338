// The host KV tier's pages: 2 MiB transparent huge pages (madvise(MADV_HUGEPAGE) on aligned
// chunks) and their smaps figure, the --huge-pages and --numa-node settings, the NUMA topology
// read from sysfs, and that neither changes a logit. This machine has one NUMA node: binding to
// another node is checked only through a fake sysfs tree and choose_numa_node's answers.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/backend/device.h"
#include "engine/common/huge_pages.h"
#include "engine/common/numa.h"
#include "engine/kv/kv_storage.h"
#include "engine/sampling/sampler.h"
#include "tests/support/compare.h"
#include "tests/support/test_model.h"

namespace spw {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// ---- THP mode and smaps ---------------------------------------------------------------------

TEST(HugePages, ParsesTheThpModeFile) {
  EXPECT_EQ(parse_thp_mode("always [madvise] never\n"), ThpMode::Madvise);
  EXPECT_EQ(parse_thp_mode("[always] madvise never\n"), ThpMode::Always);
  EXPECT_EQ(parse_thp_mode("always madvise [never]\n"), ThpMode::Never);
  EXPECT_EQ(parse_thp_mode("always madvise never\n"), ThpMode::Unknown);
  EXPECT_EQ(parse_thp_mode(""), ThpMode::Unknown);
  EXPECT_EQ(read_thp_mode("/nonexistent/enabled"), ThpMode::Unknown);
  EXPECT_TRUE(thp_usable(ThpMode::Madvise));
  EXPECT_TRUE(thp_usable(ThpMode::Always));
  EXPECT_FALSE(thp_usable(ThpMode::Never));
  EXPECT_EQ(thp_mode_name(ThpMode::Madvise), "madvise");
}

TEST(HugePages, CountsAnonHugePagesOfTheRangesOnly) {
  // Three mappings: one wholly ours (4 MiB, 4096 kB huge), one another's (2048 kB huge), one
  // that holds ours and 2 MiB more (merged by the kernel: 6 MiB, 6144 kB huge), of which only
  // our 4 MiB count.
  const std::string smaps =
      "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n"
      "Size:               4096 kB\n"
      "AnonHugePages:      4096 kB\n"
      "7f0000400000-7f0000600000 rw-p 00000000 00:00 0 \n"
      "AnonHugePages:      2048 kB\n"
      "7f1000000000-7f1000600000 rw-p 00000000 00:00 0 \n"
      "Rss:                6144 kB\n"
      "AnonHugePages:      6144 kB\n"
      "VmFlags: rd wr mr mw me ac hg\n";
  const std::vector<AddressRange> ours = {{0x7f0000000000, 0x7f0000400000},
                                          {0x7f1000000000, 0x7f1000400000}};
  EXPECT_EQ(anon_huge_bytes(smaps, ours), 8 * kMiB);
  EXPECT_EQ(anon_huge_bytes(smaps, {}), 0);
  const std::vector<AddressRange> none = {{0x1000, 0x2000}};
  EXPECT_EQ(anon_huge_bytes(smaps, none), 0);
  EXPECT_EQ(anon_huge_bytes("garbage\nAnonHugePages: x kB\n", ours), 0);
}

// ---- The arena's chunks ---------------------------------------------------------------------

// Whether the kernel backs a plain probe mapping with huge pages: 4 MiB, 2 MiB-aligned,
// madvise(MADV_HUGEPAGE), every byte written, then counted in /proc/self/smaps. Where THP is on
// and even this gets none, the arena cannot either and its tests skip: user-mode qemu (the
// aarch64 tests run under it) takes madvise() without passing it on and writes its own smaps
// with AnonHugePages 0; a host whose memory is too fragmented for a 2 MiB page is the other case.
bool probe_gets_huge_pages() {
  static const bool gets = [] {
    const size_t bytes = 2 * static_cast<size_t>(kHugePageBytes);
    const size_t span = bytes + static_cast<size_t>(kHugePageBytes);
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    const uintptr_t align = static_cast<uintptr_t>(kHugePageBytes);
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(m) + align - 1) & ~(align - 1);
    auto* p = reinterpret_cast<char*>(begin);
    bool got = false;
    if (::madvise(p, bytes, MADV_HUGEPAGE) == 0) {
      std::memset(p, 1, bytes);
      const std::vector<AddressRange> range = {{begin, begin + bytes}};
      got = anon_huge_bytes(read_self_smaps(), range) > 0;
    }
    ::munmap(m, span);
    return got;
  }();
  return gets;
}

#define SPW_SKIP_WITHOUT_HUGE_PAGES(mode)                                                        \
  do {                                                                                           \
    if (!probe_gets_huge_pages()) {                                                              \
      GTEST_SKIP() << "THP is '" << thp_mode_name(mode)                                          \
                   << "', yet not even a plain 2 MiB-aligned, madvised and written mapping got " \
                      "a huge page in /proc/self/smaps (user-mode qemu ignores madvise and "     \
                      "reports AnonHugePages 0; or memory is too fragmented)";                   \
    }                                                                                            \
  } while (0)

TEST(HostArenaHugePages, ChunksAreHugePageBackedWhenThpAllowsIt) {
  const ThpMode mode = read_thp_mode();
  if (!thp_usable(mode)) {
    GTEST_SKIP() << "transparent huge pages are '" << thp_mode_name(mode)
                 << "' here (/sys/kernel/mm/transparent_hugepage/enabled): the arena maps 4 KiB "
                    "pages; needs madvise or always";
  }
  SPW_SKIP_WITHOUT_HUGE_PAGES(mode);
  // 40 slots of 1 MiB + 1 KiB: 63 to a chunk, one chunk of 40.04 MiB, mapped as 42 MiB (21
  // whole huge pages).
  const int64_t slot_bytes = kMiB + 1024;
  auto made = kv::HostArena::create(40, slot_bytes);
  ASSERT_TRUE(made.ok()) << made.error().message;
  kv::HostArena& a = **made;
  EXPECT_TRUE(a.wants_huge_pages());
  EXPECT_EQ(a.huge_page_bytes(), 0) << "nothing mapped yet";
  auto s0 = a.acquire(0);
  ASSERT_TRUE(s0.ok()) << s0.error().message;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*s0) % kHugePageBytes, 0u) << "chunk not 2 MiB-aligned";
  EXPECT_EQ(a.mapped_bytes(), 42 * kMiB);
  for (int64_t i = 0; i < 40; ++i) {
    auto s = a.acquire(i);
    ASSERT_TRUE(s.ok());
    std::memset(*s, static_cast<int>(i + 1), static_cast<size_t>(slot_bytes));
  }
  const int64_t huge = a.huge_page_bytes_now();
  std::printf("[ THP %s ] %lld of %lld bytes in huge pages\n",
              std::string(thp_mode_name(mode)).c_str(), static_cast<long long>(huge),
              static_cast<long long>(a.mapped_bytes()));
  EXPECT_GT(huge, 0) << "no huge page backs the touched arena (THP " << thp_mode_name(mode) << ")";
  EXPECT_LE(huge, a.mapped_bytes());
  EXPECT_EQ(huge % kHugePageBytes, 0);
  EXPECT_EQ(a.huge_page_bytes(), huge) << "the throttled figure reads the same right after";
  EXPECT_EQ(a.slot(39)[slot_bytes - 1], 40);  // the bytes are where they were written
}

TEST(HostArenaHugePages, OffMapsPlainPagesOfTheChunksBytes) {
  kv::HostMemoryOptions o;
  o.huge_pages = false;
  const int64_t slot_bytes = kMiB + 1024;
  auto made = kv::HostArena::create(40, slot_bytes, o);
  ASSERT_TRUE(made.ok()) << made.error().message;
  kv::HostArena& a = **made;
  EXPECT_FALSE(a.wants_huge_pages());
  auto s0 = a.acquire(0);
  ASSERT_TRUE(s0.ok()) << s0.error().message;
  EXPECT_EQ(a.mapped_bytes(), 40 * slot_bytes);  // as before huge pages: no rounding
  std::memset(*s0, 1, static_cast<size_t>(40 * slot_bytes));
  // MADV_NOHUGEPAGE: no huge page even where THP is "always".
  EXPECT_EQ(a.huge_page_bytes_now(), 0);
}

// ---- NUMA settings and topology -------------------------------------------------------------

TEST(Numa, ParsesTheSetting) {
  auto a = parse_numa_setting("auto");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode, NumaSetting::Mode::Auto);
  auto off = parse_numa_setting("OFF");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->mode, NumaSetting::Mode::Off);
  auto n = parse_numa_setting("1");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->mode, NumaSetting::Mode::Node);
  EXPECT_EQ(n->node, 1);
  EXPECT_EQ(numa_setting_name(*n), "1");
  EXPECT_EQ(numa_setting_name(*off), "off");
  EXPECT_EQ(numa_setting_name(NumaSetting{}), "auto");
  for (const char* bad : {"-1", "x", "", "1.5", "2000"}) {
    auto e = parse_numa_setting(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.error().message, std::string("--numa-node '") + bad +
                                     "': give auto, off or a node number (0, 1, ...)");
  }
}

TEST(Numa, ParsesSysfsCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  EXPECT_TRUE(parse_cpu_list("a-b").empty());
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(Numa, ReadsATwoNodeTopologyAndAPciDevicesNode) {
  TempDir dir;
  const std::filesystem::path root = dir.path();
  write_file(root / "node/node0/cpulist", "0-1\n");
  write_file(root / "node/node1/cpulist", "2-3\n");
  write_file(root / "node/possible", "0-1\n");  // not a node folder: ignored
  const NumaTopology t = read_numa_topology(root.string());
  EXPECT_EQ(t.n_nodes, 2);
  EXPECT_EQ(t.node_of_cpu, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(node_of_cpus(t, {2, 3}), 1);
  EXPECT_EQ(node_of_cpus(t, {0}), 0);
  EXPECT_EQ(node_of_cpus(t, {1, 2}), std::nullopt) << "threads on both nodes: no one node";
  EXPECT_EQ(node_of_cpus(t, {7}), std::nullopt);

  write_file(root / "pci/0000:65:00.0/numa_node", "1\n");
  write_file(root / "pci/0000:17:00.0/numa_node", "-1\n");
  EXPECT_EQ(pci_numa_node("0000:65:00.0", (root / "pci").string()), 1);
  EXPECT_EQ(pci_numa_node("0000:65:00.0", (root / "pci").string()), 1);
  EXPECT_EQ(pci_numa_node("0000:17:00.0", (root / "pci").string()), std::nullopt);
  EXPECT_EQ(pci_numa_node("0000:99:00.0", (root / "pci").string()), std::nullopt);
  EXPECT_EQ(pci_numa_node("", (root / "pci").string()), std::nullopt);

  // Auto on two nodes binds to the attending node where libnuma can; off never does.
  const Expected<int> autob = choose_numa_node(NumaSetting{}, t, 1);
  ASSERT_TRUE(autob.ok());
  EXPECT_EQ(*autob, numa_binding_available() ? 1 : -1);
  EXPECT_EQ(*choose_numa_node(NumaSetting{}, t, std::nullopt), -1);
  EXPECT_EQ(*choose_numa_node(NumaSetting{NumaSetting::Mode::Off, 0}, t, 1), -1);
}

TEST(Numa, ASingleNodeMachineChangesNothing) {
  NumaTopology one;
  one.n_nodes = 1;
  one.node_of_cpu = {0, 0};
  EXPECT_EQ(*choose_numa_node(NumaSetting{}, one, 0), -1) << "auto on one node binds nothing";
  auto far = choose_numa_node(NumaSetting{NumaSetting::Mode::Node, 3}, one, 0);
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.error().message, "--numa-node 3: this machine has 1 NUMA node (0 to 0)");

  // This machine, as a CPU session resolves it.
  const NumaTopology here = read_numa_topology();
  if (here.n_nodes != 1) {
    GTEST_SKIP() << "this machine has " << here.n_nodes << " NUMA nodes: the single-node path "
                 << "is checked on the fake topology above only";
  }
  auto o = host_memory_options(kv::KvSettings{}, cpu_attending_node());
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->numa_node, -1);
  EXPECT_TRUE(o->huge_pages);
  EXPECT_EQ(*o, kv::HostMemoryOptions{});
}

TEST(Numa, AnExplicitNodeBindsTheArenaStrictly) {
  if (!numa_binding_available()) {
    auto e = choose_numa_node(NumaSetting{NumaSetting::Mode::Node, 0}, read_numa_topology(), 0);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error().message,
              "--numa-node 0: this build has no libnuma (install libnuma-dev and rebuild), set "
              "--numa-node auto or off");
    GTEST_SKIP() << "built without libnuma (or the kernel has no NUMA policy calls)";
  }
  kv::KvSettings s;
  s.numa = NumaSetting{NumaSetting::Mode::Node, 0};
  auto o = host_memory_options(s, std::nullopt);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->numa_node, 0);
  EXPECT_TRUE(o->numa_strict);
  auto made = kv::HostArena::create(4, kMiB, *o);
  ASSERT_TRUE(made.ok());
  auto p = (*made)->acquire(3);
  ASSERT_TRUE(p.ok()) << p.error().message;
  std::memset(*p, 1, static_cast<size_t>(kMiB));
  EXPECT_EQ(numa_bound_node(*p), 0);

  auto plain = kv::HostArena::create(4, kMiB);
  ASSERT_TRUE(plain.ok());
  auto q = (*plain)->acquire(0);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(numa_bound_node(*q), -1) << "default: the kernel's placement, no policy";
}

// ---- A session: huge pages change no logit ----------------------------------------------------

TEST(HostArenaHugePages, SessionLogitsAreTheSameWithHugePagesOnAndOff) {
  TempDir dir;
  TestModelSpec spec;
  spec.n_ctx = 1024;
  ASSERT_TRUE(write_test_model(spec, dir.file("m.gguf")).ok());
  auto m = Model::load(dir.file("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::vector<int32_t> prompt(600);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 37) % 300);

  std::vector<std::vector<float>> logits;
  std::vector<kv::KvStats> stats;
  for (const bool huge : {true, false}) {
    SessionParams sp;
    sp.n_threads = 2;
    cpu::CpuSessionParams cp;
    cp.kv.block_size = 16;
    cp.kv.window_tokens = 32;  // all but the last few blocks spill to the host tier
    cp.kv.n_sinks = 0;
    cp.kv.huge_pages = huge;
    auto s = cpu::CpuSession::create(**m, sp, cp);
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_TRUE((*s)->eval(prompt, true).ok());
    std::vector<float> all((*s)->logits().begin(), (*s)->logits().end());
    for (int step = 0; step < 4; ++step) {
      const int32_t id = argmax((*s)->logits());
      ASSERT_TRUE((*s)->eval(std::span<const int32_t>(&id, 1), true).ok());
      all.insert(all.end(), (*s)->logits().begin(), (*s)->logits().end());
    }
    ASSERT_TRUE((*s)->flush_kv().ok());
    logits.push_back(std::move(all));
    stats.push_back((*s)->usage().kv);
    EXPECT_EQ((*s)->cache().host_arena().options().huge_pages, huge);
  }
  EXPECT_EQ(logits[0], logits[1]) << "huge pages changed a logit";
  for (const kv::KvStats& st : stats) {
    EXPECT_GT(st.host_blocks, 30);
    EXPECT_GT(st.host_mapped_bytes, 0);
    EXPECT_GE(st.host_mapped_bytes, st.host_bytes);
  }
  EXPECT_EQ(stats[1].host_huge_page_bytes, 0);
  // The huge-page figure where the kernel gives huge pages at all (see probe_gets_huge_pages);
  // the logits above are compared everywhere.
  if (thp_usable(read_thp_mode()) && probe_gets_huge_pages()) {
    EXPECT_GT(stats[0].host_huge_page_bytes, 0) << "THP " << thp_mode_name(read_thp_mode());
  }
}

}  // namespace
}  // namespace spw
