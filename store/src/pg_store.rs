//! `PgStore`: a [`LogStore`] on PostgreSQL, or on a distributed engine that speaks its wire
//! protocol and SQL (CockroachDB, YugabyteDB).
//!
//! One row per event keyed `(session_id, seq)`, holding the same record bytes as the embedded
//! store (crc, blake3 chain), so verify, folds and copies work unchanged. The primary key is
//! the optimistic-concurrency check: a batch is admitted against the session's warm fold and
//! inserted in one transaction; when another writer took the seq first the insert fails with
//! a unique violation (or, on a serializable distributed engine, a serialization failure) and
//! the caller gets [`StoreError::Conflict`] with the current head. Nothing relies on advisory
//! locks or LISTEN/NOTIFY: tails poll heads (`log_service::TAIL_POLL_INTERVAL`).
//!
//! The schema is versioned (`sessionlog_schema`); the migrations are the SQL files under
//! `store/sql/`, applied in order at a writing connect. Fold checkpoints live in a side table and
//! are written in the batch's transaction, every [`CHECKPOINT_INTERVAL_EVENTS`].
//!
//! Why the synchronous `postgres` crate: the trait is synchronous (STYLE.md rule 37), and
//! `postgres` is tokio-postgres behind a private current-thread runtime per connection; the
//! async edge calls it on the blocking pool, where blocking is allowed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, NoTls};
use sessionlog_format::fold::SessionFold;
use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::relations::Identity;
use sessionlog_format::{Event, SessionHeader};

use crate::embedded::backend::{decode_checkpoint, encode_checkpoint, stored_checkpoint};
use crate::embedded::{
    admit_expected, AppendAck, AppendRequest, Head, StoreError, BATCH_EVENTS_MAX,
    CHECKPOINT_INTERVAL_EVENTS,
};
use crate::facts::{assemble, encode_segment, FactsWritten};
use crate::location::redact_url;
use crate::log_store::{
    JournalRead, LogStore, SessionInfo, StoredCheckpoint, StoredRecord, READ_EVENTS_MAX,
};
use crate::types::{check_import_resume, keeps_checkpoint, FoundImport};

/// The schema migrations, in order: `(version, name, SQL)`.
pub const SCHEMA_MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "0001_init", include_str!("../sql/0001_init.sql")),
    (
        2,
        "0002_importing",
        include_str!("../sql/0002_importing.sql"),
    ),
    (
        3,
        "0003_format_version",
        include_str!("../sql/0003_format_version.sql"),
    ),
    (
        4,
        "0004_kept_checkpoints",
        include_str!("../sql/0004_kept_checkpoints.sql"),
    ),
    (
        5,
        "0005_fact_segments",
        include_str!("../sql/0005_fact_segments.sql"),
    ),
];
/// The schema version this build writes; a newer database is refused.
pub const SCHEMA_VERSION: i64 = 5;
/// The first schema with the sessions' `importing` column.
const SCHEMA_IMPORTING: i64 = 2;
/// The first schema with the sessions' `format_version` column (and so with V4 sessions).
const SCHEMA_FORMAT_VERSION: i64 = 3;
/// The first schema with the kept checkpoints' table.
const SCHEMA_KEPT_CHECKPOINTS: i64 = 4;
/// The first schema with the fact segments' table (and so with version 3 checkpoints).
const SCHEMA_FACT_SEGMENTS: i64 = 5;
/// Connections one store keeps open.
pub const POOL_CONNECTIONS_MAX: usize = 4;
/// Rows one INSERT statement carries (3 parameters each, far below the 65535 limit).
const INSERT_ROWS_MAX: usize = 1024;
/// Attempts at applying the migrations when concurrent connectors race.
const MIGRATE_ATTEMPTS_MAX: usize = 3;

const _: () = assert!(SCHEMA_MIGRATIONS[SCHEMA_MIGRATIONS.len() - 1].0 == SCHEMA_VERSION);
const _: () = assert!(INSERT_ROWS_MAX * 3 < u16::MAX as usize);

/// A session log store on PostgreSQL.
pub struct PgStore {
    /// Where to reconnect a pooled connection the server closed.
    url: String,
    /// The schema version the database had once connected: a read-only connection reads an
    /// older schema as it is, never migrating it.
    schema: i64,
    read_only: bool,
    pool: Vec<Mutex<Client>>,
    next_client: AtomicUsize,
    sessions: Mutex<HashMap<String, Arc<Mutex<PgSession>>>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("connections", &self.pool.len())
            .finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    /// Closes the connections on a thread of its own: closing blocks on each connection's
    /// private runtime, which must not happen on a thread that drives async tasks (the last
    /// handle of a server may be dropped there).
    fn drop(&mut self) {
        let pool = std::mem::take(&mut self.pool);
        if tokio::runtime::Handle::try_current().is_err() {
            drop(pool);
            return;
        }
        // A failed join means a connection panicked while closing; nothing is left to undo.
        let _ = std::thread::spawn(move || drop(pool)).join();
    }
}

