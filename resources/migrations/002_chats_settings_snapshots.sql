-- Chats and their messages, settings, and the index of saved KV snapshots.
CREATE TABLE chats (
  id      INTEGER PRIMARY KEY,
  doc_id  INTEGER REFERENCES documents(id) ON DELETE CASCADE,  -- NULL: no document
  title   TEXT    NOT NULL,
  created INTEGER NOT NULL
);
CREATE INDEX chats_doc ON chats (doc_id);

CREATE TABLE messages (
  id      INTEGER PRIMARY KEY,
  chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
  role    TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
  content TEXT    NOT NULL,
  created INTEGER NOT NULL
);
CREATE INDEX messages_chat ON messages (chat_id, id);

CREATE TABLE settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

-- u64 fingerprints and hashes are stored bit-cast to SQLite's signed 64-bit integers.
CREATE TABLE kv_snapshots (
  id                INTEGER PRIMARY KEY,
  model_fingerprint INTEGER NOT NULL,
  prefix_hash       INTEGER NOT NULL,
  path              TEXT    NOT NULL,
  size_bytes        INTEGER NOT NULL,
  n_tokens          INTEGER NOT NULL,
  created           INTEGER NOT NULL,
  UNIQUE (model_fingerprint, prefix_hash)
);
