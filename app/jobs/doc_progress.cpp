#include "app/jobs/doc_progress.h"

#include <algorithm>

#include "app/jobs/job_store.h"

namespace spw::app {

DocProgressWriter::DocProgressWriter(Params p) : p_(std::move(p)) {
  if (!p_.clock) p_.clock = steady_seconds;
  if (!p_.now_ms) p_.now_ms = jobs_db::now_ms;
  row_.known = true;
  row_.n_prompts = p_.n_prompts;
  prompt_start_s_ = p_.clock();
}

void DocProgressWriter::prompt_begin(int prompt) {
  const double now = p_.clock();
  if (prompt > row_.prompt) {
    prompts_s_ += now - prompt_start_s_;
    prompts_timed_ += prompt - row_.prompt;
  }
  prompt_start_s_ = now;
  const int n_prompts = row_.n_prompts;
  row_ = JobDocumentProgress{};
  row_.known = true;
  row_.prompt = prompt;
  row_.n_prompts = n_prompts;
  part_eta_ = -1;
  row_.eta_s = prompts_timed_ > 0 ? (n_prompts - prompt) * prompts_s_ / prompts_timed_ : -1;
  write(true);
}

void DocProgressWriter::part_start(int part, int n_parts) {
  row_.phase = "part";
  row_.n_parts = n_parts;
  row_.part = part == 0 ? n_parts + 1 : part;
  row_.parts_done = part == 0 ? n_parts : std::max(row_.parts_done, part - 1);
  row_.tokens_done = row_.tokens_total = 0;
  write(true);
}

double DocProgressWriter::prompts_left_s() const {
  const int left = row_.n_prompts - row_.prompt - 1;
  if (left <= 0 || prompts_timed_ == 0) return 0;
  return left * prompts_s_ / prompts_timed_;
}

void DocProgressWriter::event(const ProgressEvent& e) {
  const double now = p_.clock();
  double eta = e.eta_s;
  switch (e.phase) {
    case ProgressPhase::Part:
      row_.phase = "part";
      row_.n_parts = static_cast<int>(e.total);
      row_.parts_done = std::max(row_.parts_done, static_cast<int>(e.done));
      part_eta_ = e.eta_s;
      part_eta_at_ = now;
      break;
    case ProgressPhase::Prefill:
    case ProgressPhase::Decode:
      row_.phase = progress_phase_name(e.phase);
      row_.tokens_done = e.done;
      row_.tokens_total = e.total;
      // Map-reduce: the whole answer's estimate, not this prompt's.
      if (row_.n_parts > 0)
        eta = part_eta_ >= 0 ? std::max(0.0, part_eta_ - (now - part_eta_at_)) : -1;
      break;
    case ProgressPhase::Document:
      return;  // the job's, not this document's
  }
  if (eta >= 0) eta += prompts_left_s();
  row_.eta_s = eta;
  write(e.phase == ProgressPhase::Part);
}

void DocProgressWriter::write(bool force) {
  const double now = p_.clock();
  force = force || pending_force_;
  if (!force && now - last_write_s_ < p_.min_interval_s) return;
  row_.updated_ms = p_.now_ms();
  // Best effort: a busy database skips a throttled write; a forced one is tried again with the
  // next event.
  if (!jobs_db::write_document_progress(p_.db, p_.job_id, p_.doc_id, p_.owner, row_)) {
    pending_force_ = force;
    return;
  }
  pending_force_ = false;
  last_write_s_ = now;
  ++writes_;
}

}  // namespace spw::app
