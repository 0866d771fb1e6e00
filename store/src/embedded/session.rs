//! One session's state: its header, its warm fold, and the chain hash at its head.
//!
//! Loading resumes from the latest fold checkpoint and folds only the events after it, so a
//! big session reopens in time proportional to the events since the checkpoint (plus reading
//! its live surface nodes).

use crate::types::Head;
use std::sync::Arc;

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};
use sessionlog_format::binary;
use sessionlog_format::fold::{FoldCheckpoint, SessionFold, FOLD_CHECKPOINT_VERSION};
use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::relations::{FactJournal, Identity};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{Event, SessionHeader};

use super::blocks::{self, check_link, Records, BLOCKS};
use super::sealer::Pending;
use super::tables::{
    self, CheckpointRecord, SessionRecord, CHECKPOINTS, EVENTS, FACT_SEGMENTS, KEPT_CHECKPOINTS,
    SESSIONS,
};
use super::StoreError;
use crate::facts::FactsWritten;

pub(crate) struct SessionState {
    pub(crate) key: u64,
    /// A normalized recording (spec 18).
    pub(crate) snapshot: bool,
    /// An import has not finished filling the session (the session record's flag): only the
    /// import reaches it.
    pub(crate) importing: bool,
    pub(crate) header: SessionHeader,
    pub(crate) fold: SessionFold,
    pub(crate) head_chain: ChainHash,
    /// `next_seq` of the latest persisted checkpoint (0: none).
    pub(crate) checkpoint_next_seq: u64,
    /// The fact journal as stored with the session's checkpoints.
    pub(crate) facts: FactsWritten,
    /// What the session appended since it was last hinted to the sealer.
    pub(crate) pending: Pending,
    /// The session was appended to since the store was opened.
    pub(crate) written: bool,
}

/// The rules a session's events follow: those of its version (a decoded record's header names
/// V3 or V4).
pub(crate) fn context_of(record: &SessionRecord) -> RuleContext {
    crate::types::session_context(&record.header, record.snapshot)
}

/// The session's record for a reader: a session an interrupted import left is refused with
/// `ImportInterrupted` (only the import and `verify` read it, through
/// [`stored_session_record`]).
pub(crate) fn session_record(
    txn: &ReadTransaction,
    session: &str,
) -> Result<SessionRecord, StoreError> {
    let record = stored_session_record(txn, session)?;
    if record.importing {
        return Err(StoreError::ImportInterrupted {
            session: session.to_owned(),
        });
    }
    Ok(record)
}

/// The session's record whatever its flags.
pub(crate) fn stored_session_record(
    txn: &ReadTransaction,
    session: &str,
) -> Result<SessionRecord, StoreError> {
    let sessions = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
    let bytes = sessions
        .get(session)
        .map_err(StoreError::storage)?
        .ok_or_else(|| StoreError::UnknownSession {
            session: session.to_owned(),
        })?;
    tables::decode_session(session, bytes.value())
}

impl SessionState {
    /// The sealer's hint for this session, named `session`.
    pub(crate) fn hint(&self, session: &str) -> super::sealer::Hint {
        super::sealer::Hint {
            key: self.key,
            session: session.to_owned(),
            genesis: record::genesis_chain(&self.header),
        }
    }

    pub(crate) fn head(&self) -> Head {
        Head {
            next_seq: self.fold.admission().next_seq(),
            chain: self.head_chain,
        }
    }

    /// Loads a session (an interrupted import too: the caller decides who may use it):
    /// resume from its checkpoint when one is usable, then fold the rest.
    /// The session's state at its head: resumed from its latest checkpoint with the
    /// relationship validator's fact journal left unreplayed (a cold open that only reads never
    /// replays it; the first event the fold admits does, the tail's or an append's), then the
    /// events after the checkpoint. When the journal cannot be replayed, the checkpoint is
    /// unusable and the session is folded from its records.
    pub(crate) fn load(txn: &ReadTransaction, session: &str) -> Result<SessionState, StoreError> {
        match SessionState::load_from(txn, session, Resume::Deferred)? {
            Some(state) => Ok(state),
            None => SessionState::load_from_records(txn, session),
        }
    }

