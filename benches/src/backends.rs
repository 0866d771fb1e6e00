//! The stores compared: sessionlog and the four baselines, behind one small interface for
//! durable appends, bulk imports and from-scratch derives.
//!
//! - `jsonl`: dsh's method, one file per session, the batch's V3 rows appended, then fsync.
//! - `jsonl.zstd`: the same rows as one checksummed zstd frame per batch, then fsync.
//! - `sqlite`: rusqlite (bundled SQLite) in WAL mode with `synchronous=FULL`, one row per
//!   event keyed on `(session, seq)` (a `WITHOUT ROWID` table), one transaction per batch;
//!   each session has its own connection, as each writer would.
//! - `redb`: raw redb, the same V3 row bytes keyed on `(session key, seq)`, one durable
//!   commit per batch: our records without our framing (no crc, chain, binary body, fold,
//!   checkpoints or WAL).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use redb::{ReadableDatabase, TableDefinition};
use rusqlite::{params, Connection, TransactionBehavior};
use sessionlog_format::fold::SessionFold;
use sessionlog_format::frame::FrameWriter;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Event, FormatVersion, LogReader, ReadOptions, Recovery, SessionHeader, SnapshotMode,
};

use crate::data::{encode_rows, header_line, RowsReader};

/// The baselines, in report order.
pub const BASELINES: [Baseline; 4] = [
    Baseline::Jsonl,
    Baseline::JsonlZstd,
    Baseline::Sqlite,
    Baseline::Redb,
];

/// One baseline store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    Jsonl,
    JsonlZstd,
    Sqlite,
    Redb,
}

impl Baseline {
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Jsonl => "jsonl",
            Baseline::JsonlZstd => "jsonl.zstd",
            Baseline::Sqlite => "sqlite",
            Baseline::Redb => "redb",
        }
    }

    pub fn from_name(name: &str) -> Option<Baseline> {
        BASELINES.into_iter().find(|b| b.name() == name)
    }

    /// The file (or database) of this baseline under `dir`, for session `idx` where each
    /// session has its own file.
    pub fn path(self, dir: &Path, idx: usize) -> PathBuf {
        match self {
            Baseline::Jsonl => dir.join(format!("session-{idx}.jsonl")),
            Baseline::JsonlZstd => dir.join(format!("session-{idx}.jsonl.zstd")),
            Baseline::Sqlite => dir.join("events.sqlite"),
            Baseline::Redb => dir.join("events.redb"),
        }
    }
}

const RAW_EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
const RAW_HEADERS: TableDefinition<u64, &[u8]> = TableDefinition::new("headers");

/// An open baseline store of `headers.len()` sessions, ready for durable batches.
pub enum Writer {
    Files {
        files: Vec<Mutex<File>>,
    },
    Frames {
        files: Vec<Mutex<FrameWriter<File>>>,
    },
    Sqlite {
        connections: Vec<Mutex<Connection>>,
        ids: Vec<String>,
    },
    Redb {
        db: Arc<redb::Database>,
    },
}

