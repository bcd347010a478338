-- Batch jobs (app/jobs/jobs.h): the queue, each job's documents with their progress, the
-- results (one row per document, or per document x clause type), and the runners' leases.
-- Times users see are unix seconds; leases and document timings are unix milliseconds.
CREATE TABLE jobs (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused
  title          TEXT    NOT NULL,
  task           TEXT    NOT NULL CHECK (task IN ('summary', 'clauses', 'prompt')),
  params         TEXT    NOT NULL,  -- JSON: summary_length, prompt, clauses, n_predict, temp,
                                    -- seed, map_reduce
  model_path     TEXT    NOT NULL,
  engine_json    TEXT    NOT NULL DEFAULT '',  -- app::EngineSettings JSON
  endpoint       TEXT    NOT NULL DEFAULT '',  -- OpenAI-compatible base URL; '' : local engine
  schedule       TEXT    NOT NULL DEFAULT 'now'
                 CHECK (schedule IN ('now', 'at', 'nightly', 'when-idle')),
  nightly_minute INTEGER NOT NULL DEFAULT -1,
  idle_minutes   INTEGER NOT NULL DEFAULT 15,
  due            INTEGER NOT NULL DEFAULT 0,
  priority       INTEGER NOT NULL DEFAULT 0,   -- higher first
  ord            INTEGER NOT NULL DEFAULT 0,   -- then lower first
  state          TEXT    NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  paused         INTEGER NOT NULL DEFAULT 0,
  reason         TEXT    NOT NULL DEFAULT '',
  created        INTEGER NOT NULL,
  started        INTEGER NOT NULL DEFAULT 0,
  finished       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_queue ON jobs (state, priority DESC, ord, id);

-- doc_id has no foreign key: a document removed from the library after the job was queued is
-- reported as that document's failure, and the row keeps its title.
CREATE TABLE job_documents (
  job_id           INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  doc_id           INTEGER NOT NULL,
  position         INTEGER NOT NULL,
  title            TEXT    NOT NULL,
  state            TEXT    NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'running', 'done', 'failed')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  reason           TEXT    NOT NULL DEFAULT '',
  owner            TEXT    NOT NULL DEFAULT '',  -- the runner holding the claim while running
  started_ms       INTEGER NOT NULL DEFAULT 0,
  finished_ms      INTEGER NOT NULL DEFAULT 0,
  prompt_tokens    INTEGER NOT NULL DEFAULT 0,
  generated_tokens INTEGER NOT NULL DEFAULT 0,
  decode_s         REAL    NOT NULL DEFAULT 0,
  reused_snapshot  INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, doc_id)
);

-- UNIQUE (job_id, doc_id, clause): a document's result can exist once only, whatever runners do.
CREATE TABLE job_results (
  id        INTEGER PRIMARY KEY,
  job_id    INTEGER NOT NULL,
  doc_id    INTEGER NOT NULL,
  clause    TEXT    NOT NULL DEFAULT '',  -- clauses: the clause type; '' otherwise
  idx       INTEGER NOT NULL DEFAULT 0,   -- clause order within the document
  text      TEXT    NOT NULL,
  found     INTEGER NOT NULL DEFAULT 1,
  page      INTEGER NOT NULL DEFAULT 0,
  quote     TEXT    NOT NULL DEFAULT '',
  verified  INTEGER NOT NULL DEFAULT 0,
  citations TEXT    NOT NULL DEFAULT '[]',  -- JSON [{page, quote, verified, reason}]
  created   INTEGER NOT NULL,
  UNIQUE (job_id, doc_id, clause),
  FOREIGN KEY (job_id, doc_id) REFERENCES job_documents (job_id, doc_id) ON DELETE CASCADE
);

-- One runner works on a job at a time: the lease's owner, renewed by heartbeats; a lease past
-- expires_ms may be taken over.
CREATE TABLE job_leases (
  job_id       INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  owner        TEXT    NOT NULL,
  heartbeat_ms INTEGER NOT NULL,
  expires_ms   INTEGER NOT NULL
);
