-- sessionlog PostgreSQL schema, version 3 (store/src/pg_store.rs: SCHEMA_MIGRATIONS).
-- `format_version` is the dsh format version a session was created or imported with (3 or 4),
-- the `version` of its header (docs/format.md, "Session record"); readers check that the two
-- agree. Sessions written before it are V3 sessions, the only ones schema 2 kept. A database
-- at schema 3 is refused by older builds, which would read a V4 session by the V3 rules.
ALTER TABLE sessionlog_sessions
    ADD COLUMN IF NOT EXISTS format_version SMALLINT NOT NULL DEFAULT 3
    CHECK (format_version IN (3, 4));
