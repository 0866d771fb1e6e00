//! Kept checkpoints (docs/format.md, "Checkpoint record"): a read at a past seq folds from the
//! nearest kept checkpoint below it and answers what a fold from seq 0 answers, on every
//! backend; `verify` checks each kept checkpoint against the fresh fold and names the damaged
//! ones, which reads then pass over; a store without them (an older build's) still reads.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sessionlog_format::fold::{FoldCheckpoint, SessionFold};
use sessionlog_format::relations::FactJournal;
use sessionlog_format::{Event, SessionHeader};
use sessionlog_store::embedded::verify::FaultKind;
use sessionlog_store::embedded::Store;
use sessionlog_store::log_store::LogStore;
use sessionlog_store::types::{CHECKPOINT_INTERVAL_EVENTS, KEPT_CHECKPOINT_INTERVAL_EVENTS};

use crate::harness::*;
use crate::support::*;

const KEPT: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("kept_checkpoints");
const KEPT_EVENTS: u64 = KEPT_CHECKPOINT_INTERVAL_EVENTS;
/// Past two kept boundaries, with a tail after the second.
const N_EVENTS: u64 = 2 * KEPT_EVENTS + 700;

/// The seqs each test reads at: both sides of each kept boundary, the start and the head.
fn probe_seqs(kept_keys: &[u64]) -> Vec<u64> {
    let mut seqs = vec![
        0,
        1,
        KEPT_EVENTS - 1,
        KEPT_EVENTS,
        N_EVENTS - 2,
        N_EVENTS - 1,
    ];
    for key in kept_keys {
        seqs.extend([key - 2, key - 1, *key, key + 1, key + 517]);
    }
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

/// The fold's checkpoint after each probed seq, folding the events from seq 0.
fn scratch_checkpoints(
    store: &dyn LogStore,
    header: &SessionHeader,
    events: &[Event],
    seqs: &[u64],
) -> Vec<FoldCheckpoint> {
    let mut fold: SessionFold = store.session_info(&header.id).unwrap().fold();
    let mut out = Vec::new();
    for event in events {
        fold.admit(Arc::new(event.clone())).unwrap();
        if seqs.contains(&event.seq) {
            out.push(fold.checkpoint());
        }
    }
    out
}

fn kept_keys(store: &dyn LogStore, id: &str) -> Vec<u64> {
    let keys = store.kept_checkpoint_seqs(id).unwrap();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "ascending: {keys:?}");
    keys
}

/// Asserts that a read at every probed seq equals the fold from seq 0 there.
fn assert_reads(store: &dyn LogStore, header: &SessionHeader, events: &[Event], name: &str) {
    let seqs = probe_seqs(&kept_keys(store, &header.id));
    let expected = scratch_checkpoints(store, header, events, &seqs);
    for (seq, expected) in seqs.iter().zip(expected) {
        let fold = store.fold_at(&header.id, Some(*seq)).unwrap();
        assert_eq!(fold.admission().next_seq(), seq + 1, "{name} at {seq}");
        assert_eq!(fold.checkpoint(), expected, "{name}: the fold at {seq}");
    }
}

