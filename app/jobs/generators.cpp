// The job runner's generators and task prompts (app/jobs/runner.h).
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "app/ask/citations.h"
#include "app/ask/prompt.h"
#include "app/jobs/job_store.h"
#include "app/jobs/runner.h"
#include "app/remote/openai_client.h"
#include "app/runtime/engine.h"
#include "app/settings/app_settings.h"
#include "app/store/library.h"

namespace spw::app {

namespace fs = std::filesystem;

std::vector<TaskPrompt> task_prompts(const JobSpec& spec) {
  std::vector<TaskPrompt> out;
  switch (spec.task) {
    case JobTask::Summary: {
      std::string how = "in one or two paragraphs";
      if (spec.summary_length == "short") how = "in three to five sentences";
      if (spec.summary_length == "long") how = "in detail, section by section";
      out.push_back({"", fmt::format("Summarize the document {}. Cite the pages that support each "
                                     "point as [p. N] \"short quote\".",
                                     how)});
      break;
    }
    case JobTask::Prompt:
      out.push_back({"", spec.prompt});
      break;
    case JobTask::Clauses: {
      const std::vector<std::string> types =
          spec.clauses.empty() ? default_clause_types() : spec.clauses;
      for (const std::string& c : types) {
        out.push_back(
            {c, fmt::format("Find the {0} clause of the document. Quote its key sentence exactly, "
                            "as [p. N] \"quoted text\", then explain it in one sentence. If the "
                            "document has no {0} clause, answer {1}.",
                            c, kNoClauseAnswer)});
      }
      break;
    }
  }
  return out;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return std::string();
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool says_none(const std::string& answer) {
  const size_t b = answer.find_first_not_of(" \t\r\n\"*'`");
  if (b == std::string::npos) return true;  // an empty answer found nothing
  const std::string head = lower(answer.substr(b, 80));
  return head.rfind("none", 0) == 0 || head.rfind("no such", 0) == 0 ||
         head.find("has no ") != std::string::npos ||
         head.find("does not contain") != std::string::npos;
}

JobCitation to_job_citation(const CitationCheck& c) {
  JobCitation j;
  j.page = c.citation.page;
  j.quote = c.citation.quote;
  j.verified = c.verified;
  j.reason = c.reason;
  return j;
}

}  // namespace

JobResult clause_result(const std::string& clause, const std::string& answer,
                        const std::vector<JobCitation>& citations) {
  JobResult r;
  r.clause = clause;
  r.text = answer;
  r.citations = citations;
  const JobCitation* pick = nullptr;
  for (const JobCitation& c : citations) {
    if (!c.quote.empty()) {
      pick = &c;
      break;
    }
  }
  if (!pick && !citations.empty()) pick = &citations.front();
  const bool quoted = pick && !pick->quote.empty();
  r.found = quoted || !says_none(answer);
  if (pick && r.found) {
    r.page = pick->page;
    r.quote = pick->quote;
    r.verified = pick->verified;
  }
  return r;
}

namespace {

class LocalGenerator final : public Generator {
 public:
  LocalGenerator(std::unique_ptr<Engine> engine, std::unique_ptr<Library> lib, fs::path snapshots)
      : engine_(std::move(engine)), lib_(std::move(lib)), snapshots_(std::move(snapshots)) {}

  std::string describe() const override {
    return fmt::format("{} ({})", engine_->info().name, engine_->settings().device);
  }

  GenResult run(const GenRequest& req) override {
    DocumentAsk a;
    a.doc_id = req.doc_id;
    a.question = req.question;
    a.n_predict = req.n_predict;
    a.sampling.temp = req.temp;
    a.sampling.seed = req.seed;
    a.map_reduce = req.map_reduce;
    a.snapshot_dir = snapshots_;
    // The budget of Settings (read at each prompt: the desktop app may change it while its
    // runner works); unreadable settings leave the default.
    if (auto st = load_app_settings(*lib_); st) a.snapshot_budget = st->snapshot_budget;
    a.continue_parts = req.continue_parts;
    RunCallbacks cb;
    cb.cancelled = req.cancelled;
    cb.progress = req.events;
    if (req.progress || req.usage) {
      cb.usage = [&](const SessionUsage& u) {
        if (req.progress) req.progress(u.decode_tokens, u.decode_s);
        if (req.usage) req.usage(u);
      };
    }
    GenResult out;
    std::function<void(int, int, int, int)> part_start;
    if (req.part_start)
      part_start = [&](int part, int n_parts, int, int) { req.part_start(part, n_parts); };
    auto r = ask_library_document(*engine_, *lib_, a, cb, part_start);
    if (!r) {
      out.error = r.error().message;
      out.transient = jobs_db::is_busy_message(out.error);
      return out;
    }
    out.ok = true;
    out.text = r->result.answer;
    for (const CitationCheck& c : r->result.citations) out.citations.push_back(to_job_citation(c));
    out.prompt_tokens = r->result.prompt_tokens;
    out.generated_tokens = r->result.generated_tokens;
    out.prefill_s = r->prefill_s;
    out.decode_s = r->decode_s;
    out.reused_snapshot = r->result.reused_snapshot;
    out.n_parts = r->result.n_parts;
    out.parts_kept = r->result.parts_kept;
    if (r->result.stopped_between_parts) {
      // Cancelled between parts: the finished parts are stored for the next run to keep.
      out.ok = false;
      out.error = "cancelled";
    }
    return out;
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Library> lib_;
  fs::path snapshots_;
};

}  // namespace

Expected<std::unique_ptr<Generator>> make_local_generator(const JobRecord& job,
                                                          const fs::path& db_file,
                                                          const fs::path& cache_dir) {
  EngineSettings es;
  if (!job.spec.engine_json.empty()) {
    auto parsed = engine_settings_from_json(job.spec.engine_json);
    if (!parsed) return parsed.error();
    es = *parsed;
  }
  es.model_path = job.spec.model_path;
  if (auto st = validate(es); !st) return st.error();
  std::error_code ec;
  if (!fs::is_regular_file(es.model_path, ec))
    return make_error("model '{}': no such file", es.model_path);
  auto engine = Engine::load(es);
  if (!engine) return make_error("model '{}': {}", es.model_path, engine.error().message);
  auto lib = Library::open(db_file);
  if (!lib) return lib.error();
  fs::path snapshots = cache_dir.empty() ? fs::path() : cache_dir / "snapshots";
  return std::unique_ptr<Generator>(
      new LocalGenerator(std::move(*engine), std::move(*lib), std::move(snapshots)));
}

// --- remote ------------------------------------------------------------------------------------

namespace {

class RemoteGenerator final : public Generator {
 public:
  RemoteGenerator(remote::OpenAIClient client, std::unique_ptr<Library> lib, bool plain)
      : client_(std::move(client)), lib_(std::move(lib)), plain_(plain) {}

