//! Sealed blocks: records read back byte for byte from blocks and the events table alike,
//! verify finds damage inside blocks, a version 1 store is upgraded and sealed, and the WAL
//! replays records that were sealed before a crash.

use pretty_assertions::assert_eq;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use sessionlog_format::fold::SessionFold;
use sessionlog_format::record::{self, BodyEncoding, ChainHash};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{Event, FormatVersion, SessionHeader};
use sessionlog_store::embedded::verify::FaultKind;
use sessionlog_store::embedded::{Store, StoreError};
use sessionlog_store::log_store::{LogStore, READ_EVENTS_MAX};

use crate::harness::append_all;
use crate::support::*;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
const BLOCKS: TableDefinition<(u64, u64, u32), &[u8]> = TableDefinition::new("blocks");

const N_EVENTS: u64 = 5000;
/// Small events appended after a reopen: too few bytes for the close to seal them.
const TAIL_EVENTS: u64 = 6;
/// Every event of a filled store.
const TOTAL: u64 = N_EVENTS + TAIL_EVENTS;

/// A closed store holding one generated session of `n` events, then (after a reopen)
/// [`TAIL_EVENTS`] small ones, which stay unsealed; and all those events.
fn filled(n: u64) -> (tempfile::TempDir, SessionHeader, Vec<Event>) {
    let (dir, store) = temp_store();
    let (header, batches) = generated(n, 4);
    store.create_session(&header).unwrap();
    let mut next_seq = 0;
    let mut events = Vec::new();
    for batch in batches {
        let len = batch.len() as u64;
        events.extend(batch.iter().cloned());
        store.append(&header.id, next_seq, batch).unwrap();
        next_seq += len;
    }
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    let tail: Vec<Event> = (next_seq..next_seq + TAIL_EVENTS).map(title).collect();
    store.append(&header.id, next_seq, tail.clone()).unwrap();
    events.extend(tail);
    (dir, header, events)
}

/// The records of `events` as this build encodes them, chained from the genesis.
fn encoded(header: &SessionHeader, events: &[Event], encoding: BodyEncoding) -> Vec<Vec<u8>> {
    let mut chain = record::genesis_chain(header);
    events
        .iter()
        .map(|event| {
            let mut bytes = Vec::new();
            chain = record::encode_event_with(event, &chain, &mut bytes, encoding).unwrap();
            bytes
        })
        .collect()
}

/// Every stored record of `session`, through the backend-neutral read.
fn stored_records(store: &Store, session: &str, next_seq: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut from_seq = 0;
    while from_seq < next_seq {
        let to_seq = next_seq.min(from_seq + READ_EVENTS_MAX);
        let records = LogStore::read_records(store, session, from_seq, to_seq).unwrap();
        assert_eq!(records.first().map(|r| r.seq), Some(from_seq));
        out.extend(records.into_iter().map(|r| r.bytes));
        from_seq = to_seq;
    }
    out
}

/// The block first_seqs of session key 0, in order, and the events table's length.
fn layout(dir: &tempfile::TempDir) -> (Vec<u64>, u64) {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_read().unwrap();
    let blocks = txn.open_table(BLOCKS).unwrap();
    let mut starts: Vec<u64> = Vec::new();
    for entry in blocks.iter().unwrap() {
        let (key, _) = entry.unwrap();
        let (_, first_seq, _) = key.value();
        if starts.last() != Some(&first_seq) {
            starts.push(first_seq);
        }
    }
    let events = txn.open_table(EVENTS).unwrap().len().unwrap();
    (starts, events)
}

/// Runs `edit` on the blocks table of the closed store in `dir`.
fn edit_blocks(
    dir: &tempfile::TempDir,
    edit: impl FnOnce(&mut redb::Table<(u64, u64, u32), &[u8]>),
) {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut blocks = txn.open_table(BLOCKS).unwrap();
        edit(&mut blocks);
    }
    txn.commit().unwrap();
}

fn faults(dir: &tempfile::TempDir) -> Vec<(Option<u64>, FaultKind, String)> {
    let store = Store::open(&store_path(dir)).unwrap();
    let reports = store.verify(&[]).unwrap();
    let faults = reports[0].faults.iter();
    faults.map(|f| (f.seq, f.kind, f.message.clone())).collect()
}

