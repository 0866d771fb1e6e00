-- sessionlog PostgreSQL schema, version 4 (store/src/pg_store.rs: SCHEMA_MIGRATIONS).
-- The kept fold checkpoints (docs/format.md, "Checkpoint record"): besides the latest one in
-- sessionlog_checkpoints, the first checkpoint written at or past each multiple of
-- KEPT_CHECKPOINT_INTERVAL_EVENTS is kept for good, keyed by the seq it folds to, so that a
-- read at a past seq folds from the nearest one below it. Derived data, like the latest one:
-- a damaged or stale row is ignored by reads and reported by verify.
CREATE TABLE IF NOT EXISTS sessionlog_kept_checkpoints (
    session_id TEXT NOT NULL REFERENCES sessionlog_sessions (session_id),
    next_seq BIGINT NOT NULL CHECK (next_seq > 0),
    record BYTEA NOT NULL,
    PRIMARY KEY (session_id, next_seq)
);
