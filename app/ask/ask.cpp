#include "app/ask/ask.h"
#include "app/ask/kept_answer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <QByteArray>
#include <QCryptographicHash>

#include "engine/backend/cpu/cpu_session.h"
#include "engine/common/size.h"

namespace spw::app {

namespace fs = std::filesystem;

std::string snapshot_kv_config(const SessionParams& params, const kv::KvSettings& kv) {
  std::string config = fmt::format("{}/{} block {}", kv_type_name(params.kv_type_k),
                                   kv_type_name(params.kv_type_v), kv.block_size);
  if (kv.attention != kv::KvAttention::Exact) {
    // Snapshots are the CPU session's: its window (auto resolved as it resolves it).
    config += fmt::format(" attention {} window {} sinks {}", kv::kv_attention_name(kv),
                          kv::window_tokens(kv, kv::WindowHome::Ram, 0), kv.n_sinks);
  }
  return config;
}

namespace {

// The first 8 bytes of a finished SHA-256, big-endian.
uint64_t first_8_bytes(const QCryptographicHash& h) {
  const QByteArray d = h.result();
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(d[i]);
  return v;
}

uint64_t text_hash(const std::string& text) {
  QCryptographicHash h(QCryptographicHash::Sha256);
  h.addData(QByteArrayView(text.data(), static_cast<qsizetype>(text.size())));
  return first_8_bytes(h);
}

// Sampling settings as text, for keys of generated answers.
std::string sampling_text(const SamplerParams& sp) {
  return fmt::format("temp {} top_k {} top_p {} min_p {} repeat {} last {} seed {}", sp.temp,
                     sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty, sp.repeat_last_n, sp.seed);
}

}  // namespace

uint64_t prefix_hash(const std::string& kv_config, const std::vector<int32_t>& ids) {
  QCryptographicHash h(QCryptographicHash::Sha256);
  h.addData(QByteArrayView(kv_config.data(), static_cast<qsizetype>(kv_config.size())));
  h.addData(QByteArrayView("\0", 1));
  std::vector<char> bytes(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto u = static_cast<uint32_t>(ids[i]);
    for (size_t b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xFF);
  }
  h.addData(QByteArrayView(bytes.data(), static_cast<qsizetype>(bytes.size())));
  return first_8_bytes(h);
}

std::string snapshot_file_name(const SnapshotKey& key) {
  return fmt::format("{:016x}-{:016x}.kv", key.model_fingerprint, key.prefix_hash);
}

uint64_t part_answer_key(uint64_t part_prefix_hash, const AskParams& params) {
  return text_hash(fmt::format("{:016x}\n{}\n{}\n{}", part_prefix_hash, params.question,
                               params.n_predict, sampling_text(params.sampling)));
}

std::string stopped_mark(const std::string& stopped) {
  return stopped.empty() ? std::string() : "[stopped: " + stopped + "]";
}

std::string checkpoint_file_name(const SnapshotKey& key) {
  return fmt::format("{:016x}-{:016x}-checkpoint.kv", key.model_fingerprint, key.prefix_hash);
}

int64_t answer_reserve(int32_t n_predict, int64_t n_ctx) {
  const int64_t want = n_predict >= 0 ? n_predict : 256;
  return std::max<int64_t>(1, std::min(want, std::max<int64_t>(1, n_ctx / 4)));
}

int64_t part_question_budget(int64_t n_ctx) {
  return std::max<int64_t>(1, std::min<int64_t>(128, n_ctx / 16));
}

int64_t part_answer_reserve(int64_t n_ctx) {
  return std::max<int64_t>(1, std::min<int64_t>(256, n_ctx / 8));
}

int64_t part_question_budget(int64_t n_ctx, int64_t question_tokens) {
  const int64_t fixed = part_question_budget(n_ctx);
  if (question_tokens <= fixed) return fixed;
  return (question_tokens + 63) / 64 * 64;
}

int64_t part_reserve(int64_t n_ctx, int64_t question_tokens) {
  return part_question_budget(n_ctx, question_tokens) + part_answer_reserve(n_ctx);
}

namespace {

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

struct RunSetup {
  const Tokenizer* tokenizer = nullptr;
  const AskParams* params = nullptr;
  SnapshotIndex* index = nullptr;
  const AskCallbacks* callbacks = nullptr;
  AnswerProgress* progress = nullptr;  // the callbacks' progress, when they have one
};

void note(const RunSetup& rs, const std::string& line) {
  if (rs.callbacks->note) rs.callbacks->note(line);
}

// Prefills `prefix` (the session empty, no logits) in slices of kPrefillSliceTokens, resuming
// from `checkpoint` when it holds a beginning of `prefix`, and saving it every
// checkpoint_tokens / checkpoint_seconds and when cancelled. Returns the tokens resumed from;
// `on_resumed` hears of them before the rest is prefilled (progress: restored, not computed).
Expected<int64_t> prefill_with_checkpoints(cpu::CpuSession& s, const std::vector<int32_t>& prefix,
                                           const std::string& checkpoint, const RunSetup& rs,
                                           const std::function<void(int64_t)>& on_resumed) {
  const AskParams& p = *rs.params;
  const auto n = static_cast<int64_t>(prefix.size());
  const bool on = p.checkpoint_tokens > 0;
  std::error_code ec;
  int64_t resumed = 0;
  if (on && fs::exists(checkpoint, ec)) {
    if (auto st = s.load_kv(checkpoint); !st) {
      note(rs, fmt::format("prefill checkpoint not usable ({}); prefilling from the start",
                           st.error().message));
      fs::remove(checkpoint, ec);
    } else {
      const auto held = static_cast<int64_t>(s.tokens().size());
      if (held > 0 && held < n &&
          std::equal(s.tokens().begin(), s.tokens().end(), prefix.begin())) {
        resumed = held;
        note(rs, fmt::format("resuming the prefill from a checkpoint: {} of {} tokens restored",
                             held, n));
        if (on_resumed) on_resumed(held);
      } else {
        note(rs, fmt::format("prefill checkpoint {} holds other tokens; prefilling from the start",
                             checkpoint));
        fs::remove(checkpoint, ec);
      }
    }
  }
  if (!on) {
    if (auto st = s.eval(prefix, false); !st) return st.error();
    return 0;
  }
  using Clock = std::chrono::steady_clock;
  int64_t saved_at = resumed;
  auto saved_time = Clock::now();
  const auto save = [&](int64_t pos) {
    fs::create_directories(p.snapshot_dir, ec);
    if (auto st = s.save_kv(checkpoint); !st) {
      note(rs, fmt::format("could not save a prefill checkpoint: {}", st.error().message));
      return;
    }
    note(rs, fmt::format("prefill checkpoint: {} of {} tokens saved", pos, n));
    saved_at = pos;
    saved_time = Clock::now();
  };
  const auto cancelled = [&rs] { return rs.callbacks->cancelled && rs.callbacks->cancelled(); };
  int64_t pos = resumed;
  bool first = true;
  while (pos < n) {
    if (cancelled()) {
      if (pos > saved_at) save(pos);
      return Error{"cancelled"};
    }
    const int64_t end = std::min(n, (pos / kPrefillSliceTokens + 1) * kPrefillSliceTokens);
    // After a restore the first eval gets the sequence from position 0 (CpuSession::eval).
    const size_t from = first && resumed > 0 ? 0 : static_cast<size_t>(pos);
    first = false;
    const std::span<const int32_t> slice(prefix.data() + from, static_cast<size_t>(end) - from);
    if (auto st = s.eval(slice, false); !st) {
      // Stopped inside the slice: the ubatches run are kept, and so is the work up to them.
      if (st.error().message == "cancelled" && s.n_past() > saved_at) save(s.n_past());
      return st.error();
    }
    pos = end;
    const double since = std::chrono::duration<double>(Clock::now() - saved_time).count();
    if (pos < n && (pos - saved_at >= p.checkpoint_tokens || since >= p.checkpoint_seconds))
      save(pos);
  }
  return resumed;
}

// Prefills `pt` (through its snapshot when `snapshot` and the session has them), then generates.
// `keep_answer`: the whole-document answer, kept (kept_answer.h) when it stops at the length
// limit or is cancelled, and continued when continue_answer asks for it.
Expected<PromptRun> run_prompt(Session& s, const PromptTokens& asked, bool snapshot, int part,
                               const RunSetup& rs, bool keep_answer = false) {
  const Tokenizer& tok = *rs.tokenizer;
  const AskParams& p = *rs.params;
  const auto cancelled = [&rs] { return rs.callbacks->cancelled && rs.callbacks->cancelled(); };
  if (cancelled()) return Error{"cancelled"};
  PromptRun run;
  run.prompt_tokens = static_cast<int64_t>(asked.size());
  auto* const cpu = dynamic_cast<cpu::CpuSession*>(&s);
  // A kept answer continued: its tokens follow the question, prefilled with it (the document
  // prefix still comes from its snapshot).
  keep_answer = keep_answer && !p.snapshot_dir.empty();
  std::vector<int32_t> prompt = asked.prefix;
  prompt.insert(prompt.end(), asked.suffix.begin(), asked.suffix.end());
  std::string kept_file;
  std::vector<int32_t> kept;
  if (keep_answer) {
    kept_file =
        (fs::path(p.snapshot_dir) /
         kept_answer_file_name(p.model_fingerprint,
                               prefix_hash("kept answer\n" + sampling_text(p.sampling), prompt)))
            .string();
    if (p.continue_answer) {
      auto k = read_kept_answer(kept_file, static_cast<int64_t>(prompt.size()));
      if (!k) {
        note(rs,
             fmt::format("no answer of this question to continue ({}): answering from the start",
                         k.error().message));
      } else {
        kept = std::move(*k);
        note(rs, fmt::format("continuing the earlier answer: its {} tokens are kept", kept.size()));
      }
    }
  }
  PromptTokens extended;
  if (!kept.empty()) {
    extended = asked;
    extended.suffix.insert(extended.suffix.end(), kept.begin(), kept.end());
  }
  const PromptTokens& pt = kept.empty() ? asked : extended;
  std::vector<int32_t> all = std::move(prompt);
  all.insert(all.end(), kept.begin(), kept.end());

  AnswerProgress* const progress = rs.progress;
  if (progress) progress->prompt_begin(static_cast<int64_t>(all.size()), p.n_predict);
  // An eval of prompt tokens ending at position `end`, reporting its ubatches as prefill.
  const auto prefill = [&](std::span<const int32_t> tokens, bool want_logits,
                           size_t end) -> Status {
    if (!progress) return s.eval(tokens, want_logits);
    const EvalProgress outer = s.eval_progress();
    s.set_eval_progress(progress->prefill_hook(outer, static_cast<int64_t>(end)));
    Status st = s.eval(tokens, want_logits);
    s.set_eval_progress(outer);
    return st;
  };

  const bool snapshots = snapshot && cpu != nullptr && p.use_snapshots && !p.snapshot_dir.empty() &&
                         !pt.prefix.empty() && !pt.suffix.empty();
  bool prefilled = false;
  if (snapshots) {
    const SnapshotKey key{p.model_fingerprint, prefix_hash(p.kv_config, pt.prefix)};
    const std::string file = (fs::path(p.snapshot_dir) / snapshot_file_name(key)).string();
    std::optional<std::string> found = rs.index ? rs.index->find(key) : std::nullopt;
    std::error_code ec;
    if (!found && fs::exists(file, ec)) found = file;  // written before its record was
    // The record names the file where it was written; this run's snapshot folder wins when it
    // holds the file (a data folder copied or moved elsewhere reads its own copy).
    if (found && *found != file && fs::exists(file, ec)) found = file;
    bool reuse = false;
    if (found) {
      if (auto st = cpu->load_kv(*found); !st) {
        note(rs,
             fmt::format("saved KV not usable ({}); prefilling the document", st.error().message));
        if (rs.index) rs.index->remove(key);
      } else if (cpu->tokens().size() != pt.prefix.size() ||
                 !std::equal(pt.prefix.begin(), pt.prefix.end(), cpu->tokens().begin())) {
        note(rs, fmt::format("saved KV {} holds other tokens; prefilling the document", *found));
      } else {
        reuse = true;
      }
    }
    if (reuse) {
      run.reused_snapshot = true;
      run.reused_tokens = static_cast<int64_t>(pt.prefix.size());
      note(rs, fmt::format("reused saved KV: {} tokens", pt.prefix.size()));
      if (progress) progress->prompt_restored(run.reused_tokens);
      // The whole prompt from position 0: the restored prefix is kept, the question computed.
      if (auto st = prefill(all, true, all.size()); !st) return st.error();
      prefilled = true;
    } else {
      const std::string checkpoint =
          (fs::path(p.snapshot_dir) / checkpoint_file_name(key)).string();
      // The prefix goes in slices and may resume from a checkpoint: the session's position is
      // the prefill's progress.
      const EvalProgress outer = s.eval_progress();
      if (progress) {
        s.set_eval_progress([progress, cpu, outer](int64_t done, int64_t total) {
          progress->prefill_at(cpu->n_past());
          return outer ? outer(done, total) : true;
        });
      }
      auto done = prefill_with_checkpoints(*cpu, pt.prefix, checkpoint, rs, [progress](int64_t n) {
        if (progress) progress->prompt_restored(n);
      });
      s.set_eval_progress(outer);
      if (!done) return done.error();
      run.resumed_from_tokens = *done;
      fs::create_directories(p.snapshot_dir, ec);
      if (auto st = cpu->save_kv(file); !st) {
        note(rs, fmt::format("could not save the document's KV: {}", st.error().message));
      } else {
        const auto size = static_cast<int64_t>(fs::file_size(file, ec));
        run.saved_snapshot = true;
        fs::remove(checkpoint, ec);  // the whole prefix is saved: its checkpoint is done with
        if (rs.index) {
          if (auto st =
                  rs.index->put(key, file, ec ? 0 : size, static_cast<int64_t>(pt.prefix.size()));
              !st)
            note(rs, fmt::format("could not record the saved KV: {}", st.error().message));
        }
        note(rs, fmt::format("saved KV of the document prefix: {} tokens, {}", pt.prefix.size(),
                             format_size(ec ? 0 : size)));
      }
      if (auto st = prefill(pt.suffix, true, all.size()); !st) return st.error();
      prefilled = true;
    }
  }
  if (!prefilled) {
    if (auto st = prefill(all, true, all.size()); !st) return st.error();
  }
  if (progress) progress->prefill_done();
  run.prefill_tokens_computed =
      cpu ? cpu->usage().prefill_tokens_computed : static_cast<int64_t>(all.size());

  if (auto st = check_logits_finite(s.logits()); !st) return st.error();
  Sampler sampler(p.sampling);
  std::vector<int32_t> history = all;
  for (const int32_t id : kept) {  // the continued answer's text so far, streamed as it was
    const std::string piece = tok.token_to_piece(id);
    run.text += piece;
    if (rs.callbacks->piece) rs.callbacks->piece(part, piece);
  }
  run.continued_tokens = static_cast<int64_t>(kept.size());
  // The answer so far (kept and new), kept when it stops early so that continue extends it.
  const auto keep = [&] {
    const std::span<const int32_t> answer = std::span<const int32_t>(history).subspan(asked.size());
    if (auto st = write_kept_answer(kept_file, static_cast<int64_t>(asked.size()), answer); !st)
      note(rs, fmt::format("could not keep the answer for a continue: {}", st.error().message));
  };
  for (int32_t i = 0; p.n_predict < 0 || i < p.n_predict; ++i) {
    const int32_t id = sampler.sample(s.logits(), history);
    if (tok.is_eog(id)) break;
    history.push_back(id);
    ++run.generated_tokens;
    if (progress) progress->decode_at(run.generated_tokens);
    const std::string piece = tok.token_to_piece(id);
    run.text += piece;
    if (rs.callbacks->piece) rs.callbacks->piece(part, piece);
    if (cancelled()) {
      if (keep_answer) keep();
      return Error{"cancelled"};
    }
    if (p.n_predict >= 0 && i + 1 == p.n_predict) break;  // no forward pass for unused logits
    const int32_t one[1] = {id};
    if (auto st = s.eval(one, true); !st) {
      if (starts_with(st.error().message, "context full")) {
        run.stopped = st.error().message;
        break;
      }
      return st.error();
    }
    if (auto st = check_logits_finite(s.logits()); !st) return st.error();
  }
  if (run.stopped.empty() && p.n_predict >= 0 && run.generated_tokens == p.n_predict) {
    run.stopped = fmt::format("length limit {} tokens", p.n_predict);
    if (keep_answer) keep();
  } else if (keep_answer) {
    // The answer ended on its own (or filled the context): nothing is left to continue.
    std::error_code ec;
    fs::remove(kept_file, ec);
  }
  return run;
}

bool nothing_relevant(const std::string& answer) {
  return answer.find("Nothing relevant in these pages") != std::string::npos && answer.size() < 80;
}

// Combines part answers in one prompt, or, when they do not fit, in halves first.
Expected<PromptRun> reduce(const PromptContext& ctx, const DocumentText& doc,
                           std::vector<PartText> parts, int64_t n_ctx, int64_t reserve,
                           const SessionFactory& make_session, const RunSetup& rs, bool final) {
  const std::string& question = rs.params->question;
  const BuiltPrompt prompt = build_reduce_prompt(ctx, doc.title, question, parts);
  if (static_cast<int64_t>(prompt.tokens.size()) + reserve > n_ctx) {
    // Two answers that do not fit together cannot be combined by halving any further.
    if (parts.size() <= 2) {
      return make_error(
          "the parts' answers do not fit the {}-token context even two at a time with room for "
          "a {}-token answer (use a larger -c or a smaller -n)",
          n_ctx, reserve);
    }
    const size_t half = parts.size() / 2;
    std::vector<PartText> left(parts.begin(), parts.begin() + static_cast<ptrdiff_t>(half));
    std::vector<PartText> right(parts.begin() + static_cast<ptrdiff_t>(half), parts.end());
    auto l = reduce(ctx, doc, left, n_ctx, reserve, make_session, rs, false);
    if (!l) return l.error();
    auto r = reduce(ctx, doc, right, n_ctx, reserve, make_session, rs, false);
    if (!r) return r.error();
    std::vector<PartText> two = {{left.front().first_page, left.back().last_page, l->text},
                                 {right.front().first_page, right.back().last_page, r->text}};
    auto out = reduce(ctx, doc, two, n_ctx, reserve, make_session, rs, final);
    if (out) {
      out->prefill_tokens_computed += l->prefill_tokens_computed + r->prefill_tokens_computed;
      out->generated_tokens += l->generated_tokens + r->generated_tokens;
    }
    return out;
  }
  auto session = make_session();
  if (!session) return session.error();
  // Intermediate combinations stream nowhere; the final one is the answer.
  AskCallbacks quiet = *rs.callbacks;
  if (!final) quiet.piece = nullptr;
  RunSetup sub = rs;
  sub.callbacks = &quiet;
  return run_prompt(**session, prompt.tokens, false, 0, sub);
}

}  // namespace

Expected<AskResult> ask_document(const Tokenizer& tokenizer, const DocumentText& doc,
                                 const AskParams& params, const SessionFactory& make_session,
                                 SnapshotIndex* index, const AskCallbacks& callbacks,
                                 PartStore* store) {
  AskResult res;
  const PageRange whole{0, doc.pages.size()};
  res.pages_without_text = pages_without_text(doc, whole);
  if (std::none_of(doc.pages.begin(), doc.pages.end(), page_has_text)) {
    const size_t n = doc.pages.size();
    std::string what;
    if (n == 0) {
      what = "it has no pages";
    } else if (res.pages_without_text.size() < n) {
      what = "its pages are empty";
    } else {
      what = n == 1 ? std::string(
                          "its one page is a scanned image (or undecodable) without a "
                          "text layer; it needs OCR (ingest with --ocr)")
                    : fmt::format(
                          "all {} of its pages are scanned images (or undecodable) "
                          "without a text layer; they need OCR (ingest with --ocr)",
                          n);
    }
    return make_error("document {}{} has no text: {}; not answering", doc.id,
                      doc.title.empty() ? "" : " (" + doc.title + ")", what);
  }
  if (params.question.find_first_not_of(" \t\r\n") == std::string::npos)
    return Error{"the question is empty"};

  auto first_session = make_session();
  if (!first_session) return first_session.error();
  std::unique_ptr<Session> session = std::move(*first_session);
  const int64_t n_ctx = session->n_ctx();
  res.context = n_ctx;
  const int64_t reserve = answer_reserve(params.n_predict, n_ctx);

  const PromptContext ctx{&tokenizer, params.family};
  const BuiltPrompt whole_prompt = build_document_prompt(ctx, doc, whole, params.question);
  res.document_tokens = whole_prompt.document_tokens;
  res.question_tokens = static_cast<int64_t>(whole_prompt.tokens.suffix.size());
  res.prompt_tokens = static_cast<int64_t>(whole_prompt.tokens.size());
  const auto note_line = [&](const std::string& s) {
    if (callbacks.note) callbacks.note(s);
  };
  if (!res.pages_without_text.empty()) {
    std::string pages;
    for (int p : res.pages_without_text) pages += fmt::format("{}{}", pages.empty() ? "" : ", ", p);
    note_line(fmt::format("{} {} no text (scanned or undecodable) and {} left out: {}",
                          res.pages_without_text.size() == 1 ? "page" : "pages",
                          res.pages_without_text.size() == 1 ? "has" : "have",
                          res.pages_without_text.size() == 1 ? "is" : "are", pages));
  }
  note_line(fmt::format(
      "document: {} {}, {} tokens; question: {} tokens; prompt: {} tokens of a {}-token "
      "context",
      doc.pages.size(), doc.pages.size() == 1 ? "page" : "pages", res.document_tokens,
      res.question_tokens, res.prompt_tokens, n_ctx));

  AnswerProgress progress(callbacks.progress);
  progress.set_prefill_cost(callbacks.prefill_cost);
  RunSetup rs{&tokenizer, &params, index, &callbacks, progress.enabled() ? &progress : nullptr};
  const bool fits = res.prompt_tokens + reserve <= n_ctx;
  if (fits) {
    if (params.map_reduce) note_line("the document fits the context: answering in one prompt");
    auto run = run_prompt(*session, whole_prompt.tokens, true, 0, rs, /*keep_answer=*/true);
    if (!run) return run.error();
    res.answer = run->text;
    res.prefill_tokens_computed = run->prefill_tokens_computed;
    res.generated_tokens = run->generated_tokens;
    res.continued_tokens = run->continued_tokens;
    res.reused_snapshot = run->reused_snapshot;
    res.reused_tokens = run->reused_tokens;
    res.resumed_from_tokens = run->resumed_from_tokens;
    res.stopped = run->stopped;
    res.citations = check_citations(res.answer, doc);
    return res;
  }
  // A question that leaves no room for any of the document: parts cannot help (each part's
  // prompt holds the whole question), so --map-reduce is not the advice.
  if (part_reserve(n_ctx, res.question_tokens) >= n_ctx) {
    return make_error(
        "the question is {} tokens and the context {}: with room for a {}-token answer no part "
        "of the document fits beside it (--map-reduce cannot help: each part repeats the "
        "question); shorten the question or use a larger -c",
        res.question_tokens, n_ctx, part_answer_reserve(n_ctx));
  }
  if (!params.map_reduce) {
    return make_error(
        "the document is longer than the context: the prompt needs {} tokens (document {}, "
        "question {}) plus room for a {}-token answer, but the context holds {} tokens; use "
        "--map-reduce to answer over parts of the document, or a larger -c",
        res.prompt_tokens, res.document_tokens, res.question_tokens, reserve, n_ctx);
  }
  // Checked before the first part: an answer longer than a part keeps room for would make the
  // parts' answers too long to combine, an error only after every part had run.
  if (params.n_predict < 0 || params.n_predict > part_answer_reserve(n_ctx)) {
    return make_error(
        "-n {}{}: a map-reduce part keeps room for an answer of {} tokens in the {}-token "
        "context (the parts' answers are then combined two or more at a time); give -n {} or "
        "less, or a larger -c",
        params.n_predict, params.n_predict < 0 ? " (no limit)" : "", part_answer_reserve(n_ctx),
        n_ctx, part_answer_reserve(n_ctx));
  }
  res.part_question_budget = part_question_budget(n_ctx, res.question_tokens);
  if (res.part_question_budget > part_question_budget(n_ctx)) {
    note_line(fmt::format(
        "the question takes {} tokens, more than the {} the document's parts are planned with: "
        "parts planned for a {}-token question (their saved KV serves only questions about as "
        "long)",
        res.question_tokens, part_question_budget(n_ctx), res.part_question_budget));
  }
  auto ranges = plan_parts(ctx, doc, n_ctx, part_reserve(n_ctx, res.question_tokens));
  if (!ranges) return ranges.error();
  const int n_parts = static_cast<int>(ranges->size());
  res.map_reduce = true;
  res.n_parts = n_parts;
  const auto n_pieces = std::count_if(ranges->begin(), ranges->end(),
                                      [](const PageRange& r) { return r.is_piece(); });
  note_line(fmt::format(
      "map-reduce: the prompt needs {} tokens and the context holds {}; answering over {} "
      "page-aligned parts{}, then combining their answers",
      res.prompt_tokens, n_ctx, n_parts,
      n_pieces > 0 ? fmt::format(" ({} of them pieces of pages too long for one part)", n_pieces)
                   : std::string()));
  res.reused_snapshot = true;
  if (progress.enabled()) {
    // The ETA of the whole answer counts the tokens every part's prompt holds.
    std::vector<int64_t> part_tokens;
    for (int k = 0; k < n_parts; ++k) {
      part_tokens.push_back(
          static_cast<int64_t>(build_document_prompt(ctx, doc, (*ranges)[static_cast<size_t>(k)],
                                                     params.question, k + 1, n_parts)
                                   .tokens.size()));
    }
    progress.plan_parts(part_tokens, reserve);
  }
  std::vector<PartText> texts;
  for (int k = 0; k < n_parts; ++k) {
    const PageRange r = (*ranges)[static_cast<size_t>(k)];
    PartAnswer pa;
    pa.first_page = doc.pages[r.page_begin].page_no;
    pa.last_page = doc.pages[r.page_end - 1].page_no;
    if (callbacks.part_start) callbacks.part_start(k + 1, n_parts, pa.first_page, pa.last_page);
    const BuiltPrompt prompt = build_document_prompt(ctx, doc, r, params.question, k + 1, n_parts);
    const uint64_t answer_key =
        part_answer_key(prefix_hash(params.kv_config, prompt.tokens.prefix), params);
    std::optional<PartAnswer> kept;
    if (store && params.continue_parts) kept = store->find(params.model_fingerprint, answer_key);
    if (kept) {
      // Asked before and kept: its answer as it was, nothing run.
      kept->first_page = pa.first_page;
      kept->last_page = pa.last_page;
      kept->kept = true;
      note_line(
          fmt::format("part {} of {}: its answer is kept from an earlier ask", k + 1, n_parts));
      texts.push_back({pa.first_page, pa.last_page, kept->run.text});
      res.parts.push_back(std::move(*kept));
      ++res.parts_kept;
      res.reused_snapshot = false;
      continue;
    }
    if (!session) {
      auto fresh = make_session();
      if (!fresh) return fresh.error();
      session = std::move(*fresh);
    }
    auto run = run_prompt(*session, prompt.tokens, true, k + 1, rs);
    session.reset();  // each prompt starts from an empty cache
    if (!run) {
      if (run.error().message == "cancelled" && !res.parts.empty()) {
        // Stopped: the finished parts are the work kept (and stored); no answer yet.
        res.stopped = fmt::format("stopped after part {} of {}", k, n_parts);
        res.stopped_between_parts = true;
        res.reused_snapshot = false;
        return res;
      }
      return run.error();
    }
    pa.run = std::move(*run);
    if (store) {
      if (auto st = store->put(params.model_fingerprint, answer_key, k + 1, n_parts, pa); !st)
        note_line(fmt::format("could not store part {}'s answer: {}", k + 1, st.error().message));
    }
    res.prefill_tokens_computed += pa.run.prefill_tokens_computed;
    res.generated_tokens += pa.run.generated_tokens;
    res.reused_snapshot = res.reused_snapshot && pa.run.reused_snapshot;
    res.reused_tokens += pa.run.reused_tokens;
    res.parts_reused += pa.run.reused_snapshot ? 1 : 0;
    res.resumed_from_tokens += pa.run.resumed_from_tokens;
    texts.push_back({pa.first_page, pa.last_page, pa.run.text});
    res.parts.push_back(std::move(pa));
    progress.part_done(k + 1);
  }
  // Parts that found nothing are left out of the final prompt, unless all of them did.
  std::vector<PartText> relevant;
  for (const PartText& t : texts) {
    if (!nothing_relevant(t.answer)) relevant.push_back(t);
  }
  if (relevant.empty()) relevant = texts;
  if (callbacks.part_start) callbacks.part_start(0, n_parts, 0, 0);
  auto combined = reduce(ctx, doc, relevant, n_ctx, reserve, make_session, rs, true);
  if (!combined && combined.error().message == "cancelled") {
    res.stopped = fmt::format("stopped after part {} of {}", n_parts, n_parts);
    res.stopped_between_parts = true;
    res.reused_snapshot = false;
    return res;
  }
  if (!combined) return combined.error();
  progress.answer_done();
  res.answer = combined->text;
  res.prefill_tokens_computed += combined->prefill_tokens_computed;
  res.generated_tokens += combined->generated_tokens;
  res.stopped = combined->stopped;
  res.citations = check_citations(res.answer, doc);
  return res;
}

}  // namespace spw::app
