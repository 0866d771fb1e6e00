//! `LogStore`: the storage surface every backend offers, and everything built on it.
//!
//! A backend keeps sessions as chains of the same records (`sessionlog_format::record`): the
//! crc, the blake3 chain from the header's genesis, dense seqs. It admits every batch against
//! the session's fold before writing any of it, and checks the caller's expected next seq
//! (optimistic concurrency). The trait is synchronous (STYLE.md rule 37); async callers go
//! through `log_service::LogService`.
//!
//! On top of the trait, with no knowledge of the backend: [`requests`] (the rebuilt requests,
//! through the replay driver of [`crate::replay`]), [`verify`] (every record, the
//! chain, a fresh fold, the checkpoint) and [`copy_sessions`] (one backend to another, checked
//! on arrival).
//!
//! Backends: the embedded redb [`crate::store::Store`] and [`crate::pg_store::PgStore`].

use std::sync::Arc;

use sessionlog_format::fold::{FoldCheckpoint, SessionFold};
use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{Event, FormatVersion, SessionHeader};

use crate::replay::SessionSource;
use crate::requests::{RequestAnalyzer, RequestOptions, RequestReport};
use crate::store::verify::{SessionReport, Walk};
use crate::store::{AppendAck, AppendRequest, Head, StoreError};

/// Events one range read returns at most, for callers that walk a whole session.
pub const READ_EVENTS_MAX: u64 = 4096;

/// A session's identity: its V3 header and whether it is a normalized recording.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub header: SessionHeader,
    /// A normalized dsh recording (spec 18): its rules admit `{{placeholder}}` values.
    pub snapshot: bool,
}

impl SessionInfo {
    /// An empty fold of the session: its rules and its header's identity.
    pub fn fold(&self) -> SessionFold {
        let mut fold = SessionFold::new(self.context());
        fold.set_identity(sessionlog_format::relations::Identity::of(&self.header));
        fold
    }

    /// The rules the session's events follow.
    pub fn context(&self) -> RuleContext {
        RuleContext {
            version: FormatVersion::V3,
            snapshot: self.snapshot,
        }
    }
}

/// One stored record, as raw bytes, for checks that must see what is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub seq: u64,
    pub bytes: Vec<u8>,
}

/// The storage surface of a session log backend.
///
/// Every method is synchronous and may block on I/O.
pub trait LogStore: Send + Sync {
    /// A short name for logs and reports (`redb`, `postgres`).
    fn backend_name(&self) -> &'static str;

    /// Whether other processes may append to the same sessions (a shared database), so a
    /// tail must also poll for heads it did not commit itself.
    fn is_shared(&self) -> bool;

    /// Creates a session from its V3 header (the header's id names it).
    fn create_session(&self, header: &SessionHeader, snapshot: bool) -> Result<(), StoreError>;

    /// Every session id, in id order; interrupted imports are not sessions and are left out.
    fn sessions(&self) -> Result<Vec<String>, StoreError>;

    /// The ids of the sessions an import created and did not finish, in id order: every
    /// read of them is refused (`ImportInterrupted`), so a walk over [`LogStore::sessions`]
    /// that skips them says so.
    fn interrupted_imports(&self) -> Result<Vec<String>, StoreError>;

    fn session_info(&self, session: &str) -> Result<SessionInfo, StoreError>;

    /// The seq the next event gets and the chain hash of the last record.
    fn head(&self, session: &str) -> Result<Head, StoreError>;

    /// Appends one batch, all or nothing, once it is durable. A stale expected next seq is
    /// [`StoreError::Conflict`]; an event that breaks a rule is [`StoreError::Rejected`].
    fn append(&self, request: AppendRequest) -> Result<AppendAck, StoreError>;

    /// Events `from_seq..to_seq` (clamped to the head), each record checked (crc, chain,
    /// seq) on the way out.
    fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError>;

