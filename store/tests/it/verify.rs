//! `verify` finds every kind of damage: a flipped byte (checksum), a record rewritten with a
//! valid crc (chain), a dropped record (missing), an event that breaks a rule (admission), and
//! a checkpoint that disagrees with the log.

use redb::{Database, ReadableTable, TableDefinition};
use sessionlog_format::SurfaceOp;
use sessionlog_store::embedded::verify::FaultKind;
use sessionlog_store::embedded::Store;

use crate::support::*;

const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
const SMALL: u64 = 30;

/// A store with one generated session of `n` events; returns its directory and session id.
/// A session of [`SMALL`] events stays in the events table, record by record: too few bytes
/// for the close to seal them into a block (blocks.rs tests damage inside blocks).
fn filled(n: u64) -> (tempfile::TempDir, String) {
    let (dir, store) = temp_store();
    let (header, batches) = generated(n, 4);
    store.create_session(&header).unwrap();
    let mut next_seq = 0;
    for batch in batches {
        let len = batch.len() as u64;
        store.append(&header.id, next_seq, batch).unwrap();
        next_seq += len;
    }
    (dir, header.id)
}

/// Rewrites the raw record of `seq` (session key 0) with `edit`, behind the store's back.
fn tamper(dir: &tempfile::TempDir, seq: u64, edit: impl FnOnce(&mut Vec<u8>)) {
    let db = Database::create(store_path(dir)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut events = txn.open_table(EVENTS).unwrap();
        let mut bytes = events.get((0, seq)).unwrap().unwrap().value().to_vec();
        edit(&mut bytes);
        events.insert((0, seq), bytes.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

fn faults(dir: &tempfile::TempDir) -> Vec<(Option<u64>, FaultKind)> {
    let store = Store::open(&store_path(dir)).unwrap();
    let reports = store.verify(&[]).unwrap();
    reports[0].faults.iter().map(|f| (f.seq, f.kind)).collect()
}

fn fix_crc(bytes: &mut [u8]) {
    let crc = crc32fast::hash(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
}

// Goal: a clean store verifies; one flipped bit anywhere in a record is a checksum fault at
// that seq.
#[test]
fn flipped_bit_is_a_checksum_fault() {
    let (dir, _) = filled(SMALL);
    assert_eq!(faults(&dir), vec![]);
    tamper(&dir, 10, |b| {
        let last = b.len() - 1;
        b[last] ^= 0x10;
    });
    assert_eq!(faults(&dir), vec![(Some(10), FaultKind::Checksum)]);
}

// Goal: a record altered together with its crc breaks the chain at that seq, and the walk
// resyncs so that the next record is not blamed.
#[test]
fn altered_record_with_valid_crc_breaks_the_chain() {
    let (dir, _) = filled(SMALL);
    tamper(&dir, 20, |b| {
        // Byte 40 lies in the seq field (bytes 36..44), which the chain covers.
        b[40] ^= 0xff;
        fix_crc(b);
    });
    let found = faults(&dir);
    assert!(found.contains(&(Some(20), FaultKind::Chain)), "{found:?}");
    assert!(!found.iter().any(|(seq, _)| *seq == Some(21)), "{found:?}");
}

// Goal: a dropped record is reported as missing.
#[test]
fn dropped_record_is_missing() {
    let (dir, _) = filled(SMALL);
    let db = Database::create(store_path(&dir)).unwrap();
    let txn = db.begin_write().unwrap();
    let removed = txn
        .open_table(EVENTS)
        .unwrap()
        .remove((0, 25))
        .unwrap()
        .is_some();
    assert!(removed, "the record was in the events table");
    txn.commit().unwrap();
    drop(db);
    let found = faults(&dir);
    assert_eq!(
        found.first(),
        Some(&(Some(25), FaultKind::Missing)),
        "{found:?}"
    );
}

// Goal: a damaged checkpoint is reported, and the session still loads from its records.
#[test]
fn damaged_checkpoint_is_reported_and_ignored() {
    let (dir, id) = filled(9000);
    {
        let db = Database::create(store_path(&dir)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut checkpoints = txn.open_table(CHECKPOINTS).unwrap();
            let mut bytes = checkpoints
                .get(0)
                .unwrap()
                .expect("a checkpoint was written")
                .value()
                .to_vec();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            checkpoints.insert(0, bytes.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    assert_eq!(faults(&dir), vec![(None, FaultKind::Checkpoint)]);
    let store = Store::open(&store_path(&dir)).unwrap();
    let warm = store
        .with_fold(&id, |f| {
            f.messages().into_iter().cloned().collect::<Vec<_>>()
        })
        .unwrap();
    let cold = store
        .fold_at(&id, None)
        .unwrap()
        .messages()
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(warm, cold);
}

// Goal: an event that breaks an admission rule (written behind the store's back with a valid
// crc and chain) is an admission fault.
#[test]
fn rule_breaking_event_is_an_admission_fault() {
    let (dir, store) = temp_store();
    store.create_session(&header("s")).unwrap();
    let events = vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "p", SurfaceOp::Append),
    ];
    store.append("s", 0, events).unwrap();
    let head = store.head("s").unwrap();
    drop(store);
    // A user replace over the protected head, encoded as a genuine record.
    let bad = user(
        3,
        "x",
        SurfaceOp::Replace {
            start_seq: 2,
            end_seq: 2,
        },
        Some(vec![2]),
    );
    let mut record = Vec::new();
    sessionlog_format::record::encode_event(&bad, &head.chain, &mut record).unwrap();
    let db = Database::create(store_path(&dir)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(EVENTS)
        .unwrap()
        .insert((0, 3), record.as_slice())
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    let store = Store::open(&store_path(&dir)).unwrap();
    let reports = store.verify(&[]).unwrap();
    let kinds: Vec<_> = reports[0].faults.iter().map(|f| (f.seq, f.kind)).collect();
    assert_eq!(kinds, vec![(Some(3), FaultKind::Admission)]);
    assert!(reports[0].faults[0]
        .message
        .contains("node 0 holds the system prompt"));
}

// Goal: with the fold on its own thread, an admission fault and later record damage are both
// reported, in seq order.
#[test]
fn admission_fault_then_damage_are_reported_in_seq_order() {
    let (dir, store) = temp_store();
    store.create_session(&header("s")).unwrap();
    let events = vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "p", SurfaceOp::Append),
    ];
    store.append("s", 0, events).unwrap();
    let head = store.head("s").unwrap();
    drop(store);
    let bad = user(
        3,
        "x",
        SurfaceOp::Replace {
            start_seq: 2,
            end_seq: 2,
        },
        Some(vec![2]),
    );
    let mut record = Vec::new();
    let chain = sessionlog_format::record::encode_event(&bad, &head.chain, &mut record).unwrap();
    let mut next = Vec::new();
    sessionlog_format::record::encode_event(
        &user(4, "y", SurfaceOp::Append, None),
        &chain,
        &mut next,
    )
    .unwrap();
    let last = next.len() - 1;
    next[last] ^= 0x01;
    let db = Database::create(store_path(&dir)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(EVENTS).unwrap();
        table.insert((0, 3), record.as_slice()).unwrap();
        table.insert((0, 4), next.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    assert_eq!(
        faults(&dir),
        vec![
            (Some(3), FaultKind::Admission),
            (Some(4), FaultKind::Checksum)
        ]
    );
}