    /// [`SessionState::load`] without its checkpoint: the session folded from its records, and
    /// its fact journal stored again from offset 0 at the next checkpoint.
    pub(crate) fn load_from_records(
        txn: &ReadTransaction,
        session: &str,
    ) -> Result<SessionState, StoreError> {
        SessionState::load_from(txn, session, Resume::Never)
            .map(|state| state.expect("a fold from the records never replays a journal"))
    }

    /// `None` when a deferred resume's journal cannot be replayed before the tail.
    fn load_from(
        txn: &ReadTransaction,
        session: &str,
        resume: Resume,
    ) -> Result<Option<SessionState>, StoreError> {
        let session_record = stored_session_record(txn, session)?;
        let ctx = context_of(&session_record);
        let SessionRecord {
            key,
            header,
            importing,
            ..
        } = session_record;
        let genesis = record::genesis_chain(&header);
        let pending = Pending::load(&txn.open_table(EVENTS).map_err(StoreError::storage)?, key)?;
        let resumed = match resume {
            Resume::Never => None,
            resume => load_checkpoint(txn, session, key, ctx, resume)?,
        };
        let mut state = match resumed {
            Some((fold, chain)) => {
                let next_seq = fold.admission().next_seq();
                let facts = FactsWritten::stored(fold.fact_journal());
                SessionState {
                    key,
                    snapshot: ctx.snapshot,
                    importing,
                    header,
                    fold,
                    head_chain: chain,
                    checkpoint_next_seq: next_seq,
                    facts,
                    pending,
                    written: false,
                }
            }
            None => SessionState {
                key,
                snapshot: ctx.snapshot,
                importing,
                header,
                fold: SessionFold::new(ctx),
                head_chain: genesis,
                checkpoint_next_seq: 0,
                facts: FactsWritten::new(),
                pending,
                written: false,
            },
        };
        state.fold.set_identity(Identity::of(&state.header));
        let from_seq = state.fold.admission().next_seq();
        let mut chain = state.head_chain;
        let mut unusable = false;
        let folded = for_each_record(txn, session, key, from_seq, u64::MAX, &mut chain, |event| {
            let seq = event.seq;
            if state.fold.replay_relations().is_err() {
                unusable = true;
                return Err(StoreError::corrupt_at(
                    session,
                    seq,
                    "the checkpoint's fact journal",
                ));
            }
            state
                .fold
                .admit(Arc::new(event))
                .map_err(|v| StoreError::corrupt_at(session, seq, v))
        });
        if unusable {
            return Ok(None);
        }
        folded?;
        state.head_chain = chain;
        Ok(Some(state))
    }

    /// Stages the checkpoint of the state as it is now into `group`: the latest one, with the
    /// fact segment it names, and a kept one too when it is the first at or past a kept
    /// boundary. Its records are acknowledged already (they are in the WAL or in redb).
    pub(crate) fn stage_checkpoint(
        &mut self,
        group: &mut super::staged::StagedGroup,
    ) -> Result<(), StoreError> {
        let next_seq = self.fold.admission().next_seq();
        let (bytes, segment) = self.encode_checkpoint()?;
        if let Some((start, journal_bytes)) = segment {
            group.fact_segment(self.key, start, &journal_bytes);
        }
        if crate::types::keeps_checkpoint(self.checkpoint_next_seq, next_seq) {
            group.kept_checkpoint(self.key, next_seq, bytes.clone());
        }
        group.checkpoint(self.key, bytes);
        self.checkpoint_next_seq = next_seq;
        Ok(())
    }

    /// Encodes the fold checkpoint record for the state as it is now, with the fact segment
    /// `(start, bytes)` to store beside it (none when the journal did not grow).
    pub(crate) fn encode_checkpoint(
        &mut self,
    ) -> Result<(Vec<u8>, Option<crate::facts::Segment>), StoreError> {
        super::backend::encode_checkpoint(&self.fold, &self.head_chain, &mut self.facts)
    }
}