/// A session's warm state: its fold at the head this process last saw.
struct PgSession {
    info: SessionInfo,
    fold: SessionFold,
    head_chain: ChainHash,
    checkpoint_next_seq: u64,
    /// The fact journal as this process last stored or read it with a checkpoint.
    facts: FactsWritten,
    /// A failed write left the fold ahead of the database: reload before use.
    stale: bool,
    /// An import created the session and has not finished it.
    importing: bool,
}

/// Who asks for a session's warm state: only the import may use an unfinished one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    Client,
    Import,
}

fn pg_error(error: postgres::Error) -> StoreError {
    let message = format!("postgres: {error}");
    StoreError::Storage(crate::embedded::StorageFailure::with_source(message, error))
}

/// A seq as a BIGINT; seqs are safe integers (below 2^53), so this never fails for a stored
/// seq, and a caller's range bound beyond i64 is clamped.
fn to_sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn from_sql_seq(session: &str, seq: i64) -> Result<u64, StoreError> {
    u64::try_from(seq)
        .map_err(|_| StoreError::corrupt_at(session, 0, format!("negative seq {seq} stored")))
}

/// Whether a failed write lost a race: another writer took the seq (unique key) or the
/// engine's serializable isolation aborted us.
fn is_race(error: &postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
    )
}

