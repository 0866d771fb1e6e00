//! The store's side of an import: the session it creates carries the importing flag until the
//! import has appended its last event, so an import cut short is never taken for a whole
//! session, and a rerun of it finds where it stopped.
//!
//! The flag is set in the creation record (logged in the WAL like every creation) and cleared
//! by rewriting the record in redb and making redb durable at once (`make_durable`), so that a
//! finished import is never undone by a crash. WAL replay accepts a stored record that is the
//! logged creation with only the flag cleared: the store is then ahead of its WAL.

use redb::ReadableTable;
use sessionlog_format::SessionHeader;

use super::tables::{self, SESSIONS};
use super::{lock, AppendAck, AppendRequest, Creation, Store, StoreError, Writer};
use crate::types::Head;
use crate::types::{check_import_resume, FoundImport};

impl Store {
    /// Begins the import of a log with `header`, or resumes the one an earlier run left
    /// unfinished. A new session is created with the importing flag set; a session with the
    /// flag set is resumed when its header and snapshot mode are the log's, and refused with
    /// `ImportMismatch` otherwise; a finished session is `SessionExists`.
    ///
    /// Returns the session's head: a resuming import must find the session's events at the
    /// start of its log (their chain ends at the head's chain) before it appends the rest
    /// with [`Store::append_import`].
    pub fn begin_import(&self, header: &SessionHeader, snapshot: bool) -> Result<Head, StoreError> {
        self.check_new_session(header, snapshot)?;
        {
            let mut wal = lock(&self.wal);
            let wal = wal.as_mut().expect("a writable store has its WAL");
            match self.poison_on_panic("an import's session creation", || {
                self.insert_session(wal, header, snapshot, Creation::Import)
            }) {
                Ok(()) | Err(StoreError::ImportInterrupted { .. }) => {}
                Err(StoreError::Storage(message)) => return Err(self.poison(message)),
                Err(other) => return Err(other),
            }
        }
        let state = self.import_state(&header.id)?;
        let state = lock(&state);
        let found = FoundImport {
            header: &state.header,
            snapshot: state.snapshot,
            importing: state.importing,
        };
        check_import_resume(found, header, snapshot)?;
        Ok(state.head())
    }

    /// Appends one batch to the session of an import begun with [`Store::begin_import`]: the
    /// one writer that may, while the session is unfinished. Every admission rule applies.
    pub fn append_import(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<sessionlog_format::Event>,
    ) -> Result<AppendAck, StoreError> {
        let request = AppendRequest {
            session: session.to_owned(),
            expected_next_seq,
            events,
        };
        self.append_group_by(vec![request], Writer::Import)
            .pop()
            .expect("one result per request")
    }

    /// Finishes an import: clears the session's importing flag and makes it durable (a redb
    /// durable commit, then the WAL restarts), so the session becomes a normal one that no
    /// crash turns back. A session already finished is left as it is.
    pub fn finish_import(&self, session: &str) -> Result<(), StoreError> {
        // A session held whole in its staged tail (too short for the sealer to have sealed a
        // block of it) is sealed now, as the close would seal it: else the durable commit below
        // flushes all of it plain into the events table, and the close seals it from there,
        // leaving its pages free for the compaction. A longer session's tail is left to the
        // close: sealed here, its block would take fresh pages at the end of the file, where
        // the close's sealing reuses the pages the durable commit frees (BENCHMARKS.md, "Late
        // morning on 2026-12-05").
        let tail = self.import_state(session).ok().and_then(|state| {
            let state = lock(&state);
            state.importing.then(|| state.hint(session))
        });
        if let Some(hint) = tail {
            if self.nothing_sealed(&hint)? {
                self.sealer.seal_tail(hint);
            }
        }
        // After the sealing, which may have stopped the store's writes.
        self.check_writable()?;
        let mut wal = lock(&self.wal);
        let wal = wal.as_mut().expect("a writable store has its WAL");
        let state = self.import_state(session)?;
        if !lock(&state).importing {
            return Ok(());
        }
        self.written
            .store(true, std::sync::atomic::Ordering::SeqCst);
        match self.clear_import_flag(wal, session) {
            Ok(()) => {
                let mut state = lock(&state);
                assert!(
                    state.importing,
                    "the write lock is held: nobody else finished it"
                );
                state.importing = false;
                Ok(())
            }
            Err(StoreError::Storage(message)) => Err(self.poison(message)),
            Err(other) => Err(other),
        }
    }

    /// Whether no block of the session is sealed yet, as redb holds it now (without the flush
    /// of the staged tail that a read transaction of the store makes).
    fn nothing_sealed(&self, hint: &super::sealer::Hint) -> Result<bool, StoreError> {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().map_err(StoreError::storage)?;
        let blocks = txn
            .open_table(super::blocks::BLOCKS)
            .map_err(StoreError::storage)?;
        let last =
            super::blocks::block_start_at_or_before(&blocks, &hint.session, hint.key, u64::MAX)?;
        Ok(last.is_none())
    }

    /// Rewrites the session's record without the importing flag (the only change WAL replay
    /// accepts between a logged creation and a stored record), then makes redb durable.
    fn clear_import_flag(&self, wal: &mut super::Wal, session: &str) -> Result<(), StoreError> {
        let mut txn = self.db.begin_write().map_err(StoreError::storage)?;
        txn.set_durability(redb::Durability::None)
            .map_err(StoreError::storage)?;
        {
            let mut sessions = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
            let stored = sessions
                .get(session)
                .map_err(StoreError::storage)?
                .map(|bytes| bytes.value().to_vec())
                .ok_or_else(|| StoreError::UnknownSession {
                    session: session.to_owned(),
                })?;
            tables::decode_session(session, &stored)?;
            let finished =
                tables::with_import_finished(&stored).ok_or_else(|| StoreError::Corrupt {
                    reason: format!("session {session} record: the importing flag is not set"),
                })?;
            sessions
                .insert(session, finished.as_slice())
                .map_err(StoreError::storage)?;
        }
        txn.commit().map_err(StoreError::storage)?;
        self.make_durable_waiting(wal)
    }
}
