// Chat templates: turn system/user/assistant messages into the prompt a chat model was trained
// on, and into token ids with exactly one BOS.
//
// We do not run the Jinja program stored in tokenizer.chat_template. As llama.cpp does
// (src/llama-chat.cpp: llm_chat_detect_template, llm_chat_apply_template), we recognise the
// family by marker strings in it and render that family with fixed code. Each family's exact
// output is written out below; it follows llama.cpp's llm_chat_apply_template except that no
// BOS is ever rendered inside the conversation (tokenize_chat puts exactly one at the start).
//
// Safety: the rendered prompt is a list of segments. Scaffolding (role markers, "<|im_end|>",
// "</s>", ...) is trusted: its special-token texts become special tokens. Message contents are
// untrusted: a user message or document containing "<|im_end|>" or "<|eot_id|>" tokenizes as
// ordinary text (Tokenizer::encode_segments; docs/DESIGN.md §3.2).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/expected.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw {

class GgufFile;

/// The prompt formats we render. In the formats below, S, U, A are the message contents
/// (untrusted), {role} is "system" | "user" | "assistant", trim() removes ASCII whitespace at
/// both ends (as llama.cpp's trim), and "[gen]" is what add_generation_prompt appends.
enum class ChatFamily {
  /// No tokenizer.chat_template (e.g. stories260K): the non-empty contents joined with "\n\n",
  /// in order, without role labels or special tokens. [gen]: nothing.
  ///   "S\n\nU\n\nA\n\nU2"
  Plain,
  /// ChatML (Qwen 2/2.5/3, many fine-tunes). Per message:
  ///   "<|im_start|>{role}\n" C "<|im_end|>\n"        [gen]: "<|im_start|>assistant\n"
  ChatML,
  /// Llama 3 / 3.1 / 3.2 / 3.3. Per message:
  ///   "<|start_header_id|>{role}<|end_header_id|>\n\n" trim(C) "<|eot_id|>"
  ///   [gen]: "<|start_header_id|>assistant<|end_header_id|>\n\n"
  /// (The real 3.1 template also injects a "Cutting Knowledge Date" system text; llama.cpp's
  /// fixed renderer does not, nor do we.)
  Llama3,
  /// Llama 2 chat (template with "[INST]" and "<<SYS>>"; llama.cpp's llama2-sys-strip):
  ///   "[INST] <<SYS>>\n" trim(S) "\n<</SYS>>\n\n" trim(U) " [/INST]" trim(A) "</s>"
  ///   "[INST] " trim(U2) " [/INST]"                  [gen]: nothing
  /// A turn after an assistant message opens with "[INST] " (no BOS: exactly one per stream).
  Llama2,
  /// Mistral 7B v0.1/v0.2, Mixtral ("[INST]" without "<<SYS>>"; llama.cpp's llama2):
  ///   "[INST] " S "\n" U " [/INST]" A "</s>" "[INST] " U2 " [/INST]"   [gen]: nothing
  Mistral,
  /// Mistral v0.3 and later SentencePiece Mistrals ("[AVAILABLE_TOOLS]"; llama.cpp's
  /// mistral-v3):
  ///   "[INST] " S "\n\n" U "[/INST]" " " trim(A) "</s>" "[INST] " U2 "[/INST]"  [gen]: nothing
  MistralV3,
  /// Gemma / Gemma 2 / Gemma 3. No system role: the system text is merged into the next user
  /// turn, as llama.cpp does; "assistant" is called "model":
  ///   "<start_of_turn>user\n" trim(S) "\n\n" trim(U) "<end_of_turn>\n"
  ///   "<start_of_turn>model\n" trim(A) "<end_of_turn>\n"
  ///   [gen]: "<start_of_turn>model\n"
  Gemma,
  /// Phi-3 / Phi-3.5. Per message:
  ///   "<|{role}|>\n" C "<|end|>\n"                   [gen]: "<|assistant|>\n"
  /// (A Phi-3 vocabulary strips the whitespace after these special tokens when encoding, as
  /// llama.cpp does, so the "\n" after "<|user|>" gives no token.)
  Phi3,
  /// DeepSeek LLM chat and DeepSeek-V2 ("User: ... Assistant:"; llama.cpp's deepseek2):
  ///   S "\n\n" "User: " U "\n\n" "Assistant: " A "<｜end▁of▁sentence｜>"
  ///   [gen]: "Assistant:"
  DeepSeek,
  /// DeepSeek-V2.5 / V3 / R1 and the R1 distills (llama.cpp's deepseek3):
  ///   S "\n\n" "<｜User｜>" U "<｜Assistant｜>" A "<｜end▁of▁sentence｜>"
  ///   [gen]: "<｜Assistant｜>"
  DeepSeek3,
};