    /// Records `from_seq..to_seq` as stored, unchecked, in seq order (gaps are visible as
    /// missing seqs); at most [`READ_EVENTS_MAX`] of them, the first ones.
    fn read_records(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<StoredRecord>, StoreError>;

    /// The session's persisted fold checkpoint: `(next_seq, chain, checkpoint)`, `Ok(None)`
    /// without one, `Some(Err(reason))` when it cannot be decoded.
    fn checkpoint(&self, session: &str) -> Result<Option<StoredCheckpoint>, StoreError>;

    /// The fold at `at_seq` inclusive (`None`: the head).
    fn fold_at(&self, session: &str, at_seq: Option<u64>) -> Result<SessionFold, StoreError> {
        fold_from_scratch(self, session, at_seq)
    }

    /// Verifies the given sessions (every session when empty). The default walks
    /// [`LogStore::read_records`]; a backend may add checks of its own storage.
    fn verify(&self, sessions: &[String]) -> Result<Vec<SessionReport>, StoreError> {
        verify(self, sessions)
    }
}

/// A decoded checkpoint, or why it could not be decoded.
pub type StoredCheckpoint = Result<(u64, ChainHash, FoldCheckpoint), String>;

/// Folds `session` from seq 0 through `at_seq` (the head when `None`) over range reads.
pub fn fold_from_scratch<S: LogStore + ?Sized>(
    store: &S,
    session: &str,
    at_seq: Option<u64>,
) -> Result<SessionFold, StoreError> {
    let info = store.session_info(session)?;
    let head = store.head(session)?;
    let end_seq = at_seq.map_or(head.next_seq, |at| at.saturating_add(1));
    if end_seq > head.next_seq {
        return Err(StoreError::SeqOutOfRange {
            session: session.to_owned(),
            seq: end_seq - 1,
            next_seq: head.next_seq,
        });
    }
    let mut fold = info.fold();
    for_each_event(store, session, 0, end_seq, |event| {
        let seq = event.seq;
        fold.admit(Arc::new(event))
            .map_err(|violation| StoreError::Corrupt {
                reason: format!("{session}@{seq}: {violation}"),
            })
    })?;
    debug_assert_eq!(fold.admission().next_seq(), end_seq);
    Ok(fold)
}

/// Calls `f` with every event `from_seq..to_seq`, reading [`READ_EVENTS_MAX`] at a time.
pub fn for_each_event<S: LogStore + ?Sized>(
    store: &S,
    session: &str,
    from_seq: u64,
    to_seq: u64,
    mut f: impl FnMut(Event) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut next_seq = from_seq;
    while next_seq < to_seq {
        let end_seq = to_seq.min(next_seq.saturating_add(READ_EVENTS_MAX));
        let events = store.read_range(session, next_seq, end_seq)?;
        if events.is_empty() {
            break;
        }
        for event in events {
            assert_eq!(event.seq, next_seq, "range reads are dense");
            next_seq += 1;
            f(event)?;
        }
    }
    Ok(())
}

/// Every request of a stored session, rebuilt from its log, on any backend.
pub fn requests(
    store: &dyn LogStore,
    session: &str,
    options: RequestOptions,
) -> Result<RequestReport, StoreError> {
    requests_page(store, session, options, 0..u64::MAX)
}

/// [`requests`] keeping only the rows whose index is in `rows`; the summary covers them all.
/// The session replays through the one driver ([`crate::replay`]); an event it refuses is
/// stored data breaking a rule, hence `Corrupt`.
pub fn requests_page(
    store: &dyn LogStore,
    session: &str,
    options: RequestOptions,
    rows: std::ops::Range<u64>,
) -> Result<RequestReport, StoreError> {
    let source = SessionSource::Store { store, session };
    let analyzer = source
        .replay(|opening| {
            RequestAnalyzer::new(opening.session(), opening.rules(), options).keep_rows(rows)
        })
        .map_err(crate::Error::into_store_error)?;
    Ok(analyzer.finish())
}

/// `verify` over [`LogStore::read_records`]: per record the crc, the chain link, seq density,
/// the body's decoding and every admission rule (a fold from scratch); per session the
/// persisted checkpoint against the fresh fold. As in the redb verify, a fault does not stop
/// the walk: the chain resyncs on the stored value, and the fold stops after a rule fault.
pub fn verify<S: LogStore + ?Sized>(
    store: &S,
    sessions: &[String],
) -> Result<Vec<SessionReport>, StoreError> {
    let ids = if sessions.is_empty() {
        store.sessions()?
    } else {
        sessions.to_vec()
    };
    ids.iter().map(|id| verify_session(store, id)).collect()
}

fn verify_session<S: LogStore + ?Sized>(
    store: &S,
    session: &str,
) -> Result<SessionReport, StoreError> {
    let info = match store.session_info(session) {
        Ok(info) => info,
        Err(StoreError::Corrupt { reason }) => return Ok(Walk::session_fault(session, reason)),
        Err(other) => return Err(other),
    };
    let checkpoint = store.checkpoint(session)?;
    let mut walk = Walk::new(
        session,
        record::genesis_chain(&info.header),
        info.fold(),
        &checkpoint,
    );
    let mut from_seq = 0;
    loop {
        let records = store.read_records(session, from_seq, u64::MAX)?;
        let Some(last) = records.last() else { break };
        from_seq = last.seq.saturating_add(1);
        let n_records = records.len();
        for stored in records {
            walk.record(stored.seq, &stored.bytes);
        }
        if (n_records as u64) < READ_EVENTS_MAX || from_seq == u64::MAX {
            break;
        }
    }
    Ok(walk.finish(checkpoint))
}

/// What [`copy_sessions`] did with one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedSession {
    pub session: String,
    /// Events written to the target (0 when it already held them all).
    pub copied_events: u64,
    /// The session's events on the target after the copy.
    pub events: u64,
    /// The target's chain hash at the head, equal to the source's.
    pub head_chain: ChainHash,
    /// The target's verify report of the session.
    pub report: SessionReport,
}