impl Writer {
    /// Creates the store for `headers` under `dir` (each file starts with its header line).
    pub fn create(baseline: Baseline, dir: &Path, headers: &[SessionHeader]) -> Writer {
        match baseline {
            Baseline::Jsonl => Writer::Files {
                files: (0..headers.len())
                    .map(|idx| {
                        let mut file = append_file(&baseline.path(dir, idx));
                        file.write_all(&header_line(&headers[idx]))
                            .expect("the header line");
                        file.sync_data().expect("fsync");
                        Mutex::new(file)
                    })
                    .collect(),
            },
            Baseline::JsonlZstd => Writer::Frames {
                files: (0..headers.len())
                    .map(|idx| {
                        let mut frames = FrameWriter::new(append_file(&baseline.path(dir, idx)));
                        frames
                            .write_frame(&header_line(&headers[idx]))
                            .expect("the header frame");
                        frames.get_ref().sync_data().expect("fsync");
                        Mutex::new(frames)
                    })
                    .collect(),
            },
            Baseline::Sqlite => {
                let path = baseline.path(dir, 0);
                let first = sqlite_open(&path);
                first
                    .execute_batch(
                        "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, header BLOB NOT NULL);
                         CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL, seq INTEGER NOT NULL,
                           body BLOB NOT NULL, PRIMARY KEY (session, seq)) WITHOUT ROWID;",
                    )
                    .expect("the schema");
                for header in headers {
                    first
                        .execute(
                            "INSERT INTO sessions (id, header) VALUES (?1, ?2)",
                            params![header.id, header_line(header)],
                        )
                        .expect("a session row");
                }
                let mut connections = vec![Mutex::new(first)];
                connections.extend((1..headers.len()).map(|_| Mutex::new(sqlite_open(&path))));
                Writer::Sqlite {
                    connections,
                    ids: headers.iter().map(|h| h.id.clone()).collect(),
                }
            }
            Baseline::Redb => {
                let db = redb::Database::create(baseline.path(dir, 0)).expect("redb");
                let txn = db.begin_write().expect("a write");
                {
                    let mut table = txn.open_table(RAW_HEADERS).expect("headers");
                    for (idx, header) in headers.iter().enumerate() {
                        table
                            .insert(idx as u64, header_line(header).as_slice())
                            .expect("a header");
                    }
                    txn.open_table(RAW_EVENTS).expect("events");
                }
                txn.commit().expect("commit");
                Writer::Redb { db: Arc::new(db) }
            }
        }
    }

    /// Appends one batch of session `idx` durably; `scratch` is a reusable buffer. The batch
    /// is encoded as V3 rows and written through [`Writer::append_rows`], so every baseline
    /// stores exactly the bytes a bulk import of the same events would.
    pub fn append(&self, idx: usize, batch: &[Event], scratch: &mut Vec<u8>) {
        let Some(first) = batch.first() else { return };
        debug_assert!(
            batch.windows(2).all(|w| w[1].seq == w[0].seq + 1),
            "dense seqs"
        );
        scratch.clear();
        encode_rows(batch, scratch);
        self.append_rows(idx, first.seq, scratch);
    }

    /// Appends rows that are already encoded (one V3 row per line, newline-terminated) for
    /// session `idx`, the first carrying `first_seq`: the bulk-import path, where the rows
    /// come from a file.
    pub fn append_rows(&self, idx: usize, first_seq: u64, rows: &[u8]) {
        match self {
            Writer::Files { files } => {
                let mut file = files[idx].lock().expect("no panics");
                file.write_all(rows).expect("write");
                file.sync_data().expect("fsync");
            }
            Writer::Frames { files } => {
                let mut frames = files[idx].lock().expect("no panics");
                frames.write_frame(rows).expect("write");
                frames.get_ref().sync_data().expect("fsync");
            }
            Writer::Sqlite { connections, ids } => {
                let mut connection = connections[idx].lock().expect("no panics");
                let txn = connection
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .expect("a transaction");
                {
                    let mut insert = txn
                        .prepare_cached(
                            "INSERT INTO events (session, seq, body) VALUES (?1, ?2, ?3)",
                        )
                        .expect("the insert");
                    for (i, row) in lines(rows).enumerate() {
                        let seq = first_seq + i as u64;
                        insert
                            .execute(params![ids[idx], seq as i64, row])
                            .expect("a row");
                    }
                }
                txn.commit().expect("commit");
            }
            Writer::Redb { db } => {
                let txn = db.begin_write().expect("a write");
                {
                    let mut table = txn.open_table(RAW_EVENTS).expect("events");
                    for (i, row) in lines(rows).enumerate() {
                        table
                            .insert((idx as u64, first_seq + i as u64), row)
                            .expect("a row");
                    }
                }
                txn.commit().expect("commit");
            }
        }
    }
}

fn lines(rows: &[u8]) -> impl Iterator<Item = &[u8]> {
    rows.split(|&b| b == b'\n').filter(|row| !row.is_empty())
}

fn append_file(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("a baseline file")
}

