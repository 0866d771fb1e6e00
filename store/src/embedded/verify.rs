//! `verify`: re-read every record of every session and check everything that can be checked.
//!
//! Per record: the crc, the chain link, seq density, the body's decoding, and every admission
//! rule (by folding from scratch). Per session: the persisted fold checkpoint equals the fresh
//! fold at the same seq. A fault does not stop the walk: after a chain break the walk resyncs
//! on the stored chain so that later damage is reported too; after an admission fault the fold
//! is no longer trusted and only the record checks continue.

pub use crate::types::{FaultKind, SessionReport, VerifyFault};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redb::{ReadTransaction, ReadableTable};
use sessionlog_format::fold::{FoldCheckpoint, SessionFold, FOLD_CHECKPOINT_VERSION};
use sessionlog_format::record::{self, ChainHash, RecordError};
use sessionlog_format::skim;

use super::blocks::{self, BLOCKS};
use super::decode_ahead::{BlocksAhead, Decoded};
use super::session::{
    context_of, decode_checkpoint_raw, is_stale_checkpoint, journal_hash, read_journal,
    stored_session_record,
};
use super::tables::{
    self, SessionRecord, CHECKPOINTS, EVENTS, FACT_SEGMENTS, KEPT_CHECKPOINTS, SESSIONS,
};
use super::{DamagedFrame, Store, StoreError};
use crate::log_store::{JournalRead, StoredCheckpoint};
use sessionlog_format::binary;

impl Store {
    /// Verifies the given sessions (every session when empty, interrupted imports included:
    /// each is a fault of kind `import`).
    pub fn verify(&self, sessions: &[String]) -> Result<Vec<SessionReport>, StoreError> {
        let ids = if sessions.is_empty() {
            self.stored_sessions()?
        } else {
            sessions.to_vec()
        };
        super::guard("verifying", || {
            let txn = self.read_txn()?;
            let mut reports = Vec::with_capacity(ids.len());
            let mut walked = TableCounts::default();
            let store_version = super::read_store_version(&txn)?;
            let mut blocks_ahead = BlocksAhead::start(&txn)?;
            // Sessions' records are read up to `SESSIONS_AHEAD` sessions ahead of the walk,
            // and each sound one is announced to the block reader then, so that it reads on
            // into the sessions after the one walked while it has room (`decode_ahead`).
            let mut ahead = SessionsAhead::new(&txn, &ids, &mut blocks_ahead);
            while let Some((id, record)) = ahead.next(&mut blocks_ahead) {
                let (report, counts) =
                    verify_session(&txn, &mut blocks_ahead, id, record, store_version)?;
                reports.push(report);
                walked.events += counts.events;
                walked.parts += counts.parts;
            }
            if sessions.is_empty() {
                check_table_counts(&txn, walked, &mut reports)?;
            }
            add_wal_faults(
                &txn,
                self.damaged_frames(),
                sessions.is_empty(),
                &mut reports,
            )?;
            Ok(reports)
        })
    }
}

/// How many sessions' records the walk reads, and announces to the block reader, ahead of
/// the session it walks. The reader's own bound on what it holds ([`decode_ahead`]) is in
/// blocks and records; this one bounds the headers held.
///
/// [`decode_ahead`]: super::decode_ahead
const SESSIONS_AHEAD: usize = 16;

/// The sessions' records read ahead of the walk, in the order verified.
struct SessionsAhead<'a> {
    txn: &'a ReadTransaction,
    ids: std::slice::Iter<'a, String>,
    read: std::collections::VecDeque<(&'a String, Result<SessionRecord, StoreError>)>,
}