impl PgStore {
    /// Connects (`postgres://user@host:port/db`), applying the schema migrations.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let mut store = PgStore::pool(url, POOL_CONNECTIONS_MAX, false)?;
        store.migrate()?;
        store.schema = SCHEMA_VERSION;
        Ok(store)
    }

    /// Connects for reading only: nothing is created, migrated or written, and a database
    /// without the sessionlog schema is [`StoreError::Missing`] (a read never creates a
    /// store). A schema older than this build's is read as it is; a newer one is refused.
    pub fn connect_read_only(url: &str) -> Result<PgStore, StoreError> {
        let mut store = PgStore::pool(url, 1, true)?;
        let exists = store
            .client()
            .query_one(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_name = 'sessionlog_schema' AND table_schema = current_schema()",
                &[],
            )
            .map_err(pg_error)?;
        let exists: i64 = exists.try_get(0).map_err(pg_error)?;
        if exists == 0 {
            return Err(StoreError::Missing {
                path: redact_url(url),
            });
        }
        let found = store.schema_version()?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::UpgradeRequired {
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: SCHEMA_VERSION as u32,
            });
        }
        store.schema = found;
        Ok(store)
    }

    fn pool(url: &str, connections: usize, read_only: bool) -> Result<PgStore, StoreError> {
        let mut pool = Vec::with_capacity(connections);
        for _ in 0..connections {
            pool.push(Mutex::new(Client::connect(url, NoTls).map_err(pg_error)?));
        }
        Ok(PgStore {
            url: url.to_owned(),
            schema: 0,
            read_only,
            pool,
            next_client: AtomicUsize::new(0),
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// The SQL of a session row's importing flag: its column, or `FALSE` on a schema older
    /// than the column (no import there is unfinished: imports did not write PostgreSQL).
    fn importing_column(&self) -> &'static str {
        if self.schema >= SCHEMA_IMPORTING {
            "importing"
        } else {
            "FALSE"
        }
    }

    /// The SQL of a session row's format version: its column, or 3 on a schema older than the
    /// column (which kept V3 sessions only).
    fn format_version_column(&self) -> &'static str {
        if self.schema >= SCHEMA_FORMAT_VERSION {
            "format_version"
        } else {
            "3::SMALLINT"
        }
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly {
                path: redact_url(&self.url),
            });
        }
        Ok(())
    }

    /// The schema version of the database after connecting.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        let mut client = self.client();
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM sessionlog_schema",
                &[],
            )
            .map_err(pg_error)?;
        row.try_get(0).map_err(pg_error)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let mut last_error = None;
        for _ in 0..MIGRATE_ATTEMPTS_MAX {
            match self.migrate_once() {
                Ok(()) => return Ok(()),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    /// Applies every migration newer than the database's version, each in a transaction
    /// that also records it; a racing connector's duplicate version row aborts ours.
    fn migrate_once(&self) -> Result<(), StoreError> {
        let mut client = self.client();
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS sessionlog_schema (\
                 version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL)",
            )
            .map_err(pg_error)?;
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM sessionlog_schema",
                &[],
            )
            .map_err(pg_error)?;
        let found: i64 = row.try_get(0).map_err(pg_error)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::UpgradeRequired {
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: SCHEMA_VERSION as u32,
            });
        }
        for (version, name, sql) in SCHEMA_MIGRATIONS.iter().filter(|m| m.0 > found) {
            let mut txn = client.transaction().map_err(pg_error)?;
            txn.batch_execute(sql).map_err(pg_error)?;
            txn.execute(
                "INSERT INTO sessionlog_schema (version, name) VALUES ($1, $2)",
                &[version, name],
            )
            .map_err(pg_error)?;
            txn.commit().map_err(pg_error)?;
        }
        Ok(())
    }

    /// The session's latest checkpoint record as [`stored_checkpoint`] decodes it, its fact
    /// journal read as `journal` says: resolved, or by reference with its segments streamed
    /// into their hash.
    fn read_checkpoint(
        &self,
        session: &str,
        journal: JournalRead,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        let row = client
            .query_opt(
                "SELECT record FROM sessionlog_checkpoints WHERE session_id = $1",
                &[&session],
            )
            .map_err(pg_error)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let bytes: Vec<u8> = row.try_get(0).map_err(pg_error)?;
        let client = &mut *client;
        Ok(stored_checkpoint(&bytes, |facts| match journal {
            JournalRead::Resolved => facts.resolve(|len| read_journal(client, session, len)),
            JournalRead::ByReference => {
                facts.check_stored(|len| journal_hash(client, session, len))
            }
        }))
    }

    /// A pooled connection: the first free one, else the next in turn. A connection the
    /// server closed (a restart, a failover) is replaced by a new one; when that fails too the
    /// closed one is returned and the caller's query reports the error.
    fn client(&self) -> MutexGuard<'_, Client> {
        let mut client = self.pool.iter().find_map(|slot| slot.try_lock().ok());
        if client.is_none() {
            let idx = self.next_client.fetch_add(1, Ordering::Relaxed) % self.pool.len();
            client = Some(lock(&self.pool[idx]));
        }
        let mut client = client.expect("a connection was taken");
        if client.is_closed() {
            if let Ok(fresh) = Client::connect(&self.url, NoTls) {
                *client = fresh;
            }
        }
        client
    }

    /// Appends one batch on behalf of `writer`, in one transaction.
    fn append_by(&self, request: AppendRequest, writer: Writer) -> Result<AppendAck, StoreError> {
        self.check_writable()?;
        let AppendRequest {
            session,
            expected_next_seq,
            events,
        } = request;
        if events.len() > BATCH_EVENTS_MAX {
            return Err(StoreError::BatchTooLarge {
                session,
                n_events: events.len(),
            });
        }
        let mut client = self.client();
        let state = self.session_state(&mut client, &session, writer)?;
        let mut state = lock(&state);
        fresh(self, &mut client, &session, &mut state)?;
        if expected_next_seq != state.fold.admission().next_seq() {
            catch_up(&mut client, &session, &mut state)?;
        }
        let batch = admit_expected(&mut state.fold, &session, expected_next_seq, events)?;
        // From here the fold is ahead of the database until the commit succeeds.
        state.stale = true;
        let mut chain = state.head_chain;
        let mut records = Vec::with_capacity(batch.len());
        for event in &batch {
            let mut bytes = Vec::new();
            chain = record::encode_event(event, &chain, &mut bytes).map_err(StoreError::storage)?;
            records.push((event.seq, bytes));
        }
        let next_seq = state.fold.admission().next_seq();
        let checkpoint = if next_seq >= state.checkpoint_next_seq + CHECKPOINT_INTERVAL_EVENTS {
            // A failed write reloads the state (`stale`), the stored journal's length with it.
            let session_state = &mut *state;
            let (bytes, segment) =
                encode_checkpoint(&session_state.fold, &chain, &mut session_state.facts)?;
            Some(BatchCheckpoint {
                next_seq,
                bytes,
                kept: keeps_checkpoint(state.checkpoint_next_seq, next_seq),
                segment: segment.map(|(start, bytes)| (start, encode_segment(&bytes))),
            })
        } else {
            None
        };
        let wrote_checkpoint = checkpoint.is_some();
        match PgStore::insert_batch(&mut client, &session, &records, checkpoint) {
            Ok(()) => {}
            Err(error) if is_race(&error) => {
                drop(state);
                let current = head_of(self, &mut client, &session)?.next_seq;
                return Err(StoreError::Conflict {
                    session,
                    expected: expected_next_seq,
                    current,
                });
            }
            Err(error) => return Err(pg_error(error)),
        }
        state.stale = false;
        state.head_chain = chain;
        if wrote_checkpoint {
            state.checkpoint_next_seq = next_seq;
        }
        Ok(AppendAck {
            session,
            first_seq: expected_next_seq,
            next_seq,
            head_chain: chain,
        })
    }

    /// Inserts a session record (flagged as importing for an import); an existing id is
    /// `SessionExists`.
    fn insert_session(
        &self,
        header: &SessionHeader,
        snapshot: bool,
        importing: bool,
    ) -> Result<(), StoreError> {
        self.check_writable()?;
        // The same door as every backend: an id that could traverse paths is refused.
        crate::embedded::check_new_header(header, snapshot)?;
        let text = serde_json::to_string(header).map_err(|e| StoreError::InvalidHeader {
            reason: e.to_string(),
        })?;
        let version =
            crate::types::stored_version(header).map_or(3, |version| version.number() as i16);
        let inserted = self
            .client()
            .execute(
                "INSERT INTO sessionlog_sessions \
                 (session_id, snapshot, header, importing, format_version) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id) DO NOTHING",
                &[&header.id, &snapshot, &text, &importing, &version],
            )
            .map_err(pg_error)?;
        if inserted == 0 {
            return Err(StoreError::SessionExists {
                session: header.id.clone(),
            });
        }
        Ok(())
    }

    /// The ids of the finished sessions, or of the unfinished imports, in byte order.
    fn session_ids(&self, importing: bool) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT session_id FROM sessionlog_sessions WHERE {} = $1",
            self.importing_column()
        );
        let rows = self
            .client()
            .query(sql.as_str(), &[&importing])
            .map_err(pg_error)?;
        let mut ids: Vec<String> = rows
            .iter()
            .map(|row| row.try_get(0).map_err(pg_error))
            .collect::<Result<_, _>>()?;
        // Byte order, as redb keeps them (collations differ between engines).
        ids.sort_unstable();
        Ok(ids)
    }

    fn read_info(&self, client: &mut Client, session: &str) -> Result<SessionInfo, StoreError> {
        let (info, importing) = self.read_record(client, session)?;
        if importing {
            return Err(StoreError::ImportInterrupted {
                session: session.to_owned(),
            });
        }
        Ok(info)
    }

    /// The session's record and its importing flag (always clear on a schema before it).
    fn read_record(
        &self,
        client: &mut Client,
        session: &str,
    ) -> Result<(SessionInfo, bool), StoreError> {
        let row = client
            .query_opt(
                &format!(
                    "SELECT snapshot, header, {}, {} FROM sessionlog_sessions \
                     WHERE session_id = $1",
                    self.importing_column(),
                    self.format_version_column()
                ),
                &[&session],
            )
            .map_err(pg_error)?
            .ok_or_else(|| StoreError::UnknownSession {
                session: session.to_owned(),
            })?;
        let header_text: String = row.try_get(1).map_err(pg_error)?;
        let header: SessionHeader =
            serde_json::from_str(&header_text).map_err(|e| StoreError::Corrupt {
                reason: format!("session {session} record: {e}"),
            })?;
        if header.id != session {
            return Err(StoreError::Corrupt {
                reason: format!("session {session} record: names session {}", header.id),
            });
        }
        let recorded: i16 = row.try_get(3).map_err(pg_error)?;
        match crate::types::stored_version(&header) {
            Some(version) if version.number() == recorded as u64 => {}
            _ => {
                return Err(StoreError::Corrupt {
                    reason: format!(
                        "session {session} record: its header names format version {:?}, \
                         its row version {recorded}",
                        header.version
                    ),
                })
            }
        }
        let info = SessionInfo {
            header,
            snapshot: row.try_get(0).map_err(pg_error)?,
        };
        Ok((info, row.try_get(2).map_err(pg_error)?))
    }

    /// Records `from_seq..to_seq`, at most [`READ_EVENTS_MAX`], unchecked.
    fn query_records(
        client: &mut Client,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let rows = client
            .query(
                "SELECT seq, record FROM sessionlog_events \
                 WHERE session_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq LIMIT $4",
                &[
                    &session,
                    &to_sql_seq(from_seq),
                    &to_sql_seq(to_seq),
                    &(READ_EVENTS_MAX as i64),
                ],
            )
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(StoredRecord {
                    seq: from_sql_seq(session, row.try_get(0).map_err(pg_error)?)?,
                    bytes: row.try_get(1).map_err(pg_error)?,
                })
            })
            .collect()
    }

    /// The session's warm state, loading it on first use. The caller reloads it in place
    /// when it finds it stale ([`fresh`]).
    ///
    /// A session an import has not finished is refused to everyone but the import; a warm
    /// state that says so is reloaded first (another process may have finished it).
    fn session_state(
        &self,
        client: &mut Client,
        session: &str,
        writer: Writer,
    ) -> Result<Arc<Mutex<PgSession>>, StoreError> {
        let known = lock(&self.sessions).get(session).map(Arc::clone);
        let state = match known {
            Some(state) => state,
            None => {
                let state = Arc::new(Mutex::new(load_session(self, client, session)?));
                let mut sessions = lock(&self.sessions);
                let entry = sessions.entry(session.to_owned()).or_insert(state);
                Arc::clone(entry)
            }
        };
        {
            let mut warm = lock(&state);
            if warm.importing && writer == Writer::Client {
                // One row tells whether another process finished the import; only then is
                // the session loaded again (a reader polling an interrupted import pays a
                // query, not a whole load, each time it is refused).
                let (_, importing) = self.read_record(client, session)?;
                if importing {
                    return Err(StoreError::ImportInterrupted {
                        session: session.to_owned(),
                    });
                }
                *warm = load_session(self, client, session)?;
            }
        }
        Ok(state)
    }

    fn insert_batch(
        client: &mut Client,
        session: &str,
        records: &[(u64, Vec<u8>)],
        checkpoint: Option<BatchCheckpoint>,
    ) -> Result<(), postgres::Error> {
        let mut txn = client.transaction()?;
        for chunk in records.chunks(INSERT_ROWS_MAX) {
            let seqs: Vec<i64> = chunk.iter().map(|(seq, _)| to_sql_seq(*seq)).collect();
            let mut sql =
                String::from("INSERT INTO sessionlog_events (session_id, seq, record) VALUES ");
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(chunk.len() * 2 + 1);
            params.push(&session);
            for (row_idx, ((_, bytes), seq)) in chunk.iter().zip(&seqs).enumerate() {
                if row_idx > 0 {
                    sql.push(',');
                }
                let n = params.len();
                sql.push_str(&format!("($1, ${}, ${})", n + 1, n + 2));
                params.push(seq);
                params.push(bytes);
            }
            txn.execute(sql.as_str(), &params)?;
        }
        if let Some(BatchCheckpoint {
            next_seq,
            bytes,
            kept,
            segment,
        }) = checkpoint
        {
            if let Some((start, value)) = segment {
                // A segment replaces the session's segments from its start on (a merged run,
                // or the journal written again from offset 0 by a writer that refolded).
                txn.execute(
                    "DELETE FROM sessionlog_fact_segments \
                     WHERE session_id = $1 AND start_offset >= $2",
                    &[&session, &to_sql_seq(start)],
                )?;
                txn.execute(
                    "INSERT INTO sessionlog_fact_segments (session_id, start_offset, segment) \
                     VALUES ($1, $2, $3) ON CONFLICT (session_id, start_offset) \
                     DO UPDATE SET segment = excluded.segment",
                    &[&session, &to_sql_seq(start), &value],
                )?;
            }
            txn.execute(
                "INSERT INTO sessionlog_checkpoints (session_id, next_seq, record) \
                 VALUES ($1, $2, $3) ON CONFLICT (session_id) \
                 DO UPDATE SET next_seq = excluded.next_seq, record = excluded.record",
                &[&session, &to_sql_seq(next_seq), &bytes],
            )?;
            if kept {
                txn.execute(
                    "INSERT INTO sessionlog_kept_checkpoints (session_id, next_seq, record) \
                     VALUES ($1, $2, $3) ON CONFLICT (session_id, next_seq) DO NOTHING",
                    &[&session, &to_sql_seq(next_seq), &bytes],
                )?;
            }
        }
        txn.commit()
    }
}