fn sqlite_open(path: &Path) -> Connection {
    let connection = Connection::open(path).expect("sqlite");
    connection
        .busy_timeout(std::time::Duration::from_secs(600))
        .expect("busy timeout");
    let mode: String = connection
        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
        .expect("WAL mode");
    assert_eq!(mode, "wal", "SQLite refused WAL mode");
    connection
        .execute_batch("PRAGMA synchronous=FULL;")
        .expect("synchronous=FULL");
    connection
}

/// The derived messages of a fold, serialized as `sessionlog messages --json` would carry
/// them; the length keeps the work from being optimized away.
pub fn derive_messages(fold: &SessionFold) -> usize {
    serde_json::to_vec(&fold.messages())
        .expect("messages serialize")
        .len()
}

/// Folds session `idx` of a baseline from scratch through `at_seq` (inclusive; `None`: all)
/// and derives its messages: the work a reader of that store does with our codec. Files go
/// through `engine::inspect::fold_session`, as `sessionlog messages FILE` does.
pub fn derive_from_scratch(
    baseline: Baseline,
    dir: &Path,
    idx: usize,
    at_seq: Option<u64>,
) -> usize {
    match baseline {
        Baseline::Jsonl | Baseline::JsonlZstd => {
            let path = baseline.path(dir, idx);
            let source = sessionlog_engine::replay::SessionSource::File {
                path: &path,
                snapshot: SnapshotMode::Off,
            };
            let folded =
                sessionlog_engine::inspect::fold_session(source, at_seq).expect("a valid log");
            derive_messages(&folded.fold)
        }
        Baseline::Sqlite => {
            let connection = Connection::open(baseline.path(dir, 0)).expect("sqlite");
            let (id, header): (String, Vec<u8>) = connection
                .query_row(
                    "SELECT id, header FROM sessions ORDER BY rowid LIMIT 1 OFFSET ?1",
                    params![idx as i64],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .expect("the session");
            let to_seq = at_seq.map_or(i64::MAX, |s| s as i64);
            let mut rows = connection
                .prepare("SELECT body FROM events WHERE session = ?1 AND seq <= ?2 ORDER BY seq")
                .expect("the query");
            let bodies = rows
                .query_map(params![id, to_seq], |row| row.get::<_, Vec<u8>>(0))
                .expect("rows")
                .map(|row| row.expect("a row"));
            fold_rows(RowsReader::new(header, bodies))
        }
        Baseline::Redb => {
            let db = redb::Database::open(baseline.path(dir, 0)).expect("redb");
            let txn = db.begin_read().expect("a read");
            let headers = txn.open_table(RAW_HEADERS).expect("headers");
            let header = headers
                .get(idx as u64)
                .expect("a read")
                .expect("the session")
                .value()
                .to_vec();
            let events = txn.open_table(RAW_EVENTS).expect("events");
            let to_seq = at_seq.unwrap_or(u64::MAX - 1);
            let range = events
                .range((idx as u64, 0)..=(idx as u64, to_seq))
                .expect("a range");
            let bodies = range.map(|entry| entry.expect("a row").1.value().to_vec());
            fold_rows(RowsReader::new(header, bodies))
        }
    }
}

fn fold_rows(input: impl std::io::Read) -> usize {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot: SnapshotMode::Off,
    };
    let mut reader = LogReader::new(input, options).expect("a header");
    let mut fold = SessionFold::new(RuleContext {
        version: FormatVersion::V3,
        snapshot: false,
    });
    while let Some(event) = reader.next_event() {
        fold.admit(Arc::new(event.expect("a valid row")))
            .expect("an admitted event");
    }
    derive_messages(&fold)
}

/// Bytes on disk of a baseline's store under `dir` (every file of it, SQLite's WAL included).
pub fn size_on_disk_bytes(baseline: Baseline, dir: &Path, n_sessions: usize) -> u64 {
    let len = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    match baseline {
        Baseline::Jsonl | Baseline::JsonlZstd => (0..n_sessions)
            .map(|idx| len(baseline.path(dir, idx)))
            .sum(),
        Baseline::Sqlite => {
            let path = baseline.path(dir, 0);
            let wal = path.with_extension("sqlite-wal");
            len(path) + len(wal)
        }
        Baseline::Redb => len(baseline.path(dir, 0)),
    }
}