// Goal: every backend that keeps checkpoints keeps one per kept interval the session crossed,
// a read at any seq equals a fold from seq 0 there, and verify (the backend's own and the
// generic one) accepts them.
// Method: a generated session of two kept intervals and 700 events; reads on both sides of
// each kept boundary.
#[test]
fn reads_at_past_seqs_fold_from_the_nearest_kept_checkpoint() {
    let (header, batches) = session("kept-reads", N_EVENTS);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    for backend in backends("reads_at_past_seqs_fold_from_the_nearest_kept_checkpoint") {
        let store = backend.store.as_ref();
        append_all(store, &header, &batches);
        let keys = kept_keys(store, &header.id);
        if backend.checkpoints {
            assert_eq!(keys.len(), 2, "{}: {keys:?}", backend.name);
            for (i, key) in keys.iter().enumerate() {
                let boundary = (i as u64 + 1) * KEPT_EVENTS;
                assert!(
                    (boundary..boundary + CHECKPOINT_INTERVAL_EVENTS + 1024).contains(key),
                    "{}: kept checkpoint {i} at {key}",
                    backend.name
                );
            }
        } else {
            assert_eq!(keys, Vec::<u64>::new(), "{}", backend.name);
        }
        assert_reads(store, &header, &events, backend.name);
        let reports = store.verify(std::slice::from_ref(&header.id)).unwrap();
        assert!(reports[0].ok(), "{}: {:?}", backend.name, reports[0].faults);
        let generic =
            sessionlog_store::verify::verify(store, std::slice::from_ref(&header.id)).unwrap();
        assert_eq!(generic, reports, "{}", backend.name);
    }
}

/// A redb store holding the first [`N_EVENTS`] events of a generated session of `seed`, in
/// batches of 512; returns its directory, header and those events, and the events after them
/// (two more kept intervals).
fn redb_session(seed: u64) -> (tempfile::TempDir, SessionHeader, Vec<Event>, Vec<Event>) {
    let (dir, store) = temp_store();
    let (header, batches) = generated(N_EVENTS + 2 * KEPT_EVENTS, seed);
    let mut events: Vec<Event> = batches.into_iter().flatten().collect();
    let rest = events.split_off(N_EVENTS as usize);
    store.create_session(&header).unwrap();
    append_chunks(&store, &header.id, &events);
    drop(store);
    (dir, header, events, rest)
}

fn append_chunks(store: &Store, id: &str, events: &[Event]) {
    for chunk in events.chunks(512) {
        let next_seq = store.head(id).unwrap().next_seq;
        store.append(id, next_seq, chunk.to_vec()).unwrap();
    }
}

/// Runs `edit` on the raw kept checkpoints table of session key 0, behind the store's back.
fn edit_kept(dir: &tempfile::TempDir, edit: impl FnOnce(&mut redb::Table<(u64, u64), &[u8]>)) {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut kept = txn.open_table(KEPT).unwrap();
        edit(&mut kept);
    }
    txn.commit().unwrap();
}

/// The store of `dir` opened read-only after its kept record `key` was replaced by `bytes`.
fn with_kept(dir: &tempfile::TempDir, key: (u64, u64), bytes: &[u8]) -> Store {
    edit_kept(dir, |t| {
        t.insert(key, bytes).unwrap();
    });
    Store::open_read_only(&store_path(dir)).unwrap()
}

fn raw_kept(dir: &tempfile::TempDir) -> Vec<((u64, u64), Vec<u8>)> {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_read().unwrap();
    let kept = txn.open_table(KEPT).unwrap();
    kept.iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value(), value.value().to_vec())
        })
        .collect()
}

fn checkpoint_faults(store: &Store) -> Vec<String> {
    let reports = store.verify(&[]).unwrap();
    assert!(reports[0]
        .faults
        .iter()
        .all(|f| f.kind == FaultKind::Checkpoint && f.seq.is_none()));
    reports[0]
        .faults
        .iter()
        .map(|f| f.message.clone())
        .collect()
}

