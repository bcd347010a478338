-- Search in every script: the FTS5 index moves to the "spillway" tokenizer
-- (app/store/search_tokenizer.h: NFKC case folding, marks such as accents, niqqud and harakat
-- ignored, Chinese and Japanese indexed by character and bigram). The index of an existing
-- library is rebuilt from pages.text.
DROP TRIGGER pages_fts_insert;
DROP TRIGGER pages_fts_delete;
DROP TRIGGER pages_fts_update;
DROP TABLE pages_fts;

CREATE VIRTUAL TABLE pages_fts USING fts5(
  text, content = 'pages', content_rowid = 'id', tokenize = 'spillway');

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

INSERT INTO pages_fts (pages_fts) VALUES ('rebuild');