/// A checkpoint written with a batch: the latest one, and `kept` for good as well, with the
/// fact segment `(start, row value)` it names first.
struct BatchCheckpoint {
    next_seq: u64,
    bytes: Vec<u8>,
    kept: bool,
    segment: Option<(u64, Vec<u8>)>,
}

/// Reloads a stale state in place (a failed write left its fold ahead of the database).
fn fresh(
    store: &PgStore,
    client: &mut Client,
    session: &str,
    state: &mut PgSession,
) -> Result<(), StoreError> {
    if state.stale {
        *state = load_session(store, client, session)?;
    }
    debug_assert!(!state.stale);
    Ok(())
}

/// Loads a session: its record, the fold from its checkpoint when usable, then the rest.
/// An importing session loads for its import only (`importing`).
fn load_session(
    store: &PgStore,
    client: &mut Client,
    session: &str,
) -> Result<PgSession, StoreError> {
    let (info, importing) = store.read_record(client, session)?;
    let mut state = PgSession {
        fold: info.fold(),
        head_chain: record::genesis_chain(&info.header),
        checkpoint_next_seq: 0,
        facts: FactsWritten::new(),
        stale: false,
        importing,
        info,
    };
    if let Some((fold, chain)) = load_checkpoint(client, session, &state.info)? {
        state.checkpoint_next_seq = fold.admission().next_seq();
        state.facts = FactsWritten::stored(fold.fact_journal());
        state.fold = fold;
        state.fold.set_identity(Identity::of(&state.info.header));
        state.head_chain = chain;
    }
    catch_up(client, session, &mut state)?;
    Ok(state)
}