/// Decodes a checkpoint record's fold checkpoint, its fact journal read through `journal`
/// (the session's first `len` bytes), or says why it cannot be used.
pub(crate) fn decode_checkpoint_body(
    bytes: &[u8],
    facts: impl FnOnce(&mut FactJournal) -> Result<(), String>,
) -> Result<(CheckpointRecord, FoldCheckpoint), String> {
    let (record, raw) = decode_checkpoint_raw(bytes)?;
    let mut checkpoint: FoldCheckpoint = binary::from_slice(&raw).map_err(|e| e.to_string())?;
    facts(&mut checkpoint.relations.facts)?;
    Ok((record, checkpoint))
}

/// The first `len` bytes of session `key`'s fact journal, from its fact segments.
pub(crate) fn read_journal(txn: &ReadTransaction, key: u64, len: u64) -> Result<Vec<u8>, String> {
    with_segment_rows(txn, key, len, |rows| crate::facts::assemble(len, rows))
}

/// The BLAKE3 hash of the first `len` bytes of session `key`'s fact journal, from its fact
/// segments a row at a time ([`crate::facts::journal_hash`]): what `verify` checks a
/// checkpoint's reference against without holding the journal.
pub(crate) fn journal_hash(txn: &ReadTransaction, key: u64, len: u64) -> Result<[u8; 32], String> {
    with_segment_rows(txn, key, len, |rows| crate::facts::journal_hash(len, rows))
}

/// `read` of session `key`'s fact segment rows in offset order, their values not copied;
/// for `len` 0 with no rows, so that a store from before the fact segments (which holds no
/// checkpoint naming a journal) is not asked for their table.
fn with_segment_rows<T>(
    txn: &ReadTransaction,
    key: u64,
    len: u64,
    read: impl FnOnce(&mut dyn Iterator<Item = SegmentRowRead<'_>>) -> Result<T, String>,
) -> Result<T, String> {
    if len == 0 {
        return read(&mut std::iter::empty());
    }
    let segments = txn.open_table(FACT_SEGMENTS).map_err(|e| e.to_string())?;
    let rows = segments
        .range((key, 0)..=(key, u64::MAX))
        .map_err(|e| e.to_string())?;
    read(&mut rows.map(|row| row.map(|(k, v)| (k.value().1, SegmentRow(v)))))
}

/// One fact segment row as [`with_segment_rows`] reads it: its start offset and value.
type SegmentRowRead<'a> = Result<(u64, SegmentRow<'a>), redb::StorageError>;

/// A fact segment row's value as redb reads it, not copied.
struct SegmentRow<'a>(redb::AccessGuard<'a, &'static [u8]>);

impl AsRef<[u8]> for SegmentRow<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.value()
    }
}

/// Whether `bytes` is a whole checkpoint record (its crc holds) of another build's checkpoint
/// version: derived data this build neither reads nor judges, which readers and `verify` pass
/// over as if it were absent (docs/format.md, "Checkpoint record").
pub(crate) fn is_stale_checkpoint(bytes: &[u8]) -> bool {
    tables::decode_checkpoint_header(bytes)
        .is_ok_and(|header| header.version != FOLD_CHECKPOINT_VERSION)
}

/// A checkpoint record's header and its body decompressed (the binary JSON of the fold
/// checkpoint, not decoded), or why it cannot be read; the version is checked.
pub(crate) fn decode_checkpoint_raw(bytes: &[u8]) -> Result<(CheckpointRecord, Vec<u8>), String> {
    let record = tables::decode_checkpoint(bytes)?;
    if record.version != FOLD_CHECKPOINT_VERSION {
        return Err(format!(
            "checkpoint version {} is not this build's {FOLD_CHECKPOINT_VERSION}",
            record.version
        ));
    }
    let raw = zstd::stream::decode_all(record.body.as_slice()).map_err(|e| e.to_string())?;
    Ok((record, raw))
}

