//! The embedded store as a [`LogStore`], and the checkpoint record codec other backends share.

use sessionlog_format::fold::SessionFold;
use sessionlog_format::record::ChainHash;
use sessionlog_format::relations::FactJournal;
use sessionlog_format::{binary, Event, SessionHeader};

use super::blocks::{Records, BLOCKS};
pub(crate) use super::session::is_stale_checkpoint;
use super::session::{decode_checkpoint_body, read_journal, session_record};
use super::tables::{self, CheckpointRecord, EVENTS};
use super::verify::SessionReport;
use super::{guard, AppendAck, AppendRequest, DamagedFrame, Head, Store, StoreError};
use crate::facts::FactsWritten;
use crate::log_store::{
    JournalRead, LogStore, SessionInfo, StoredCheckpoint, StoredRecord, READ_EVENTS_MAX,
};

/// zstd level of checkpoint bodies (as the redb store writes them).
const CHECKPOINT_ZSTD_LEVEL: i32 = 3;

impl LogStore for Store {
    fn backend_name(&self) -> &'static str {
        "redb"
    }

    /// redb holds an exclusive lock on its file: every append goes through this process.
    fn is_shared(&self) -> bool {
        false
    }

    fn create_session(&self, header: &SessionHeader, snapshot: bool) -> Result<(), StoreError> {
        self.create_session_with(header, snapshot)
    }

    fn sessions(&self) -> Result<Vec<String>, StoreError> {
        Store::sessions(self)
    }

    fn interrupted_imports(&self) -> Result<Vec<String>, StoreError> {
        Store::interrupted_imports(self)
    }

    fn session_info(&self, session: &str) -> Result<SessionInfo, StoreError> {
        guard("reading a session record", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            Ok(SessionInfo {
                header: record.header,
                snapshot: record.snapshot,
            })
        })
    }

    fn head(&self, session: &str) -> Result<Head, StoreError> {
        Store::head(self, session)
    }

    fn append(&self, request: AppendRequest) -> Result<AppendAck, StoreError> {
        Store::append_group(self, vec![request])
            .pop()
            .expect("one result per request")
    }

    /// One WAL fsync for the whole group.
    fn groups_commits(&self) -> bool {
        true
    }

    fn append_group(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendAck, StoreError>> {
        Store::append_group(self, requests)
    }

    fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        Store::read_range(self, session, from_seq, to_seq)
    }

    fn read_records(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        guard("reading records", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
            let blocks = txn.open_table(BLOCKS).map_err(StoreError::storage)?;
            let mut records = Records::new(&events, &blocks, session, record.key);
            let mut out = Vec::new();
            let limit = READ_EVENTS_MAX as usize;
            records.for_each(from_seq, to_seq.max(from_seq), limit, |seq, bytes, _| {
                out.push(StoredRecord {
                    seq,
                    bytes: bytes.to_vec(),
                });
                Ok(())
            })?;
            Ok(out)
        })
    }

    fn checkpoint(&self, session: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        guard("reading a checkpoint", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            super::verify::read_checkpoint(&txn, record.key, JournalRead::Resolved)
        })
    }

    fn checkpoint_by_reference(
        &self,
        session: &str,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        guard("reading a checkpoint", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            super::verify::read_checkpoint(&txn, record.key, JournalRead::ByReference)
        })
    }

    fn kept_checkpoint_seqs(&self, session: &str) -> Result<Vec<u64>, StoreError> {
        guard("reading the kept checkpoints", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            super::verify::read_kept_checkpoint_seqs(&txn, record.key)
        })
    }

    fn fact_journal(&self, session: &str, len: u64) -> Result<Vec<u8>, StoreError> {
        guard("reading the fact journal", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            read_journal(&txn, record.key, len).map_err(|reason| StoreError::Corrupt {
                reason: format!("{session}: {reason}"),
            })
        })
    }

    fn kept_checkpoint_below(
        &self,
        session: &str,
        end_seq: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        guard("reading a kept checkpoint", || {
            let txn = self.read_txn()?;
            let record = session_record(&txn, session)?;
            super::session::kept_checkpoint_below(&txn, record.key, end_seq)
        })
    }

    /// The head from the warm fold; an earlier seq folded from the nearest checkpoint below.
    fn fold_at(&self, session: &str, at_seq: Option<u64>) -> Result<SessionFold, StoreError> {
        match at_seq {
            None => self.with_fold(session, SessionFold::clone),
            Some(at) => Store::fold_at(self, session, Some(at)),
        }
    }

    /// The warm fold, lent under the session's lock.
    fn with_head_fold(
        &self,
        session: &str,
        f: &mut dyn FnMut(&SessionFold),
    ) -> Result<(), StoreError> {
        self.with_fold(session, |fold| f(fold))
    }

    fn begin_import(&self, header: &SessionHeader, snapshot: bool) -> Result<Head, StoreError> {
        Store::begin_import(self, header, snapshot)
    }

    fn append_import(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError> {
        Store::append_import(self, session, expected_next_seq, events)
    }

    fn finish_import(&self, session: &str) -> Result<(), StoreError> {
        Store::finish_import(self, session)
    }

    fn damaged_frames(&self) -> Vec<DamagedFrame> {
        Store::damaged_frames(self).to_vec()
    }

    /// The redb verify: the generic walk's checks plus the events table's own count.
    fn verify(&self, sessions: &[String]) -> Result<Vec<SessionReport>, StoreError> {
        Store::verify(self, sessions)
    }
}