/// The first `len` bytes of the session's fact journal, from its fact segments (an error on a
/// schema before them, which holds no checkpoint that names a journal).
fn read_journal(client: &mut Client, session: &str, len: u64) -> Result<Vec<u8>, String> {
    with_segment_rows(client, session, len, |rows| assemble(len, rows))
}

/// The BLAKE3 hash of the first `len` bytes of the session's fact journal, its segments
/// streamed a row at a time ([`crate::facts::journal_hash`]): what `verify` checks a
/// checkpoint's reference against without holding the journal.
fn journal_hash(client: &mut Client, session: &str, len: u64) -> Result<[u8; 32], String> {
    with_segment_rows(client, session, len, |rows| {
        crate::facts::journal_hash(len, rows)
    })
}

/// `read` of the session's fact segment rows that start below `len`, in offset order, as the
/// server streams them; for `len` 0 with no rows and no query. A `read` that stops early
/// (the journal reached `len`) drops the stream, whose rest the connection reads and discards
/// before its next query.
fn with_segment_rows<T>(
    client: &mut Client,
    session: &str,
    len: u64,
    read: impl FnOnce(&mut dyn Iterator<Item = Result<(u64, Vec<u8>), String>>) -> Result<T, String>,
) -> Result<T, String> {
    if len == 0 {
        return read(&mut std::iter::empty());
    }
    let len_sql = to_sql_seq(len);
    let params: [&(dyn ToSql + Sync); 2] = [&session, &len_sql];
    let rows = client
        .query_raw(
            "SELECT start_offset, segment FROM sessionlog_fact_segments \
             WHERE session_id = $1 AND start_offset < $2 ORDER BY start_offset",
            params,
        )
        .map_err(|e| e.to_string())?;
    let mut rows = rows.iterator().map(|row| {
        let row = row.map_err(|e| e.to_string())?;
        let start: i64 = row.try_get(0).map_err(|e| e.to_string())?;
        let value: Vec<u8> = row.try_get(1).map_err(|e| e.to_string())?;
        let start = u64::try_from(start).map_err(|_| format!("fact segment offset {start}"))?;
        Ok((start, value))
    });
    read(&mut rows)
}

