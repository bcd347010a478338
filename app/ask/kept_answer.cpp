#include "app/ask/kept_answer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace spw::app {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "spillway kept answer 1";

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string kept_answer_file_name(uint64_t model_fingerprint, uint64_t key) {
  return fmt::format("{:016x}-{:016x}-answer.tokens", model_fingerprint, key);
}

Status write_kept_answer(const std::string& path, int64_t prompt_tokens,
                         std::span<const int32_t> answer) {
  std::string body =
      fmt::format("{}\nprompt_tokens {}\nanswer_tokens {}\n", kMagic, prompt_tokens, answer.size());
  for (size_t i = 0; i < answer.size(); ++i) {
    if (i > 0) body += ' ';
    body += std::to_string(answer[i]);
  }
  body += '\n';
  body += fmt::format("check {:016x}\n", fnv1a64(body));
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << body;
    out.flush();
    if (!out) {
      const int err = errno;
      fs::remove(tmp, ec);
      return make_error("cannot write {}: {}", tmp, std::strerror(err));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error("cannot write {}: {}", path, ec.message());
  }
  return Status::Ok();
}

Expected<std::vector<int32_t>> read_kept_answer(const std::string& path, int64_t prompt_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("none kept");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const Error damaged = make_error("{} is damaged", path);
  const size_t check_at = text.rfind("check ");
  if (check_at == std::string::npos || check_at == 0 || text[check_at - 1] != '\n') return damaged;
  const std::string body = text.substr(0, check_at);
  if (text.substr(check_at) != fmt::format("check {:016x}\n", fnv1a64(body))) return damaged;
  std::istringstream lines(body);
  std::string magic, word;
  int64_t n_prompt = -1, n_answer = -1;
  std::getline(lines, magic);
  if (magic != kMagic) return damaged;
  if (!(lines >> word >> n_prompt) || word != "prompt_tokens") return damaged;
  if (!(lines >> word >> n_answer) || word != "answer_tokens" || n_answer < 0) return damaged;
  if (n_prompt != prompt_tokens)
    return make_error("kept for another prompt ({} tokens, not {})", n_prompt, prompt_tokens);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(std::min<int64_t>(n_answer, 1 << 20)));
  int32_t id = 0;
  while (lines >> id) ids.push_back(id);
  if (static_cast<int64_t>(ids.size()) != n_answer) return damaged;
  if (ids.empty()) return make_error("an empty answer is kept");
  return ids;
}

}  // namespace spw::app