// Goal: a damaged kept checkpoint, one moved to another key, and one of another session's fold
// are each a checkpoint fault naming its seq, and reads at every seq still equal a fold from
// seq 0 (a read passes over a checkpoint it cannot use).
// Method: flip a byte of the first kept record; then store the second's bytes under the
// first's key; then store another session's record at the same seq under it.
#[test]
fn damaged_kept_checkpoints_are_reported_and_passed_over() {
    let (dir, header, events, _) = redb_session(7);
    let kept = raw_kept(&dir);
    assert_eq!(kept.len(), 2);
    let (first, second) = (kept[0].0, kept[1].0);

    let mut damaged = kept[0].1.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let store = with_kept(&dir, first, damaged.as_slice());
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the kept checkpoint at seq {} cannot be read: checkpoint record checksum mismatch",
            first.1
        )]
    );
    assert_reads(&store, &header, &events, "damaged");
    drop(store);

    let store = with_kept(&dir, first, kept[1].1.as_slice());
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the kept checkpoint keyed at seq {} holds a fold of {} events",
            first.1, second.1
        )]
    );
    assert_reads(&store, &header, &events, "moved");
    drop(store);

    // Another session (another seed) kept a checkpoint at the same seq: its fold and chain are
    // not this session's.
    let (other_dir, _, _, _) = redb_session(11);
    let foreign = raw_kept(&other_dir)
        .into_iter()
        .find(|(key, _)| key.1 == first.1)
        .map(|(_, bytes)| bytes)
        .expect("the other session kept a checkpoint at the same seq");
    let store = with_kept(&dir, first, foreign.as_slice());
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the kept checkpoint at seq {} differs from a fold from scratch",
            first.1
        )]
    );
    assert_reads(&store, &header, &events, "foreign");
}

// Goal: a kept checkpoint past the log's end is reported; a store without the kept table (as
// an older build wrote it) reads and verifies clean, and a writing open creates the table and
// keeps checkpoints from then on.
#[test]
fn a_store_without_kept_checkpoints_reads_and_keeps_them_from_then_on() {
    let (dir, header, events, rest) = redb_session(7);
    let kept = raw_kept(&dir);
    edit_kept(&dir, |t| {
        t.insert((0, N_EVENTS + 5), kept[0].1.as_slice()).unwrap();
    });
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    let faults = checkpoint_faults(&store);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(
        faults[0],
        format!(
            "the kept checkpoint at seq {} is past the log's end",
            N_EVENTS + 5
        )
    );
    drop(store);
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.delete_table(KEPT).unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(kept_keys(&store, &header.id), Vec::<u64>::new());
    assert_reads(&store, &header, &events, "without the table");
    assert!(store.verify(&[]).unwrap()[0].ok());
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    assert_eq!(kept_keys(&store, &header.id), Vec::<u64>::new());
    append_chunks(&store, &header.id, &rest);
    let keys = kept_keys(&store, &header.id);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys[0] >= 3 * KEPT_EVENTS && keys[1] >= 4 * KEPT_EVENTS);
    assert!(store.verify(&[]).unwrap()[0].ok());
}

/// `record` (a checkpoint record) with its fold checkpoint edited by `edit`, re-encoded as a
/// writer encodes it (docs/format.md, "Checkpoint record").
fn with_edited_fold(record: &[u8], edit: impl FnOnce(&mut FoldCheckpoint)) -> Vec<u8> {
    let raw = zstd::stream::decode_all(&record[48..]).unwrap();
    let mut fold: FoldCheckpoint = sessionlog_format::binary::from_slice(&raw).unwrap();
    edit(&mut fold);
    let mut raw = Vec::new();
    sessionlog_format::binary::to_vec(&fold, &mut raw).unwrap();
    let mut bytes = record[..48].to_vec();
    bytes.extend(zstd::stream::encode_all(raw.as_slice(), 3).unwrap());
    let crc = crc32fast::hash(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

// Goal: an older build kept every retry chain in its checkpoints; this one keeps only those a
// later retry can extend. A kept checkpoint holding dead chains (turn 0 never opens) verifies
// clean and reads use it; a change to a live part is still a fault.
// Method: add a dead chain to the first kept record, verify and read; then change its next
// turn number, verify.
#[test]
fn an_older_builds_kept_checkpoint_with_dead_retry_chains_verifies() {
    let (dir, header, events, _) = redb_session(7);
    let kept = raw_kept(&dir);
    let (first, bytes) = kept[0].clone();
    let dead = sessionlog_format::relations::ChainCheckpoint {
        turn: 0,
        step: 1,
        provider: Some("deepseek".to_owned()),
        policy_key: Some("dead".to_owned()),
        last_retry: 2,
        retry_id: "dead-chain".to_owned(),
    };
    let older = with_edited_fold(&bytes, |fold| fold.relations.chains.insert(0, dead));
    assert_ne!(older, bytes);
    let store = with_kept(&dir, first, older.as_slice());
    assert_eq!(checkpoint_faults(&store), Vec::<String>::new());
    assert_reads(&store, &header, &events, "dead chains");
    drop(store);

    let changed = with_edited_fold(&older, |fold| fold.relations.next_turn += 1);
    let store = with_kept(&dir, first, changed.as_slice());
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the kept checkpoint at seq {} differs from a fold from scratch",
            first.1
        )]
    );
}