// Goal: a long session is sealed into blocks that tile its oldest seqs, and every way of
// reading it (raw records, events by range, folds at any seq, a cold reopen, verify) gives
// exactly what was appended.
// Method: append 5000 generated events; read the layout from redb; compare the stored records
// with a fresh encoding of the events, ranges across block boundaries with the events, and
// folds at seqs inside blocks and in the tail with folds of the events.
#[test]
fn sealed_records_read_back_byte_for_byte() {
    let (dir, header, events) = filled(N_EVENTS);
    let (starts, unsealed) = layout(&dir);
    // The close seals a tail of 64 KiB or more; the small events after the reopen stay.
    assert!(
        (TAIL_EVENTS..1024).contains(&unsealed),
        "{unsealed} unsealed records"
    );
    assert!(starts.len() >= 4, "{starts:?}");
    assert_eq!(starts[0], 0);

    let store = Store::open(&store_path(&dir)).unwrap();
    let id = header.id.as_str();
    assert_eq!(store.head(id).unwrap().next_seq, TOTAL);
    let expected = encoded(&header, &events, BodyEncoding::Plain);
    assert_eq!(stored_records(&store, id, TOTAL), expected);
    let head = record::check_record_crc(expected.last().unwrap()).unwrap();
    assert_eq!(store.head(id).unwrap().chain, head.chain);

    let boundary = starts[1];
    let across = store.read_range(id, boundary - 3, boundary + 3).unwrap();
    assert_eq!(
        across,
        events[boundary as usize - 3..boundary as usize + 3].to_vec()
    );
    let tail_start = TOTAL - unsealed;
    let across = store
        .read_range(id, tail_start - 2, tail_start + 2)
        .unwrap();
    assert_eq!(
        across,
        events[tail_start as usize - 2..tail_start as usize + 2].to_vec()
    );
    assert_eq!(store.read_range(id, 0, TOTAL).unwrap(), events);
    assert_eq!(store.read_range(id, TOTAL, TOTAL + 5).unwrap(), vec![]);
    let last_block = *starts.last().unwrap() as usize;
    let from_last = store.read_range(id, last_block as u64, TOTAL).unwrap();
    assert_eq!(from_last, events[last_block..].to_vec());

    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot: false,
    };
    for at in [
        5,
        boundary - 1,
        boundary,
        starts[2] + 17,
        tail_start,
        TOTAL - 1,
    ] {
        let mut fold = SessionFold::new(ctx);
        for event in &events[..=at as usize] {
            fold.admit(std::sync::Arc::new(event.clone())).unwrap();
        }
        let stored = store.fold_at(id, Some(at)).unwrap();
        assert_eq!(stored.messages(), fold.messages(), "at seq {at}");
    }
    let reports = store.verify(&[]).unwrap();
    assert_eq!(reports[0].faults, vec![]);
    assert_eq!(reports[0].events, TOTAL);
    assert_eq!(reports[0].head_chain, head.chain);
}

