//! The types every backend shares: the append request and its acknowledgement, a session's
//! head, the store error, the verify report, the rules a new session and a batch pass on every
//! backend ([`check_new_header`], [`admit_expected`]) and the bounds they share.
//!
//! They sit below the `log_store` API and every backend, so that no backend module and the API
//! depend on each other in a circle.

use std::sync::Arc;

use sessionlog_format::fold::SessionFold;
use sessionlog_format::record::ChainHash;
use sessionlog_format::{Event, FormatVersion, SessionHeader, Violation};

/// Most events one batch may carry.
pub const BATCH_EVENTS_MAX: usize = 65_536;
/// Longest session id the store keeps, in bytes of UTF-8 (the header rule's bound).
pub use sessionlog_format::header::SESSION_ID_BYTES_MAX;
/// A fold checkpoint is written when this many events have been appended since the last one.
pub const CHECKPOINT_INTERVAL_EVENTS: u64 = 1024;
/// Besides the latest checkpoint, the first one written at or past each multiple of this many
/// events is kept for good: a read at a past seq folds from the nearest kept one below it, so
/// its cost follows its distance from that checkpoint (at most this interval plus
/// [`CHECKPOINT_INTERVAL_EVENTS`] and one batch), never the log's length.
pub const KEPT_CHECKPOINT_INTERVAL_EVENTS: u64 = 16_384;

/// Whether the checkpoint written at `next_seq`, after the one at `previous_next_seq`, is the
/// first at or past a multiple of [`KEPT_CHECKPOINT_INTERVAL_EVENTS`] and so is kept.
pub fn keeps_checkpoint(previous_next_seq: u64, next_seq: u64) -> bool {
    next_seq / KEPT_CHECKPOINT_INTERVAL_EVENTS > previous_next_seq / KEPT_CHECKPOINT_INTERVAL_EVENTS
}
/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file or database operation failed; the store is now poisoned. The failure keeps the
    /// error underneath as its source.
    #[error("storage failure: {0}")]
    Storage(#[source] StorageFailure),
    /// Another open store holds the file's lock (another process, or this one).
    #[error("the store {path} is locked: another sessionlog process has it open")]
    Locked { path: String },
    /// An earlier write failed; no write is taken until the store is reopened.
    #[error("the store stopped taking writes after an earlier failure; reopen it to recover")]
    Poisoned,
    #[error("the store was written by a newer sessionlog (store format v{found}, this build reads v{supported})")]
    UpgradeRequired { found: u32, supported: u32 },
    /// Stored bytes failed a check.
    #[error("the store is corrupt: {reason}")]
    Corrupt { reason: String },
    /// A read-only open found no file: a read never creates a store.
    #[error("no store at {path} (a read never creates one; import or copy --to creates it)")]
    Missing { path: String },
    /// A location that names no store a backend can open: an unsupported scheme, or a file
    /// in a directory that does not exist (a usage error; nothing was created).
    #[error("{location}: {reason}")]
    BadLocation { location: String, reason: String },
    /// The file is not a sessionlog store.
    #[error("{path} is not a sessionlog store: {reason}")]
    NotAStore { path: String, reason: String },
    /// The store was opened read-only (a read command, or a WAL with a damaged frame).
    #[error("the store {path} is open read-only")]
    ReadOnly { path: String },
    /// The WAL holds a damaged frame: the store opens only read-only, so that nothing in the
    /// WAL is dropped by a restart; `salvage` exports what is intact.
    #[error("the store's WAL {path} is damaged: {summary}; it opens only read-only (`sessionlog verify` names what was lost, `sessionlog salvage` exports every intact session)")]
    WalDamaged { path: String, summary: String },
    #[error("no session {session} in the store")]
    UnknownSession { session: String },
    #[error("session {session} already exists")]
    SessionExists { session: String },
    /// An import created the session and did not finish (it was killed, or failed part-way):
    /// the session is hidden and refused to everyone but a rerun of the import.
    #[error("session {session} is an interrupted import: rerun `sessionlog import FILE` with its log to complete it")]
    ImportInterrupted { session: String },
    /// A rerun of an import found the interrupted session holding something other than the
    /// start of this log; nothing was changed.
    #[error(
        "session {session} is an interrupted import of another log: {reason}; nothing was changed"
    )]
    ImportMismatch { session: String, reason: String },
    /// The caller's expected next seq is stale: another writer appended first.
    #[error("{session}@{expected}: conflict: the session's next seq is {current}")]
    Conflict {
        session: String,
        expected: u64,
        current: u64,
    },
    /// An event broke an admission rule; nothing of its batch was written.
    #[error("{session}@{seq}: {violation}")]
    Rejected {
        session: String,
        seq: u64,
        violation: Violation,
    },
    #[error("{session}: a batch holds {n_events} events, at most {BATCH_EVENTS_MAX}")]
    BatchTooLarge { session: String, n_events: usize },
    #[error("invalid session header: {reason}")]
    InvalidHeader { reason: String },
    /// The id cannot name a stored session (see [`check_session_id`]).
    #[error("session id {session:?} is refused: {reason} [session-id]")]
    InvalidSessionId { session: String, reason: String },
    #[error("{session}@{seq}: no such seq; the session's next seq is {next_seq}")]
    SeqOutOfRange {
        session: String,
        seq: u64,
        next_seq: u64,
    },
}

