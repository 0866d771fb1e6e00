//! Sealing: moving a session's full runs of unsealed records into compressed blocks, on a
//! thread of its own so that compression never sits on an append's path.
//!
//! The writer counts what each session appends ([`Pending`]) and, once a block's worth has
//! been committed, hints the session to the [`Sealer`]. The sealer reads the run in a read
//! transaction, compresses it outside any lock, then swaps it in with one non-durable write
//! transaction (the block in, its records out), which the next durable commit persists with
//! everything else. Sealing is a reorganisation, not a write of new data: a crash before the
//! durable commit leaves the records where they were, a crash after it leaves the block, and
//! both read the same bytes. Only the sealer (and, once it has stopped, the closing store)
//! writes blocks or removes records from the events table, so a run read in one transaction
//! is still unsealed when it is swapped in the next.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use sessionlog_format::block::{self, BLOCK_EVENTS_MAX, BLOCK_RAW_BYTES_TARGET};
use sessionlog_format::record::ChainHash;

use super::blocks::{self, corrupt, BLOCKS};

/// The closing store seals a session's unsealed tail when it holds at least this much: a
/// smaller block would compress poorly, and sessions that are opened for a few appends and
/// closed again would pile up tiny blocks.
pub(crate) const TAIL_SEAL_BYTES_MIN: usize = 64 << 10;
use super::tables::EVENTS;
use super::StoreError;

fn storage(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Storage(crate::embedded::StorageFailure::caused_by(error))
}

/// What a session appended since it was last hinted to the sealer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    events: u64,
    bytes: u64,
}

impl Pending {
    /// The backlog of a session as it loads: its records in the events table, all of which
    /// are unsealed (counted over at most one block's worth: more is due in any case).
    pub(crate) fn load(
        events: &impl ReadableTable<(u64, u64), &'static [u8]>,
        key: u64,
    ) -> Result<Pending, StoreError> {
        let mut pending = Pending::default();
        let range = events.range((key, 0)..=(key, u64::MAX)).map_err(storage)?;
        for entry in range.take(BLOCK_EVENTS_MAX) {
            pending.add(entry.map_err(storage)?.1.value().len());
        }
        Ok(pending)
    }

    /// Counts one appended record of `bytes`.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.events += 1;
        self.bytes += bytes as u64;
    }

    /// Whether a block's worth is pending; if so, the count starts again.
    pub(crate) fn take_due(&mut self) -> bool {
        let due =
            self.events >= BLOCK_EVENTS_MAX as u64 || self.bytes >= BLOCK_RAW_BYTES_TARGET as u64;
        if due {
            *self = Pending::default();
        }
        due
    }
}

/// A session to look at: its key, id (for messages) and genesis chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hint {
    pub(crate) key: u64,
    pub(crate) session: String,
    pub(crate) genesis: ChainHash,
}

/// The sealing thread and the channel that feeds it hints.
pub(crate) struct Sealer {
    hints: Option<Sender<Hint>>,
    thread: Option<JoinHandle<()>>,
}

impl Sealer {
    /// A sealer with no thread (hints are dropped): a store before it is fully open.
    pub(crate) fn idle() -> Sealer {
        Sealer {
            hints: None,
            thread: None,
        }
    }