// Goal: one damaged part of a block is one checksum fault at the block's first seq, naming
// the seqs it covers, and the walk goes on: later blocks and the unsealed tail are still
// checked (damage there is found too) and nothing after the block is blamed.
// Method: flip a byte of the second part of the second block and of one unsealed record.
#[test]
fn a_damaged_block_is_one_fault_and_the_walk_goes_on() {
    let (dir, _, _) = filled(N_EVENTS);
    let (starts, unsealed) = layout(&dir);
    let (second, third) = (starts[1], starts[2]);
    edit_blocks(&dir, |blocks| {
        let mut bytes = blocks
            .get((0, second, 1))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        bytes[100] ^= 0x04;
        blocks.insert((0, second, 1), bytes.as_slice()).unwrap();
    });
    let tail_seq = TOTAL - unsealed / 2 - 1;
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut events = txn.open_table(EVENTS).unwrap();
            let mut bytes = events.get((0, tail_seq)).unwrap().unwrap().value().to_vec();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
            events.insert((0, tail_seq), bytes.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let found = faults(&dir);
    let kinds: Vec<(Option<u64>, FaultKind)> = found.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(
        kinds,
        vec![
            (Some(second), FaultKind::Checksum),
            (Some(tail_seq), FaultKind::Checksum)
        ]
    );
    assert!(
        found[0]
            .2
            .contains(&format!("the block of seqs {second}..{third}")),
        "{}",
        found[0].2
    );
}

// Goal: a block with a missing part, and a block removed whole, are reported where they
// were; a block rewritten with a valid crc but another chain fails the chain.
// Method: drop one part of the first block; in a second store drop every part of the second
// block; in a third, alter chain_in of the third block and fix its crc.
#[test]
fn missing_and_forged_blocks_are_found() {
    let (dir, _, _) = filled(N_EVENTS);
    let (starts, _) = layout(&dir);
    edit_blocks(&dir, |blocks| {
        blocks.remove((0, 0, 2)).unwrap();
    });
    let found = faults(&dir);
    assert_eq!(
        (found[0].0, found[0].1),
        (Some(0), FaultKind::Decode),
        "{found:?}"
    );
    assert!(found[0].2.contains("missing"), "{}", found[0].2);

    let (dir, _, _) = filled(N_EVENTS);
    let (second, third) = (starts[1], starts[2]);
    edit_blocks(&dir, |blocks| {
        for part in 0..u32::MAX {
            if blocks.remove((0, second, part)).unwrap().is_none() {
                break;
            }
        }
    });
    let found = faults(&dir);
    assert_eq!(
        (found[0].0, found[0].1),
        (Some(second), FaultKind::Missing),
        "{found:?}"
    );
    assert!(found[0]
        .2
        .contains(&format!("seqs {second}..{third} are missing")));

    let (dir, _, _) = filled(N_EVENTS);
    edit_blocks(&dir, |blocks| {
        let mut bytes = blocks.get((0, third, 0)).unwrap().unwrap().value().to_vec();
        bytes[30] ^= 0xff;
        blocks.insert((0, third, 0), bytes.as_slice()).unwrap();
        let mut joined = Vec::new();
        for part in 0.. {
            match blocks.get((0, third, part)).unwrap() {
                Some(v) => joined.extend_from_slice(v.value()),
                None => break,
            }
        }
        let crc = crc32fast::hash(&joined[4..]);
        bytes[..4].copy_from_slice(&crc.to_le_bytes());
        blocks.insert((0, third, 0), bytes.as_slice()).unwrap();
    });
    let found = faults(&dir);
    assert_eq!(
        (found[0].0, found[0].1),
        (Some(third), FaultKind::Chain),
        "{found:?}"
    );
}

/// The meta record of a version 1 store.
fn meta_v1() -> Vec<u8> {
    let mut bytes = b"SESSLOG\0".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

// Goal: a version 1 store (no blocks, large bodies compressed record by record) opens, is
// marked version 2, and its records are sealed over the next appends without changing a
// byte: the chain still verifies and the old records read back as they were written.
// Method: write 3000 records the way version 1 did straight into redb, with a version 1 meta
// record; reopen, append the rest of the session, and compare.
#[test]
fn version_1_store_is_upgraded_and_sealed() {
    let (dir, store) = temp_store();
    let (header, batches) = generated(3300, 6);
    let events: Vec<Event> = batches.into_iter().flatten().collect();
    store.create_session(&header).unwrap();
    drop(store);
    let old = encoded(&header, &events[..3000], BodyEncoding::CompressLarge);
    assert!(
        old.iter().any(|r| r[45] == record::FLAG_ZSTD),
        "some bodies compressed"
    );
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("store", meta_v1().as_slice()).unwrap();
            let mut table = txn.open_table(EVENTS).unwrap();
            for (seq, bytes) in (0u64..).zip(&old) {
                table.insert((0, seq), bytes.as_slice()).unwrap();
            }
        }
        txn.delete_table(BLOCKS).unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&store_path(&dir)).unwrap();
    let id = header.id.as_str();
    let last_old: ChainHash = old[2999][4..36].try_into().unwrap();
    assert_eq!(store.head(id).unwrap().next_seq, 3000);
    assert_eq!(store.head(id).unwrap().chain, last_old);
    store.append(id, 3000, events[3000..].to_vec()).unwrap();
    let reports = store.verify(&[]).unwrap();
    assert_eq!(reports[0].faults, vec![]);
    let stored = stored_records(&store, id, 3300);
    assert_eq!(stored[..3000].to_vec(), old);
    assert_eq!(store.read_range(id, 0, 3300).unwrap(), events);
    drop(store);
    let (starts, _) = layout(&dir);
    assert!(starts.len() >= 2, "{starts:?}");
    let db = Database::create(store_path(&dir)).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    let version = meta.get("store").unwrap().unwrap().value()[8..12].to_vec();
    assert_eq!(version, 2u32.to_le_bytes().to_vec());
}

