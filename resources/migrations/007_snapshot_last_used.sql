-- The snapshot budget evicts the least recently used saved KV first: when each snapshot was last
-- restored or written, in unix milliseconds (asks a second apart must order). Existing rows
-- count as used when they were created.
ALTER TABLE kv_snapshots ADD COLUMN last_used_ms INTEGER NOT NULL DEFAULT 0;
UPDATE kv_snapshots SET last_used_ms = created * 1000;
