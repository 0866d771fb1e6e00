-- sessionlog PostgreSQL schema, version 1 (store/src/pg_store.rs: SCHEMA_MIGRATIONS).
-- Only SQL that CockroachDB and YugabyteDB accept as well: plain tables, primary keys, no
-- advisory locks, no LISTEN/NOTIFY, no sequences, no triggers.

-- One row per session: its canonical V3 header line; `snapshot` marks a normalized dsh
-- recording (spec 18), whose rules admit placeholders.
CREATE TABLE IF NOT EXISTS sessionlog_sessions (
    session_id TEXT NOT NULL PRIMARY KEY,
    snapshot BOOLEAN NOT NULL,
    header TEXT NOT NULL
);

-- One row per event: the record bytes of sessionlog_format::record (crc32, blake3 chain, seq,
-- flags, optional zstd body), exactly as the embedded store keeps them. The primary key is the
-- optimistic-concurrency check: of two writers appending the same seq, one insert fails.
CREATE TABLE IF NOT EXISTS sessionlog_events (
    session_id TEXT NOT NULL REFERENCES sessionlog_sessions (session_id),
    seq BIGINT NOT NULL CHECK (seq >= 0),
    record BYTEA NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The latest fold checkpoint of a session (derived; ignored when stale or damaged).
CREATE TABLE IF NOT EXISTS sessionlog_checkpoints (
    session_id TEXT NOT NULL PRIMARY KEY REFERENCES sessionlog_sessions (session_id),
    next_seq BIGINT NOT NULL,
    record BYTEA NOT NULL
);