/// A version 2 WAL holding `records` of session key 0 as one frame.
fn wal_bytes(records: &[(u64, &[u8])]) -> Vec<u8> {
    let mut header = b"SLWAL\0\0\0".to_vec();
    header.extend_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    let mut payload = (records.len() as u32).to_le_bytes().to_vec();
    for (seq, bytes) in records {
        payload.push(1);
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        payload.extend_from_slice(bytes);
    }
    header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    header.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    header.extend_from_slice(&payload);
    header
}

// Goal: a WAL that logged records which are sealed by now (redb was made durable before the
// WAL was emptied, then the process died) replays cleanly, and a logged record that differs
// from its sealed copy is refused as corruption.
// Method: write a WAL holding sealed records beside a closed store and reopen; then one with
// a record altered under a valid crc.
#[test]
fn wal_replay_checks_records_already_sealed() {
    let (dir, header, events) = filled(N_EVENTS);
    let records = encoded(&header, &events, BodyEncoding::Plain);
    let wal = dir.path().join("store.redb.wal");
    let logged: Vec<(u64, &[u8])> = (10..20)
        .map(|s| (s, records[s as usize].as_slice()))
        .collect();
    std::fs::write(&wal, wal_bytes(&logged)).unwrap();
    let store = Store::open(&store_path(&dir)).unwrap();
    assert_eq!(store.verify(&[]).unwrap()[0].faults, vec![]);
    drop(store);

    let mut altered = records[15].clone();
    altered[60] ^= 0x01;
    let crc = crc32fast::hash(&altered[4..]);
    altered[..4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&wal, wal_bytes(&[(15, altered.as_slice())])).unwrap();
    match Store::open(&store_path(&dir)) {
        Err(StoreError::Corrupt { reason }) => assert!(reason.contains("disagree"), "{reason}"),
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }
}

// Goal: reads racing the sealer never miss or change a record: a range read is one snapshot
// of both tables and the staged tail, whether a run is sealed before, during or after it, and
// whether the sealer takes it from the staged tail (no read flushed it) or from the events
// table (a read did).
// Method: append 5000 events in small batches from one thread while another reads the whole
// session again and again and compares it with the prefix appended so far; once with reads
// back to back (most runs flushed into the events table first), once with a pause between
// reads (most runs sealed straight from the staged tail).
#[test]
fn reads_racing_the_sealer_see_every_record() {
    for pause in [None, Some(std::time::Duration::from_millis(3))] {
        reads_racing_the_sealer(pause);
    }
}

fn reads_racing_the_sealer(pause: Option<std::time::Duration>) {
    let (dir, store) = temp_store();
    let store = std::sync::Arc::new(store);
    let (header, batches) = generated(N_EVENTS, 9);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    store.create_session(&header).unwrap();
    let id = header.id.clone();
    let reader = {
        let (store, id, events) = (std::sync::Arc::clone(&store), id.clone(), events.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            loop {
                // What is acknowledged: the warm head may run ahead of it within a group.
                let read = store.read_range(&id, 0, N_EVENTS).unwrap();
                let n = read.len();
                assert!(read == events[..n], "read {reads} differs ({n} events)");
                reads += 1;
                if n as u64 == N_EVENTS {
                    return reads;
                }
                if let Some(pause) = pause {
                    std::thread::sleep(pause);
                }
            }
        })
    };
    let mut next_seq = 0;
    for batch in batches {
        let len = batch.len() as u64;
        store.append(&id, next_seq, batch).unwrap();
        next_seq += len;
    }
    let reads = reader.join().unwrap();
    assert!(reads >= 1);
    assert_eq!(
        store.verify(&[]).unwrap()[0].faults,
        vec![],
        "pause {pause:?}"
    );
    drop(store);
    let (starts, _) = layout(&dir);
    assert!(starts.len() >= 4, "{starts:?}");
    let store = Store::open_read_only(&store_path(&dir)).unwrap();
    assert_eq!(store.read_range(&id, 0, N_EVENTS).unwrap(), events);
}