/// The session-id rule of `format` ([`sessionlog_format::header::check_session_id`]) as a
/// store error; every backend calls it before creating a session.
pub fn check_session_id(id: &str) -> Result<(), StoreError> {
    sessionlog_format::header::check_session_id(id).map_err(|reason| StoreError::InvalidSessionId {
        session: id.to_owned(),
        reason,
    })
}

/// The format versions a store keeps a session in, each session in the version it was created
/// or imported with (docs/format.md, "Session record").
pub const STORED_VERSIONS: [FormatVersion; 2] = [FormatVersion::V3, FormatVersion::V4];

/// The format version of a stored session: its header's `version` (3 or 4). `None` for any
/// other value, which no backend admits and every reader reports as corrupt.
pub fn stored_version(header: &SessionHeader) -> Option<FormatVersion> {
    header
        .version
        .and_then(FormatVersion::from_number)
        .filter(|version| STORED_VERSIONS.contains(version))
}

/// The rules a stored session's events follow: its version's (V3 when the header names none
/// a store keeps, which every backend refuses as corrupt before it gets here) and its
/// snapshot flag. The one definition behind `SessionInfo::context` and the redb records.
pub fn session_context(
    header: &SessionHeader,
    snapshot: bool,
) -> sessionlog_format::rules::RuleContext {
    sessionlog_format::rules::RuleContext {
        version: stored_version(header).unwrap_or(FormatVersion::V3),
        snapshot,
    }
}

/// What every backend checks of a new session's header before it creates the session: an
/// id that can name a stored session, a version the store keeps (V3 or V4), and that
/// version's header rules.
pub fn check_new_header(header: &SessionHeader, snapshot: bool) -> Result<(), StoreError> {
    check_session_id(&header.id)?;
    let Some(version) = stored_version(header) else {
        let found = header
            .version
            .map_or_else(|| "no version".to_owned(), |n| format!("version {n}"));
        return Err(StoreError::InvalidHeader {
            reason: format!(
                "the store keeps V3 and V4 sessions, the header names {found} \
                 (import or migrate an older log to V3 or V4 first)"
            ),
        });
    };
    header
        .check(version, snapshot)
        .map_err(|reason| StoreError::InvalidHeader { reason })
}

/// Admits `events` into `fold` as the batch that must start at `expected_next_seq`: the
/// optimistic-concurrency check and every admission rule, shared by all backends. A stale
/// expected seq is `Conflict` naming the current one; a refused event is `Rejected` naming its
/// seq and rule. Either way the fold is unchanged (`admit_batch` is atomic).
pub fn admit_expected(
    fold: &mut SessionFold,
    session: &str,
    expected_next_seq: u64,
    events: Vec<Event>,
) -> Result<Vec<Arc<Event>>, StoreError> {
    let current = fold.admission().next_seq();
    if expected_next_seq != current {
        return Err(StoreError::Conflict {
            session: session.to_owned(),
            expected: expected_next_seq,
            current,
        });
    }
    let batch: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
    if let Err((event_idx, violation)) = fold.admit_batch(&batch) {
        let seq = batch[event_idx].seq;
        return Err(StoreError::Rejected {
            session: session.to_owned(),
            seq,
            violation,
        });
    }
    debug_assert_eq!(
        fold.admission().next_seq(),
        expected_next_seq + batch.len() as u64
    );
    Ok(batch)
}

impl StoreError {
    pub(crate) fn storage(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::Storage(StorageFailure::caused_by(error))
    }

    /// Stored data that fails a check, at `session@seq`.
    pub(crate) fn corrupt_at(session: &str, seq: u64, error: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            reason: format!("{session}@{seq}: {error}"),
        }
    }

    /// A storage failure with no error underneath.
    pub fn storage_message(message: impl Into<String>) -> StoreError {
        StoreError::Storage(StorageFailure::new(message))
    }
}

