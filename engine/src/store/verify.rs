//! `verify`: re-read every record of every session and check everything that can be checked.
//!
//! Per record: the crc, the chain link, seq density, the body's decoding, and every admission
//! rule (by folding from scratch). Per session: the persisted fold checkpoint equals the fresh
//! fold at the same seq. A fault does not stop the walk: after a chain break the walk resyncs
//! on the stored chain so that later damage is reported too; after an admission fault the fold
//! is no longer trusted and only the record checks continue.

use std::sync::Arc;

use redb::{ReadTransaction, ReadableDatabase};
use sessionlog_format::fold::{FoldCheckpoint, SessionFold};
use sessionlog_format::record::{self, ChainHash, RecordError};

use super::session::{context_of, decode_checkpoint_body, session_record};
use super::tables::{CHECKPOINTS, EVENTS};
use super::{Store, StoreError};
use crate::log_store::StoredCheckpoint;

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

impl Store {
    /// Verifies the given sessions (every session when empty).
    pub fn verify(&self, sessions: &[String]) -> Result<Vec<SessionReport>, StoreError> {
        let ids = if sessions.is_empty() {
            self.sessions()?
        } else {
            sessions.to_vec()
        };
        super::guard("verifying", || {
            let txn = self
                .db()
                .begin_read()
                .map_err(|e| StoreError::Storage(e.to_string()))?;
            let mut reports: Vec<SessionReport> = ids
                .iter()
                .map(|id| verify_session(&txn, id))
                .collect::<Result<_, _>>()?;
            if sessions.is_empty() {
                check_event_count(&txn, &mut reports)?;
            }
            Ok(reports)
        })
    }
}

fn verify_session(txn: &ReadTransaction, session: &str) -> Result<SessionReport, StoreError> {
    let storage = |e: redb::StorageError| StoreError::Storage(e.to_string());
    let record = match session_record(txn, session) {
        Ok(record) => record,
        Err(StoreError::Corrupt { reason }) => return Ok(Walk::session_fault(session, reason)),
        Err(other) => return Err(other),
    };
    let checkpoint = read_checkpoint(txn, record.key)?;
    let mut walk = Walk::new(
        session,
        record::genesis_chain(&record.header),
        SessionFold::new(context_of(&record)),
        &checkpoint,
    );
    let events = txn
        .open_table(EVENTS)
        .map_err(|e| StoreError::Storage(e.to_string()))?;
    for entry in events
        .range((record.key, 0)..=(record.key, u64::MAX))
        .map_err(storage)?
    {
        let (key, bytes) = entry.map_err(storage)?;
        walk.record(key.value().1, bytes.value());
    }
    Ok(walk.finish(checkpoint))
}

/// redb keeps each table's length apart from its tree: when the walks of all sessions found
/// fewer records than that, damage to the tree's inner pages has hidden some (a lost suffix
/// keeps the chain intact, so no record check can see it). The corruption campaign
/// (RELIABILITY.md) found this case; every session is told, as the damage cannot be placed.
fn check_event_count(
    txn: &ReadTransaction,
    reports: &mut [SessionReport],
) -> Result<(), StoreError> {
    use redb::ReadableTableMetadata;
    let events = txn
        .open_table(EVENTS)
        .map_err(|e| StoreError::Storage(e.to_string()))?;
    let stored = events
        .len()
        .map_err(|e| StoreError::Storage(e.to_string()))?;
    let walked: u64 = reports.iter().map(|r| r.events).sum();
    if stored != walked {
        let message = format!(
            "the events table counts {stored} records but the sessions hold {walked}: \
             damage to the table hides records"
        );
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

fn read_checkpoint(
    txn: &ReadTransaction,
    key: u64,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    let checkpoints = txn
        .open_table(CHECKPOINTS)
        .map_err(|e| StoreError::Storage(e.to_string()))?;
    let Some(bytes) = checkpoints
        .get(key)
        .map_err(|e| StoreError::Storage(e.to_string()))?
    else {
        return Ok(None);
    };
    Ok(Some(
        decode_checkpoint_body(bytes.value()).map(|(r, c)| (r.next_seq, r.chain, c)),
    ))
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
    /// The fresh fold's checkpoint and chain at the stored checkpoint's seq.
    fresh_checkpoint: Option<(FoldCheckpoint, ChainHash)>,
}

impl Walk {
    /// A walk from seq 0, starting at the genesis `chain` with an empty `fold`.
    pub(crate) fn new(
        session: &str,
        chain: ChainHash,
        fold: SessionFold,
        checkpoint: &Option<StoredCheckpoint>,
    ) -> Walk {
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
            checkpoint_next_seq: checkpoint
                .as_ref()
                .and_then(|c| c.as_ref().ok())
                .map(|c| c.0),
            fresh_checkpoint: None,
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

    /// The report, once every record was walked.
    pub(crate) fn finish(mut self, checkpoint: Option<StoredCheckpoint>) -> SessionReport {
        self.report.head_chain = self.chain;
        self.report.events = self.expected_seq;
        check_checkpoint(&mut self, checkpoint);
        self.report
    }

    fn fault(&mut self, seq: u64, kind: FaultKind, message: impl Into<String>) {
        self.report.faults.push(VerifyFault {
            seq: Some(seq),
            kind,
            message: message.into(),
        });
    }

    pub(crate) fn record(&mut self, seq: u64, bytes: &[u8]) {
        if seq != self.expected_seq {
            let message = format!("seqs {}..{seq} are missing", self.expected_seq);
            self.fault(self.expected_seq, FaultKind::Missing, message);
            self.fold = None;
        }
        self.expected_seq = seq + 1;
        let header = match record::check_record_crc(bytes) {
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
        if let Err(error) = record::check_record(bytes, &self.chain) {
            self.fault(seq, FaultKind::Chain, error.to_string());
        }
        self.chain = header.chain;
        let event = match record::decode_checked_body(bytes, &header, seq) {
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
            self.fresh_checkpoint = Some((fold.checkpoint(), self.chain));
        }
    }
}

fn check_checkpoint(walk: &mut Walk, checkpoint: Option<StoredCheckpoint>) {
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
