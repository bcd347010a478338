-- What a stored message needs besides its text: for an answer, how it was made (tokens in
-- context, prefill time, saved KV reused, decode speed, stopped by the user) as a JSON object,
-- so a reloaded chat shows the same header as the live answer. '' for none.
ALTER TABLE messages ADD COLUMN meta TEXT NOT NULL DEFAULT '';
