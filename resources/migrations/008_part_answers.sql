-- Finished map-reduce parts' answers, so that a stopped or killed ask (chat or batch job)
-- continues at the next part instead of redoing the document. answer_key identifies a part's
-- prompt and what decides its answer (app/ask/ask.h part_answer_key: the part's prefix hash,
-- the question, n_predict, sampling); u64 values are stored bit-cast to signed integers.
CREATE TABLE part_answers (
  id                INTEGER PRIMARY KEY,
  model_fingerprint INTEGER NOT NULL,
  answer_key        INTEGER NOT NULL,
  doc_id            INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  part              INTEGER NOT NULL,  -- 1-based
  n_parts           INTEGER NOT NULL,
  first_page        INTEGER NOT NULL,
  last_page         INTEGER NOT NULL,
  answer            TEXT    NOT NULL,
  prompt_tokens     INTEGER NOT NULL,
  generated_tokens  INTEGER NOT NULL,
  stopped           TEXT    NOT NULL DEFAULT '',
  created           INTEGER NOT NULL,
  UNIQUE (model_fingerprint, answer_key)
);
CREATE INDEX part_answers_doc ON part_answers (doc_id, part);
