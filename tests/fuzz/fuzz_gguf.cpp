// libFuzzer target: the GGUF parser (engine/gguf) on arbitrary bytes, through a memory file as
// GgufFile::open maps it, then every metadata key read back through the typed getters and every
// tensor's shape string. Open must succeed or fail with a message naming the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.gguf", 0);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto f = spw::GgufFile::open(path);
  if (!f) {
    if (f.error().message.rfind(path, 0) != 0) std::abort();
    return 0;
  }
  for (const auto& kv : (*f)->metadata()) {
    (void)(*f)->get_int(kv.key);
    (void)(*f)->get_float(kv.key);
    (void)(*f)->get_bool(kv.key);
    (void)(*f)->get_string(kv.key);
  }
  for (const auto& t : (*f)->tensors()) (void)t.shape_string();
  return 0;
}