/// `record` with its version field set to `version`, its crc made good again.
fn with_version(record: &[u8], version: u32) -> Vec<u8> {
    let mut bytes = record.to_vec();
    bytes[4..8].copy_from_slice(&version.to_le_bytes());
    let crc = crc32fast::hash(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

// Goal: checkpoints of another checkpoint version (an older build's, whole and with a good
// crc) are derived data this build passes over: verify reports nothing, reads at every seq
// still equal a fold from seq 0, and the next append writes a current checkpoint.
// Method: restamp the latest and the first kept record as version 2; verify and read
// read-only; then append the rest and read the latest record's version.
#[test]
fn checkpoints_of_an_older_version_are_passed_over() {
    const LATEST: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
    let (dir, header, events, rest) = redb_session(7);
    let kept = raw_kept(&dir);
    let (first, bytes) = kept[0].clone();
    let older = sessionlog_format::fold::FOLD_CHECKPOINT_VERSION - 1;
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut latest = txn.open_table(LATEST).unwrap();
            let record = latest.get(0).unwrap().unwrap().value().to_vec();
            latest
                .insert(0, with_version(&record, older).as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = with_kept(&dir, first, with_version(&bytes, older).as_slice());
    assert_eq!(checkpoint_faults(&store), Vec::<String>::new());
    assert_reads(&store, &header, &events, "older version");
    drop(store);

    let store = Store::open(&store_path(&dir)).unwrap();
    append_chunks(&store, &header.id, &rest);
    drop(store);
    let db = Database::create(store_path(&dir)).unwrap();
    let txn = db.begin_read().unwrap();
    let latest = txn.open_table(LATEST).unwrap();
    let record = latest.get(0).unwrap().unwrap().value().to_vec();
    let version = u32::from_le_bytes(record[4..8].try_into().unwrap());
    assert_eq!(version, sessionlog_format::fold::FOLD_CHECKPOINT_VERSION);
    drop(latest);
    drop(txn);
    drop(db);
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(checkpoint_faults(&store), Vec::<String>::new());
}

const SEGMENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("fact_segments");

fn raw_segments(dir: &tempfile::TempDir) -> Vec<((u64, u64), Vec<u8>)> {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_read().unwrap();
    let segments = txn.open_table(SEGMENTS).unwrap();
    segments
        .iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value(), value.value().to_vec())
        })
        .collect()
}

/// Writes a fact segment row as it stands, over whatever the store holds at `key`.
fn write_segment(dir: &tempfile::TempDir, key: (u64, u64), value: &[u8]) {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(SEGMENTS)
        .unwrap()
        .insert(key, value)
        .unwrap();
    txn.commit().unwrap();
}

