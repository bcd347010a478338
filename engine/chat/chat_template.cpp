#include "engine/chat/chat_template.h"

#include <cctype>

#include <array>
#include <cassert>
#include <initializer_list>

#include <fmt/format.h>

#include "engine/gguf/gguf.h"

namespace spw {

namespace {

struct FamilyName {
  std::string_view name;
  ChatFamily family;
};

// Canonical names first (chat_family_name returns the first entry of a family), then aliases.
constexpr std::array<FamilyName, 11> kFamilyNames = {{
    {"plain", ChatFamily::Plain},
    {"chatml", ChatFamily::ChatML},
    {"llama3", ChatFamily::Llama3},
    {"llama2", ChatFamily::Llama2},
    {"mistral", ChatFamily::Mistral},
    {"mistral-v3", ChatFamily::MistralV3},
    {"gemma", ChatFamily::Gemma},
    {"phi3", ChatFamily::Phi3},
    {"deepseek", ChatFamily::DeepSeek},
    {"deepseek3", ChatFamily::DeepSeek3},
    {"deepseek2", ChatFamily::DeepSeek},  // llama.cpp's name for the "User:/Assistant:" format
}};

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool contains_all(std::string_view haystack, std::initializer_list<std::string_view> needles) {
  for (std::string_view n : needles)
    if (!contains(haystack, n)) return false;
  return true;
}

// llama.cpp's trim(): isspace() bytes (ASCII whitespace) at both ends.
std::string_view trim(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view role_name(ChatRole role) {
  switch (role) {
    case ChatRole::System:
      return "system";
    case ChatRole::User:
      return "user";
    case ChatRole::Assistant:
      return "assistant";
  }
  return "user";
}

ChatTemplateChoice fallback(std::string_view seen) {
  return {ChatFamily::ChatML,
          fmt::format("the model's chat template ({}) is not one Spillway renders; using ChatML. "
                      "Choose another with the chat template setting (--template NAME: {})",
                      seen, chat_family_names())};
}

ChatTemplateChoice approximated(ChatFamily family, std::string_view seen) {
  return {family,
          fmt::format("the model's chat template looks like {}, which Spillway renders as '{}' "
                      "(spacing around [INST] may differ); override with --template NAME",
                      seen, chat_family_name(family))};
}

// Collects segments; adjacent pieces of the same trust are merged.
class SegmentBuilder {
 public:
  void scaffold(std::string_view text) { add(text, true); }
  void content(std::string_view text) { add(text, false); }
  std::vector<TextSegment> take() { return std::move(segments_); }

 private:
  void add(std::string_view text, bool trusted) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().trusted == trusted) {
      segments_.back().text += text;
    } else {
      segments_.push_back(TextSegment{std::string(text), trusted});
    }
  }
  std::vector<TextSegment> segments_;
};

// The renderers. Each cites the llama.cpp branch of llm_chat_apply_template it follows
// (src/llama-chat.cpp); the formats are spelled out in chat_template.h.

void render_plain(const std::vector<ChatMessage>& messages, SegmentBuilder& b) {
  bool first = true;
  for (const ChatMessage& m : messages) {
    if (m.content.empty()) continue;
    if (!first) b.scaffold("\n\n");
    b.content(m.content);
    first = false;
  }
}

// LLM_CHAT_TEMPLATE_CHATML.
void render_chatml(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  for (const ChatMessage& m : messages) {
    b.scaffold(fmt::format("<|im_start|>{}\n", role_name(m.role)));
    b.content(m.content);
    b.scaffold("<|im_end|>\n");
  }
  if (gen) b.scaffold("<|im_start|>assistant\n");
}

// LLM_CHAT_TEMPLATE_LLAMA_3.
void render_llama3(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  for (const ChatMessage& m : messages) {
    b.scaffold(fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", role_name(m.role)));
    b.content(trim(m.content));
    b.scaffold("<|eot_id|>");
  }
  if (gen) b.scaffold("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// LLM_CHAT_TEMPLATE_LLAMA_2 (Mistral: system text + "\n", untrimmed) and
// LLM_CHAT_TEMPLATE_LLAMA_2_SYS_STRIP (Llama 2: <<SYS>> block, trimmed contents). llama.cpp's
// llama2-sys-bos variant would put "<s>" before each later "[INST]"; we never do (one BOS per
// stream). The prompt ends with "[/INST]": there is no separate generation prompt.
void render_llama2(const std::vector<ChatMessage>& messages, bool sys_block, SegmentBuilder& b) {
  auto text = [&](const std::string& c) { return sys_block ? trim(c) : std::string_view(c); };
  bool inside_turn = true;
  b.scaffold("[INST] ");
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      inside_turn = true;
      b.scaffold("[INST] ");
    }
    switch (m.role) {
      case ChatRole::System:
        if (sys_block) {
          b.scaffold("<<SYS>>\n");
          b.content(text(m.content));
          b.scaffold("\n<</SYS>>\n\n");
        } else {
          b.content(m.content);
          b.scaffold("\n");
        }
        break;
      case ChatRole::User:
        b.content(text(m.content));
        b.scaffold(" [/INST]");
        break;
      case ChatRole::Assistant:
        b.content(text(m.content));
        b.scaffold("</s>");
        inside_turn = false;
        break;
    }
  }
}

// LLM_CHAT_TEMPLATE_MISTRAL_V3 (leading space "", trailing space " ", assistant trimmed).
void render_mistral_v3(const std::vector<ChatMessage>& messages, SegmentBuilder& b) {
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      b.scaffold("[INST] ");
      inside_turn = true;
    }
    switch (m.role) {
      case ChatRole::System:
        b.content(m.content);
        b.scaffold("\n\n");
        break;
      case ChatRole::User:
        b.content(m.content);
        b.scaffold("[/INST]");
        break;
      case ChatRole::Assistant:
        b.scaffold(" ");
        b.content(trim(m.content));
        b.scaffold("</s>");
        inside_turn = false;
        break;
    }
  }
}