impl<'a> SessionsAhead<'a> {
    fn new(
        txn: &'a ReadTransaction,
        ids: &'a [String],
        blocks_ahead: &mut BlocksAhead,
    ) -> SessionsAhead<'a> {
        let mut ahead = SessionsAhead {
            txn,
            ids: ids.iter(),
            read: std::collections::VecDeque::with_capacity(SESSIONS_AHEAD + 1),
        };
        ahead.fill(blocks_ahead);
        ahead
    }

    /// Reads records until `SESSIONS_AHEAD` are held besides the one walked next, announcing
    /// each sound one.
    fn fill(&mut self, blocks_ahead: &mut BlocksAhead) {
        while self.read.len() <= SESSIONS_AHEAD {
            let Some(id) = self.ids.next() else { return };
            let record = stored_session_record(self.txn, id);
            if let Ok(record) = &record {
                blocks_ahead.announce(record.key);
            }
            self.read.push_back((id, record));
        }
    }

    /// The next session to walk and its record, one more read ahead.
    fn next(
        &mut self,
        blocks_ahead: &mut BlocksAhead,
    ) -> Option<(&'a String, Result<SessionRecord, StoreError>)> {
        let next = self.read.pop_front()?;
        self.fill(blocks_ahead);
        Some(next)
    }
}

/// How many entries of each table a session's walk read.
#[derive(Debug, Default, Clone, Copy)]
struct TableCounts {
    events: u64,
    parts: u64,
}

/// Verifies one session, whose record `stored` the caller read (`stored_session_record`);
/// its blocks come from `blocks_ahead`, to which the caller announced the session when it
/// read a sound record.
fn verify_session(
    txn: &ReadTransaction,
    blocks_ahead: &mut BlocksAhead,
    session: &str,
    stored: Result<SessionRecord, StoreError>,
    store_version: u32,
) -> Result<(SessionReport, TableCounts), StoreError> {
    let mut counts = TableCounts::default();
    let record = match stored {
        Ok(record) => record,
        Err(StoreError::Corrupt { reason }) => {
            return Ok((Walk::session_fault(session, reason), counts))
        }
        Err(other) => return Err(other),
    };
    // The checkpoint's seq now, the checkpoint itself once the walk is done: the read
    // transaction is a snapshot, and the decoded checkpoint (its fact journal with it) is then
    // not held beside the blocks in flight and the fresh fold.
    let checkpoint_next_seq = read_checkpoint_seq(txn, record.key)?;
    let mut walk = Walk::new(
        session,
        record::genesis_chain(&record.header),
        {
            let mut fold = SessionFold::new(context_of(&record));
            fold.set_identity(sessionlog_format::relations::Identity::of(&record.header));
            fold
        },
        checkpoint_next_seq,
        read_kept_checkpoint_seqs(txn, record.key)?,
    );
    let key = record.key;
    let kept_table = match txn.open_table(KEPT_CHECKPOINTS) {
        Ok(kept) => Some(kept),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(StoreError::storage(e)),
    };
    let fetch_kept = |seq: u64| -> Result<Option<Vec<u8>>, StoreError> {
        let Some(kept) = &kept_table else {
            return Ok(None);
        };
        Ok(kept
            .get((key, seq))
            .map_err(StoreError::storage)?
            .map(|bytes| bytes.value().to_vec()))
    };
    let blocks_table = match txn.open_table(BLOCKS) {
        Ok(blocks) => Some(blocks),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(StoreError::storage(e)),
    };
    // The blocks first, each read and decoded ahead of the walk (`decode_ahead`), and each
    // searched for as reads search for it (a walk in order never uses the index's separators).
    let mut last_block = None;
    counts.parts = blocks_ahead.session(key, |decoded| {
        walk.block(decoded);
        if let Some(blocks) = &blocks_table {
            let first_seq = decoded.stored.first_seq;
            let end_seq = decoded.header().map(|header| header.end_seq());
            last_block = Some((first_seq, end_seq));
            if let Some(message) = blocks::search_problem(blocks, key, first_seq, end_seq)? {
                walk.fault(first_seq, FaultKind::Missing, message);
            }
        }
        walk.check_kept(fetch_kept)
    })?;
    if let Some(blocks) = &blocks_table {
        if let Some(message) = blocks::last_block_problem(blocks, key, last_block)? {
            let seq = last_block.map_or(0, |(first_seq, _)| first_seq);
            walk.fault(seq, FaultKind::Missing, message);
        }
    }
    // Then the unsealed records, each searched for as reads search for it.
    let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
    let mut unsealed = None;
    // A run of records whose lookups found nothing is one fault, at the run's first seq, its
    // message widened as the run goes on (the faults stay in seq order).
    let mut not_found: Option<(usize, u64)> = None;
    for entry in events
        .range((key, 0)..=(key, u64::MAX))
        .map_err(StoreError::storage)?
    {
        let (stored_key, bytes) = entry.map_err(StoreError::storage)?;
        let seq = stored_key.value().1;
        counts.events += 1;
        walk.record(seq, bytes.value());
        if blocks::unsealed_found(&events, key, seq)? {
            not_found = None;
        } else if let Some((index, first)) = not_found {
            walk.report.faults[index].message = blocks::unsealed_lookup_fault(first, seq);
        } else {
            not_found = Some((walk.report.faults.len(), seq));
            walk.fault(
                seq,
                FaultKind::Missing,
                blocks::unsealed_lookup_fault(seq, seq),
            );
        }
        let first = unsealed.map_or(seq, |(first, _)| first);
        unsealed = Some((first, seq));
        walk.check_kept(fetch_kept)?;
    }
    if let Some((first, last)) = unsealed {
        if let Some(message) = blocks::unsealed_range_problem(&events, key, first, last)? {
            walk.fault(first, FaultKind::Missing, message);
        }
    }
    // The journal the latest checkpoint names ends where the session's fact segments end.
    let mut journal_len = None;
    let mut report = walk.finish(|| {
        let checkpoint = read_checkpoint(txn, key, JournalRead::ByReference)?;
        journal_len = checkpoint.as_ref().and_then(|stored| {
            let (_, _, fold) = stored.as_ref().ok()?;
            Some(fold.relations.facts.byte_len())
        });
        Ok(checkpoint)
    })?;
    if let Some(len) = journal_len {
        check_segments_end(txn, key, len, &mut report)?;
    }
    let version = context_of(&record).version;
    if store_version < tables::store_version_for(version) {
        report.faults.push(VerifyFault {
            seq: None,
            kind: FaultKind::Session,
            message: format!(
                "a {version} session in a store of version {store_version}: older builds would \
                 read it by the V3 rules (the store's version must be at least {})",
                tables::store_version_for(version)
            ),
        });
    }
    if record.importing {
        report.faults.push(VerifyFault {
            seq: None,
            kind: FaultKind::Import,
            message: format!(
                "an interrupted import: the session holds {} events so far and is hidden from \
                 reads; rerun `sessionlog import FILE` with its log to complete it",
                report.events
            ),
        });
    }
    Ok((report, counts))
}