/// The fold and head chain from the session's checkpoint, when there is a usable one. A stale
/// (other version) or damaged checkpoint is ignored: the log is the source of truth.
fn load_checkpoint(
    txn: &ReadTransaction,
    session: &str,
    key: u64,
    ctx: RuleContext,
    resume: Resume,
) -> Result<Option<(SessionFold, ChainHash)>, StoreError> {
    let checkpoints = txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
    let Some(bytes) = checkpoints.get(key).map_err(StoreError::storage)? else {
        return Ok(None);
    };
    resume_checkpoint(txn, session, key, ctx, bytes.value(), resume)
}

/// How a load resumes from its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Now, the relationship journal replayed in full (a read at a past seq folds on at once).
    Now,
    /// With the relationship journal left for the first admitted event (a session's load).
    Deferred,
    /// Not at all: the session is folded from its records.
    Never,
}

/// The fold and chain a checkpoint record holds, its live nodes read back from the log; `None`
/// when the record is damaged, of another version, or does not resume to its own `next_seq`.
fn resume_checkpoint(
    txn: &ReadTransaction,
    session: &str,
    key: u64,
    ctx: RuleContext,
    bytes: &[u8],
    resume: Resume,
) -> Result<Option<(SessionFold, ChainHash)>, StoreError> {
    let resolve = |facts: &mut FactJournal| facts.resolve(|len| read_journal(txn, key, len));
    let Ok((record, checkpoint)) = decode_checkpoint_body(bytes, resolve) else {
        return Ok(None);
    };
    let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
    let blocks = txn.open_table(BLOCKS).map_err(StoreError::storage)?;
    let mut records = Records::new(&events, &blocks, session, key);
    let mut failure = None;
    let live_events = |seq| match read_event_unchained(&mut records, session, seq) {
        Ok(event) => Some(Arc::new(event)),
        Err(error) => {
            failure = Some(error);
            None
        }
    };
    let fold = match resume {
        Resume::Deferred => SessionFold::resume_deferred(ctx, checkpoint, live_events),
        Resume::Now | Resume::Never => SessionFold::resume(ctx, checkpoint, live_events),
    };
    if let Some(error) = failure {
        return Err(error);
    }
    match fold {
        Ok(fold) if fold.admission().next_seq() == record.next_seq => {
            Ok(Some((fold, record.chain)))
        }
        _ => Ok(None),
    }
}

/// The kept checkpoint record of session `key` keyed at the greatest seq of at most `end_seq`,
/// with that seq (none in a store from before kept checkpoints).
pub(crate) fn kept_checkpoint_below(
    txn: &ReadTransaction,
    key: u64,
    end_seq: u64,
) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
    let kept = match txn.open_table(KEPT_CHECKPOINTS) {
        Ok(kept) => kept,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(error) => return Err(StoreError::storage(error)),
    };
    let below = kept
        .range((key, 0)..=(key, end_seq))
        .map_err(StoreError::storage)?
        .next_back()
        .transpose()
        .map_err(StoreError::storage)?;
    Ok(below.map(|(stored_key, bytes)| (stored_key.value().1, bytes.value().to_vec())))
}