// Goal: a session too small to fill a block is sealed when the store closes (its records
// compressed, the file compacted), and a store opened only to read is left as it was.
// Method: append 300 generated events and close; the events table is empty and the file is
// smaller than the plain records. Then append small events (too few bytes to seal), close,
// open to read and close again: the tail is still unsealed and the file kept its size.
#[test]
fn small_sessions_are_sealed_at_close_and_reads_change_nothing() {
    let (dir, store) = temp_store();
    let (header, batches) = generated(300, 5);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    store.create_session(&header).unwrap();
    store.append(&header.id, 0, events.clone()).unwrap();
    drop(store);
    let (starts, unsealed) = layout(&dir);
    assert_eq!((starts, unsealed), (vec![0], 0));
    let plain: usize = encoded(&header, &events, BodyEncoding::Plain)
        .iter()
        .map(Vec::len)
        .sum();
    let file = std::fs::metadata(store_path(&dir)).unwrap().len();
    assert!(
        file < plain as u64,
        "{file} bytes on disk for {plain} bytes of records"
    );

    let store = Store::open(&store_path(&dir)).unwrap();
    let tail: Vec<Event> = (300..303).map(title).collect();
    store.append(&header.id, 300, tail).unwrap();
    drop(store);
    let before = (layout(&dir), std::fs::read(store_path(&dir)).unwrap());
    let store = Store::open(&store_path(&dir)).unwrap();
    assert_eq!(store.read_range(&header.id, 0, 303).unwrap().len(), 303);
    assert_eq!(store.verify(&[]).unwrap()[0].faults, vec![]);
    drop(store);
    let after = (layout(&dir), std::fs::read(store_path(&dir)).unwrap());
    assert_eq!(before.0, (vec![0], 3));
    // redb itself rewrites its header slots on every open and close; what we keep is the
    // layout and the size: no block written, no record moved, no commit.
    assert_eq!(before.0, after.0);
    assert_eq!(before.1.len(), after.1.len());
}

/// The bytes of the file at `path` that redb has not allocated to a page.
fn unallocated_bytes(path: &std::path::Path) -> (u64, u64) {
    let db = Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    let stats = txn.stats().unwrap();
    txn.abort().unwrap();
    drop(db);
    let file = std::fs::metadata(path).unwrap().len();
    let live = stats.allocated_pages() * stats.page_size() as u64;
    (file, file - live)
}

// Goal: a store closed after a long write keeps at most 1/32 of its file unallocated: the
// close lets redb trim the file's free end, counts the pages left and compacts the holes
// (sealing moves every record out of the events table, and redb reuses freed pages only after
// a durable commit); and the store reads and verifies the same afterwards.
// Method: append 6,000 generated events in their batches, close, count redb's allocated pages
// against the file's length; open again, read everything and verify.
#[test]
fn a_closed_store_keeps_few_unallocated_pages() {
    let (dir, store) = temp_store();
    let (header, batches) = generated(6000, 11);
    let next = append_all(&store, &header, &batches);
    drop(store);
    let (file, unallocated) = unallocated_bytes(&store_path(&dir));
    assert!(
        unallocated * 32 < file,
        "{unallocated} of {file} bytes unallocated after the close"
    );
    let store = Store::open(&store_path(&dir)).unwrap();
    let events: Vec<Event> = batches.into_iter().flatten().collect();
    let mut read = Vec::new();
    while (read.len() as u64) < next {
        let from = read.len() as u64;
        read.extend(
            store
                .read_range(&header.id, from, next.min(from + 1000))
                .unwrap(),
        );
    }
    assert_eq!(read, events);
    assert_eq!(store.verify(&[]).unwrap()[0].faults, vec![]);
}