/// Adds a fault to every session a damaged WAL frame held records of (as far as its payload
/// still shows them): the frame, its offset, and the seqs the store does not hold. A session
/// whose creation was in the frame and that the store does not hold is reported too (when
/// every session is verified).
fn add_wal_faults(
    txn: &ReadTransaction,
    damaged: &[DamagedFrame],
    all_sessions: bool,
    reports: &mut Vec<SessionReport>,
) -> Result<(), StoreError> {
    if damaged.is_empty() {
        return Ok(());
    }
    let sessions_table = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
    let mut ids_by_key = HashMap::new();
    for entry in sessions_table.iter().map_err(StoreError::storage)? {
        let (id, bytes) = entry.map_err(StoreError::storage)?;
        if let Ok(record) = tables::decode_session(id.value(), bytes.value()) {
            ids_by_key.insert(record.key, id.value().to_owned());
        }
    }
    for frame in damaged {
        let what = format!(
            "WAL frame {} at byte offset {} is damaged ({})",
            frame.frame_idx, frame.offset_bytes, frame.reason
        );
        let mut seqs_by_key: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for &(key, seq) in &frame.events {
            let range = seqs_by_key.entry(key).or_insert((seq, seq));
            range.0 = range.0.min(seq);
            range.1 = range.1.max(seq);
        }
        for (key, (first, last)) in seqs_by_key {
            let Some(id) = ids_by_key.get(&key) else {
                continue;
            };
            let Some(report) = reports.iter_mut().find(|r| &r.session == id) else {
                continue;
            };
            let lost = if report.events > last {
                "the store holds them".to_owned()
            } else {
                format!(
                    "the store holds seqs up to {}: seqs {}..={last} are lost",
                    report.events.saturating_sub(1),
                    first.max(report.events)
                )
            };
            report.faults.push(VerifyFault {
                seq: Some(first.max(report.events)),
                kind: FaultKind::Wal,
                message: format!(
                    "{what}: it held seqs {first}..={last}{} of this session; {lost}",
                    if frame.entries_complete {
                        ""
                    } else {
                        " and more that the damage hides"
                    }
                ),
            });
        }
        for record in &frame.session_records {
            let Ok(logged) = tables::logged_session_record(record) else {
                continue;
            };
            let id = logged.header.id;
            if ids_by_key.values().any(|known| known == &id) || !all_sessions {
                continue;
            }
            reports.push(SessionReport {
                session: id,
                events: 0,
                head_chain: [0; 32],
                faults: vec![VerifyFault {
                    seq: None,
                    kind: FaultKind::Wal,
                    message: format!("{what}: it held the creation of this session, which the store does not hold"),
                }],
            });
        }
    }
    Ok(())
}