/// The fold and chain from the nearest checkpoint at or below `end_seq` (the latest one or a
/// kept one) that names the seq it is keyed at and carries the stored chain of its last record;
/// `None` when there is none to use (a store from before kept checkpoints has only its latest
/// one). Both checks read one record, so they run before the resume reads the live nodes.
fn nearest_checkpoint(
    txn: &ReadTransaction,
    session: &str,
    record: &SessionRecord,
    end_seq: u64,
) -> Result<Option<(SessionFold, ChainHash)>, StoreError> {
    let mut candidates: Vec<(Option<u64>, Vec<u8>)> = Vec::with_capacity(2);
    let latest = txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
    if let Some(bytes) = latest.get(record.key).map_err(StoreError::storage)? {
        candidates.push((None, bytes.value().to_vec()));
    }
    if let Some((key, bytes)) = kept_checkpoint_below(txn, record.key, end_seq)? {
        candidates.push((Some(key), bytes));
    }
    let mut usable = Vec::with_capacity(candidates.len());
    for (key, bytes) in candidates {
        let Ok(header) = tables::decode_checkpoint_header(&bytes) else {
            continue;
        };
        let next_seq = header.next_seq;
        if next_seq == 0 || next_seq > end_seq || key.is_some_and(|k| k != next_seq) {
            continue;
        }
        if chain_before(txn, session, record, next_seq)? == header.chain {
            usable.push((next_seq, bytes));
        }
    }
    usable.sort_by_key(|(next_seq, _)| std::cmp::Reverse(*next_seq));
    for (_, bytes) in usable {
        let ctx = context_of(record);
        let resumed = resume_checkpoint(txn, session, record.key, ctx, &bytes, Resume::Now)?;
        if resumed.is_some() {
            return Ok(resumed);
        }
    }
    Ok(None)
}

/// One event by seq, checking its record's crc (its chain is checked by a full walk).
fn read_event_unchained<E, B>(
    records: &mut Records<'_, E, B>,
    session: &str,
    seq: u64,
) -> Result<Event, StoreError>
where
    E: ReadableTable<(u64, u64), &'static [u8]>,
    B: ReadableTable<(u64, u64, u32), &'static [u8]>,
{
    let bytes = records
        .get(seq)?
        .ok_or_else(|| StoreError::corrupt_at(session, seq, "the record is missing"))?;
    let record = bytes.as_ref();
    let header =
        record::check_record_crc(record).map_err(|e| StoreError::corrupt_at(session, seq, e))?;
    record::decode_checked_body(record, &header, seq)
        .map_err(|e| StoreError::corrupt_at(session, seq, e))
}

/// Walks records `from_seq..to_seq` in order, checking crc, chain link and seq density, and
/// calls `f` with each event. `chain` is the chain before `from_seq` and ends at the last one.
/// A walk that ends before `to_seq` must end where the session does ([`check_reached`]), so
/// that no reader (a range read, a fold, a session's load) takes a short walk for a whole one.
pub(crate) fn for_each_record(
    txn: &ReadTransaction,
    session: &str,
    key: u64,
    from_seq: u64,
    to_seq: u64,
    chain: &mut ChainHash,
    mut f: impl FnMut(Event) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
    let blocks = txn.open_table(BLOCKS).map_err(StoreError::storage)?;
    let mut records = Records::new(&events, &blocks, session, key);
    let mut expected_seq = from_seq;
    records.for_each(from_seq, to_seq, usize::MAX, |seq, bytes, link| {
        if seq != expected_seq {
            let message = format!("the record is missing (next is {seq})");
            return Err(StoreError::corrupt_at(session, expected_seq, message));
        }
        expected_seq += 1;
        let header =
            check_link(bytes, chain, link).map_err(|e| StoreError::corrupt_at(session, seq, e))?;
        let event = record::decode_checked_body(bytes, &header, seq)
            .map_err(|e| StoreError::corrupt_at(session, seq, e))?;
        *chain = header.chain;
        f(event)
    })?;
    check_reached(txn, &events, &blocks, session, key, expected_seq, to_seq)
}

/// The chain hash after `seq` as stored in its record (the genesis for `None`).
fn chain_before(
    txn: &ReadTransaction,
    session: &str,
    record: &SessionRecord,
    from_seq: u64,
) -> Result<ChainHash, StoreError> {
    if from_seq == 0 {
        return Ok(record::genesis_chain(&record.header));
    }
    let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
    let blocks = txn.open_table(BLOCKS).map_err(StoreError::storage)?;
    let mut records = Records::new(&events, &blocks, session, record.key);
    let prev_seq = from_seq - 1;
    let bytes = records
        .get(prev_seq)?
        .ok_or_else(|| StoreError::corrupt_at(session, prev_seq, "the record is missing"))?;
    let header = record::check_record_crc(&bytes)
        .map_err(|e| StoreError::corrupt_at(session, prev_seq, e))?;
    Ok(header.chain)
}