enum class ChatRole { System, User, Assistant };

struct ChatMessage {
  ChatRole role = ChatRole::User;
  std::string content;  ///< untrusted: never parsed for special tokens
};

struct ChatTemplateChoice {
  ChatFamily family = ChatFamily::Plain;
  /// Empty, or a user-facing warning (not printed here): the template was not recognised and
  /// ChatML is used, or it was recognised as a variant we only approximate.
  std::string warning;
};

/// The family for a tokenizer.chat_template string (nullopt or empty: no template -> Plain).
/// Marker checks run in the order of llama.cpp's llm_chat_detect_template, so a template that
/// names markers of two families gets the one llama.cpp picks. A template that is itself a
/// family name ("chatml") selects that family. Templates llama.cpp knows but we do not render
/// (Phi-4, Zephyr, Command-R, ...) and unrecognised ones give ChatML with a warning that names
/// what was seen; Mistral v1 / v3-tekken / v7 templates give Mistral / MistralV3 with a warning.
ChatTemplateChoice detect_chat_template(std::optional<std::string_view> template_text);

/// tokenizer.chat_template of `file`: nullopt when absent; an error naming the key when it is
/// present but not a string.
Expected<std::optional<std::string>> read_chat_template(const GgufFile& file);

/// "plain", "chatml", "llama3", "llama2", "mistral", "mistral-v3", "gemma", "phi3", "deepseek"
/// (also "deepseek2", llama.cpp's name for it), "deepseek3". Case-sensitive. An unknown name
/// is an error listing the known ones.
Expected<ChatFamily> parse_chat_family(std::string_view name);

/// The canonical name accepted by parse_chat_family.
std::string_view chat_family_name(ChatFamily family);

/// "plain, chatml, llama3, ..." for help texts and error messages.
std::string chat_family_names();

/// The override when `override_name` is non-empty (an unknown name is an error), else
/// detect_chat_template(template_text).
Expected<ChatTemplateChoice> select_chat_template(std::optional<std::string_view> template_text,
                                                  std::string_view override_name);

/// Whether the family's reference template starts with bos_token (all but Plain and ChatML).
/// tokenize_chat adds a BOS when this or the tokenizer's add_bos says so.
bool chat_family_wants_bos(ChatFamily family);

/// The prompt as segments: scaffolding trusted, message contents untrusted (empty contents
/// give no segment). Never contains BOS. Messages are rendered in order; the families do not
/// require alternating roles (llama.cpp's renderer does not either).
std::vector<TextSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt);

/// The segments' texts concatenated: the prompt as the model reads it (without BOS).
std::string segments_text(const std::vector<TextSegment>& segments);

/// Token ids of render_chat(...): Tokenizer::encode_segments without added specials, then
/// exactly one BOS in front when the tokenizer adds BOS or the family wants one (and the
/// vocabulary has a BOS token), none otherwise: never a second one, even where the rendered text
/// already starts with the BOS token. Never an EOS at the end (generation follows).
std::vector<int32_t> tokenize_chat(const Tokenizer& tokenizer, ChatFamily family,
                                   const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt);

/// True when `ids`, a raw prompt encoded with add_special, starts with two BOS tokens: the text
/// began with the BOS token's text (parsed as special) and the tokenizer added its own. Such a
/// prompt is kept as given, as llama.cpp keeps it, and the caller warns once with
/// doubled_bos_warning(). (Chat prompts never double it: tokenize_chat.)
bool doubled_bos(const Tokenizer& tokenizer, std::span<const int32_t> ids);

/// "the prompt already starts with BOS ('<s>') and the tokenizer adds one, so it now starts with
/// 2 BOS tokens: remove it from the prompt to send one"
std::string doubled_bos_warning(const Tokenizer& tokenizer);

}  // namespace spw
