//! The write-behind tail: what appends made durable in the WAL that redb does not hold yet.
//!
//! An append is acknowledged once its WAL frame is synced; its records and checkpoints then
//! wait here instead of going through a redb write transaction on the append's path (the redb
//! insert and commit were over a third of an append's CPU, BENCHMARKS.md). They reach redb in
//! one of two ways, both on the [`Staged::flushing`] lock:
//! - **sealed**: the sealer takes a session's oldest block's worth from here (after whatever
//!   the events table holds below it), compresses it, and commits the block; the records never
//!   enter the events table;
//! - **flushed**: every staged record and checkpoint is inserted into redb in one non-durable
//!   commit. Every read of the store flushes first (`Store::read_txn`), and so does the durable
//!   point (`Store::make_durable`, before the WAL restarts), so that a reader sees redb hold
//!   every acknowledged record, and the WAL is never restarted over a record redb lacks.
//!
//! **Invariant:** a session's records are sealed in blocks below `sealed_end`, in the events
//! table from there, and here above those: every seq in exactly one of the three places, except
//! while a flush or a seal commits (under the lock), after which what they committed leaves
//! this tail. Records are pushed only after their frame is synced, so the tail holds nothing
//! that was not acknowledged; a crash loses it, and the WAL replays it.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{Database, Durability};

use super::tables::{CHECKPOINTS, EVENTS, FACT_SEGMENTS, KEPT_CHECKPOINTS};
use super::{lock, StoreError};

/// Staged bytes past which the writer asks the sealer to flush (sessions that never fill a
/// block would otherwise wait for the durable point, up to a WAL's worth).
pub(crate) const STAGED_BYTES_FLUSH: usize = 8 << 20;

/// One staged record: a range of a buffer that the records of one append request share, so
/// that staging a request makes one allocation, not one per record, and taking a run for a
/// block copies no record. A buffer holds the records of one request of one session only, so
/// it lives no longer than that session's oldest staged record of it: what a slow session
/// stages never keeps another session's records in memory.
#[derive(Debug, Clone)]
pub(crate) struct StagedRecord {
    shared: Arc<[u8]>,
    start: u32,
    end: u32,
}

impl StagedRecord {
    /// The record at `range` of `shared`.
    pub(crate) fn new(shared: &Arc<[u8]>, range: Range<usize>) -> StagedRecord {
        assert!(range.start <= range.end && range.end <= shared.len());
        let offset = |at: usize| u32::try_from(at).expect("a request's records are bounded");
        StagedRecord {
            shared: Arc::clone(shared),
            start: offset(range.start),
            end: offset(range.end),
        }
    }

    /// A record of its own (read from the events table).
    pub(crate) fn owned(bytes: &[u8]) -> StagedRecord {
        StagedRecord::new(&Arc::from(bytes), 0..bytes.len())
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.shared[self.start as usize..self.end as usize]
    }

