#include "app/ask/prompt.h"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

namespace spw::app {

const char* const kAskSystemPrompt =
    "You answer questions about the document below, using only its text. Each page of it starts "
    "with a marker [p. N]. Support every statement with a citation: the page marker followed by "
    "a short exact quote from that page in double quotes, for example [p. 2] \"the term of this "
    "Agreement\". If the document does not answer the question, say so.";

const char* const kAskPartSystemPrompt =
    "You answer questions about the pages below, which are one part of a longer document, using "
    "only their text. Each page starts with a marker [p. N]. Support every statement with a "
    "citation: the page marker followed by a short exact quote from that page in double quotes, "
    "for example [p. 2] \"the term of this Agreement\". If these pages hold nothing relevant to "
    "the question, answer only: Nothing relevant in these pages.";

const char* const kAskReduceSystemPrompt =
    "You combine partial answers into one answer. Each partial answer was written from some "
    "pages of one document. Keep their citations, a page marker [p. N] followed by a quote in "
    "double quotes, exactly as written. Leave out partial answers that found nothing relevant.";

namespace {

// Splits the user message where the question starts: never in a document or question (it holds
// a control character no extracted text keeps) and gone from the rendered prompt.
constexpr std::string_view kSplit = "\x01\x02spillway-question\x02\x01";

std::string page_range_text(int first, int last) {
  return first == last ? fmt::format("page {}", first) : fmt::format("pages {}-{}", first, last);
}

bool wants_bos(const PromptContext& ctx) {
  return ctx.tokenizer->bos() >= 0 &&
         (ctx.tokenizer->add_bos() || chat_family_wants_bos(ctx.family));
}

// Renders system + user (with kSplit inside the user text) and tokenizes the two sides.
BuiltPrompt render_split(const PromptContext& ctx, const std::string& system,
                         const std::string& user_before, const std::string& user_after) {
  const std::vector<ChatMessage> messages = {
      {ChatRole::System, system}, {ChatRole::User, user_before + std::string(kSplit) + user_after}};
  std::vector<TextSegment> before, after;
  bool split = false;
  for (const TextSegment& s : render_chat(ctx.family, messages, true)) {
    if (split) {
      after.push_back(s);
      continue;
    }
    const size_t at = s.trusted ? std::string::npos : s.text.find(kSplit);
    if (at == std::string::npos) {
      before.push_back(s);
      continue;
    }
    split = true;
    if (at > 0) before.push_back({s.text.substr(0, at), false});
    after.push_back({s.text.substr(at + kSplit.size()), false});
  }
  assert(split);
  const Tokenizer& tok = *ctx.tokenizer;
  BuiltPrompt p;
  const std::vector<int32_t> pre = tok.encode_segments(before, false);
  // One BOS, as tokenize_chat gives: none added where the text already starts with it.
  if (wants_bos(ctx) && (pre.empty() || pre.front() != tok.bos()))
    p.tokens.prefix.push_back(tok.bos());
  p.tokens.prefix.insert(p.tokens.prefix.end(), pre.begin(), pre.end());
  // The suffix is encoded on its own. SentencePiece vocabularies prepend a space to text that
  // starts the input; the question's own leading space stands for it, so the pair tokenizes as
  // the words would inside one prompt ("Question:" + "▁What").
  std::vector<TextSegment> tail = after;
  if (!tail.empty() && tok.kind() == VocabKind::Spm && tok.add_space_prefix() &&
      !tail.front().text.empty() && tail.front().text.front() == ' ')
    tail.front().text.erase(0, 1);
  p.tokens.suffix = tok.encode_segments(tail, false);
  p.text = segments_text(before) + segments_text(after);
  return p;
}

std::string trimmed(std::string s) {
  const auto sp = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && sp(s.back())) s.pop_back();
  size_t a = 0;
  while (a < s.size() && sp(s[a])) ++a;
  return s.substr(a);
}

// " QUESTION" plus, for templates without a generation prompt of their own, the cue to answer.
std::string question_tail(const PromptContext& ctx, const std::string& question) {
  std::string t(1, ' ');
  t += trimmed(question);
  if (ctx.family == ChatFamily::Plain) t += "\n\nAnswer:";
  return t;
}

int page_no_at(const DocumentText& doc, size_t index) { return doc.pages[index].page_no; }

}  // namespace

