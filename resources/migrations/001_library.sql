-- Documents and their pages, with an FTS5 index over the normalised page text.
-- Booleans are INTEGER 0/1; times are unix seconds.
CREATE TABLE documents (
  id            INTEGER PRIMARY KEY,
  sha256        TEXT    NOT NULL UNIQUE,   -- lowercase hex of the file's bytes
  title         TEXT    NOT NULL,
  path          TEXT    NOT NULL,          -- absolute path at ingest time
  n_pages       INTEGER NOT NULL,
  n_chars       INTEGER NOT NULL,          -- code points of the normalised text
  encrypted     INTEGER NOT NULL DEFAULT 0,
  repaired      INTEGER NOT NULL DEFAULT 0,
  n_scanned     INTEGER NOT NULL DEFAULT 0,
  n_ocr         INTEGER NOT NULL DEFAULT 0,
  n_undecodable INTEGER NOT NULL DEFAULT 0,
  no_text       INTEGER NOT NULL DEFAULT 0, -- 1: never answer from this document
  added_at      INTEGER NOT NULL
);

CREATE TABLE pages (
  id            INTEGER PRIMARY KEY,
  doc_id        INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  page_no       INTEGER NOT NULL,          -- 1-based
  original_text TEXT    NOT NULL,          -- as extracted, reading order
  text          TEXT    NOT NULL,          -- normalised (what the model and search see)
  scanned       INTEGER NOT NULL DEFAULT 0,
  ocr           INTEGER NOT NULL DEFAULT 0,
  undecodable   INTEGER NOT NULL DEFAULT 0,
  boilerplate   TEXT    NOT NULL DEFAULT '', -- "b-e,b-e": [b,e) byte ranges in text
  UNIQUE (doc_id, page_no)
);

-- External-content FTS5 table over pages.text, kept in step by the triggers below.
CREATE VIRTUAL TABLE pages_fts USING fts5(
  text, content = 'pages', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2');

CREATE TRIGGER pages_fts_insert AFTER INSERT ON pages BEGIN
  INSERT INTO pages_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER pages_fts_delete AFTER DELETE ON pages BEGIN
  INSERT INTO pages_fts (pages_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER pages_fts_update AFTER UPDATE OF text ON pages BEGIN
  INSERT INTO pages_fts (pages_fts, rowid, text) VALUES ('delete', old.id, old.text);
  INSERT INTO pages_fts (rowid, text) VALUES (new.id, new.text);
END;
