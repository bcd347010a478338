#include "tests/support/vocab_cases.h"

#include <fstream>
#include <sstream>

namespace spw {

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_vocab_inputs(const std::string& raw) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_vocab_outputs(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(f, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    for (long v; ss >> v;) ids.push_back(static_cast<int32_t>(v));
    out.push_back(std::move(ids));
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace spw
