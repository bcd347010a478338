// Asking a document: the whole-document prompt (app/ask/prompt.h) run on an engine session,
// with the document prefix's KV saved as a snapshot and restored for later questions, map-reduce
// over page-aligned parts when the document is longer than the context, and the answer's
// citations checked against the pages (app/ask/citations.h).
//
// Snapshots: the prefix (everything before the question) is keyed by the model's fingerprint
// together with the KV settings that change what a snapshot holds (KV types, block size, an
// approximate attention mode) and a hash of the prefix's token ids. The file lies at
// <snapshot_dir>/<fingerprint>-<prefix hash>.kv and is recorded through a SnapshotIndex (the
// library's kv_snapshots table). Restoring it leaves only the question to compute; a missing,
// damaged or mismatched file falls back to prefilling, with a note.
//
// Only the CPU session has snapshots (its paged KV cache); on another session the prompt is
// prefilled each time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/ask/citations.h"
#include "app/ask/document.h"
#include "app/ask/prompt.h"
#include "app/runtime/progress.h"
#include "engine/backend/device.h"
#include "engine/common/expected.h"
#include "engine/kv/tier_policy.h"
#include "engine/sampling/sampler.h"
#include "engine/session/session.h"
#include "engine/tokenizer/tokenizer.h"

namespace spw::app {

/// Identity of a saved prefix: the library's kv_snapshots key.
struct SnapshotKey {
  uint64_t model_fingerprint = 0;  // kv::model_fingerprint(model)
  /// The first 8 bytes of SHA-256 over the KV settings text (snapshot_kv_config) and the
  /// prefix's token ids (little-endian int32): the same tokens under KV settings that make
  /// another snapshot are another key.
  uint64_t prefix_hash = 0;
};

/// Where snapshots are recorded (the library's kv_snapshots table; tests use a map).
class SnapshotIndex {
 public:
  virtual ~SnapshotIndex() = default;
  /// The recorded file of `key`, if any.
  virtual std::optional<std::string> find(const SnapshotKey& key) = 0;
  /// Records a file just written.
  virtual Status put(const SnapshotKey& key, const std::string& path, int64_t size_bytes,
                     int64_t n_tokens) = 0;
  /// Forgets the record of a file that turned out missing or unusable.
  virtual void remove(const SnapshotKey& key) = 0;
};

/// The KV settings a snapshot depends on, as text: "f16/f16 block 256", plus the attention
/// mode, window and sinks when the attention is approximate (it changes the KV a prefill
/// computes).
std::string snapshot_kv_config(const SessionParams& params, const kv::KvSettings& kv);

/// SnapshotKey::prefix_hash of `ids` under `kv_config`.
uint64_t prefix_hash(const std::string& kv_config, const std::vector<int32_t>& ids);

/// "<fingerprint as 16 hex digits>-<prefix hash as 16 hex digits>.kv"
std::string snapshot_file_name(const SnapshotKey& key);

struct AskParams {
  std::string question;
  int32_t n_predict = 256;  // answer tokens per prompt; < 0: until the end of text or context
  SamplerParams sampling;
  bool map_reduce = false;  // answer over parts when the document does not fit
  bool use_snapshots = true;
  std::string snapshot_dir;        // where snapshot files go; empty: no snapshots
  uint64_t model_fingerprint = 0;  // kv::model_fingerprint(model)
  std::string kv_config;           // snapshot_kv_config(...)
  ChatFamily family = ChatFamily::Plain;
  /// Resumable prefill: while a prefix with snapshots on is prefilled, a checkpoint of the
  /// tokens so far is saved every checkpoint_tokens tokens or checkpoint_seconds seconds of
  /// prefill, whichever comes first, and when the ask is cancelled during the prefill. The next
  /// ask of the same prefix restores it and prefills only the rest. The file is
  /// checkpoint_file_name(key) beside the prefix's snapshot, rewritten whole each time (the
  /// snapshot format is one checksummed zstd payload: nothing can be appended) and removed once
  /// the whole prefix is saved. checkpoint_tokens <= 0: no checkpoints.
  int64_t checkpoint_tokens = 8192;
  double checkpoint_seconds = 60;
  /// Map-reduce: parts whose answers the PartStore holds (from an ask stopped or killed after
  /// them, with the same question and generation settings) are not asked again; the ask
  /// continues at the first part without one. Every finished part is stored either way.
  bool continue_parts = false;
  /// A whole-document answer that stopped at the length limit, or was cancelled while it was
  /// generated, is kept as its token ids (app/ask/kept_answer.h: a small file in snapshot_dir,
  /// keyed by the prompt and the sampling settings, not n_predict). With continue_answer an ask
  /// of the same prompt prefills the kept tokens after the question (the document prefix still
  /// from its snapshot) and generates up to n_predict more: AskResult::answer is the whole
  /// answer, continued_tokens the part kept. Greedy, it equals one uninterrupted answer of the
  /// summed length (the kept tokens' KV is computed as a batch, not token by token: the same up
  /// to float rounding); with temp > 0 the continuation draws from the seed afresh. Without a
  /// kept answer it answers from the start (said in a note). The kept answer is removed once an
  /// answer of the prompt ends on its own. Map-reduce answers are not continued (their parts
  /// are: continue_parts).
  bool continue_answer = false;
};

/// Identity of a part's answer: the part's prefix hash (SnapshotKey::prefix_hash: its pages and
/// KV settings), the question, n_predict and the sampling settings. The first 8 bytes of
/// SHA-256 over them.
uint64_t part_answer_key(uint64_t part_prefix_hash, const AskParams& params);

/// "<fingerprint>-<prefix hash>-checkpoint.kv": a prefill checkpoint of the prefix `key` names.
std::string checkpoint_file_name(const SnapshotKey& key);

/// Tokens per prefill call when checkpoints are on: a multiple of the sessions' default ubatch
/// (512), so that slicing a prefill changes none of its ubatches, and checkpoints (taken between
/// slices) fall on the same positions in an interrupted run and an uninterrupted one.
inline constexpr int64_t kPrefillSliceTokens = 512;

struct AskCallbacks {
  /// A line for the user (token counts, snapshot reuse, fallbacks); the CLI prints it to stderr.
  std::function<void(const std::string&)> note;
  /// Answer text as it is generated. `part` >= 1 for a map-reduce part's answer, 0 for the
  /// answer itself.
  std::function<void(int part, const std::string&)> piece;
  /// Polled before each prompt and after every generated token: true stops the ask with the
  /// error "cancelled" (a prefill in progress finishes first; the engine has no hook in it yet).
  std::function<bool()> cancelled;
  /// Called before each part's prompt runs (part K of n_parts, its pages).
  std::function<void(int part, int n_parts, int first_page, int last_page)> part_start;
  /// Progress (app/runtime/progress.h): every prompt's prefill per ubatch (positions of its
  /// tokens) and decode per token; in map-reduce mode the parts (k of N, with the ETA of the
  /// whole answer: the remaining parts' tokens at the measured rate), ending at N of N.
  ProgressSink progress;
  /// The shape of a prefill's cost for the progress ETA (model_prefill_cost()); empty: linear.
  PrefillCost prefill_cost;
};

/// Creates a fresh session for one prompt (every prompt starts from an empty cache).
using SessionFactory = std::function<Expected<std::unique_ptr<Session>>()>;

/// How one prompt ran.
struct PromptRun {
  std::string text;  // the generated answer
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t prefill_tokens_computed = 0;
  bool reused_snapshot = false;
  int64_t reused_tokens = 0;
  bool saved_snapshot = false;
  int64_t resumed_from_tokens = 0;  // prefix tokens restored from a prefill checkpoint
  int64_t continued_tokens = 0;     // answer tokens restored from a saved answer (continue_answer)
  /// Empty, or why generation stopped early: "context full: ...", or "length limit N tokens"
  /// when the answer used all of n_predict (it may end mid-word: the reader is told).
  std::string stopped;
};

struct PartAnswer {
  int first_page = 0, last_page = 0;
  PromptRun run;
  bool kept = false;  // its answer came from the PartStore (an earlier, stopped ask)
};

/// Where finished map-reduce parts' answers are kept (the library's part_answers table; tests
/// use a map), so that a stopped or killed ask continues at the next part.
class PartStore {
 public:
  virtual ~PartStore() = default;
  /// The answer stored under `key` (part_answer_key), if any.
  virtual std::optional<PartAnswer> find(uint64_t model_fingerprint, uint64_t key) = 0;
  /// Stores a part's answer just finished (part K of n_parts, 1-based).
  virtual Status put(uint64_t model_fingerprint, uint64_t key, int part, int n_parts,
                     const PartAnswer& answer) = 0;
};

struct AskResult {
  std::string answer;
  std::vector<CitationCheck> citations;
  int64_t document_tokens = 0;          // the whole document's page blocks
  int64_t question_tokens = 0;          // the suffix: question and closing scaffolding
  int64_t prompt_tokens = 0;            // the whole-document prompt (prefix + suffix)
  int64_t context = 0;                  // the session's context length
  int64_t prefill_tokens_computed = 0;  // over every prompt run
  int64_t generated_tokens = 0;
  bool reused_snapshot = false;  // every document prompt (each part's) came from a snapshot
  int64_t reused_tokens = 0;
  int64_t resumed_from_tokens = 0;  // restored from prefill checkpoints, over every prompt
  /// continue_answer: answer tokens kept from the saved answer (in `answer`, before the
  /// generated_tokens new ones).
  int64_t continued_tokens = 0;
  bool map_reduce = false;
  std::vector<PartAnswer> parts;     // map-reduce: each part's answer
  int n_parts = 0;                   // map-reduce: the parts the document was answered over
  int parts_reused = 0;              // map-reduce: parts whose prefix was restored from saved KV
  int64_t part_question_budget = 0;  // map-reduce: the question tokens the parts were planned with
  int parts_kept = 0;                // map-reduce, continue_parts: parts answered by an earlier ask
  std::vector<int> pages_without_text;
  /// The final prompt's early stop, if any ("length limit N tokens", "context full: ..."); or,
  /// for a map-reduce ask cancelled after some parts finished, "stopped after part K of N": then
  /// `parts` holds the K finished parts (stored in the PartStore), `answer` is empty, and an ask
  /// with continue_parts resumes at part K + 1.
  std::string stopped;
  bool stopped_between_parts = false;  // the "stopped after part K of N" case above
};

/// " [stopped: length limit N tokens]" etc.: the mark an answer with `stopped` ends with when
/// shown; empty when it did not stop early.
std::string stopped_mark(const std::string& stopped);

/// The tokens an answer needs room for: n_predict, or 256 when it is unbounded, at most a
/// quarter of the context.
int64_t answer_reserve(int32_t n_predict, int64_t n_ctx);

/// Tokens a map-reduce part keeps for the question's suffix (the question and the template's
/// closing scaffolding) whatever the question: 128, at most a sixteenth of the context. Parts
/// are planned with this fixed budget so that their boundaries, and so their saved prefixes,
/// are the same for every question up to this long.
int64_t part_question_budget(int64_t n_ctx);

/// The question budget a question of `question_tokens` suffix tokens is planned with: the fixed
/// part_question_budget, or, for a longer question, its length rounded up to a multiple of 64
/// (its own partition: its parts' saved KV serves only questions of about its length).
int64_t part_question_budget(int64_t n_ctx, int64_t question_tokens);

/// Tokens a map-reduce part keeps for its answer, whatever n_predict (so that -n does not move
/// the parts either): 256, at most an eighth of the context. A part's answer longer than that
/// stops at the full context ("context full: ...").
int64_t part_answer_reserve(int64_t n_ctx);

/// Tokens a map-reduce part keeps free of the document (plan_parts' `reserve`): the question
/// budget plus part_answer_reserve.
int64_t part_reserve(int64_t n_ctx, int64_t question_tokens);

/// Asks `doc`. Errors: a document without text (all pages scanned or undecodable: "not
/// answering"); a prompt longer than the context without map_reduce ("the document needs N
/// tokens ... use --map-reduce"); with map_reduce, an n_predict unbounded or above
/// part_answer_reserve (before any part runs: "-n 300: a map-reduce part keeps room for an
/// answer of 64 tokens ..."); a page too long for any part; session and eval errors.
/// `parts` (may be null) keeps map-reduce parts' answers (AskParams::continue_parts). Cancelled
/// (AskCallbacks::cancelled) during a map-reduce ask after at least one part finished: not an
/// error but a result stopped after that part (AskResult::stopped).
Expected<AskResult> ask_document(const Tokenizer& tokenizer, const DocumentText& doc,
                                 const AskParams& params, const SessionFactory& make_session,
                                 SnapshotIndex* index, const AskCallbacks& callbacks,
                                 PartStore* parts = nullptr);

}  // namespace spw::app