    /// Starts the thread. A storage error while sealing poisons the store (`poisoned`); the
    /// bytes of the records it moves into blocks are added to `moved`.
    pub(crate) fn spawn(
        db: Arc<Database>,
        poisoned: Arc<AtomicBool>,
        moved: Arc<AtomicU64>,
    ) -> Sealer {
        let (hints, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sessionlog-sealer".to_owned())
            .spawn(move || run(&db, &poisoned, &moved, &receiver))
            .ok();
        Sealer {
            hints: Some(hints),
            thread,
        }
    }

    /// Asks the thread to look at a session; ignored once it has stopped.
    pub(crate) fn hint(&self, hint: Hint) {
        if let Some(hints) = &self.hints {
            let _ = hints.send(hint);
        }
    }

    /// Stops the thread after the work in hand, dropping hints not yet taken, and waits.
    pub(crate) fn stop(&mut self) {
        self.hints = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(db: &Database, poisoned: &AtomicBool, moved: &AtomicU64, receiver: &Receiver<Hint>) {
    while let Ok(first) = receiver.recv() {
        // Hints that piled up while the last ones were sealed: each session once.
        let mut sessions = BTreeMap::new();
        for hint in std::iter::once(first).chain(receiver.try_iter()) {
            sessions.insert(hint.key, hint);
        }
        for hint in sessions.values() {
            if poisoned.load(Ordering::SeqCst) {
                return;
            }
            let sealed = super::guard("sealing", || seal_session(db, hint, moved, None));
            if let Err(error) = sealed {
                tracing::error!(session = %hint.session, %error, "sealing failed; the store stops taking writes");
                poisoned.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Seals the full runs of the session's unsealed records into blocks, one transaction each,
/// adding the bytes of the records moved to `moved`; returns how many blocks. With
/// `tail_min`, a last run that does not fill a block is sealed too when it holds at least
/// that many bytes (the closing store, so that a small session is compressed as well). A run
/// that does not chain is corruption.
pub(crate) fn seal_session(
    db: &Database,
    hint: &Hint,
    moved: &AtomicU64,
    tail_min: Option<usize>,
) -> Result<usize, StoreError> {
    let Hint {
        key,
        session,
        genesis,
    } = hint;
    let mut sealed = 0;
    // Where the blocks end, read once: from then on, the block this loop just wrote.
    let (mut first_seq, mut chain_in) = {
        let txn = db.begin_read().map_err(storage)?;
        let blocks_table = txn.open_table(BLOCKS).map_err(storage)?;
        blocks::sealed_end(&blocks_table, session, *key, genesis)?
    };
    loop {
        let run = {
            let txn = db.begin_read().map_err(storage)?;
            let events = txn.open_table(EVENTS).map_err(storage)?;
            let Some(run) = full_run(&events, session, *key, first_seq, tail_min)? else {
                return Ok(sealed);
            };
            run
        };
        let bytes = block::encode_block(first_seq, &chain_in, run.iter().map(Vec::as_slice))
            .map_err(|e| corrupt(session, first_seq, format!("sealing: {e}")))?;
        let mut txn = db.begin_write().map_err(storage)?;
        txn.set_durability(Durability::None).map_err(storage)?;
        {
            let mut blocks_table = txn.open_table(BLOCKS).map_err(storage)?;
            blocks::insert_block(&mut blocks_table, *key, first_seq, &bytes)?;
            let mut events = txn.open_table(EVENTS).map_err(storage)?;
            // One range pass: 17x faster than a remove per key (2.1 ms against 122 us for
            // 1024 records, measured on this machine).
            let end_seq = first_seq + run.len() as u64;
            events
                .retain_in((*key, first_seq)..(*key, end_seq), |_, _| false)
                .map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        let run_bytes: usize = run.iter().map(Vec::len).sum();
        moved.fetch_add(run_bytes as u64, Ordering::SeqCst);
        sealed += 1;
        first_seq += run.len() as u64;
        chain_in.copy_from_slice(&run[run.len() - 1][4..36]);
    }
}

/// The records from `end` that fill one block, or `None` when they do not fill one yet; with
/// `tail_min`, also a run that does not fill a block but holds at least that many bytes.
fn full_run(
    events: &impl ReadableTable<(u64, u64), &'static [u8]>,
    session: &str,
    key: u64,
    end: u64,
    tail_min: Option<usize>,
) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
    let mut run: Vec<Vec<u8>> = Vec::new();
    let mut run_bytes = 0usize;
    let range = events
        .range((key, end)..=(key, u64::MAX))
        .map_err(storage)?;
    for entry in range {
        let (stored_key, bytes) = entry.map_err(storage)?;
        let expected = end + run.len() as u64;
        if stored_key.value().1 != expected {
            return Err(corrupt(session, expected, "sealing: the record is missing"));
        }
        run_bytes += bytes.value().len();
        run.push(bytes.value().to_vec());
        if run.len() == BLOCK_EVENTS_MAX || run_bytes >= BLOCK_RAW_BYTES_TARGET {
            return Ok(Some(run));
        }
    }
    Ok(tail_min.filter(|min| run_bytes >= *min).map(|_| run))
}