/// What a storage failure says, and the error underneath when there is one (a redb, I/O or
/// PostgreSQL error), so that a caller can walk the chain to it.
#[derive(Debug, Clone)]
pub struct StorageFailure {
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl StorageFailure {
    /// A failure with no error underneath.
    pub fn new(message: impl Into<String>) -> StorageFailure {
        StorageFailure {
            message: message.into(),
            source: None,
        }
    }

    /// A failure caused by `error`; it says what `error` says.
    pub fn caused_by(error: impl std::error::Error + Send + Sync + 'static) -> StorageFailure {
        StorageFailure {
            message: error.to_string(),
            source: Some(Arc::new(error)),
        }
    }

    /// A failure that says `message` (what failed, where) and keeps `error` underneath.
    pub fn with_source(
        message: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> StorageFailure {
        StorageFailure {
            message: message.into(),
            source: Some(Arc::new(error)),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for StorageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StorageFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for StorageFailure {
    fn from(message: String) -> StorageFailure {
        StorageFailure::new(message)
    }
}

impl From<&str> for StorageFailure {
    fn from(message: &str) -> StorageFailure {
        StorageFailure::new(message)
    }
}

/// One batch to append.
#[derive(Debug, Clone)]
pub struct AppendRequest {
    pub session: String,
    /// The seq the batch's first event must carry; a stale value is a conflict.
    pub expected_next_seq: u64,
    pub events: Vec<Event>,
}

/// A durable append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendAck {
    pub session: String,
    pub first_seq: u64,
    /// The session's next seq after the batch; the last seq committed is `next_seq - 1`.
    pub next_seq: u64,
    /// The chain hash at the session's head after the batch.
    pub head_chain: ChainHash,
}

/// A session's head: the seq the next event gets and the chain hash of the last record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub next_seq: u64,
    pub chain: ChainHash,
}

/// A frame of the current generation that is damaged: what the WAL knows of what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFrame {
    /// Where the frame starts in the WAL file.
    pub offset_bytes: u64,
    /// Its place among the frames of the current generation (0 is the first).
    pub frame_idx: u64,
    /// What failed.
    pub reason: String,
    /// The (session key, seq) of the event entries its damaged payload still shows, as far as
    /// it parses; empty when nothing of it can be read.
    pub events: Vec<(u64, u64)>,
    /// The session records it shows (session creations).
    pub session_records: Vec<Vec<u8>>,
    /// Whether `events` and `session_records` are every entry the payload counts; otherwise
    /// the damage hides the rest.
    pub entries_complete: bool,
}

/// What kind of fault verify found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// A record's crc does not match its bytes.
    Checksum,
    /// A record's chain hash does not follow from the previous record.
    Chain,
    /// A seq is missing or out of place.
    Missing,
    /// A record's header or body cannot be decoded.
    Decode,
    /// An event breaks an admission rule.
    Admission,
    /// The persisted fold checkpoint differs from a fold from scratch.
    Checkpoint,
    /// The session's own record is damaged.
    Session,
    /// A WAL frame that held records of the session is damaged: they are not in the store.
    Wal,
    /// The session is an import that did not finish: a rerun of the import completes it.
    Import,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Checksum => "checksum",
            FaultKind::Chain => "chain",
            FaultKind::Missing => "missing",
            FaultKind::Decode => "decode",
            FaultKind::Admission => "admission",
            FaultKind::Checkpoint => "checkpoint",
            FaultKind::Session => "session",
            FaultKind::Wal => "wal",
            FaultKind::Import => "import",
        }
    }
}

/// One fault found by verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFault {
    /// The seq the fault is at; `None` for session-level faults.
    pub seq: Option<u64>,
    pub kind: FaultKind,
    pub message: String,
}

/// The verify result of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReport {
    pub session: String,
    pub events: u64,
    /// The chain hash at the head, as recomputed.
    pub head_chain: ChainHash,
    pub faults: Vec<VerifyFault>,
}

impl SessionReport {
    pub fn ok(&self) -> bool {
        self.faults.is_empty()
    }
}

/// The session an import finds when it begins, as its backend holds it.
#[derive(Debug, Clone, Copy)]
pub struct FoundImport<'a> {
    pub header: &'a SessionHeader,
    pub snapshot: bool,
    /// The importing flag is still set.
    pub importing: bool,
}

/// Whether an import of a log with `header` (read as a normalized recording when `snapshot`)
/// may resume the session it `found`, on every backend: the session must still be an
/// unfinished import (else `SessionExists`: another import finished it) of the same header in
/// the same snapshot mode (else `ImportMismatch`, nothing changed).
pub fn check_import_resume(
    found: FoundImport<'_>,
    header: &SessionHeader,
    snapshot: bool,
) -> Result<(), StoreError> {
    let mismatch = |reason: &str| StoreError::ImportMismatch {
        session: header.id.clone(),
        reason: reason.to_owned(),
    };
    if !found.importing {
        return Err(StoreError::SessionExists {
            session: header.id.clone(),
        });
    }
    if found.header != header {
        return Err(mismatch("its header differs from the log's"));
    }
    if found.snapshot != snapshot {
        return Err(mismatch(if found.snapshot {
            "it was imported as a normalized recording and the log is read as a plain one"
        } else {
            "it was imported as a plain log and the log is read as a normalized recording"
        }));
    }
    Ok(())
}
