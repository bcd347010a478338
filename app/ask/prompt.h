// Whole-document prompts: the document's pages with "[p. N]" markers inside the model's chat
// template, a system prompt asking for `[p. N] "short quote"` citations, and the question last.
//
// A prompt is tokenized as two parts: the *prefix* (everything before the question: BOS,
// system prompt, document, the "Question:" label) and the *suffix* (the question and the
// template's closing scaffolding up to the generation prompt). The prefix depends only on the
// model's vocabulary, template and the document, so its KV can be saved once and restored for
// every later question (app/ask/ask.h). Document and question texts are untrusted segments:
// special-token texts in them ("<|im_end|>") tokenize as ordinary text.
//
// Map-reduce (a document longer than the context): page-aligned parts, each a prompt of the same
// shape over its pages (the system prompt says it sees only part of the document), and a final
// prompt that combines the parts' answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/ask/document.h"
#include "engine/chat/chat_template.h"
#include "engine/common/expected.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::app {

/// The system prompts (shown for transparency in tests and --verbose output).
extern const char* const kAskSystemPrompt;
extern const char* const kAskPartSystemPrompt;
extern const char* const kAskReduceSystemPrompt;

/// Token ids of one prompt, split where the question starts.
struct PromptTokens {
  std::vector<int32_t> prefix;  // BOS, system prompt, document, "Question:" label
  std::vector<int32_t> suffix;  // the question, closing scaffolding, generation prompt
  size_t size() const { return prefix.size() + suffix.size(); }
};

/// Which pages a prompt holds: indices [page_begin, page_end) into DocumentText::pages. A page
/// too long for any part on its own is split: then the range is that one page and
/// [byte_begin, byte_end) a piece of its prompt text (page_prompt_text), cut at whitespace.
struct PageRange {
  size_t page_begin = 0, page_end = 0;
  int64_t byte_begin = 0, byte_end = -1;  // byte_end < 0: the whole pages
  bool is_piece() const { return byte_end >= 0; }
};

struct BuiltPrompt {
  PromptTokens tokens;
  std::string text;             // the rendered prompt (prefix + suffix texts, no BOS)
  int64_t document_tokens = 0;  // tokens of the page blocks alone (markers and texts)
};

struct PromptContext {
  const Tokenizer* tokenizer = nullptr;  // required
  ChatFamily family = ChatFamily::Plain;
};

/// "[p. 1]\n<text>\n\n[p. 2]\n..." for the pages in `range`: each page's text without its
/// running headers/footers; a page without text (scanned, undecodable) as a one-line note
/// "[p. N] (no text: scanned page, not read)"; empty pages left out. A piece of a page is
/// "[p. N]\n<piece>".
std::string document_block(const DocumentText& doc, PageRange range);

/// The page numbers in `range` whose text the model does not get (scanned, undecodable).
std::vector<int> pages_without_text(const DocumentText& doc, PageRange range);

/// The prompt over `range` of `doc`. `part` / `n_parts` (1-based, n_parts > 1) mark a
/// map-reduce part: its own system prompt and "(part K of M: pages A-B)" after the title.
BuiltPrompt build_document_prompt(const PromptContext& ctx, const DocumentText& doc,
                                  PageRange range, const std::string& question, int part = 0,
                                  int n_parts = 0);

/// One part's answer for the final prompt.
struct PartText {
  int first_page = 0, last_page = 0;
  std::string answer;
};

/// The final map-reduce prompt: the question and the parts' answers (all in `tokens.prefix`
/// followed by the question in the suffix; nothing of it is worth a snapshot).
BuiltPrompt build_reduce_prompt(const PromptContext& ctx, const std::string& title,
                                const std::string& question, const std::vector<PartText>& parts);

/// Page-aligned parts of `doc` whose prompt prefixes (instructions and pages, up to the
/// "Question:" label) each leave `reserve` tokens of `n_ctx` for the question's suffix and the
/// answer. The boundaries depend on the document, the tokenizer, the template, `n_ctx` and
/// `reserve` only, never on a question, so each part's prefix is the same for every question and
/// its saved KV is reused (app/ask/ask.h: part_reserve). Pages without text go with their
/// neighbours. A page that does not fit alone is split at whitespace into pieces, one part each
/// (every piece keeps its "[p. N]" marker). Error when not even a few words of a page fit beside
/// the instructions, naming the page and the numbers.
Expected<std::vector<PageRange>> plan_parts(const PromptContext& ctx, const DocumentText& doc,
                                            int64_t n_ctx, int64_t reserve);

}  // namespace spw::app
