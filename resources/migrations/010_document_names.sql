-- The name a user gives a document (rename in the library, `docs rename`): shown instead of the
-- title cleaned from the PDF's own (app/store/display_title.h), which stays in `title`.
-- '' : none given (the cleaned title is shown).
ALTER TABLE documents ADD COLUMN custom_title TEXT NOT NULL DEFAULT '';