/// redb keeps each table's length apart from its tree: when the walks of all sessions found
/// fewer entries than that, damage to the tree's inner pages has hidden some (a lost suffix
/// keeps the chain intact, so no record check can see it). The corruption campaign
/// (RELIABILITY.md) found this case; every session is told, as the damage cannot be placed.
fn check_table_counts(
    txn: &ReadTransaction,
    walked: TableCounts,
    reports: &mut [SessionReport],
) -> Result<(), StoreError> {
    use redb::ReadableTableMetadata;
    let events = txn
        .open_table(EVENTS)
        .map_err(StoreError::storage)?
        .len()
        .map_err(StoreError::storage)?;
    let parts = txn
        .open_table(BLOCKS)
        .map_err(StoreError::storage)?
        .len()
        .map_err(StoreError::storage)?;
    let mut messages = Vec::new();
    if events != walked.events {
        messages.push(format!(
            "the events table counts {events} records but the sessions hold {}: \
             damage to the table hides records",
            walked.events
        ));
    }
    if parts != walked.parts {
        messages.push(format!(
            "the blocks table counts {parts} parts but the sessions hold {}: \
             damage to the table hides blocks",
            walked.parts
        ));
    }
    for message in messages {
        for report in reports.iter_mut() {
            report.faults.push(VerifyFault {
                seq: None,
                kind: FaultKind::Missing,
                message: message.clone(),
            });
        }
    }
    Ok(())
}

/// Reports the fact segments of session `key` that reach past `len`, the length of the journal
/// its latest checkpoint names: a segment is written with the checkpoint that names it, so
/// none can.
fn check_segments_end(
    txn: &ReadTransaction,
    key: u64,
    len: u64,
    report: &mut SessionReport,
) -> Result<(), StoreError> {
    let segments = match txn.open_table(FACT_SEGMENTS) {
        Ok(segments) => segments,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(StoreError::storage(e)),
    };
    for entry in segments
        .range((key, 0)..=(key, u64::MAX))
        .map_err(StoreError::storage)?
    {
        let (stored_key, value) = entry.map_err(StoreError::storage)?;
        let start = stored_key.value().1;
        let end = crate::facts::decode_segment(value.value())
            .map_or(u64::MAX, |bytes| start + bytes.len() as u64);
        if end > len {
            report.faults.push(VerifyFault {
                seq: None,
                kind: FaultKind::Checkpoint,
                message: format!(
                    "the fact segment at offset {start} reaches past the {len} bytes of journal \
                     the checkpoint names"
                ),
            });
        }
    }
    Ok(())
}