/// The fold and chain from the session's checkpoint; a damaged or stale one is ignored.
fn load_checkpoint(
    client: &mut Client,
    session: &str,
    info: &SessionInfo,
) -> Result<Option<(SessionFold, ChainHash)>, StoreError> {
    let row = client
        .query_opt(
            "SELECT record FROM sessionlog_checkpoints WHERE session_id = $1",
            &[&session],
        )
        .map_err(pg_error)?;
    let Some(row) = row else { return Ok(None) };
    let bytes: Vec<u8> = row.try_get(0).map_err(pg_error)?;
    let journal = |len| read_journal(client, session, len);
    let Ok((next_seq, chain, checkpoint)) = decode_checkpoint(&bytes, journal) else {
        return Ok(None);
    };
    let mut failure = None;
    let fold = SessionFold::resume(info.context(), checkpoint, |seq| {
        match read_one(client, session, seq) {
            Ok(event) => Some(Arc::new(event)),
            Err(error) => {
                failure = Some(error);
                None
            }
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    match fold {
        Ok(fold) if fold.admission().next_seq() == next_seq => Ok(Some((fold, chain))),
        _ => Ok(None),
    }
}

/// One event by seq, its crc checked (the chain is checked by a walk).
fn read_one(client: &mut Client, session: &str, seq: u64) -> Result<Event, StoreError> {
    let records = PgStore::query_records(client, session, seq, seq + 1)?;
    let stored = records
        .first()
        .ok_or_else(|| StoreError::corrupt_at(session, seq, "the record is missing"))?;
    let header = record::check_record_crc(&stored.bytes)
        .map_err(|e| StoreError::corrupt_at(session, seq, e))?;
    record::decode_checked_body(&stored.bytes, &header, seq)
        .map_err(|e| StoreError::corrupt_at(session, seq, e))
}

/// Folds every record after the warm state's head (written by other writers), checking the
/// chain and the rules.
fn catch_up(client: &mut Client, session: &str, state: &mut PgSession) -> Result<(), StoreError> {
    loop {
        let from_seq = state.fold.admission().next_seq();
        let records = PgStore::query_records(client, session, from_seq, u64::MAX)?;
        let n_records = records.len();
        for (expected_seq, stored) in (from_seq..).zip(records) {
            if stored.seq != expected_seq {
                let message = format!("the record is missing (next is {})", stored.seq);
                return Err(StoreError::corrupt_at(session, expected_seq, message));
            }
            let (event, chain) = record::decode_event(&stored.bytes, &state.head_chain, stored.seq)
                .map_err(|e| StoreError::corrupt_at(session, stored.seq, e))?;
            state
                .fold
                .admit(Arc::new(event))
                .map_err(|v| StoreError::corrupt_at(session, expected_seq, v))?;
            state.head_chain = chain;
        }
        if (n_records as u64) < READ_EVENTS_MAX {
            return Ok(());
        }
    }
}

/// The session's head in the database.
fn head_of(store: &PgStore, client: &mut Client, session: &str) -> Result<Head, StoreError> {
    let row = client
        .query_opt(
            "SELECT seq, record FROM sessionlog_events WHERE session_id = $1 \
             ORDER BY seq DESC LIMIT 1",
            &[&session],
        )
        .map_err(pg_error)?;
    let Some(row) = row else {
        let (info, _) = store.read_record(client, session)?;
        return Ok(Head {
            next_seq: 0,
            chain: record::genesis_chain(&info.header),
        });
    };
    let seq = from_sql_seq(session, row.try_get(0).map_err(pg_error)?)?;
    let bytes: Vec<u8> = row.try_get(1).map_err(pg_error)?;
    let header =
        record::check_record_crc(&bytes).map_err(|e| StoreError::corrupt_at(session, seq, e))?;
    Ok(Head {
        next_seq: seq + 1,
        chain: header.chain,
    })
}

impl LogStore for PgStore {
    fn backend_name(&self) -> &'static str {
        "postgres"
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn create_session(&self, header: &SessionHeader, snapshot: bool) -> Result<(), StoreError> {
        self.insert_session(header, snapshot, false)
    }

    fn sessions(&self) -> Result<Vec<String>, StoreError> {
        self.session_ids(false)
    }

    fn interrupted_imports(&self) -> Result<Vec<String>, StoreError> {
        self.session_ids(true)
    }

    fn session_info(&self, session: &str) -> Result<SessionInfo, StoreError> {
        self.read_info(&mut self.client(), session)
    }

    /// The head as the database has it now (other writers included).
    fn head(&self, session: &str) -> Result<Head, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        head_of(self, &mut client, session)
    }

    fn append(&self, request: AppendRequest) -> Result<AppendAck, StoreError> {
        self.append_by(request, Writer::Client)
    }

    fn verify(&self, sessions: &[String]) -> Result<Vec<crate::types::SessionReport>, StoreError> {
        crate::verify::verify(self, sessions)
    }

    fn begin_import(&self, header: &SessionHeader, snapshot: bool) -> Result<Head, StoreError> {
        match self.insert_session(header, snapshot, true) {
            Ok(()) | Err(StoreError::SessionExists { .. }) => {}
            Err(other) => return Err(other),
        }
        let mut client = self.client();
        let (info, importing) = self.read_record(&mut client, &header.id)?;
        let found = FoundImport {
            header: &info.header,
            snapshot: info.snapshot,
            importing,
        };
        check_import_resume(found, header, snapshot)?;
        head_of(self, &mut client, &header.id)
    }

    fn append_import(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError> {
        let request = AppendRequest {
            session: session.to_owned(),
            expected_next_seq,
            events,
        };
        self.append_by(request, Writer::Import)
    }

    /// Clears the flag in one committed statement: PostgreSQL's commit is durable.
    fn finish_import(&self, session: &str) -> Result<(), StoreError> {
        self.check_writable()?;
        let mut client = self.client();
        self.read_record(&mut client, session)?;
        client
            .execute(
                "UPDATE sessionlog_sessions SET importing = FALSE WHERE session_id = $1",
                &[&session],
            )
            .map_err(pg_error)?;
        drop(client);
        if let Some(state) = lock(&self.sessions).get(session) {
            lock(state).importing = false;
        }
        Ok(())
    }

    fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        let mut client = self.client();
        let info = self.read_info(&mut client, session)?;
        // The record before the range carries the chain the range follows.
        let mut chain = match from_seq.checked_sub(1) {
            None => record::genesis_chain(&info.header),
            Some(prev_seq) => {
                let prev = PgStore::query_records(&mut client, session, prev_seq, from_seq)?;
                match prev.first() {
                    Some(stored) => {
                        record::check_record_crc(&stored.bytes)
                            .map_err(|e| StoreError::corrupt_at(session, prev_seq, e))?
                            .chain
                    }
                    // Past the head: nothing to read.
                    None => return Ok(Vec::new()),
                }
            }
        };
        let records = PgStore::query_records(&mut client, session, from_seq, to_seq)?;
        let mut events = Vec::with_capacity(records.len());
        for (expected_seq, stored) in (from_seq..).zip(records) {
            if stored.seq != expected_seq {
                let message = format!("the record is missing (next is {})", stored.seq);
                return Err(StoreError::corrupt_at(session, expected_seq, message));
            }
            let (event, next_chain) = record::decode_event(&stored.bytes, &chain, expected_seq)
                .map_err(|e| StoreError::corrupt_at(session, expected_seq, e))?;
            chain = next_chain;
            events.push(event);
        }
        Ok(events)
    }

    fn read_records(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        PgStore::query_records(&mut client, session, from_seq, to_seq)
    }

    fn checkpoint(&self, session: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.read_checkpoint(session, JournalRead::Resolved)
    }

    fn checkpoint_by_reference(
        &self,
        session: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.read_checkpoint(session, JournalRead::ByReference)
    }

    fn kept_checkpoint_seqs(&self, session: &str) -> Result<Vec<u64>, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        if self.schema < SCHEMA_KEPT_CHECKPOINTS {
            return Ok(Vec::new());
        }
        let rows = client
            .query(
                "SELECT next_seq FROM sessionlog_kept_checkpoints WHERE session_id = $1 \
                 ORDER BY next_seq",
                &[&session],
            )
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| from_sql_seq(session, row.try_get(0).map_err(pg_error)?))
            .collect()
    }

    fn fact_journal(&self, session: &str, len: u64) -> Result<Vec<u8>, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        if self.schema < SCHEMA_FACT_SEGMENTS && len > 0 {
            return Err(StoreError::Corrupt {
                reason: format!("{session}: schema {} keeps no fact journal", self.schema),
            });
        }
        read_journal(&mut client, session, len).map_err(|reason| StoreError::Corrupt {
            reason: format!("{session}: {reason}"),
        })
    }

    fn kept_checkpoint_below(
        &self,
        session: &str,
        end_seq: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let mut client = self.client();
        self.read_info(&mut client, session)?;
        if self.schema < SCHEMA_KEPT_CHECKPOINTS {
            return Ok(None);
        }
        let row = client
            .query_opt(
                "SELECT next_seq, record FROM sessionlog_kept_checkpoints \
                 WHERE session_id = $1 AND next_seq <= $2 ORDER BY next_seq DESC LIMIT 1",
                &[&session, &to_sql_seq(end_seq)],
            )
            .map_err(pg_error)?;
        row.map(|row| {
            let next_seq: i64 = row.try_get(0).map_err(pg_error)?;
            let bytes: Vec<u8> = row.try_get(1).map_err(pg_error)?;
            Ok((from_sql_seq(session, next_seq)?, bytes))
        })
        .transpose()
    }

    /// The head from the warm fold, caught up with the database; an earlier seq from the
    /// nearest checkpoint below it.
    fn fold_at(&self, session: &str, at_seq: Option<u64>) -> Result<SessionFold, StoreError> {
        if at_seq.is_some() {
            return crate::log_store::fold_from_checkpoint(self, session, at_seq);
        }
        let mut client = self.client();
        let state = self.session_state(&mut client, session, Writer::Client)?;
        let mut state = lock(&state);
        fresh(self, &mut client, session, &mut state)?;
        catch_up(&mut client, session, &mut state)?;
        Ok(state.fold.clone())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
