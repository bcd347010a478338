-- Document ids are never reused: removing the newest document must not hand its id to the next
-- one (a script's or a saved chat's `--doc 8` would silently point at another file). The table
-- keeps the highest id ever given; inserts take the next one.
CREATE TABLE document_id_high_water (id INTEGER NOT NULL);
INSERT INTO document_id_high_water SELECT COALESCE(MAX(id), 0) FROM documents;
CREATE TRIGGER documents_id_high_water AFTER INSERT ON documents BEGIN
  UPDATE document_id_high_water SET id = MAX(id, new.id);
END;