// Goal: the validator's fact journal lives in its own segments, checked on every read: a
// damaged segment makes the checkpoint that names it unusable (verify reports it, reads pass
// over it and still equal a fold from seq 0), and a writer that then folds from scratch
// stores the journal again from offset 0, replacing every segment the session had.
// Method: flip a byte of the second segment; verify and read read-only; then append the rest
// and read the segments back.
#[test]
fn a_damaged_fact_segment_is_reported_and_the_journal_rewritten() {
    let (dir, header, events, rest) = redb_session(7);
    let segments = raw_segments(&dir);
    assert!(segments.len() > 2, "{} segments", segments.len());
    assert!(segments.windows(2).all(|w| w[0].0 .1 < w[1].0 .1));
    let (key, mut value) = segments[1].clone();
    let last = value.len() - 1;
    value[last] ^= 1;
    write_segment(&dir, key, &value);
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the checkpoint cannot be read: a fact segment fails its checksum (at offset {})",
            key.1
        )]
    );
    assert_reads(&store, &header, &events, "damaged segment");
    drop(store);

    let store = Store::open(&store_path(&dir)).unwrap();
    append_chunks(&store, &header.id, &rest);
    drop(store);
    let rewritten = raw_segments(&dir);
    assert_eq!(rewritten[0].0, (0, 0));
    assert!(
        rewritten[0].1.len() > segments[0].1.len() + segments[1].1.len(),
        "the first segment holds the journal up to the first checkpoint after the reload"
    );
    assert!(rewritten.iter().all(|(_, value)| value != &segments[1].1));
    assert!(!rewritten.iter().any(|(k, _)| *k == key));
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(checkpoint_faults(&store), Vec::<String>::new());
}

// Goal: verify checks the latest checkpoint's fact journal by its hash, read a segment at a
// time: a segment whose bytes were changed and its checksum made to match is reported as the
// journal the checkpoint does not name, and reads still equal a fold from seq 0.
// Method: flip a byte of the second segment and write its CRC-32 anew; verify read-only.
#[test]
fn a_fact_segment_changed_under_a_good_checksum_fails_the_journals_hash() {
    let (dir, header, events, _) = redb_session(8);
    let segments = raw_segments(&dir);
    assert!(segments.len() >= 2, "{} segments", segments.len());
    let (key, mut value) = segments[1].clone();
    let middle = 4 + (value.len() - 4) / 2;
    value[middle] ^= 1;
    let crc = crc32fast::hash(&value[4..]).to_le_bytes();
    value[..4].copy_from_slice(&crc);
    write_segment(&dir, key, &value);
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    let len = match LogStore::checkpoint(&store, &header.id).unwrap() {
        Some(Err(reason)) => {
            let len = reason
                .strip_prefix("the fact journal's first ")
                .and_then(|rest| rest.strip_suffix(" bytes are not the ones the checkpoint names"))
                .unwrap_or_else(|| panic!("a resolving read refuses it: {reason}"));
            len.parse::<u64>().unwrap()
        }
        other => panic!("a resolving read refuses the checkpoint: {other:?}"),
    };
    assert!(len > key.1, "the journal named reaches the changed segment");
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the checkpoint cannot be read: the fact journal's first {len} bytes are not the ones \
             the checkpoint names"
        )]
    );
    assert_reads(&store, &header, &events, "changed segment");
}

/// The `next_seq` of the session's latest checkpoint in `store`.
fn latest_checkpoint_seq(store: &Store, id: &str) -> u64 {
    match LogStore::checkpoint(store, id).unwrap() {
        Some(Ok((next_seq, _, _))) => next_seq,
        other => panic!("no usable latest checkpoint: {other:?}"),
    }
}