/// The seqs the session's kept checkpoints are keyed at, ascending (none in a store from before
/// them).
pub(crate) fn read_kept_checkpoint_seqs(
    txn: &ReadTransaction,
    key: u64,
) -> Result<Vec<u64>, StoreError> {
    let kept = match txn.open_table(KEPT_CHECKPOINTS) {
        Ok(kept) => kept,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::storage(e)),
    };
    let mut out = Vec::new();
    for entry in kept
        .range((key, 0)..=(key, u64::MAX))
        .map_err(StoreError::storage)?
    {
        let (stored_key, _) = entry.map_err(StoreError::storage)?;
        out.push(stored_key.value().1);
    }
    Ok(out)
}

/// The session's latest checkpoint, its fact journal read from its fact segments as `journal`
/// says: resolved (an open's read) or by reference, each segment hashed as it is read
/// (`verify`'s, which compares journals by reference and need not hold one that grows with
/// the log). See [`super::backend::stored_checkpoint`].
pub(crate) fn read_checkpoint(
    txn: &ReadTransaction,
    key: u64,
    journal: JournalRead,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    with_checkpoint_record(txn, key, |bytes| {
        super::backend::stored_checkpoint(bytes, |facts| match journal {
            JournalRead::Resolved => facts.resolve(|len| read_journal(txn, key, len)),
            JournalRead::ByReference => facts.check_stored(|len| journal_hash(txn, key, len)),
        })
    })
}

/// The `next_seq` of session `key`'s latest checkpoint, from its record's header (crc and
/// version checked, the body left compressed); `None` when there is none or it is another
/// build's. A body that cannot be decoded is reported when [`Walk::finish`] reads it.
fn read_checkpoint_seq(txn: &ReadTransaction, key: u64) -> Result<Option<u64>, StoreError> {
    with_checkpoint_record(txn, key, |bytes| {
        tables::decode_checkpoint_header(bytes)
            .ok()
            .filter(|header| header.version == FOLD_CHECKPOINT_VERSION)
            .map(|header| header.next_seq)
    })
}

