-- Where each document of a job is while it runs, written by the runner from the ask's progress
-- events (at most about once a second, and at every map-reduce part): the jobs list and the
-- Jobs dock show it, and a runner that takes over a dead one's document reads from it where
-- that runner died. Unix milliseconds, as the document timings of 004_jobs.sql.
CREATE TABLE job_document_progress (
  job_id       INTEGER NOT NULL,
  doc_id       INTEGER NOT NULL,
  phase        TEXT    NOT NULL DEFAULT '',  -- prefill | part | decode; '' before the first event
  prompt       INTEGER NOT NULL DEFAULT 0,   -- 0-based prompt in progress (clauses: one per type)
  n_prompts    INTEGER NOT NULL DEFAULT 0,
  part         INTEGER NOT NULL DEFAULT 0,   -- map-reduce: the part in progress, 1-based, and
                                             -- n_parts + 1 while combining; 0: not map-reduce
  n_parts      INTEGER NOT NULL DEFAULT 0,
  parts_done   INTEGER NOT NULL DEFAULT 0,   -- answered, this run or kept from an earlier one
  tokens_done  INTEGER NOT NULL DEFAULT 0,   -- of the phase: prompt positions (prefill) or
  tokens_total INTEGER NOT NULL DEFAULT 0,   -- tokens generated of n_predict (decode)
  eta_s        REAL    NOT NULL DEFAULT -1,  -- the document's answer; < 0: unknown
  updated_ms   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, doc_id),
  FOREIGN KEY (job_id, doc_id) REFERENCES job_documents (job_id, doc_id) ON DELETE CASCADE
);

-- A document whose runner died (its claim found still running by the next runner) is given up
-- only when its runs keep dying at the same place: `deaths` counts consecutive deaths that got
-- no further than (death_prompt, death_part); a death further on starts the count again.
-- n_parts and parts_kept: a finished map-reduce document's parts over all its prompts, and how
-- many of them were answered by an earlier, killed or stopped run (part_answers).
ALTER TABLE job_documents ADD COLUMN deaths       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_documents ADD COLUMN death_prompt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_documents ADD COLUMN death_part   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_documents ADD COLUMN n_parts      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_documents ADD COLUMN parts_kept   INTEGER NOT NULL DEFAULT 0;