// Goal: a clean close checkpoints every session written since the open at its head, so the
// next open folds no tail after the checkpoint; the closing checkpoints verify, and reads
// near the head still equal a fold from seq 0.
// Method: a session appended in batches of 512 (its last interval checkpoint 700 events below
// the head) and closed; reopen and look at the latest checkpoint; read, close and look again;
// append 10 events (far fewer than the interval), close, and look again.
#[test]
fn a_clean_close_checkpoints_each_written_session_at_its_head() {
    let (dir, header, mut events, rest) = redb_session(12);
    const _: () = assert!(
        N_EVENTS % CHECKPOINT_INTERVAL_EVENTS > 512,
        "a tail to checkpoint"
    );
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(latest_checkpoint_seq(&store, &header.id), N_EVENTS);
    drop(store);
    // 33 checkpoints' fact segments, merged as they grew (store::facts): a few rows, which
    // each merge replaced from its start on.
    let segments = raw_segments(&dir);
    assert!(
        (1..=6).contains(&segments.len()),
        "{} segments",
        segments.len()
    );

    let store = Store::open(&store_path(&dir)).unwrap();
    let messages = store.with_fold(&header.id, |f| f.messages().len()).unwrap();
    assert!(messages > 0);
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    assert_eq!(latest_checkpoint_seq(&store, &header.id), N_EVENTS);

    events.extend_from_slice(&rest[..10]);
    append_chunks(&store, &header.id, &rest[..10]);
    drop(store);
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(latest_checkpoint_seq(&store, &header.id), N_EVENTS + 10);
    assert!(store.verify(&[]).unwrap()[0].ok());
    for seq in [N_EVENTS - 1, N_EVENTS, N_EVENTS + 9] {
        let fold = store.fold_at(&header.id, Some(seq)).unwrap();
        let scratch = store.fold_from_start(&header.id, Some(seq)).unwrap();
        assert!(fold == scratch, "the fold at {seq}");
    }
}

/// Appends `n` to `out` as an unsigned LEB128 varint (the fact journal's integers).
fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

// Goal: a latest checkpoint whose fact journal reads back whole (crc and hash good) but does
// not replay does not stop its session: an open that only reads derives from it without
// replaying, verify reports it, and the first append finds it unusable, folds the session
// from its records and goes on; after the close the journal is rewritten and verify is clean.
// Method: append to the journal a human user message at the session's head seq (no log can
// write one), as a segment of its own, and point the latest checkpoint at the longer journal.
#[test]
fn a_checkpoint_whose_journal_does_not_replay_is_refolded_at_the_first_append() {
    const LATEST: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
    let (dir, header, events, rest) = redb_session(9);
    let segments = raw_segments(&dir);
    let key = segments[0].0 .0;
    let mut journal = Vec::new();
    for ((_, start), value) in &segments {
        journal.truncate(*start as usize);
        journal.extend_from_slice(&value[4..]);
    }
    let mut extra = vec![0x05];
    push_varint(&mut extra, N_EVENTS);
    let bad: Vec<u8> = [journal.as_slice(), &extra].concat();
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut value = crc32fast::hash(&extra).to_le_bytes().to_vec();
            value.extend_from_slice(&extra);
            let mut table = txn.open_table(SEGMENTS).unwrap();
            table
                .insert((key, journal.len() as u64), value.as_slice())
                .unwrap();
            let mut latest = txn.open_table(LATEST).unwrap();
            let record = latest.get(key).unwrap().unwrap().value().to_vec();
            let edited = with_edited_fold(&record, |fold| {
                fold.relations.facts = FactJournal::stored(&bad);
            });
            latest.insert(key, edited.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    let scratch = store.fold_from_start(&header.id, None).unwrap();
    let derived = store.with_fold(&header.id, |f| f.messages().len()).unwrap();
    assert_eq!(derived, scratch.messages().len());
    assert_eq!(
        checkpoint_faults(&store),
        vec![format!(
            "the checkpoint at seq {N_EVENTS} differs from a fold from scratch"
        )],
        "verify reports the journal"
    );
    drop(store);

    let store = Store::open(&store_path(&dir)).unwrap();
    append_chunks(&store, &header.id, &rest[..10]);
    assert_eq!(store.head(&header.id).unwrap().next_seq, N_EVENTS + 10);
    drop(store);
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert!(store.verify(&[]).unwrap()[0].ok());
    let mut all = events;
    all.extend_from_slice(&rest[..10]);
    let fold = store.fold_at(&header.id, None).unwrap();
    assert!(fold == store.fold_from_start(&header.id, None).unwrap());
    assert_eq!(fold.admission().next_seq(), all.len() as u64);
}
