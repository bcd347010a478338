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
};

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
  std::string stopped;  // empty, or why generation stopped early ("context full: ...")
};

struct PartAnswer {
  int first_page = 0, last_page = 0;
  PromptRun run;
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
  bool map_reduce = false;
  std::vector<PartAnswer> parts;  // map-reduce: each part's answer
  std::vector<int> pages_without_text;
  std::string stopped;  // the final prompt's early stop, if any
};

/// The tokens an answer needs room for: n_predict, or 256 when it is unbounded, at most a
/// quarter of the context.
int64_t answer_reserve(int32_t n_predict, int64_t n_ctx);

/// Asks `doc`. Errors: a document without text (all pages scanned or undecodable: "not
/// answering"); a prompt longer than the context without map_reduce ("the document needs N
/// tokens ... use --map-reduce"); a page too long for any part; session and eval errors.
Expected<AskResult> ask_document(const Tokenizer& tokenizer, const DocumentText& doc,
                                 const AskParams& params, const SessionFactory& make_session,
                                 SnapshotIndex* index, const AskCallbacks& callbacks);

}  // namespace spw::app
