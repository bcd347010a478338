// Writes the snapshot fuzzer's seeds (tests/fuzz/corpus/kv_snapshot) with the engine's own
// writer: 150 tokens of seeded random K/V into the fuzzer's cache (kv_snapshot_cache.h), saved,
// then cut short and with a byte changed. Each seed starts with the harness's byte (odd: rehash).
//   tests/fuzz/run.sh --seeds   (builds this and writes the corpus)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto cache = spw::kv::fuzz::make_cache();
  const spw::kv::KvCacheConfig& c = cache->config();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(c.n_kv_heads * c.head_dim));
  std::vector<float> v(static_cast<size_t>(c.n_kv_heads * c.head_dim_v));
  std::vector<int32_t> tokens;
  for (int64_t done = 0; done < 150;) {
    const int64_t ub = std::min<int64_t>(150 - done, 40);
    if (!cache->reserve(ub)) return 1;
    for (int64_t pos = done; pos < done + ub; ++pos) {
      for (int64_t l = 0; l < c.n_layer; ++l) {
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        cache->store(l, pos, k.data(), v.data());
      }
      tokens.push_back(static_cast<int32_t>(rng() % 320));
    }
    cache->commit(ub);
    done += ub;
  }
  if (!cache->flush()) return 1;
  const std::string tmp = dir + "/.snapshot.kv";
  if (auto st = spw::kv::save_snapshot_file(tmp, spw::kv::fuzz::kFingerprint, *cache, tokens);
      !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::ifstream in(tmp, std::ios::binary);
  const std::vector<char> snap{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
  std::remove(tmp.c_str());
  write(dir + "/snapshot-150.kv", 0, snap);
  write(dir + "/snapshot-150-rehash.kv", 1, snap);
  // Cut inside the header, inside the tokens and inside the payload.
  for (const size_t n : {size_t(40), size_t(300), snap.size() - 100}) {
    write(dir + "/cut-" + std::to_string(n) + ".kv", 1,
          std::vector<char>(snap.begin(), snap.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  // A byte changed in the token count and in the zstd frame, checksums then made good.
  std::vector<char> garbled = snap;
  garbled[64] = static_cast<char>(garbled[64] + 1);
  write(dir + "/garbled-count.kv", 1, garbled);
  garbled = snap;
  garbled[snap.size() - 200] = static_cast<char>(garbled[snap.size() - 200] ^ 0x5a);
  write(dir + "/garbled-frame.kv", 1, garbled);
  std::printf("wrote 7 seeds (a snapshot of %zu bytes) to %s\n", snap.size(), dir.c_str());
  return 0;
}