/// Encodes the checkpoint record of `fold` whose last record has chain hash `chain`: the same
/// bytes the redb store keeps (docs/format.md, "Store"). Its fact journal is named by length
/// and hash; the segment `(start, bytes)` returned (none when the journal did not grow) is
/// stored with it, and `facts` moves on past it.
pub(crate) fn encode_checkpoint(
    fold: &SessionFold,
    chain: &ChainHash,
    facts: &mut FactsWritten,
) -> Result<(Vec<u8>, Option<crate::facts::Segment>), StoreError> {
    let (reference, segment) = facts.advance(fold.fact_journal());
    let checkpoint = fold.checkpoint_with(reference);
    let mut raw = Vec::new();
    binary::to_vec(&checkpoint, &mut raw).map_err(StoreError::storage)?;
    let body = zstd::bulk::compress(&raw, CHECKPOINT_ZSTD_LEVEL).map_err(StoreError::storage)?;
    let record = CheckpointRecord {
        version: checkpoint.version,
        next_seq: fold.admission().next_seq(),
        chain: *chain,
        body,
    };
    Ok((tables::encode_checkpoint(&record), segment))
}

/// A session's latest checkpoint record as the readers and `verify` see it: `None` for one of
/// another checkpoint version (an older build's derived data, passed over), else the record
/// decoded by [`decode_checkpoint_with`], `facts` given its fact journal (a reference, unless
/// an older build wrote the bytes inline) to resolve or check.
pub(crate) fn stored_checkpoint(
    bytes: &[u8],
    facts: impl FnOnce(&mut FactJournal) -> Result<(), String>,
) -> Option<StoredCheckpoint> {
    (!is_stale_checkpoint(bytes)).then(|| decode_checkpoint_with(bytes, facts))
}

/// Decodes a checkpoint record into `(next_seq, chain, checkpoint)`, its fact journal read
/// through `journal` (the session's first `len` bytes), or says why it cannot.
pub(crate) fn decode_checkpoint(
    bytes: &[u8],
    journal: impl FnOnce(u64) -> Result<Vec<u8>, String>,
) -> StoredCheckpoint {
    decode_checkpoint_with(bytes, |facts| facts.resolve(journal))
}

/// [`decode_checkpoint`], `facts` given the decoded fact journal to resolve
/// ([`FactJournal::resolve`]) or check ([`FactJournal::check_stored`]).
pub(crate) fn decode_checkpoint_with(
    bytes: &[u8],
    facts: impl FnOnce(&mut FactJournal) -> Result<(), String>,
) -> StoredCheckpoint {
    decode_checkpoint_body(bytes, facts).map(|(record, checkpoint)| {
        debug_assert_eq!(record.next_seq, checkpoint.next_seq);
        (record.next_seq, record.chain, checkpoint)
    })
}
