-- sessionlog PostgreSQL schema, version 5 (store/src/pg_store.rs: SCHEMA_MIGRATIONS).
-- The relationship validator's fact journal (docs/format.md, "Fact segments"): fold
-- checkpoints of version 3 name the journal by length and BLAKE3 hash, and its bytes are kept
-- here as append-only segments keyed by the journal offset they start at (each the CRC-32 of
-- its bytes, then the bytes), written in the transaction of the checkpoint that first names
-- them. A segment at offset 0 replaces the session's others. Derived data, like the
-- checkpoints: a checkpoint whose journal cannot be read back is ignored by reads and
-- reported by verify.
CREATE TABLE IF NOT EXISTS sessionlog_fact_segments (
    session_id TEXT NOT NULL REFERENCES sessionlog_sessions (session_id),
    start_offset BIGINT NOT NULL CHECK (start_offset >= 0),
    segment BYTEA NOT NULL,
    PRIMARY KEY (session_id, start_offset)
);