    pub(crate) fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the two records are ranges of one buffer: records of one append request.
    pub(crate) fn shares_buffer_with(&self, other: &StagedRecord) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl PartialEq for StagedRecord {
    fn eq(&self, other: &StagedRecord) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// What one append group stages once its frame is synced.
#[derive(Debug, Default)]
pub(crate) struct StagedGroup {
    /// `(session key, seq, record)`, each session's in seq order.
    records: Vec<(u64, u64, StagedRecord)>,
    /// `(session key, checkpoint record)`: the latest checkpoint.
    checkpoints: Vec<(u64, Vec<u8>)>,
    /// `(session key, next_seq, checkpoint record)`: kept checkpoints.
    kept: Vec<(u64, u64, Vec<u8>)>,
    /// `(session key, start offset, segment row value)`: fact segments, in order.
    segments: Vec<(u64, u64, Vec<u8>)>,
}

impl StagedGroup {
    pub(crate) fn record(&mut self, key: u64, seq: u64, record: StagedRecord) {
        self.records.push((key, seq, record));
    }

    pub(crate) fn checkpoint(&mut self, key: u64, bytes: Vec<u8>) {
        self.checkpoints.push((key, bytes));
    }

    pub(crate) fn kept_checkpoint(&mut self, key: u64, next_seq: u64, bytes: Vec<u8>) {
        self.kept.push((key, next_seq, bytes));
    }

    /// A fact segment of session `key` starting at journal offset `start`, stored with the
    /// checkpoint that names it; it replaces the session's segments from `start` on.
    pub(crate) fn fact_segment(&mut self, key: u64, start: u64, journal_bytes: &[u8]) {
        let value = crate::facts::encode_segment(journal_bytes);
        self.segments.push((key, start, value));
    }
}

/// One session's staged records: `first_seq..first_seq + records.len()`.
#[derive(Debug, Default)]
struct SessionTail {
    first_seq: u64,
    records: VecDeque<StagedRecord>,
}

#[derive(Debug, Default)]
struct Tail {
    sessions: HashMap<u64, SessionTail>,
    checkpoints: HashMap<u64, Vec<u8>>,
    kept: Vec<(u64, u64, Vec<u8>)>,
    segments: Vec<(u64, u64, Vec<u8>)>,
    bytes: usize,
}

impl Tail {
    fn is_empty(&self) -> bool {
        self.sessions.is_empty()
            && self.checkpoints.is_empty()
            && self.kept.is_empty()
            && self.segments.is_empty()
    }

    fn push_record(&mut self, key: u64, seq: u64, bytes: StagedRecord) {
        self.bytes += bytes.len();
        let tail = self.sessions.entry(key).or_insert_with(|| SessionTail {
            first_seq: seq,
            records: VecDeque::new(),
        });
        debug_assert_eq!(tail.first_seq + tail.records.len() as u64, seq);
        tail.records.push_back(bytes);
    }

    /// Puts back what a failed flush took (`older`), before what was staged since.
    fn restore(&mut self, older: Tail) {
        let newer = std::mem::replace(self, older);
        for (key, tail) in newer.sessions {
            for (i, bytes) in tail.records.into_iter().enumerate() {
                self.push_record(key, tail.first_seq + i as u64, bytes);
            }
        }
        self.checkpoints.extend(newer.checkpoints);
        self.kept.extend(newer.kept);
        self.segments.extend(newer.segments);
    }
}

/// The write-behind tail of a writable store (empty forever in a read-only one).
#[derive(Debug, Default)]
pub(crate) struct Staged {
    tail: Mutex<Tail>,
    /// Held by whoever moves staged records into redb (a flush, a seal) from before it looks at
    /// the tail until its commit is done and the tail forgets what it committed; and by a
    /// reader from its flush until its read transaction has begun.
    flushing: Mutex<()>,
}

impl Staged {
    /// Adds a synced group's records and checkpoints; returns the bytes now staged.
    pub(crate) fn push(&self, group: StagedGroup) -> usize {
        let mut tail = lock(&self.tail);
        for (key, seq, bytes) in group.records {
            tail.push_record(key, seq, bytes);
        }
        for (key, bytes) in group.checkpoints {
            tail.checkpoints.insert(key, bytes);
        }
        tail.kept.extend(group.kept);
        tail.segments.extend(group.segments);
        tail.bytes
    }

    /// Session `key`'s staged records, oldest first.
    #[cfg(test)]
    pub(crate) fn records_of(&self, key: u64) -> Vec<StagedRecord> {
        let tail = lock(&self.tail);
        tail.sessions
            .get(&key)
            .map(|session| session.records.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The lock every move of staged records into redb holds (see [`Staged`]).
    pub(crate) fn flushing(&self) -> MutexGuard<'_, ()> {
        lock(&self.flushing)
    }

    /// Inserts everything staged into redb in one non-durable commit; the caller holds
    /// [`Staged::flushing`]. On a failure nothing leaves the tail.
    pub(crate) fn flush_locked(
        &self,
        db: &Database,
        _flushing: &MutexGuard<'_, ()>,
    ) -> Result<(), StoreError> {
        let taken = std::mem::take(&mut *lock(&self.tail));
        if taken.is_empty() {
            return Ok(());
        }
        match insert(db, &taken) {
            Ok(()) => Ok(()),
            Err(error) => {
                lock(&self.tail).restore(taken);
                Err(error)
            }
        }
    }

    /// Session `key`'s staged records from `from_seq` on while they (with `run_bytes` already
    /// taken) fill at most a block: appended to `run`, which returns whether the block is full.
    /// The caller holds [`Staged::flushing`].
    pub(crate) fn take_run(
        &self,
        key: u64,
        from_seq: u64,
        run: &mut Vec<StagedRecord>,
        run_bytes: &mut usize,
        full: impl Fn(usize, usize) -> bool,
    ) -> bool {
        let tail = lock(&self.tail);
        let Some(session) = tail.sessions.get(&key) else {
            return false;
        };
        let Some(skip) = from_seq.checked_sub(session.first_seq) else {
            return false;
        };
        for bytes in session.records.iter().skip(skip as usize) {
            *run_bytes += bytes.len();
            run.push(bytes.clone());
            if full(run.len(), *run_bytes) {
                return true;
            }
        }
        false
    }

    /// Forgets session `key`'s staged records below `end_seq` (sealed into a block). The
    /// caller holds [`Staged::flushing`].
    pub(crate) fn forget_below(&self, key: u64, end_seq: u64) {
        let mut tail = lock(&self.tail);
        let Some(session) = tail.sessions.get_mut(&key) else {
            return;
        };
        let mut freed = 0;
        while session.first_seq < end_seq {
            let Some(bytes) = session.records.pop_front() else {
                break;
            };
            freed += bytes.len();
            session.first_seq += 1;
        }
        if session.records.is_empty() {
            tail.sessions.remove(&key);
        }
        tail.bytes -= freed;
    }
}

fn insert(db: &Database, tail: &Tail) -> Result<(), StoreError> {
    let mut txn = db.begin_write().map_err(StoreError::storage)?;
    txn.set_durability(Durability::None)
        .map_err(StoreError::storage)?;
    {
        let mut events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
        for (key, session) in &tail.sessions {
            for (i, bytes) in session.records.iter().enumerate() {
                events
                    .insert((*key, session.first_seq + i as u64), bytes.as_slice())
                    .map_err(StoreError::storage)?;
            }
        }
        let mut checkpoints = txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
        for (key, bytes) in &tail.checkpoints {
            checkpoints
                .insert(*key, bytes.as_slice())
                .map_err(StoreError::storage)?;
        }
        let mut kept = txn
            .open_table(KEPT_CHECKPOINTS)
            .map_err(StoreError::storage)?;
        for (key, next_seq, bytes) in &tail.kept {
            kept.insert((*key, *next_seq), bytes.as_slice())
                .map_err(StoreError::storage)?;
        }
        let mut segments = txn.open_table(FACT_SEGMENTS).map_err(StoreError::storage)?;
        for (key, start, value) in &tail.segments {
            // A segment replaces the session's segments from its start on (a merged run, or
            // the journal written again from offset 0 by a writer that refolded).
            segments
                .retain_in((*key, *start)..=(*key, u64::MAX), |_, _| false)
                .map_err(StoreError::storage)?;
            segments
                .insert((*key, *start), value.as_slice())
                .map_err(StoreError::storage)?;
        }
    }
    txn.commit().map_err(StoreError::storage)
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, ReadableTable};

    use super::*;

    fn record(seq: u64) -> Vec<u8> {
        vec![seq as u8; 10 + seq as usize]
    }

    /// The records of `seqs` as one request stages them: ranges of one shared buffer.
    fn group(key: u64, seqs: std::ops::Range<u64>) -> StagedGroup {
        let joined: Vec<u8> = seqs.clone().flat_map(record).collect();
        let shared: Arc<[u8]> = Arc::from(joined);
        let mut group = StagedGroup::default();
        let mut start = 0;
        for seq in seqs {
            let end = start + record(seq).len();
            group.record(key, seq, StagedRecord::new(&shared, start..end));
            start = end;
        }
        group
    }

    fn records(seqs: std::ops::Range<u64>) -> Vec<StagedRecord> {
        seqs.map(|seq| StagedRecord::owned(&record(seq))).collect()
    }

    fn bytes(seqs: std::ops::Range<u64>) -> usize {
        seqs.map(|seq| record(seq).len()).sum()
    }

    // Goal: a run is taken from the seq asked for, stops where a block is full, and what a
    // seal forgets leaves the tail (and its byte count) exactly.
    // Method: stage two sessions, take runs from several seqs with a small "full" bound, forget
    // a prefix of one session and check what is left.
    #[test]
    fn runs_are_taken_in_order_and_forgotten_below_a_seq() {
        let staged = Staged::default();
        assert_eq!(staged.push(group(7, 0..5)), bytes(0..5));
        assert_eq!(staged.push(group(9, 3..6)), bytes(0..5) + bytes(3..6));
        staged.push(group(7, 5..8));

        let mut run = Vec::new();
        let mut run_bytes = 0;
        let full = staged.take_run(7, 2, &mut run, &mut run_bytes, |n, _| n == 4);
        assert!(full);
        assert_eq!(run, records(2..6));
        assert_eq!(run_bytes, bytes(2..6));

        // Not full: everything from the seq on; none before the tail's first seq.
        let (mut run, mut run_bytes) = (Vec::new(), 0);
        assert!(!staged.take_run(9, 3, &mut run, &mut run_bytes, |n, _| n == 4));
        assert_eq!(run.len(), 3);
        let (mut run, mut run_bytes) = (Vec::new(), 0);
        assert!(!staged.take_run(9, 2, &mut run, &mut run_bytes, |_, _| true));
        assert!(run.is_empty());
        assert!(!staged.take_run(8, 0, &mut run, &mut run_bytes, |_, _| true));

        staged.forget_below(7, 6);
        let (mut run, mut run_bytes) = (Vec::new(), 0);
        assert!(!staged.take_run(7, 6, &mut run, &mut run_bytes, |_, _| false));
        assert_eq!(run, records(6..8));
        staged.forget_below(9, 100);
        let tail = lock(&staged.tail);
        assert_eq!(tail.bytes, bytes(6..8));
        assert!(!tail.sessions.contains_key(&9));
    }

    // Goal: a failed flush loses nothing: what it took goes back before what was staged since,
    // and the latest checkpoint of a session stays the newer one.
    // Method: restore an older tail into a newer one and compare with staging both in order.
    #[test]
    fn a_failed_flush_puts_its_records_back_before_newer_ones() {
        let older = Staged::default();
        older.push(group(1, 0..3));
        let mut with_checkpoint = group(2, 0..1);
        with_checkpoint.checkpoint(2, b"old".to_vec());
        with_checkpoint.kept_checkpoint(2, 1, b"kept-old".to_vec());
        older.push(with_checkpoint);
        let taken = std::mem::take(&mut *lock(&older.tail));

        let newer = Staged::default();
        newer.push(group(1, 3..5));
        let mut with_checkpoint = group(2, 1..2);
        with_checkpoint.checkpoint(2, b"new".to_vec());
        newer.push(with_checkpoint);
        lock(&newer.tail).restore(taken);

        let tail = lock(&newer.tail);
        let session = &tail.sessions[&1];
        assert_eq!(session.first_seq, 0);
        assert_eq!(session.records, records(0..5));
        assert_eq!(tail.sessions[&2].records.len(), 2);
        assert_eq!(tail.checkpoints[&2], b"new");
        assert_eq!(tail.kept, vec![(2, 1, b"kept-old".to_vec())]);
        assert_eq!(tail.bytes, bytes(0..5) + bytes(0..2));
    }

    // Goal: a flush inserts every staged record and checkpoint into redb in one commit and
    // leaves the tail empty.
    // Method: flush into a fresh database and read the tables back.
    #[test]
    fn a_flush_moves_everything_into_redb() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let db = Database::create(file.path()).unwrap();
        let staged = Staged::default();
        let mut first = group(4, 0..3);
        first.checkpoint(4, b"c1".to_vec());
        staged.push(first);
        let mut second = group(4, 3..4);
        second.checkpoint(4, b"c2".to_vec());
        second.kept_checkpoint(4, 4, b"k".to_vec());
        staged.push(second);
        let flushing = staged.flushing();
        staged.flush_locked(&db, &flushing).unwrap();
        assert!(lock(&staged.tail).is_empty());
        assert_eq!(lock(&staged.tail).bytes, 0);

        let txn = db.begin_read().unwrap();
        let events = txn.open_table(EVENTS).unwrap();
        for seq in 0..4 {
            let stored = events.get((4, seq)).unwrap().unwrap();
            assert_eq!(stored.value(), record(seq).as_slice());
        }
        assert_eq!(events.iter().unwrap().count(), 4);
        let checkpoints = txn.open_table(CHECKPOINTS).unwrap();
        assert_eq!(checkpoints.get(4).unwrap().unwrap().value(), b"c2");
        let kept = txn.open_table(KEPT_CHECKPOINTS).unwrap();
        assert_eq!(kept.get((4, 4)).unwrap().unwrap().value(), b"k");
        // An empty tail writes nothing.
        staged.flush_locked(&db, &flushing).unwrap();
    }
}
