//! `MemStore`: a [`LogStore`] in memory, for tests and for embedders that want the rules
//! without a file.
//!
//! It keeps the same record bytes as every backend (crc, blake3 chain, seq), admits every
//! batch against the session's fold before keeping any of it, and refuses an unfinished
//! import to everyone but the import, so it passes the same conformance suite as the redb and
//! PostgreSQL stores. Nothing outside this module knows it exists: it is the proof that a
//! backend needs only the trait. Nothing survives the process, and it keeps no checkpoints.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use sessionlog_format::fold::SessionFold;
use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::{Event, SessionHeader};

use crate::embedded::{
    admit_expected, check_new_header, AppendAck, AppendRequest, Head, StoreError, BATCH_EVENTS_MAX,
};
use crate::log_store::{LogStore, SessionInfo, StoredCheckpoint, StoredRecord, READ_EVENTS_MAX};
use crate::types::{check_import_resume, FoundImport};

/// A session log store in memory.
#[derive(Debug, Default)]
pub struct MemStore {
    sessions: Mutex<BTreeMap<String, MemSession>>,
}

#[derive(Debug)]
struct MemSession {
    info: SessionInfo,
    fold: SessionFold,
    /// The record bytes, seq `i` at index `i`.
    records: Vec<Vec<u8>>,
    head_chain: ChainHash,
    importing: bool,
}

/// Who asks: only the import may use an unfinished one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    Client,
    Import,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, MemSession>> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on a session as `writer` may see it.
    fn with_session<T>(
        &self,
        session: &str,
        writer: Writer,
        f: impl FnOnce(&mut MemSession) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut sessions = self.lock();
        let state = sessions
            .get_mut(session)
            .ok_or_else(|| StoreError::UnknownSession {
                session: session.to_owned(),
            })?;
        if state.importing && writer == Writer::Client {
            return Err(StoreError::ImportInterrupted {
                session: session.to_owned(),
            });
        }
        f(state)
    }

    fn insert(
        &self,
        header: &SessionHeader,
        snapshot: bool,
        importing: bool,
    ) -> Result<(), StoreError> {
        check_new_header(header, snapshot)?;
        let mut sessions = self.lock();
        if sessions.contains_key(&header.id) {
            return Err(StoreError::SessionExists {
                session: header.id.clone(),
            });
        }
        let info = SessionInfo {
            header: header.clone(),
            snapshot,
        };
        let state = MemSession {
            fold: info.fold(),
            records: Vec::new(),
            head_chain: record::genesis_chain(header),
            importing,
            info,
        };
        sessions.insert(header.id.clone(), state);
        Ok(())
    }

    fn append_by(&self, request: AppendRequest, writer: Writer) -> Result<AppendAck, StoreError> {
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
        self.with_session(&session, writer, |state| {
            // Admission on a copy: a refused batch leaves the fold as it was.
            let mut fold = state.fold.clone();
            let batch = admit_expected(&mut fold, &session, expected_next_seq, events)?;
            let mut chain = state.head_chain;
            let mut records = Vec::with_capacity(batch.len());
            for event in &batch {
                let mut bytes = Vec::new();
                chain =
                    record::encode_event(event, &chain, &mut bytes).map_err(StoreError::storage)?;
                records.push(bytes);
            }
            state.fold = fold;
            state.records.extend(records);
            state.head_chain = chain;
            Ok(AppendAck {
                session: session.clone(),
                first_seq: expected_next_seq,
                next_seq: state.fold.admission().next_seq(),
                head_chain: chain,
            })
        })
    }

    fn ids(&self, importing: bool) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, state)| state.importing == importing)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

fn head(state: &MemSession) -> Head {
    Head {
        next_seq: state.records.len() as u64,
        chain: state.head_chain,
    }
}

/// A seq as an index into the records (clamped: no record sits past `usize::MAX`).
fn index(seq: u64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

impl LogStore for MemStore {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn create_session(&self, header: &SessionHeader, snapshot: bool) -> Result<(), StoreError> {
        self.insert(header, snapshot, false)
    }

    fn sessions(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.ids(false))
    }

    fn interrupted_imports(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.ids(true))
    }

    fn session_info(&self, session: &str) -> Result<SessionInfo, StoreError> {
        self.with_session(session, Writer::Client, |state| Ok(state.info.clone()))
    }

    fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.with_session(session, Writer::Client, |state| Ok(head(state)))
    }

    fn append(&self, request: AppendRequest) -> Result<AppendAck, StoreError> {
        self.append_by(request, Writer::Client)
    }

    fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        self.with_session(session, Writer::Client, |state| {
            let end = index(to_seq).min(state.records.len());
            let start = index(from_seq).min(end);
            let mut chain = match start.checked_sub(1) {
                None => record::genesis_chain(&state.info.header),
                Some(prev) => {
                    record::check_record_crc(&state.records[prev])
                        .map_err(|e| StoreError::corrupt_at(session, prev as u64, e))?
                        .chain
                }
            };
            let mut events = Vec::with_capacity(end - start);
            for (seq, bytes) in (from_seq..).zip(&state.records[start..end]) {
                let (event, next) = record::decode_event(bytes, &chain, seq)
                    .map_err(|e| StoreError::corrupt_at(session, seq, e))?;
                chain = next;
                events.push(event);
            }
            Ok(events)
        })
    }

    fn read_records(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        self.with_session(session, Writer::Client, |state| {
            let end = index(to_seq).min(state.records.len());
            let start = index(from_seq).min(end);
            let end = end.min(start.saturating_add(READ_EVENTS_MAX as usize));
            Ok((from_seq..)
                .zip(&state.records[start..end])
                .map(|(seq, bytes)| StoredRecord {
                    seq,
                    bytes: bytes.clone(),
                })
                .collect())
        })
    }

    /// No checkpoints: a fold starts from the first event.
    fn checkpoint(&self, session: &str) -> Result<Option<StoredCheckpoint>, StoreError> {
        self.with_session(session, Writer::Client, |_| Ok(None))
    }

    fn with_head_fold(
        &self,
        session: &str,
        f: &mut dyn FnMut(&SessionFold),
    ) -> Result<(), StoreError> {
        self.with_session(session, Writer::Client, |state| {
            f(&state.fold);
            Ok(())
        })
    }

    fn verify(&self, sessions: &[String]) -> Result<Vec<crate::types::SessionReport>, StoreError> {
        crate::verify::verify(self, sessions)
    }

    fn begin_import(&self, header: &SessionHeader, snapshot: bool) -> Result<Head, StoreError> {
        match self.insert(header, snapshot, true) {
            Ok(()) | Err(StoreError::SessionExists { .. }) => {}
            Err(other) => return Err(other),
        }
        self.with_session(&header.id, Writer::Import, |state| {
            let found = FoundImport {
                header: &state.info.header,
                snapshot: state.info.snapshot,
                importing: state.importing,
            };
            check_import_resume(found, header, snapshot)?;
            Ok(head(state))
        })
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

    fn finish_import(&self, session: &str) -> Result<(), StoreError> {
        self.with_session(session, Writer::Import, |state| {
            state.importing = false;
            Ok(())
        })
    }
}
