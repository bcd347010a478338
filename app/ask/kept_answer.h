// A whole-document answer that stopped early (at its length limit, or cancelled while it was
// generated) kept as its token ids, so that a later ask of the same prompt continues it
// (AskParams::continue_answer in app/ask/ask.h). Only the ids are kept: continuing prefills them
// after the question on top of the document prefix's saved KV, a few hundred tokens, where a
// saved KV of the whole answer would write the document's KV to disk again after every answer.
//
// The file is text, "<model fingerprint>-<key>-answer.tokens" in the snapshot folder:
//   spillway kept answer 1
//   prompt_tokens N          the prompt (document prefix + question) it answers
//   answer_tokens M
//   <M token ids, space-separated>
//   check <FNV-1a 64 of the lines above, 16 hex digits>
// written to a temporary file and renamed, so a reader sees a whole file or none.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/common/expected.h"

namespace spw::app {

/// "<fingerprint as 16 hex digits>-<key as 16 hex digits>-answer.tokens"
std::string kept_answer_file_name(uint64_t model_fingerprint, uint64_t key);

/// Writes `answer` (the ids generated after a prompt of `prompt_tokens` tokens) to `path`,
/// replacing what was there. Errors: the folder or the file cannot be written (with the path and
/// the system's reason).
Status write_kept_answer(const std::string& path, int64_t prompt_tokens,
                         std::span<const int32_t> answer);

/// The ids kept at `path` for a prompt of `prompt_tokens` tokens. Errors: no such file ("none
/// kept"), a file that is not whole or fails its check ("damaged"), one kept for a prompt of
/// another length ("kept for another prompt"), an empty answer.
Expected<std::vector<int32_t>> read_kept_answer(const std::string& path, int64_t prompt_tokens);

}  // namespace spw::app