// LLM_CHAT_TEMPLATE_GEMMA: system texts are collected (trimmed, concatenated) and put at the
// start of the next user turn, followed by "\n\n".
void render_gemma(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  std::vector<std::string_view> pending_system;
  for (const ChatMessage& m : messages) {
    if (m.role == ChatRole::System) {
      pending_system.push_back(trim(m.content));
      continue;
    }
    const bool model = m.role == ChatRole::Assistant;
    b.scaffold(model ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
    bool any_system = false;
    for (std::string_view s : pending_system) any_system |= !s.empty();
    if (!model && any_system) {
      for (std::string_view s : pending_system) b.content(s);
      b.scaffold("\n\n");
      pending_system.clear();
    }
    b.content(trim(m.content));
    b.scaffold("<end_of_turn>\n");
  }
  if (gen) b.scaffold("<start_of_turn>model\n");
}

// LLM_CHAT_TEMPLATE_PHI_3.
void render_phi3(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  for (const ChatMessage& m : messages) {
    b.scaffold(fmt::format("<|{}|>\n", role_name(m.role)));
    b.content(m.content);
    b.scaffold("<|end|>\n");
  }
  if (gen) b.scaffold("<|assistant|>\n");
}

// LLM_CHAT_TEMPLATE_DEEPSEEK_2.
void render_deepseek(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  for (const ChatMessage& m : messages) {
    switch (m.role) {
      case ChatRole::System:
        b.content(m.content);
        b.scaffold("\n\n");
        break;
      case ChatRole::User:
        b.scaffold("User: ");
        b.content(m.content);
        b.scaffold("\n\n");
        break;
      case ChatRole::Assistant:
        b.scaffold("Assistant: ");
        b.content(m.content);
        b.scaffold("<｜end▁of▁sentence｜>");
        break;
    }
  }
  if (gen) b.scaffold("Assistant:");
}

// LLM_CHAT_TEMPLATE_DEEPSEEK_3.
void render_deepseek3(const std::vector<ChatMessage>& messages, bool gen, SegmentBuilder& b) {
  for (const ChatMessage& m : messages) {
    switch (m.role) {
      case ChatRole::System:
        b.content(m.content);
        b.scaffold("\n\n");
        break;
      case ChatRole::User:
        b.scaffold("<｜User｜>");
        b.content(m.content);
        break;
      case ChatRole::Assistant:
        b.scaffold("<｜Assistant｜>");
        b.content(m.content);
        b.scaffold("<｜end▁of▁sentence｜>");
        break;
    }
  }
  if (gen) b.scaffold("<｜Assistant｜>");
}

}  // namespace