/// `read` of session `key`'s latest checkpoint record, if it has one.
fn with_checkpoint_record<T>(
    txn: &ReadTransaction,
    key: u64,
    read: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<Option<T>, StoreError> {
    let checkpoints = txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
    let bytes = checkpoints.get(key).map_err(StoreError::storage)?;
    Ok(bytes.and_then(|bytes| read(bytes.value())))
}

/// One session's walk: every record in seq order through [`Walk::record`], then
/// [`Walk::finish`] with the stored checkpoint. Shared by the redb verify and the verify of
/// any [`crate::log_store::LogStore`], so both judge records by the same code.
pub(crate) struct Walk {
    report: SessionReport,
    fold: Option<SessionFold>,
    chain: ChainHash,
    expected_seq: u64,
    checkpoint_next_seq: Option<u64>,
    /// The fresh fold's checkpoint and chain at the stored checkpoint's seq, its fact journal
    /// held by reference (length and BLAKE3 hash, as the kept ones compare): a copy of the
    /// journal, which grows with the log, would be held to the end of the walk.
    fresh_checkpoint: Option<(FoldCheckpoint, ChainHash)>,
    /// The seqs of the kept checkpoints not reached yet, descending (the next one due is last).
    kept: Vec<u64>,
    /// Kept checkpoints the walk reached, with the fresh fold's checkpoint and chain there
    /// (`None`: the walk passed the seq without standing on it), until [`Walk::check_kept`]
    /// reads the stored records: a walk never holds more than a block's worth of them.
    /// The fresh checkpoint is held encoded (its binary JSON, as a writer stores it before
    /// compression), which is smaller than the decoded one and compares by bytes: equal states
    /// write equal bytes (docs/format.md, "Checkpoint record").
    kept_due: Vec<(u64, Option<FreshKept>)>,
    /// After a lost block: the next record or block starts the walk again (its seq and chain
    /// are taken as they are), since what was lost is reported already.
    resync: bool,
}

impl Walk {
    /// A walk from seq 0, starting at the genesis `chain` with an empty `fold`.
    pub(crate) fn new(
        session: &str,
        chain: ChainHash,
        fold: SessionFold,
        checkpoint_next_seq: Option<u64>,
        mut kept: Vec<u64>,
    ) -> Walk {
        kept.sort_unstable_by_key(|next_seq| std::cmp::Reverse(*next_seq));
        Walk {
            report: SessionReport {
                session: session.to_owned(),
                events: 0,
                head_chain: [0; 32],
                faults: Vec::new(),
            },
            fold: Some(fold),
            chain,
            expected_seq: 0,
            checkpoint_next_seq,
            fresh_checkpoint: None,
            kept,
            kept_due: Vec::new(),
            resync: false,
        }
    }

    /// The report of a session whose own record cannot be read.
    pub(crate) fn session_fault(session: &str, reason: String) -> SessionReport {
        SessionReport {
            session: session.to_owned(),
            events: 0,
            head_chain: [0; 32],
            faults: vec![VerifyFault {
                seq: None,
                kind: FaultKind::Session,
                message: reason,
            }],
        }
    }

    /// The report, once every record was walked: the stored checkpoint, which `read_checkpoint`
    /// gives, is checked against the fresh fold's. It is read after the fold is dropped.
    pub(crate) fn finish(
        mut self,
        read_checkpoint: impl FnOnce() -> Result<Option<StoredCheckpoint>, StoreError>,
    ) -> Result<SessionReport, StoreError> {
        debug_assert!(self.kept_due.is_empty(), "check_kept runs before finish");
        self.fold = None;
        self.report.head_chain = self.chain;
        self.report.events = self.expected_seq;
        check_checkpoint(&mut self, read_checkpoint()?);
        Ok(self.report)
    }

    fn fault(&mut self, seq: u64, kind: FaultKind, message: impl Into<String>) {
        self.report.faults.push(VerifyFault {
            seq: Some(seq),
            kind,
            message: message.into(),
        });
    }

    /// Walks a sealed block as the block reader (`decode_ahead`) decoded it, its rebuild
    /// finished by the caller where the reader had not ([`Decoded::finish_rebuild`]): each of
    /// its records as [`Walk::record`] does. A block that cannot be decoded is one fault at its
    /// first seq, covering the seqs its header names when it can be read.
    fn block(&mut self, decoded: &mut Decoded) {
        let first_seq = decoded.stored.first_seq;
        self.check_seq(first_seq);
        match &decoded.block {
            Ok(block) => {
                let mut prev_chain = block.header.chain_in;
                for (index, (seq, record)) in block.records().enumerate() {
                    // A body the block's reader decoded ahead is the one this record gives.
                    let body = decoded.bodies.take(index, block.len());
                    self.record_linked(seq, record, Some(&prev_chain), body);
                    prev_chain.copy_from_slice(&record[4..36]);
                }
            }
            Err(error) => {
                let kind = match error {
                    sessionlog_format::block::BlockError::ChecksumMismatch { .. } => {
                        FaultKind::Checksum
                    }
                    sessionlog_format::block::BlockError::ChainOut => FaultKind::Chain,
                    _ => FaultKind::Decode,
                };
                let header = decoded.header();
                let covered = match header {
                    Some(header) => format!("seqs {first_seq}..{}", header.end_seq()),
                    None => format!("seqs from {first_seq}"),
                };
                self.fault(first_seq, kind, format!("the block of {covered}: {error}"));
                self.fold = None;
                self.resync = true;
                self.expected_seq = header.map_or(first_seq, |h| h.end_seq());
            }
        }
    }

    /// Checks that `seq` is the next one expected; after a lost block, takes it as it is.
    fn check_seq(&mut self, seq: u64) {
        if self.resync {
            self.expected_seq = seq;
        }
        if seq != self.expected_seq {
            let message = format!("seqs {}..{seq} are missing", self.expected_seq);
            self.fault(self.expected_seq, FaultKind::Missing, message);
            self.fold = None;
        }
        self.expected_seq = seq;
    }

    pub(crate) fn record(&mut self, seq: u64, bytes: &[u8]) {
        self.record_linked(seq, bytes, None, None);
    }

    /// [`Walk::record`]; `link` is the chain a record rebuilt from a block was rebuilt from,
    /// which stands in for hashing the record again (see `blocks::Records::for_each`), and
    /// `body` the event its body decoded to, when the block's reader decoded it ahead (the
    /// same call on the same bytes: `decode_ahead::Decoded::decode_one_body`).
    fn record_linked(
        &mut self,
        seq: u64,
        bytes: &[u8],
        link: Option<&ChainHash>,
        body: Option<sessionlog_format::Event>,
    ) {
        self.check_seq(seq);
        self.expected_seq = seq + 1;
        let resync = std::mem::take(&mut self.resync);
        // A record rebuilt from a block (`link`) was checked through its block by the
        // block's decoder (`decode_ahead`: the block's crc, the chain to `chain_out`; its own
        // crc is not rebuilt); one from the events table is hashed here.
        let header = match blocks::record_header(bytes, link) {
            Ok(header) => header,
            Err(error) => {
                let kind = match error {
                    RecordError::ChecksumMismatch { .. } => FaultKind::Checksum,
                    _ => FaultKind::Decode,
                };
                self.fault(seq, kind, error.to_string());
                self.fold = None;
                // Resync on the stored chain, so the next record is judged on its own.
                if let Some(stored) = bytes.get(4..36) {
                    self.chain.copy_from_slice(stored);
                }
                return;
            }
        };
        // The record after a lost block: its link cannot be checked, only what follows.
        if !resync {
            if let Err(error) = blocks::check_link_of(bytes, &header, &self.chain, link) {
                self.fault(seq, FaultKind::Chain, error.to_string());
            }
        }
        self.chain = header.chain;
        let decoded = match body {
            Some(event) => Ok(event),
            // Decoded for the rules and dropped: skimmed (`sessionlog_format::skim`).
            None => skim::skimming(true, || record::decode_checked_body(bytes, &header, seq)),
        };
        let event = match decoded {
            Ok(event) => event,
            Err(error) => {
                self.fault(seq, FaultKind::Decode, error.to_string());
                self.fold = None;
                return;
            }
        };
        self.admit(seq, event);
    }

    fn admit(&mut self, seq: u64, event: sessionlog_format::Event) {
        let Some(fold) = self.fold.as_mut() else {
            return;
        };
        if let Err(violation) = fold.admit(Arc::new(event)) {
            self.fault(seq, FaultKind::Admission, violation.to_string());
            self.fold = None;
            return;
        }
        if Some(seq + 1) == self.checkpoint_next_seq {
            let facts = fold.fact_journal_reference();
            self.fresh_checkpoint = Some((fold.checkpoint_with(facts), self.chain));
        }
        while self.kept.last().is_some_and(|key| *key <= seq + 1) {
            let Some(key) = self.kept.pop() else {
                break;
            };
            let fresh = (key == seq + 1).then(|| {
                let mut raw = Vec::new();
                let facts = fold.fact_journal_reference();
                // Encoding a checkpoint fails only on a value binary JSON cannot hold, which a
                // fold never holds; an empty encoding then compares unequal and is reported.
                let _ = sessionlog_format::binary::to_vec(&fold.checkpoint_with(facts), &mut raw);
                (raw, self.chain)
            });
            self.kept_due.push((key, fresh));
        }
        // The fresh fold's journal is only compared by length and hash (above): its bytes are
        // folded into the hash as they come, so that the walk holds none of a journal that
        // grows with the log.
        if fold.unhashed_fact_journal_len() >= FACTS_HASHED_AT {
            fold.hash_fact_journal();
        }
    }

    /// Checks the kept checkpoints the walk reached since the last call against the fresh
    /// fold there; `fetch` reads the stored record keyed at a seq. Callers call it after each
    /// block or batch of records they walk, and before [`Walk::finish`].
    pub(crate) fn check_kept(
        &mut self,
        mut fetch: impl FnMut(u64) -> Result<Option<Vec<u8>>, StoreError>,
    ) -> Result<(), StoreError> {
        for (key, fresh) in std::mem::take(&mut self.kept_due) {
            let Some(bytes) = fetch(key)? else {
                continue;
            };
            if let Some(message) = kept_checkpoint_problem(key, fresh, &bytes) {
                self.report.faults.push(VerifyFault {
                    seq: None,
                    kind: FaultKind::Checkpoint,
                    message,
                });
            }
        }
        Ok(())
    }
}

/// Bytes of the fresh fold's fact journal held before they are folded into its hash.
const FACTS_HASHED_AT: usize = 64 * 1024;

/// The fresh fold at a kept checkpoint's seq: its checkpoint's binary JSON and the chain.
type FreshKept = (Vec<u8>, ChainHash);

/// What is wrong with the kept checkpoint record keyed at `key`, given the fresh fold's
/// checkpoint and chain at that seq (`None`: the walk never stood on it).
fn kept_checkpoint_problem(key: u64, fresh: Option<FreshKept>, bytes: &[u8]) -> Option<String> {
    if is_stale_checkpoint(bytes) {
        return None;
    }
    let cannot_read = |reason: String| {
        Some(format!(
            "the kept checkpoint at seq {key} cannot be read: {reason}"
        ))
    };
    let (record, raw) = match decode_checkpoint_raw(bytes) {
        Ok(decoded) => decoded,
        Err(reason) => return cannot_read(reason),
    };
    let matches =
        matches!(&fresh, Some((fresh_raw, chain)) if *fresh_raw == raw && record.chain == *chain);
    if matches && record.next_seq == key {
        return None;
    }
    // Only a record that does not match is decoded, to tell what is wrong with it.
    let mut stored = match binary::from_slice::<FoldCheckpoint>(&raw) {
        Ok(stored) => stored,
        Err(reason) => return cannot_read(reason.to_string()),
    };
    if record.next_seq == key && matches!(&fresh, Some((_, chain)) if record.chain == *chain) {
        // An older build kept every retry chain; the same state without the dead ones is
        // what this build writes.
        stored.relations.prune_chains();
        let mut canonical = Vec::new();
        let encoded = binary::to_vec(&stored, &mut canonical);
        if encoded.is_ok() && matches!(&fresh, Some((fresh_raw, _)) if *fresh_raw == canonical) {
            return None;
        }
    }
    if record.next_seq != key {
        return Some(format!(
            "the kept checkpoint keyed at seq {key} holds a fold of {} events",
            record.next_seq
        ));
    }
    match fresh {
        None => Some(format!(
            "the kept checkpoint at seq {key} was not reached by the walk"
        )),
        Some(_) => Some(format!(
            "the kept checkpoint at seq {key} differs from a fold from scratch"
        )),
    }
}

fn check_checkpoint(walk: &mut Walk, checkpoint: Option<StoredCheckpoint>) {
    if walk.report.faults.is_empty() {
        for key in walk.kept.iter().rev() {
            walk.report.faults.push(VerifyFault {
                seq: None,
                kind: FaultKind::Checkpoint,
                message: format!("the kept checkpoint at seq {key} is past the log's end"),
            });
        }
    }
    // An older build kept every retry chain; compared without the dead ones, as this build
    // writes it (`RelationsCheckpoint::prune_chains`). Its fact journal was read by reference
    // (`JournalRead::ByReference`; over any backend, `LogStore::checkpoint_by_reference`), as
    // the fresh one's is named.
    let checkpoint = checkpoint.map(|stored| {
        stored.map(|(next_seq, chain, mut fold)| {
            fold.relations.prune_chains();
            (next_seq, chain, fold)
        })
    });
    let problem = match checkpoint {
        None => None,
        Some(Err(reason)) => Some(format!("the checkpoint cannot be read: {reason}")),
        Some(Ok((next_seq, chain, stored))) => match &walk.fresh_checkpoint {
            Some((fresh, fresh_chain)) if *fresh == stored && *fresh_chain == chain => None,
            Some(_) => Some(format!(
                "the checkpoint at seq {next_seq} differs from a fold from scratch"
            )),
            None if walk.report.faults.is_empty() => Some(format!(
                "the checkpoint is at seq {next_seq}, past the log's end"
            )),
            None => None,
        },
    };
    if let Some(message) = problem {
        walk.report.faults.push(VerifyFault {
            seq: None,
            kind: FaultKind::Checkpoint,
            message,
        });
    }
}
