// The runner's pieces (internal to app/jobs, used by tests): the prompts of each task, how a
// clause answer is read, and the two generators (the local engine, an OpenAI-compatible
// endpoint).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/jobs/jobs.h"
#include "engine/common/expected.h"

namespace spw::app {

/// One prompt of a document's task: the question, and the clause type it asks for (clauses).
struct TaskPrompt {
  std::string clause;  // empty for summary/prompt
  std::string question;
};
/// The prompts a document of `spec` needs: one for summary and prompt, one per clause type.
std::vector<TaskPrompt> task_prompts(const JobSpec& spec);

/// The answer the clause prompt asks for when the document has no such clause.
inline constexpr const char* kNoClauseAnswer = "NONE";

/// A clause answer read into a result row: found unless the answer starts with NONE (or says
/// there is no such clause) and has no citation with a quote; page/quote/verified from the
/// first citation with a quote (else the first citation).
JobResult clause_result(const std::string& clause, const std::string& answer,
                        const std::vector<JobCitation>& citations);

/// The local engine: the job's model loaded once (EngineSettings from engine_json with
/// model_path), each prompt asked with ask_library_document on a library connection of its own,
/// the document's saved KV under <cache_dir>/snapshots reused when model and prefix match
/// (empty cache_dir: no snapshots). Errors: the settings' or the model's ("cannot open ...").
Expected<std::unique_ptr<Generator>> make_local_generator(const JobRecord& job,
                                                          const std::filesystem::path& db_file,
                                                          const std::filesystem::path& cache_dir);

/// An OpenAI-compatible endpoint (`job.spec.endpoint`): the document's pages and the question
/// sent as a chat completion (the model name is `job.spec.model_path`), the API key from
/// SPILLWAY_API_KEY; the answer's citations checked against the library's pages here. 503,
/// 429, timeouts and refused connections are transient.
Expected<std::unique_ptr<Generator>> make_remote_generator(const JobRecord& job,
                                                           const std::filesystem::path& db_file);

}  // namespace spw::app
