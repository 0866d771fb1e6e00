-- sessionlog PostgreSQL schema, version 2 (store/src/pg_store.rs: SCHEMA_MIGRATIONS).
-- `importing` marks a session an import created and has not finished (docs/format.md,
-- "Session record", bit 1 of the embedded store's flags): every reader and writer but the
-- import refuses it, and a rerun of the import resumes it.
ALTER TABLE sessionlog_sessions ADD COLUMN IF NOT EXISTS importing BOOLEAN NOT NULL DEFAULT FALSE;