// Goal: a read never returns a session shorter than its head as if it were whole. With a
// block lost in the middle of a session whose records all sit in blocks, or its last block
// lost, a read of the whole range and a fold at a point inside the lost block are refused at
// a seq of the lost block, on a writable and on a read-only open. (Before, both stopped where
// the blocks stopped and succeeded: `export` wrote a shorter log; `corrupt --seed 29` found
// it through a damaged index, which reads as a lost block.) The head is served from the
// checkpoint, or refused at the lost block when the checkpoint's last record was in it.
// Method: a session that the close seals whole (the first of a few lengths whose tail is
// worth a block); remove every part of one block; read through both opens.
#[test]
fn a_lost_block_never_reads_as_a_shorter_session() {
    for lost_last in [false, true] {
        let sealed_whole = [5_400, 5_600, 5_800, 6_000]
            .into_iter()
            .find_map(|n_events| {
                let (dir, store) = temp_store();
                let (header, batches) = generated(n_events, 4);
                let next_seq = append_all(&store, &header, &batches);
                drop(store);
                let (starts, n_unsealed) = layout(&dir);
                (n_unsealed == 0).then_some((dir, header, next_seq, starts))
            });
        let (dir, header, next_seq, starts) = sealed_whole.expect("a length sealed whole");
        let at = if lost_last { starts.len() - 1 } else { 1 };
        let lost = starts[at]..starts.get(at + 1).copied().unwrap_or(next_seq);
        edit_blocks(&dir, |blocks| {
            blocks
                .retain(|(_, first_seq, _), _| first_seq != lost.start)
                .unwrap();
        });
        // The seq a corruption names (`session@seq: ...`) must lie in the lost block.
        let refused_in_lost = |what: &str, result: Result<u64, StoreError>| match result {
            Err(StoreError::Corrupt { reason }) => {
                let seq: u64 = reason
                    .split_once('@')
                    .and_then(|(_, rest)| rest.split_once(':'))
                    .and_then(|(seq, _)| seq.parse().ok())
                    .unwrap_or_else(|| panic!("{what}: no seq in {reason}"));
                assert!(lost.contains(&seq), "{what}: {reason} (lost {lost:?})");
            }
            other => panic!("{what} with the block {lost:?} lost: {other:?}"),
        };
        let path = store_path(&dir);
        for store in [
            Store::open(&path).unwrap(),
            Store::open_read_only(&path).unwrap(),
        ] {
            match store.head(&header.id) {
                Ok(head) => assert_eq!(head.next_seq, next_seq),
                refused => refused_in_lost("head", refused.map(|head| head.next_seq)),
            }
            let read = store.read_range(&header.id, 0, u64::MAX);
            refused_in_lost("read", read.map(|events| events.len() as u64));
            // A point inside the lost block is folded from seq 0 (no kept checkpoint below).
            let folded = store.fold_at(&header.id, Some(lost.start + 5));
            refused_in_lost("fold", folded.map(|fold| fold.admission().next_seq()));
        }
    }
}