ChatTemplateChoice detect_chat_template(std::optional<std::string_view> template_text) {
  if (!template_text || template_text->empty()) return {ChatFamily::Plain, {}};
  const std::string_view t = *template_text;
  // llama.cpp accepts a template name in place of the template.
  for (const FamilyName& f : kFamilyNames)
    if (t == f.name) return {f.family, {}};

  // The order below is llm_chat_detect_template's; entries for formats we do not render keep
  // their place so that a template is never claimed by a family llama.cpp would not pick.
  if (contains(t, "<|im_start|>")) {
    if (contains(t, "<|im_sep|>")) return fallback("Phi-4");
    if (contains(t, "<end_of_utterance>")) return fallback("SmolVLM");
    return {ChatFamily::ChatML, {}};
  }
  if (t.substr(0, 7) == "mistral" || contains(t, "[INST]")) {
    if (contains(t, "[SYSTEM_PROMPT]")) return approximated(ChatFamily::MistralV3, "Mistral v7");
    if (contains(t, "' [INST] ' + system_message") || contains(t, "[AVAILABLE_TOOLS]")) {
      if (contains(t, " [INST]")) return approximated(ChatFamily::Mistral, "Mistral v1");
      if (contains(t, "\"[INST]\""))
        return approximated(ChatFamily::MistralV3, "Mistral v3-tekken");
      return {ChatFamily::MistralV3, {}};
    }
    if (contains(t, "<<SYS>>")) return {ChatFamily::Llama2, {}};
    return {ChatFamily::Mistral, {}};
  }
  if (contains_all(t, {"<|assistant|>", "<|end|>"})) return {ChatFamily::Phi3, {}};
  if (contains(t, "[gMASK]<sop>")) return fallback("ChatGLM 4");
  if (contains_all(t, {"<|assistant|>", "<|user|>"}))
    return fallback(contains(t, "</s>") ? "Falcon 3" : "GLM-Edge");
  if (contains_all(t, {"<|{{ item['role'] }}|>", "<|begin_of_image|>"}))
    return fallback("GLM-Edge");
  if (contains_all(t, {"<|user|>", "<|endoftext|>"})) return fallback("Zephyr");
  if (contains(t, "bos_token + message['role']")) return fallback("Monarch");
  if (contains(t, "<start_of_turn>")) return {ChatFamily::Gemma, {}};
  if (contains(t, "'\\n\\nAssistant: ' + eos_token")) return fallback("Orion");
  if (contains(t, "GPT4 Correct ")) return fallback("OpenChat");
  if (contains_all(t, {"USER: ", "ASSISTANT: "})) return fallback("Vicuna");
  if (contains_all(t, {"### Instruction:", "<|EOT|>"})) return fallback("DeepSeek Coder");
  if (contains_all(t, {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"})) return fallback("Command-R");
  if (contains_all(t, {"<|start_header_id|>", "<|end_header_id|>"}))
    return {ChatFamily::Llama3, {}};
  if (contains(t, "[gMASK]sop")) return fallback("ChatGLM 3");
  if (contains(t, "<用户>")) return fallback("MiniCPM");
  if (contains(t, "'Assistant: ' + message['content'] + eos_token"))
    return {ChatFamily::DeepSeek, {}};
  if (contains_all(t, {"<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"}))
    return {ChatFamily::DeepSeek3, {}};
  if (contains_all(t, {"[|system|]", "[|assistant|]", "[|endofturn|]"})) return fallback("EXAONE");
  if (contains(t, "<|start_of_role|>")) return fallback("Granite");
  if (contains_all(t, {"<|header_start|>", "<|header_end|>"})) return fallback("Llama 4");
  return fallback("unrecognised");
}

Expected<std::optional<std::string>> read_chat_template(const GgufFile& file) {
  constexpr std::string_view kKey = "tokenizer.chat_template";
  if (file.find(kKey) == nullptr) return std::optional<std::string>();
  auto s = file.get_string(kKey);
  if (!s) return s.error();
  return std::optional<std::string>(std::move(*s));
}

Expected<ChatFamily> parse_chat_family(std::string_view name) {
  // Names are matched without regard to ASCII case ("ChatML" is chatml).
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const FamilyName& f : kFamilyNames)
    if (lower == f.name) return f.family;
  return make_error("unknown chat template '{}' (known: {})", name, chat_family_names());
}

std::string_view chat_family_name(ChatFamily family) {
  for (const FamilyName& f : kFamilyNames)
    if (f.family == family) return f.name;
  return "chatml";
}

std::string chat_family_names() {
  std::string out;
  for (const FamilyName& f : kFamilyNames) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

Expected<ChatTemplateChoice> select_chat_template(std::optional<std::string_view> template_text,
                                                  std::string_view override_name) {
  if (override_name.empty()) return detect_chat_template(template_text);
  auto family = parse_chat_family(override_name);
  if (!family) return family.error();
  return ChatTemplateChoice{*family, {}};
}

bool chat_family_wants_bos(ChatFamily family) {
  return family != ChatFamily::Plain && family != ChatFamily::ChatML;
}

std::vector<TextSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) {
  SegmentBuilder b;
  const bool gen = add_generation_prompt;
  switch (family) {
    case ChatFamily::Plain:
      render_plain(messages, b);
      break;
    case ChatFamily::ChatML:
      render_chatml(messages, gen, b);
      break;
    case ChatFamily::Llama3:
      render_llama3(messages, gen, b);
      break;
    case ChatFamily::Llama2:
      render_llama2(messages, /*sys_block=*/true, b);
      break;
    case ChatFamily::Mistral:
      render_llama2(messages, /*sys_block=*/false, b);
      break;
    case ChatFamily::MistralV3:
      render_mistral_v3(messages, b);
      break;
    case ChatFamily::Gemma:
      render_gemma(messages, gen, b);
      break;
    case ChatFamily::Phi3:
      render_phi3(messages, gen, b);
      break;
    case ChatFamily::DeepSeek:
      render_deepseek(messages, gen, b);
      break;
    case ChatFamily::DeepSeek3:
      render_deepseek3(messages, gen, b);
      break;
  }
  return b.take();
}

std::string segments_text(const std::vector<TextSegment>& segments) {
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

std::vector<int32_t> tokenize_chat(const Tokenizer& tokenizer, ChatFamily family,
                                   const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  // add_special = false: BOS is decided here, and a chat prompt never ends with EOS.
  std::vector<int32_t> ids =
      tokenizer.encode_segments(render_chat(family, messages, add_generation_prompt), false);
  const bool want_bos = tokenizer.add_bos() || chat_family_wants_bos(family);
  const bool has_bos = !ids.empty() && ids.front() == tokenizer.bos();
  if (want_bos && tokenizer.bos() >= 0 && !has_bos) ids.insert(ids.begin(), tokenizer.bos());
  return ids;
}

bool doubled_bos(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  const int32_t bos = tokenizer.bos();
  return tokenizer.add_bos() && bos >= 0 && ids.size() >= 2 && ids[0] == bos && ids[1] == bos;
}

std::string doubled_bos_warning(const Tokenizer& tokenizer) {
  return fmt::format(
      "the prompt already starts with BOS ('{}') and the tokenizer adds one, so it now starts "
      "with 2 BOS tokens: remove it from the prompt to send one",
      tokenizer.token_text(tokenizer.bos()));
}

}  // namespace spw