std::string document_block(const DocumentText& doc, PageRange range) {
  if (range.is_piece()) {
    assert(range.page_end == range.page_begin + 1 && range.page_begin < doc.pages.size());
    const PageText& p = doc.pages[range.page_begin];
    const std::string text = page_prompt_text(p);
    const auto b = static_cast<size_t>(
        std::clamp<int64_t>(range.byte_begin, 0, static_cast<int64_t>(text.size())));
    const auto e = static_cast<size_t>(std::clamp<int64_t>(range.byte_end, static_cast<int64_t>(b),
                                                           static_cast<int64_t>(text.size())));
    return fmt::format("[p. {}]\n{}", p.page_no, text.substr(b, e - b));
  }
  std::string out;
  for (size_t i = range.page_begin; i < range.page_end && i < doc.pages.size(); ++i) {
    const PageText& p = doc.pages[i];
    std::string body;
    if (p.undecodable) {
      body = fmt::format("[p. {}] (no text: undecodable page, not read)", p.page_no);
    } else if (p.scanned && !p.ocr) {
      body = fmt::format("[p. {}] (no text: scanned page, not read)", p.page_no);
    } else {
      const std::string text = page_prompt_text(p);
      if (text.empty()) continue;
      body = fmt::format("[p. {}]\n{}", p.page_no, text);
    }
    if (!out.empty()) out += "\n\n";
    out += body;
  }
  return out;
}

std::vector<int> pages_without_text(const DocumentText& doc, PageRange range) {
  std::vector<int> out;
  for (size_t i = range.page_begin; i < range.page_end && i < doc.pages.size(); ++i) {
    const PageText& p = doc.pages[i];
    if (p.undecodable || (p.scanned && !p.ocr)) out.push_back(p.page_no);
  }
  return out;
}

BuiltPrompt build_document_prompt(const PromptContext& ctx, const DocumentText& doc,
                                  PageRange range, const std::string& question, int part,
                                  int n_parts) {
  assert(ctx.tokenizer != nullptr);
  const std::string block = document_block(doc, range);
  std::string head = doc.title.empty() ? "Document" : "Document: " + doc.title;
  const bool is_part = n_parts > 1 && range.page_end > range.page_begin;
  if (is_part) {
    head += fmt::format(
        " (part {} of {}: {}{})", part, n_parts,
        page_range_text(page_no_at(doc, range.page_begin), page_no_at(doc, range.page_end - 1)),
        range.is_piece() ? ", a piece of it" : "");
  }
  BuiltPrompt p =
      render_split(ctx, is_part ? kAskPartSystemPrompt : kAskSystemPrompt,
                   head + "\n\n" + block + "\n\nQuestion:", question_tail(ctx, question));
  p.document_tokens = static_cast<int64_t>(ctx.tokenizer->encode(block, false, false).size());
  return p;
}