// Goal: verify of a store of many sessions, whose block reader is told of sessions well
// ahead of the walk, reports each damage at its own session and at no other: a session
// record that cannot be decoded (a session the reader is never told of), and a damaged block
// of a later session within the same window.
// Method: 40 sessions of 120 generated events, each sealed into one block at close. Cut the
// 10th session's record short and flip a byte of the 14th's block. Verify reports one session
// fault for the 10th, one checksum fault at seq 0 for the 14th, and the other 38 clean with
// all their events and the heads their reads give. Besides, every report ends with the blocks
// table's count of the parts no session's walk reached (the 10th's).
#[test]
fn sessions_read_ahead_keep_their_own_faults() {
    const SESSIONS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
    const N_SESSIONS: usize = 40;
    const PER_SESSION: u64 = 120;
    let (dir, store) = temp_store();
    let mut ids = Vec::new();
    for i in 0..N_SESSIONS {
        let (mut header, batches) = generated(PER_SESSION, i as u64 + 1);
        header.id = format!("s{i:02}");
        store.create_session(&header).unwrap();
        let events: Vec<Event> = batches.into_iter().flatten().collect();
        store.append(&header.id, 0, events).unwrap();
        ids.push(header.id);
    }
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    let heads: Vec<ChainHash> = ids.iter().map(|id| store.head(id).unwrap().chain).collect();
    drop(store);
    let (cut, flipped) = (10, 14);
    let flipped_key = {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_read().unwrap();
        let blocks = txn.open_table(BLOCKS).unwrap();
        let keys: std::collections::BTreeSet<u64> = blocks
            .iter()
            .unwrap()
            .map(|entry| entry.unwrap().0.value().0)
            .collect();
        assert_eq!(keys.len(), N_SESSIONS, "each session sealed at close");
        keys.into_iter().nth(flipped).unwrap()
    };
    edit_blocks(&dir, |blocks| {
        let mut bytes = blocks
            .get((flipped_key, 0, 0))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        bytes[200] ^= 0x08;
        blocks
            .insert((flipped_key, 0, 0), bytes.as_slice())
            .unwrap();
    });
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut sessions = txn.open_table(SESSIONS_TABLE).unwrap();
            sessions.insert(ids[cut].as_str(), &[1u8][..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&store_path(&dir)).unwrap();
    let reports = store.verify(&[]).unwrap();
    let named: Vec<&str> = reports.iter().map(|r| r.session.as_str()).collect();
    assert_eq!(named, ids.iter().map(String::as_str).collect::<Vec<_>>());
    for (i, report) in reports.iter().enumerate() {
        let (count, own) = report.faults.split_last().unwrap();
        assert!(
            count.kind == FaultKind::Missing
                && count.message.starts_with("the blocks table counts"),
            "session {i}: {report:?}"
        );
        let kinds: Vec<(Option<u64>, FaultKind)> = own.iter().map(|f| (f.seq, f.kind)).collect();
        match i {
            _ if i == cut => assert_eq!(kinds, vec![(None, FaultKind::Session)], "{report:?}"),
            _ if i == flipped => {
                assert_eq!(kinds, vec![(Some(0), FaultKind::Checksum)], "{report:?}");
            }
            _ => {
                assert_eq!(kinds, vec![], "session {i}: {report:?}");
                assert_eq!(report.events, PER_SESSION, "session {i}");
                assert_eq!(report.head_chain, heads[i], "session {i}");
            }
        }
    }
}

// Goal: whatever damage to the blocks table's index makes a read refuse a session, verify
// reports too: it searches for every block as a read does, besides walking the table in
// order (a walk in order passes over a branch page's separators, which only a search uses).
// Method: a closed store of one session sealed into several blocks. A part fills a leaf page,
// so the blocks table's branch page holds a separator per part: the page of the file where
// the table's keys sit packed. Bits of the seq field of 32 separators spread over it are
// flipped one at a time; the store is opened, verified and read whole. A read refused while
// verify is clean fails the test; at least one flip must make a read refuse, or the test
// would test nothing.
#[test]
fn damage_to_the_blocks_index_that_reads_refuse_is_found_by_verify() {
    let (dir, header, _) = filled(N_EVENTS);
    let keys: Vec<[u8; 20]> = {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_read().unwrap();
        let blocks = txn.open_table(BLOCKS).unwrap();
        let keys = blocks.iter().unwrap().map(|entry| {
            let (key, first_seq, part) = entry.unwrap().0.value();
            let mut bytes = [0u8; 20];
            bytes[..8].copy_from_slice(&key.to_le_bytes());
            bytes[8..16].copy_from_slice(&first_seq.to_le_bytes());
            bytes[16..].copy_from_slice(&part.to_le_bytes());
            bytes
        });
        keys.collect()
    };
    let clean = std::fs::read(store_path(&dir)).unwrap();
    // Each key's copies in the file; a separator is the copy in the 4 KiB page holding most.
    let copies: Vec<Vec<usize>> = keys
        .iter()
        .filter(|key| key[8..16] != [0; 8])
        .map(|key| {
            let at = clean.windows(key.len()).enumerate();
            at.filter(|(_, window)| window == key)
                .map(|(at, _)| at)
                .collect()
        })
        .collect();
    let mut per_page = std::collections::BTreeMap::<usize, usize>::new();
    for at in copies.iter().flatten() {
        *per_page.entry(at / 4096).or_default() += 1;
    }
    let (&branch, &held) = per_page.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(
        held > 16,
        "a branch page holds the separators: {per_page:?}"
    );
    let separators: Vec<usize> = copies
        .iter()
        .filter_map(|at| at.iter().copied().find(|at| at / 4096 == branch))
        .collect();
    let step = (separators.len() / 32).max(1);
    let (mut refused, mut trials) = (0, 0);
    let trial_dir = tempfile::tempdir().unwrap();
    let trial_path = trial_dir.path().join("trial.redb");
    for &at in separators.iter().step_by(step) {
        // Bits 3 to 10 of the seq: a separator moved by 8 to 1024 seqs.
        for bit in 3..11 {
            let flip = (at + 8 + bit / 8, bit % 8);
            if let Some((read_refused, _)) = index_flip_trial(&clean, flip, &trial_path, &header.id)
            {
                trials += 1;
                refused += u32::from(read_refused);
            }
        }
    }
    eprintln!("{refused} of {trials} flips refused by the read");
    assert!(refused > 0, "no flip of {trials} made a read refuse");
}

// Goal: the same for the events table, which holds a session's unsealed records: whatever
// damage to its index makes a read refuse a session, verify reports too.
// Method: a closed store of one session of 100 generated events (sealed at the close) and 400
// small ones appended after a reopen, too few bytes for the close to seal: in the events
// table, a branch page over its leaves. Bits 0 to 7 of the seq of each separator of that
// page (the page of the file holding the most copies of the table's keys, none of them
// consecutive) are flipped one at a time; the store is opened, verified and read whole. A
// read refused while verify is clean fails the test, and so do more than two faults for one
// flip (a run of records the index hides is one fault, the tail's range another); at least
// one flip must make a read refuse.
#[test]
fn damage_to_the_events_index_that_reads_refuse_is_found_by_verify() {
    let (dir, store) = temp_store();
    let (header, batches) = generated(100, 4);
    let mut next_seq = append_all(&store, &header, &batches);
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    let tail_from = next_seq;
    let tail: Vec<Event> = (next_seq..next_seq + 400).map(title).collect();
    next_seq = store.append(&header.id, next_seq, tail).unwrap().next_seq;
    drop(store);
    let (_, unsealed) = layout(&dir);
    assert_eq!(unsealed, 400, "the small events stay unsealed");
    let clean = std::fs::read(store_path(&dir)).unwrap();
    let key_of = |seq: u64| {
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&seq.to_le_bytes());
        bytes
    };
    // Every page's copies of the table's keys.
    let mut per_page = std::collections::BTreeMap::<usize, Vec<(usize, u64)>>::new();
    for seq in tail_from..next_seq {
        let key = key_of(seq);
        let copies = clean.windows(key.len()).enumerate();
        for (at, _) in copies.filter(|(_, window)| *window == key) {
            per_page.entry(at / 4096).or_default().push((at, seq));
        }
    }
    let branch = per_page
        .values()
        .filter(|found| found.windows(2).all(|pair| pair[1].1 > pair[0].1 + 1))
        .max_by_key(|found| found.len())
        .expect("a page of separators");
    assert!(branch.len() >= 4, "a branch page: {per_page:?}");
    let (mut refused, mut trials) = (0, 0);
    let trial_dir = tempfile::tempdir().unwrap();
    let trial_path = trial_dir.path().join("trial.redb");
    for &(at, _) in branch {
        for bit in 0..8 {
            if let Some((read_refused, faults)) =
                index_flip_trial(&clean, (at + 8, bit), &trial_path, &header.id)
            {
                trials += 1;
                refused += u32::from(read_refused);
                // One damaged separator hides a run of records: one lookup fault for the run
                // and one for the tail's range, not one per record.
                assert!(faults <= 2, "byte {} bit {bit}: {faults} faults", at + 8);
            }
        }
    }
    eprintln!("{refused} of {trials} flips refused by the read");
    assert!(refused > 0, "no flip of {trials} made a read refuse");
}

/// One trial of the index tests above: `clean` with bit `flip.1` of byte `flip.0` flipped,
/// written to `path`, opened read-only, verified, and `session` read whole. Fails when the
/// read refuses and verify is clean; `None` when the open refuses the file, else whether the
/// read refused and how many faults verify reported.
fn index_flip_trial(
    clean: &[u8],
    flip: (usize, usize),
    path: &std::path::Path,
    session: &str,
) -> Option<(bool, usize)> {
    let (byte, bit) = flip;
    let mut bytes = clean.to_vec();
    bytes[byte] ^= 1 << bit;
    std::fs::write(path, &bytes).unwrap();
    let store = Store::open_read_only(path).ok()?;
    let verified = store.verify(&[]);
    let clean_verify = matches!(&verified, Ok(reports) if reports.iter().all(|r| r.ok()));
    let read = store.read_range(session, 0, u64::MAX);
    if let Err(error) = &read {
        assert!(
            !clean_verify,
            "byte {byte} bit {bit}: verify is clean, the read refuses: {error}"
        );
    }
    let faults = verified.map_or(0, |reports| reports.iter().map(|r| r.faults.len()).sum());
    Some((read.is_err(), faults))
}
