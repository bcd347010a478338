// A document's progress row while its prompts run (internal to app/jobs): the ask's progress
// events and part starts folded into a JobDocumentProgress and written to the library
// (jobs_db::write_document_progress) at most every `min_interval_s`, and at once at every
// prompt start and map-reduce part start, so that a runner that takes over after a death knows
// the part it died in.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <string>

#include "app/jobs/jobs.h"

namespace spw::app {

class DocProgressWriter final {
 public:
  struct Params {
    sqlite3* db = nullptr;  // the runner's connection (used on its thread)
    int64_t job_id = 0, doc_id = 0;
    std::string owner;  // the claim's owner: rows are written only while it holds the claim
    int n_prompts = 1;
    double min_interval_s = 1.0;
    std::function<double()> clock;    // seconds; default steady_seconds
    std::function<int64_t()> now_ms;  // unix ms for updated_ms; default the system clock
  };
  explicit DocProgressWriter(Params p);

  /// Prompt `prompt` (0-based) of the document begins.
  void prompt_begin(int prompt);
  /// Map-reduce part `part` of `n_parts` begins (1-based; 0: the combination begins).
  void part_start(int part, int n_parts);
  /// A progress event of the prompt (prefill, decode, part).
  void event(const ProgressEvent& e);
  /// The row as last folded (written or not).
  const JobDocumentProgress& row() const { return row_; }
  /// Rows written so far (tests).
  int writes() const { return writes_; }

 private:
  void write(bool force);
  double prompts_left_s() const;  // the prompts after this one, at the mean so far

  Params p_;
  JobDocumentProgress row_;
  double last_write_s_ = -1e300;
  bool pending_force_ = false;
  int writes_ = 0;
  // The ETA: a part event's estimate of the whole answer, counted down since it came.
  double part_eta_ = -1, part_eta_at_ = 0;
  // Prompts finished and their seconds, for the ETA of the prompts still to come.
  double prompt_start_s_ = 0, prompts_s_ = 0;
  int prompts_timed_ = 0;
};

}  // namespace spw::app
