-- The user's "always answer this document over parts" (the chat's verdict banner): questions on
-- the document are asked with map-reduce at once instead of showing the planner's verdict first.
-- 1: always over parts; 0: ask first. It goes with the document's row when the document is
-- removed and stays when its pages are read again (OCR in place).
ALTER TABLE documents ADD COLUMN answer_over_parts INTEGER NOT NULL DEFAULT 0;
