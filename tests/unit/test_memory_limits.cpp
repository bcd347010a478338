// Running out of memory is an error with the numbers and the setting to change, never
// std::bad_alloc or a crash; and the host KV tier takes address space as blocks spill into it,
// not for the whole context up front. The limits are real: each case runs in a forked child
// under RLIMIT_AS set a little above what the process maps already.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/common/size.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/model.h"
#include "tests/support/test_model.h"

namespace spw {

// AddressSanitizer aborts on a failed allocation instead of returning null, and its shadow
// memory needs terabytes of address space: these limits are checked by the Release run.
#if defined(__SANITIZE_ADDRESS__)
#define SPW_SKIP_UNDER_ASAN() \
  GTEST_SKIP() << "address-space limits are not checked under AddressSanitizer"
#else
#define SPW_SKIP_UNDER_ASAN() static_cast<void>(0)
#endif
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

int64_t vm_size_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::atoll(line.c_str() + 7) * 1024;
  return 0;
}

// Runs `fn` in a forked child whose address space may grow `headroom` bytes beyond what it maps
// now; returns the text fn returned ("exception: ..." if it threw, "signal N" if it died).
std::string run_limited(int64_t headroom, const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const int64_t limit = vm_size_bytes() + headroom;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    struct rlimit rl = {static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    std::string out;
    if (::setrlimit(RLIMIT_AS, &rl) != 0) {
      out = "setrlimit failed";
    } else {
      try {
        out = fn();
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
      }
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return text;
}

// Whether RLIMIT_AS holds here: a child limited to 32 MiB beyond what it maps asks for 256 MiB.
// User-mode qemu (the aarch64 tests run under it) accepts setrlimit(RLIMIT_AS) and enforces
// nothing; there no case below can fail, and they skip.
bool address_space_limit_holds() {
  const auto map_256_mib = [] {
    const auto bytes = static_cast<size_t>(256 * kMiB);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return std::string("refused");
    ::munmap(p, bytes);
    return std::string("mapped");
  };
  static const bool holds = run_limited(32 * kMiB, map_256_mib) == "refused";
  return holds;
}

#define SPW_SKIP_WITHOUT_RLIMIT_AS()                                                          \
  do {                                                                                        \
    if (!address_space_limit_holds()) {                                                       \
      GTEST_SKIP() << "RLIMIT_AS is not enforced here: a child limited to 32 MiB more "       \
                      "mapped 256 MiB (user-mode qemu takes setrlimit and enforces nothing)"; \
    }                                                                                         \
  } while (0)

// ---- The host arena ---------------------------------------------------------------------------

TEST(HostArena, MapsAChunkWhenItsFirstSlotIsUsedAndKeepsAddresses) {
  // Slots of 1 MiB: 64 to a chunk; 150 slots are 3 chunks, the last of 22 slots.
  auto made = kv::HostArena::create(150, kMiB);
  ASSERT_TRUE(made.ok()) << made.error().message;
  kv::HostArena& a = **made;
  EXPECT_EQ(a.slots_per_chunk(), 64);
  EXPECT_EQ(a.mapped_bytes(), 0);
  auto s0 = a.acquire(0);
  ASSERT_TRUE(s0.ok()) << s0.error().message;
  EXPECT_EQ(a.mapped_bytes(), 64 * kMiB);
  std::memset(*s0, 0x5A, static_cast<size_t>(kMiB));
  auto s63 = a.acquire(63);
  ASSERT_TRUE(s63.ok());
  EXPECT_EQ(*s63, *s0 + 63 * kMiB);  // the same chunk
  EXPECT_EQ(a.mapped_bytes(), 64 * kMiB);
  auto s149 = a.acquire(149);  // the last chunk, without the one between
  ASSERT_TRUE(s149.ok());
  EXPECT_EQ(a.mapped_bytes(), (64 + 22) * kMiB);
  (*s149)[kMiB - 1] = 7;
  EXPECT_EQ(a.slot(0), *s0);
  EXPECT_EQ(a.slot(0)[kMiB - 1], 0x5A);
  EXPECT_EQ(a.slot(149)[kMiB - 1], 7);
  // A slot larger than a chunk: one slot per chunk.
  auto big = kv::HostArena::create(3, 100 * kMiB);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ((*big)->slots_per_chunk(), 1);
  EXPECT_EQ((*big)->mapped_bytes(), 0);
}

TEST(HostArena, AChunkThatCannotBeMappedIsAnErrorWithTheSetting) {
  SPW_SKIP_WITHOUT_RLIMIT_AS();
  const std::string msg = run_limited(32 * kMiB, [] {
    auto made = kv::HostArena::create(1000, kMiB);  // 1000 MiB if it were reserved
    if (!made) return "create: " + made.error().message;
    auto s = (*made)->acquire(0);
    return s ? std::string("mapped") : s.error().message;
  });
  EXPECT_EQ(msg,
            "cannot allocate 64.0 MiB of RAM for the host KV tier (it holds 0 B so far): Cannot "
            "allocate memory; set --host-budget (and --disk-budget for the rest) or a shorter -c");
}

// ---- The cache under an address-space limit ---------------------------------------------------

// 1 layer, 1 KV head of 256 f32: 2 KiB per token, blocks of 1024 tokens (2 MiB, 32 to a host
// chunk), a window of 1 block, no sinks; 2^20 tokens are 2 GiB of KV.
kv::KvCacheConfig big_config() {
  kv::KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = 1;
  c.head_dim = c.head_dim_v = 256;
  c.type_k = c.type_v = GgmlType::F32;
  c.n_ctx = int64_t{1} << 20;
  c.block_size = 1024;
  c.n_sinks = 0;
  c.window_tokens = 1024;
  return c;
}

// Appends n positions of constant rows, one block-sized ubatch at a time.
Status append(kv::KvCache& cache, int64_t n) {
  const std::vector<float> row(256, 0.25f);
  for (int64_t done = 0; done < n;) {
    const int64_t step = std::min<int64_t>(1024, n - done);
    if (Status st = cache.reserve(step); !st) return st;
    for (int64_t t = 0; t < step; ++t) cache.store(0, cache.n_tokens() + t, row.data(), row.data());
    cache.commit(step);
    done += step;
  }
  return Status::Ok();
}

TEST(KvCacheMemory, AHugeUnlimitedHostTierCostsOnlyWhatSpills) {
  SPW_SKIP_WITHOUT_RLIMIT_AS();
  const std::string msg = run_limited(256 * kMiB, [] {
    auto made = kv::KvCache::create(big_config());  // 2 GiB of cold slots, none reserved
    if (!made) return "create: " + made.error().message;
    kv::KvCache& cache = **made;
    if (Status st = append(cache, 20 * 1024); !st) return "append: " + st.error().message;
    if (Status st = cache.flush(); !st) return "flush: " + st.error().message;
    return fmt::format("max {} host {}", cache.max_tokens(), cache.stats().host_blocks);
  });
  EXPECT_EQ(msg, "max 1048576 host 19");
}

TEST(KvCacheMemory, RunningOutOfAddressSpaceForTheHostTierIsAnError) {
  SPW_SKIP_WITHOUT_RLIMIT_AS();
  const std::string msg = run_limited(256 * kMiB, [] {
    auto made = kv::KvCache::create(big_config());
    if (!made) return "create: " + made.error().message;
    kv::KvCache& cache = **made;
    // 2 GiB do not fit in 256 MiB: some spill's chunk fails, and a later reserve says so.
    Status st = append(cache, int64_t{1} << 20);
    if (st) st = cache.flush();
    return st ? std::string("no error") : st.error().message;
  });
  EXPECT_NE(msg.find("cannot allocate 64.0 MiB of RAM for the host KV tier (it holds "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("; set --host-budget (and --disk-budget for the rest) or a shorter -c"),
            std::string::npos)
      << msg;
}

TEST(KvCacheMemory, AWindowBlockThatCannotBeAllocatedIsAnError) {
  SPW_SKIP_UNDER_ASAN();
  SPW_SKIP_WITHOUT_RLIMIT_AS();
  const std::string msg = run_limited(128 * kMiB, [] {
    kv::KvCacheConfig c = big_config();
    // Blocks of 1 GiB (8 KV heads, 2^16 tokens): the first window block does not fit, whatever
    // free heap the process brought into the child.
    c.n_kv_heads = 8;
    c.block_size = 1 << 16;
    c.window_tokens = 1 << 16;
    auto made = kv::KvCache::create(c);
    if (!made) return "create: " + made.error().message;
    Status st = (*made)->reserve(5);
    return st ? std::string("no error") : st.error().message;
  });
  EXPECT_EQ(msg,
            "cannot allocate 1.0 GiB of RAM for a KV window block (the window holds 0 blocks, "
            "0 B): out of memory; a smaller --kv-window or --ubatch, or a shorter -c");
}

// ---- The CPU session's scratch ----------------------------------------------------------------

TEST(CpuSessionMemory, ScratchThatDoesNotFitIsAnErrorAtCreateNamingUbatch) {
  SPW_SKIP_UNDER_ASAN();
  SPW_SKIP_WITHOUT_RLIMIT_AS();
  TempDir dir("spillway-mem");
  TestModelSpec spec;  // 64 embd, 4 heads of 16, 2 KV heads, 96 ff, 320 tokens
  spec.n_ctx = 1 << 20;
  const std::string path = dir.path() + "/m.gguf";
  ASSERT_TRUE(write_test_model(spec, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const Model& m = **model;
  const auto make = [&m](int64_t ubatch) -> std::string {
    SessionParams sp;
    sp.n_threads = 1;
    cpu::CpuSessionParams cp;
    cp.n_ubatch = ubatch;
    auto s = cpu::CpuSession::create(m, sp, cp);
    if (!s) return s.error().message;
    const int32_t prompt[5] = {1, 50, 60, 70, 80};
    Status st = (*s)->eval(prompt, true);
    return st ? std::string("ok") : st.error().message;
  };
  // Per token: x, h, tmp 64 + q 64 + k, v 32 + attention 64 + RoPE 16 = 400 floats, 1600 bytes;
  // 2^20 tokens, the FFN's gate and up of 128 tokens (96 floats each: 98304 bytes) and the 320
  // logits: 1677721600 + 98304 + 1280 bytes = 1.6 GiB.
  EXPECT_EQ(run_limited(512 * kMiB, [&] { return make(int64_t{1} << 20); }),
            "cannot allocate 1.6 GiB of RAM for the CPU session's scratch (a ubatch of 1048576 "
            "tokens, 1600 bytes per token): out of memory; a smaller --ubatch");
  // The same limit runs the same context with the default ubatch.
  EXPECT_EQ(run_limited(512 * kMiB, [&] { return make(512); }), "ok");
}

// Worker threads the system refuses to start (their stacks do not fit under the limit) are left
// out instead of failing the run with "Resource temporarily unavailable": the pool has the
// threads it got and still covers every index once.
TEST(ThreadPoolMemory, ThreadsThatCannotStartAreLeftOut) {
  SPW_SKIP_UNDER_ASAN();
  EXPECT_EQ(run_limited(24 * kMiB,
                        [] {
                          cpu::ThreadPool pool(64);  // 63 stacks of 8 MiB do not fit in 24 MiB
                          std::vector<int> hits(1000, 0);
                          pool.parallel_for(1000, [&](int64_t b, int64_t e) {
                            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
                          });
                          const bool once =
                              std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; });
                          return fmt::format("{} threads, {}", pool.size() < 64 ? "fewer" : "all",
                                             once ? "every index once" : "indices missed");
                        }),
            "fewer threads, every index once");
}

}  // namespace
}  // namespace spw
