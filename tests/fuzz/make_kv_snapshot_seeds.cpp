// Writes the snapshot fuzzer's seeds (tests/fuzz/corpus/kv_snapshot) with the engine's own
// writer: 150 tokens of seeded random K/V into the fuzzer's cache and into its sliding-window
// layer groups (kv_snapshot_cache.h: format versions 1 and 2, the second's seeds named
// groups-*), saved, then cut short and with a byte changed. Each seed starts with the harness's
// byte (bit 0: rehash; bit 1: the layer groups).
//   tests/fuzz/run.sh --seeds   (builds this and writes the corpus)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/kv_cache_set.h"
#include "engine/kv/snapshot_file.h"
#include "tests/fuzz/kv_snapshot_cache.h"

namespace {

void write(const std::string& path, unsigned char harness, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.put(static_cast<char>(harness));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// 150 tokens of seeded random K/V into `cache` (a KvCache or a KvCacheSet), saved as a snapshot;
// returns its bytes.
template <class Cache>
std::vector<char> snapshot_of(Cache& cache, int64_t n_layer, const spw::kv::KvCacheConfig& c,
                              const std::string& dir) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(c.n_kv_heads * c.head_dim));
  std::vector<float> v(static_cast<size_t>(c.n_kv_heads * c.head_dim_v));
  std::vector<int32_t> tokens;
  for (int64_t done = 0; done < 150;) {
    const int64_t ub = std::min<int64_t>(150 - done, 40);
    if (!cache.reserve(ub)) std::exit(1);
    for (int64_t pos = done; pos < done + ub; ++pos) {
      for (int64_t l = 0; l < n_layer; ++l) {
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        cache.store(l, pos, k.data(), v.data());
      }
      tokens.push_back(static_cast<int32_t>(rng() % 320));
    }
    cache.commit(ub);
    done += ub;
  }
  if (!cache.flush()) std::exit(1);
  const std::string tmp = dir + "/.snapshot.kv";
  if (auto st = spw::kv::save_snapshot_file(tmp, spw::kv::fuzz::kFingerprint, cache, tokens); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    std::exit(1);
  }
  std::ifstream in(tmp, std::ios::binary);
  std::vector<char> snap{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::remove(tmp.c_str());
  return snap;
}

// The seeds of one snapshot: whole (as written, and with the harness rehashing), cut inside the
// header, inside the tokens and inside the payload, and a byte changed in the token count and in
// the zstd frame. `prefix` names them, `harness` (0, or 2 for the layer groups) is their bit 1.
int write_seeds(const std::string& dir, const std::string& prefix, unsigned char harness,
                const std::vector<char>& snap) {
  write(dir + "/" + prefix + "snapshot-150.kv", harness, snap);
  write(dir + "/" + prefix + "snapshot-150-rehash.kv", harness | 1, snap);
  for (const size_t n : {size_t(40), size_t(300), snap.size() - 100}) {
    write(dir + "/" + prefix + "cut-" + std::to_string(n) + ".kv", harness | 1,
          std::vector<char>(snap.begin(), snap.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  std::vector<char> garbled = snap;
  garbled[64] = static_cast<char>(garbled[64] + 1);
  write(dir + "/" + prefix + "garbled-count.kv", harness | 1, garbled);
  garbled = snap;
  garbled[snap.size() - 200] = static_cast<char>(garbled[snap.size() - 200] ^ 0x5a);
  write(dir + "/" + prefix + "garbled-frame.kv", harness | 1, garbled);
  return 7;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto cache = spw::kv::fuzz::make_cache();
  const std::vector<char> v1 = snapshot_of(*cache, cache->config().n_layer, cache->config(), dir);
  auto set = spw::kv::fuzz::make_cache_set();
  const std::vector<char> v2 = snapshot_of(*set, 4, cache->config(), dir);
  const int n = write_seeds(dir, "", 0, v1) + write_seeds(dir, "groups-", 2, v2);
  std::printf("wrote %d seeds (snapshots of %zu and %zu bytes) to %s\n", n, v1.size(), v2.size(),
              dir.c_str());
  return 0;
}