pub(crate) fn read_range(
    txn: &ReadTransaction,
    session: &str,
    from_seq: u64,
    to_seq: u64,
) -> Result<Vec<Event>, StoreError> {
    let record = session_record(txn, session)?;
    let mut chain = chain_before(txn, session, &record, from_seq)?;
    let mut out = Vec::new();
    for_each_record(
        txn,
        session,
        record.key,
        from_seq,
        to_seq,
        &mut chain,
        |event| {
            out.push(event);
            Ok(())
        },
    )?;
    Ok(out)
}

/// A walk of the snapshot `txn` that ended at `end_seq`, before `to_seq`, must have met the
/// session's end in that snapshot: past its last block, its last record in the events table
/// and its latest checkpoint (written with the records it covers). Records a damaged table no
/// longer finds (a lost block, a search that lands beside its key) end a walk early as if the
/// session ended there; without this check a short read would pass for a whole one (an
/// export would write a shorter log and succeed).
fn check_reached(
    txn: &ReadTransaction,
    events: &ReadOnlyTable<(u64, u64), &'static [u8]>,
    blocks: &ReadOnlyTable<(u64, u64, u32), &'static [u8]>,
    session: &str,
    key: u64,
    end_seq: u64,
    to_seq: u64,
) -> Result<(), StoreError> {
    if end_seq >= to_seq {
        return Ok(());
    }
    let mut stored_end = blocks::sealed_end_seq(blocks, session, key)?;
    let last_unsealed = events
        .range((key, 0)..=(key, u64::MAX))
        .map_err(StoreError::storage)?
        .next_back();
    if let Some(entry) = last_unsealed {
        let seq = entry.map_err(StoreError::storage)?.0.value().1;
        stored_end = stored_end.max(seq.saturating_add(1));
    }
    let checkpoints = txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
    let checkpoint = checkpoints.get(key).map_err(StoreError::storage)?;
    let header = checkpoint.and_then(|b| tables::decode_checkpoint_header(b.value()).ok());
    if let Some(next_seq) = header.map(|header| header.next_seq) {
        stored_end = stored_end.max(next_seq);
    }
    if end_seq < stored_end.min(to_seq) {
        return Err(StoreError::corrupt_at(
            session,
            end_seq,
            format!("the record is missing (the session's records reach {stored_end})"),
        ));
    }
    Ok(())
}

/// Folds the session through `at_seq` (the head when `None`): from the nearest checkpoint at
/// or below it (see [`nearest_checkpoint`]), or from its start.
/// With `from_start`, every checkpoint is passed over and the fold starts at seq 0.
pub(crate) fn fold_at(
    txn: &ReadTransaction,
    session: &str,
    at_seq: Option<u64>,
    from_start: bool,
) -> Result<SessionFold, StoreError> {
    let record = session_record(txn, session)?;
    let to_seq = at_seq.map_or(u64::MAX, |s| s.saturating_add(1));
    let resumed = match from_start {
        true => None,
        false => nearest_checkpoint(txn, session, &record, to_seq)?,
    };
    let (mut fold, mut chain) = match resumed {
        Some(resumed) => resumed,
        None => (
            SessionFold::new(context_of(&record)),
            record::genesis_chain(&record.header),
        ),
    };
    fold.set_identity(Identity::of(&record.header));
    let from_seq = fold.admission().next_seq();
    for_each_record(
        txn,
        session,
        record.key,
        from_seq,
        to_seq,
        &mut chain,
        |event| {
            let seq = event.seq;
            fold.admit(Arc::new(event))
                .map_err(|v| StoreError::corrupt_at(session, seq, v))
        },
    )?;
    if let Some(at) = at_seq {
        let next_seq = fold.admission().next_seq();
        if next_seq <= at {
            return Err(StoreError::SeqOutOfRange {
                session: session.to_owned(),
                seq: at,
                next_seq,
            });
        }
    }
    Ok(fold)
}