  std::string describe() const override {
    return fmt::format("{}{} ({})", client_.origin(), client_.prefix(), client_.options().model);
  }

  GenResult run(const GenRequest& req) override {
    GenResult out;
    auto rec = lib_->document(req.doc_id);
    if (!rec) {
      out.error = rec.error().message;
      out.transient = jobs_db::is_busy_message(out.error);
      return out;
    }
    if (rec->no_text) {
      out.error = fmt::format(
          "document {} has no text (scanned or undecodable pages): not answering", req.doc_id);
      return out;
    }
    auto pages = lib_->pages(req.doc_id);
    if (!pages) {
      out.error = pages.error().message;
      out.transient = jobs_db::is_busy_message(out.error);
      return out;
    }
    const DocumentText doc = document_text(*rec, std::move(*pages));
    PageRange all;
    all.page_end = doc.pages.size();
    std::vector<ChatMessage> messages(2);
    messages[0].role = ChatRole::System;
    messages[0].content = kAskSystemPrompt;
    messages[1].role = ChatRole::User;
    // The user message as the local whole-document prompt has it (app/ask/prompt.cpp), so a
    // chat-template model answers the same on both sides with greedy settings.
    messages[1].content = fmt::format("{}\n\n{}\n\nQuestion: {}",
                                      doc.title.empty() ? "Document" : "Document: " + doc.title,
                                      document_block(doc, all), trimmed(req.question));
    if (plain_) messages[1].content += "\n\nAnswer:";  // as question_tail() for 'plain'
    Completion c;
    c.max_tokens = req.n_predict;
    c.sampling.temp = req.temp;
    c.sampling.seed = req.seed;
    RunCallbacks cb;
    cb.cancelled = req.cancelled;
    remote::RemoteResult res = client_.chat(messages, c, cb);
    if (!res.ok()) {
      out.error = res.error.message;
      out.transient = res.error.transient;
      return out;
    }
    if (res.value->finish_reason == "cancelled") {
      out.error = "cancelled";
      return out;
    }
    out.ok = true;
    out.text = res.value->text;
    for (const CitationCheck& ck : check_citations(out.text, doc))
      out.citations.push_back(to_job_citation(ck));
    out.prompt_tokens = res.value->prompt_tokens;
    out.generated_tokens = res.value->completion_tokens;
    out.prefill_s = res.value->prefill_s;
    out.decode_s = res.value->decode_s;
    return out;
  }

 private:
  remote::OpenAIClient client_;
  std::unique_ptr<Library> lib_;
  bool plain_ = false;
};

}  // namespace

Expected<std::unique_ptr<Generator>> make_remote_generator(const JobRecord& job,
                                                           const fs::path& db_file) {
  remote::RemoteOptions o;
  o.base_url = job.spec.endpoint;
  o.api_key = remote::api_key_from_env();
  o.model = job.spec.model_path;
  o.max_attempts = 1;  // the runner retries transient failures with its own backoff
  auto client = remote::OpenAIClient::create(o);
  if (!client) return make_error("--endpoint {}: {}", job.spec.endpoint, client.error().message);
  auto lib = Library::open(db_file);
  if (!lib) return lib.error();
  // -m naming a local copy of the served GGUF: its chat template tells whether the local
  // prompt has the 'plain' family's "Answer:" cue, so both sides see the same text.
  bool plain = false;
  std::error_code ec;
  if (fs::is_regular_file(job.spec.model_path, ec)) {
    if (auto info = probe_model(job.spec.model_path)) plain = info->chat_family == "plain";
  }
  return std::unique_ptr<Generator>(
      new RemoteGenerator(std::move(*client), std::move(*lib), plain));
}

}  // namespace spw::app
