//! `LogStore`: the storage surface every backend offers, and everything built on it.
//!
//! A backend keeps sessions as chains of the same records (`sessionlog_format::record`): the
//! crc, the blake3 chain from the header's genesis, dense seqs. It admits every batch against
//! the session's fold before writing any of it, and checks the caller's expected next seq
//! (optimistic concurrency). The trait is synchronous (STYLE.md rule 37); async callers go
//! through `log_service::LogService`.
//!
//! On top of the trait, with no knowledge of the backend: [`copy_sessions`] (one backend to another, checked
//! on arrival, as an import).
//!
//! Backends: the embedded redb store (`embedded::Store`), PostgreSQL (`pg_store::PgStore`)
//! and `mem_store::MemStore`.

use std::sync::Arc;

use sessionlog_format::fold::{FoldCheckpoint, SessionFold};
use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{Event, FormatVersion, SessionHeader};

use crate::types::{AppendAck, AppendRequest, DamagedFrame, Head, SessionReport, StoreError};

/// Events one range read returns at most, for callers that walk a whole session.
pub const READ_EVENTS_MAX: u64 = 4096;

/// A session's identity: its header (V3 or V4) and whether it is a normalized recording.
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

    /// The session's format version, V3 or V4: its header's (a backend refuses a stored
    /// header of any other version as corrupt before it builds a `SessionInfo`).
    pub fn version(&self) -> FormatVersion {
        crate::types::stored_version(&self.header).unwrap_or(FormatVersion::V3)
    }

    /// The rules the session's events follow: those of its version.
    pub fn context(&self) -> RuleContext {
        crate::types::session_context(&self.header, self.snapshot)
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

    /// [`LogStore::checkpoint`] with its fact journal left a reference (length and BLAKE3
    /// hash), checked against the stored journal as `checkpoint` checks it: what `verify`
    /// compares, for a journal that grows with the log. The default resolves the journal and
    /// then reduces it; a backend that can hash its segments as it reads them does that
    /// instead, and holds none of it.
    fn checkpoint_by_reference(
        &self,
        session: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        let checkpoint = self.checkpoint(session)?;
        Ok(checkpoint.map(|stored| {
            stored.map(|(next_seq, chain, mut fold)| {
                fold.relations.facts.to_reference();
                (next_seq, chain, fold)
            })
        }))
    }

    /// The `next_seq`s the session's kept checkpoints are keyed at (docs/format.md,
    /// "Checkpoint record"), ascending; none for a backend that keeps only the latest one.
    fn kept_checkpoint_seqs(&self, session: &str) -> Result<Vec<u64>, StoreError> {
        let _ = session;
        Ok(Vec::new())
    }

    /// The kept checkpoint record keyed at the greatest `next_seq` of at most `end_seq`, with
    /// that `next_seq`; `None` when there is none (or the backend keeps none).
    fn kept_checkpoint_below(
        &self,
        session: &str,
        end_seq: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let _ = (session, end_seq);
        Ok(None)
    }

    /// The first `len` bytes of the session's fact journal, from the fact segments stored
    /// beside its checkpoints (docs/format.md, "Fact segments"); an error when they cannot
    /// give them (a backend that keeps no checkpoints has none).
    fn fact_journal(&self, session: &str, len: u64) -> Result<Vec<u8>, StoreError> {
        let _ = len;
        Err(StoreError::Corrupt {
            reason: format!("{session}: this backend keeps no fact journal"),
        })
    }

    /// The fold at `at_seq` inclusive (`None`: the head).
    fn fold_at(&self, session: &str, at_seq: Option<u64>) -> Result<SessionFold, StoreError> {
        fold_from_checkpoint(self, session, at_seq)
    }

    /// Whether [`LogStore::append_group`] commits a group at once (one fsync for every batch):
    /// the async service then funnels appends through one writer thread.
    fn groups_commits(&self) -> bool {
        false
    }

    /// Appends several batches, each admitted or refused on its own: one result per request,
    /// in order. The default appends them one by one.
    fn append_group(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendAck, StoreError>> {
        requests.into_iter().map(|r| self.append(r)).collect()
    }

    /// Runs `f` on the session's fold at its head. The default folds a copy
    /// ([`LogStore::fold_at`]); a backend with a warm fold lends it without a copy.
    fn with_head_fold(
        &self,
        session: &str,
        f: &mut dyn FnMut(&SessionFold),
    ) -> Result<(), StoreError> {
        let fold = self.fold_at(session, None)?;
        f(&fold);
        Ok(())
    }

    /// Appends `events` to `session` after `expected_next_seq`: [`LogStore::append`] of one
    /// request.
    fn append_events(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError> {
        self.append(AppendRequest {
            session: session.to_owned(),
            expected_next_seq,
            events,
        })
    }

    /// Begins the import of a log with `header`, or resumes the one an earlier run left
    /// unfinished: a new session is created flagged as importing, hidden from every reader
    /// and writer but the import until [`LogStore::finish_import`]. A flagged session with
    /// another header or snapshot mode is `ImportMismatch`; a finished one `SessionExists`.
    /// Returns the session's head: a resuming import must find the session's events at the
    /// start of its log (their chain ends at the head's) before it appends the rest.
    fn begin_import(&self, header: &SessionHeader, snapshot: bool) -> Result<Head, StoreError>;

    /// Appends one batch to the session of an import begun with [`LogStore::begin_import`],
    /// under every admission rule: the one writer that may while the session is unfinished.
    fn append_import(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError>;

    /// Finishes an import: the session becomes a normal one, durably, so that no crash turns
    /// it back. A finished session is left as it is.
    fn finish_import(&self, session: &str) -> Result<(), StoreError>;

    /// What the backend found damaged when it opened and left out of every read (the redb
    /// store's damaged WAL frames); `verify` reports them as faults.
    fn damaged_frames(&self) -> Vec<DamagedFrame> {
        Vec::new()
    }

    /// Verifies the given sessions (every session when empty): every record, the chain, a
    /// fresh fold and the checkpoint. `verify::verify` does it over
    /// [`LogStore::read_records`] for any backend; a backend may add checks of its own storage.
    fn verify(&self, sessions: &[String]) -> Result<Vec<SessionReport>, StoreError>;
}

/// Runs `f` on the head fold of `session` ([`LogStore::with_head_fold`]) and returns its value.
pub fn with_fold<T>(
    store: &dyn LogStore,
    session: &str,
    f: impl FnOnce(&SessionFold) -> T,
) -> Result<T, StoreError> {
    let mut f = Some(f);
    let mut out = None;
    store.with_head_fold(session, &mut |fold| {
        if let Some(f) = f.take() {
            out = Some(f(fold));
        }
    })?;
    Ok(out.expect("with_head_fold calls its closure once on success"))
}

/// A decoded checkpoint, or why it could not be decoded.
pub type StoredCheckpoint = Result<(u64, ChainHash, FoldCheckpoint), String>;

/// How a backend's checkpoint read gives the fact journal a checkpoint names:
/// [`LogStore::checkpoint`] resolves it, [`LogStore::checkpoint_by_reference`] checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JournalRead {
    /// Read whole and checked against the reference ([`FactJournal::resolve`](sessionlog_format::relations::FactJournal::resolve)).
    Resolved,
    /// Hashed a segment at a time and checked, left a reference ([`FactJournal::check_stored`](sessionlog_format::relations::FactJournal::check_stored)).
    ByReference,
}

/// Folds `session` through `at_seq` (the head when `None`) over range reads: from the nearest
/// usable checkpoint at or below it (the latest one or a kept one), else from seq 0.
pub fn fold_from_checkpoint<S: LogStore + ?Sized>(
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
    let mut fold = resume_nearest(store, session, &info, end_seq)?.unwrap_or_else(|| info.fold());
    let from_seq = fold.admission().next_seq();
    for_each_event(store, session, from_seq, end_seq, |event| {
        let seq = event.seq;
        fold.admit(Arc::new(event))
            .map_err(|violation| StoreError::corrupt_at(session, seq, violation))
    })?;
    debug_assert_eq!(fold.admission().next_seq(), end_seq);
    Ok(fold)
}

/// The fold resumed from the nearest checkpoint keyed at most `end_seq` that decodes, resumes
/// to its own `next_seq` and carries the stored chain of its last record.
fn resume_nearest<S: LogStore + ?Sized>(
    store: &S,
    session: &str,
    info: &SessionInfo,
    end_seq: u64,
) -> Result<Option<SessionFold>, StoreError> {
    let mut candidates = Vec::with_capacity(2);
    if let Some(Ok(latest)) = store.checkpoint(session)? {
        if latest.0 <= end_seq {
            candidates.push(latest);
        }
    }
    if let Some((key, bytes)) = store.kept_checkpoint_below(session, end_seq)? {
        let journal = |len| store.fact_journal(session, len).map_err(|e| e.to_string());
        if let Ok(kept) = crate::embedded::backend::decode_checkpoint(&bytes, journal) {
            if kept.0 == key {
                candidates.push(kept);
            }
        }
    }
    candidates.sort_by_key(|(next_seq, _, _)| std::cmp::Reverse(*next_seq));
    for (next_seq, chain, checkpoint) in candidates {
        if next_seq == 0 {
            continue;
        }
        let stored = store.read_records(session, next_seq - 1, next_seq)?;
        let Some(last) = stored.first().filter(|r| r.seq == next_seq - 1) else {
            continue;
        };
        match record::check_record_crc(&last.bytes) {
            Ok(header) if header.chain == chain => {}
            _ => continue,
        }
        let mut failure = None;
        let resumed = SessionFold::resume(info.context(), checkpoint, |seq| {
            match store.read_range(session, seq, seq + 1) {
                Ok(mut events) if events.len() == 1 => events.pop().map(Arc::new),
                Ok(_) => None,
                Err(error) => {
                    failure = Some(error);
                    None
                }
            }
        });
        if let Some(error) = failure {
            return Err(error);
        }
        if let Ok(mut fold) = resumed {
            if fold.admission().next_seq() == next_seq {
                fold.set_identity(sessionlog_format::relations::Identity::of(&info.header));
                return Ok(Some(fold));
            }
        }
    }
    Ok(None)
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
    let start = target_start(from, to, session, &info, &source_head)?;
    let mut next_seq = start.next_seq;
    while next_seq < source_head.next_seq {
        let end_seq = source_head
            .next_seq
            .min(next_seq.saturating_add(READ_EVENTS_MAX));
        let events = from.read_range(session, next_seq, end_seq)?;
        if events.is_empty() {
            break;
        }
        let ack = if start.importing {
            to.append_import(session, next_seq, events)?
        } else {
            to.append_events(session, next_seq, events)?
        };
        next_seq = ack.next_seq;
        progress(session, next_seq);
    }
    if start.importing {
        to.finish_import(session)?;
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
        copied_events: next_seq - start.next_seq,
        events: target_head.next_seq,
        head_chain: target_head.chain,
        report,
    })
}

/// Where the copy of a session starts on the target.
struct CopyStart {
    next_seq: u64,
    /// The target's session is an import this copy began (or resumes): it stays hidden until
    /// the copy has appended its last event, so a copy cut short never looks whole.
    importing: bool,
}

/// Where the copy of `session` starts on the target: a new session is created as an import
/// (and an interrupted copy's import is resumed); a finished session on the target resumes
/// after its last event. Either way the target must hold a prefix of the source: its chain at
/// its last seq must be the source's.
fn target_start(
    from: &dyn LogStore,
    to: &dyn LogStore,
    session: &str,
    info: &SessionInfo,
    source_head: &Head,
) -> Result<CopyStart, StoreError> {
    let refused = |reason: String| StoreError::Corrupt {
        reason: format!("{session}: the target already holds a different session: {reason}"),
    };
    let (target_head, importing) = match to.begin_import(&info.header, info.snapshot) {
        Ok(held) => (held, true),
        Err(StoreError::SessionExists { .. }) => {
            let existing = to.session_info(session)?;
            if existing != *info {
                return Err(refused("its header differs".to_owned()));
            }
            (to.head(session)?, false)
        }
        Err(StoreError::ImportMismatch { reason, .. }) => return Err(refused(reason)),
        Err(other) => return Err(other),
    };
    let start = CopyStart {
        next_seq: target_head.next_seq,
        importing,
    };
    let Some(last_seq) = target_head.next_seq.checked_sub(1) else {
        return Ok(start);
    };
    if target_head.next_seq > source_head.next_seq {
        return Err(refused(format!(
            "it holds {} events and the source {}",
            target_head.next_seq, source_head.next_seq
        )));
    }
    let source = from.read_records(session, last_seq, last_seq + 1)?;
    let source_chain = source
        .first()
        .and_then(|r| record::check_record_crc(&r.bytes).ok())
        .map(|h| h.chain);
    if source_chain != Some(target_head.chain) {
        return Err(refused(format!("its chain at seq {last_seq} differs")));
    }
    Ok(start)
}