/// Progress of a copy: called after each committed batch with the session and its next seq.
pub type CopyProgress<'a> = &'a mut dyn FnMut(&str, u64);

/// Copies every session of `from` (or those named) to `to`, batch by batch, then verifies
/// each on the target and compares its head chain with the source's. A session already on
/// the target resumes after its last event when the target's chain at that seq equals the
/// source's; any other difference is refused.
pub fn copy_sessions(
    from: &dyn LogStore,
    to: &dyn LogStore,
    sessions: &[String],
    progress: CopyProgress<'_>,
) -> Result<Vec<CopiedSession>, StoreError> {
    let ids = if sessions.is_empty() {
        from.sessions()?
    } else {
        sessions.to_vec()
    };
    ids.iter()
        .map(|id| copy_session(from, to, id, progress))
        .collect()
}

fn copy_session(
    from: &dyn LogStore,
    to: &dyn LogStore,
    session: &str,
    progress: CopyProgress<'_>,
) -> Result<CopiedSession, StoreError> {
    let info = from.session_info(session)?;
    let source_head = from.head(session)?;
    let mut next_seq = target_start(from, to, session, &info)?;
    let start_seq = next_seq;
    while next_seq < source_head.next_seq {
        let end_seq = source_head
            .next_seq
            .min(next_seq.saturating_add(READ_EVENTS_MAX));
        let events = from.read_range(session, next_seq, end_seq)?;
        if events.is_empty() {
            break;
        }
        let ack = to.append(AppendRequest {
            session: session.to_owned(),
            expected_next_seq: next_seq,
            events,
        })?;
        next_seq = ack.next_seq;
        progress(session, next_seq);
    }
    let target_head = to.head(session)?;
    if target_head != source_head {
        return Err(StoreError::Corrupt {
            reason: format!(
                "{session}@{}: the copy's head differs from the source's (next seq {} vs {})",
                target_head.next_seq.saturating_sub(1),
                target_head.next_seq,
                source_head.next_seq
            ),
        });
    }
    let report = to
        .verify(&[session.to_owned()])?
        .pop()
        .expect("one report per session");
    Ok(CopiedSession {
        session: session.to_owned(),
        copied_events: next_seq - start_seq,
        events: target_head.next_seq,
        head_chain: target_head.chain,
        report,
    })
}

/// Where the copy of `session` starts on the target: 0 for a new session, else the target's
/// next seq after checking that the target holds the source's prefix.
fn target_start(
    from: &dyn LogStore,
    to: &dyn LogStore,
    session: &str,
    info: &SessionInfo,
) -> Result<u64, StoreError> {
    let existing = match to.session_info(session) {
        Ok(existing) => existing,
        Err(StoreError::UnknownSession { .. }) => {
            to.create_session(&info.header, info.snapshot)?;
            return Ok(0);
        }
        Err(other) => return Err(other),
    };
    let refused = |reason: String| StoreError::Corrupt {
        reason: format!("{session}: the target already holds a different session: {reason}"),
    };
    if existing != *info {
        return Err(refused("its header differs".to_owned()));
    }
    let target_head = to.head(session)?;
    let Some(last_seq) = target_head.next_seq.checked_sub(1) else {
        return Ok(0);
    };
    let source = from.read_records(session, last_seq, last_seq + 1)?;
    let source_chain = source
        .first()
        .and_then(|r| record::check_record_crc(&r.bytes).ok())
        .map(|h| h.chain);
    if source_chain != Some(target_head.chain) {
        return Err(refused(format!("its chain at seq {last_seq} differs")));
    }
    Ok(target_head.next_seq)
}