BuiltPrompt build_reduce_prompt(const PromptContext& ctx, const std::string& title,
                                const std::string& question, const std::vector<PartText>& parts) {
  std::string user = title.empty() ? std::string("Partial answers about a document")
                                   : "Partial answers about the document " + title;
  user += ", one for each part of it:";
  for (const PartText& p : parts) {
    user +=
        fmt::format("\n\n({})\n{}", page_range_text(p.first_page, p.last_page), trimmed(p.answer));
  }
  user += "\n\nWrite one answer to the question from them.\n\nQuestion:";
  return render_split(ctx, kAskReduceSystemPrompt, user, question_tail(ctx, question));
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Pieces of page `index` whose part prompts fit in `limit` tokens, cut at whitespace (inside a
// word, or a UTF-8 character, only when a single word is longer than a piece).
Expected<std::vector<PageRange>> split_page(const PromptContext& ctx, const DocumentText& doc,
                                            size_t index, int64_t limit, int64_t n_ctx,
                                            int64_t reserve) {
  const std::string text = page_prompt_text(doc.pages[index]);
  const auto n = static_cast<int64_t>(text.size());
  const auto prompt_size = [&](int64_t b, int64_t e) {
    return static_cast<int64_t>(
        build_document_prompt(ctx, doc, {index, index + 1, b, e}, "", 999, 999)
            .tokens.prefix.size());
  };
  std::vector<PageRange> out;
  int64_t pos = 0;
  while (pos < n) {
    // The longest piece that fits: binary search on its byte length.
    int64_t lo = pos, hi = n;  // [pos, lo) fits; [pos, hi] is the most there is
    if (prompt_size(pos, n) <= limit) lo = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (prompt_size(pos, mid) <= limit) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    int64_t end = lo;
    if (end < n) {
      int64_t cut = end;
      while (cut > pos && !is_ws(text[static_cast<size_t>(cut)])) --cut;
      if (cut > pos + (end - pos) / 4) end = cut;  // a word boundary not far back
      // Never inside a UTF-8 character.
      while (end > pos &&
             (static_cast<unsigned char>(text[static_cast<size_t>(end)]) & 0xC0) == 0x80)
        --end;
    }
    if (end <= pos) {
      return make_error(
          "page {}: not even a few words of it fit beside the instructions in the {}-token "
          "context with {} tokens kept for the question and the answer (use a larger context)",
          doc.pages[index].page_no, n_ctx, reserve);
    }
    out.push_back({index, index + 1, pos, end});
    pos = end;
    while (pos < n && is_ws(text[static_cast<size_t>(pos)])) ++pos;
  }
  return out;
}

}  // namespace

Expected<std::vector<PageRange>> plan_parts(const PromptContext& ctx, const DocumentText& doc,
                                            int64_t n_ctx, int64_t reserve) {
  const Tokenizer& tok = *ctx.tokenizer;
  // Only prefixes are measured (the question's suffix is in `reserve`), each with the widest
  // part label it could get.
  const int64_t slack = 16;
  const size_t n = doc.pages.size();
  const int64_t limit = n_ctx - reserve;
  auto fits = [&](PageRange r) {
    return static_cast<int64_t>(
               build_document_prompt(ctx, doc, r, "", 999, 999).tokens.prefix.size()) +
               slack <=
           limit;
  };
  // Per-page costs, measured alone (a page's block plus its separator).
  std::vector<int64_t> cost(n);
  for (size_t i = 0; i < n; ++i) {
    cost[i] =
        static_cast<int64_t>(tok.encode(document_block(doc, {i, i + 1}), false, false).size()) + 2;
  }
  const int64_t overhead =
      static_cast<int64_t>(build_document_prompt(ctx, doc, {0, 0}, "").tokens.prefix.size()) + 24;
  std::vector<PageRange> parts;
  size_t begin = 0;
  while (begin < n) {
    size_t end = begin;
    int64_t used = overhead;
    while (end < n && (end == begin || used + cost[end] + slack <= limit)) used += cost[end++];
    // The estimate adds costs of pages tokenized alone; the real prompt decides.
    while (end > begin + 1 && !fits({begin, end})) --end;
    if (!fits({begin, end})) {
      // The page alone is too long: pieces of it, each as long as fits.
      auto pieces = split_page(ctx, doc, begin, limit - slack, n_ctx, reserve);
      if (!pieces) return pieces.error();
      parts.insert(parts.end(), pieces->begin(), pieces->end());
      begin = end;
      continue;
    }
    parts.push_back({begin, end});
    begin = end;
  }
  return parts;
}

}  // namespace spw::app
