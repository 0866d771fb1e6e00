//! Import and export round trips, and warm folds against folds from scratch.

use std::path::PathBuf;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use sessionlog_format::fold::SessionFold;
use sessionlog_format::{read_log, Compression, LogWriter, ReadOptions, SnapshotMode};
use sessionlog_store::embedded::Store;
use sessionlog_store::transfer::{export_session, import_file, ExportTarget};

use crate::support::*;

fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh");
    if dir.join("MANIFEST.tsv").is_file() {
        return Some(dir);
    }
    eprintln!(
        "skipping: {} is missing (the dsh fixtures live beside the checkout)",
        dir.display()
    );
    None
}

fn accepted_v3_fixtures(dir: &std::path::Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            (cells.get(1) == Some(&"3") && cells.get(2) == Some(&"accept"))
                .then(|| dir.join(cells[0]))
        })
        .collect()
}

/// Imports `file`, exports it (raw and zstd), re-imports each export into a second store, and
/// checks that the events, header and head hash are identical at every step.
fn round_trip(file: &std::path::Path) {
    let (dir, store) = temp_store();
    let mut acks = Vec::new();
    let report = import_file(&store, file, SnapshotMode::Auto, &mut |ack| {
        acks.push(ack.next_seq)
    })
    .unwrap();
    let original = read_log(std::fs::File::open(file).unwrap(), ReadOptions::default()).unwrap();
    let stored = store.read_range(&report.session, 0, u64::MAX).unwrap();
    assert_eq!(stored, original.events, "{}", file.display());
    assert_eq!(
        acks.last().copied().unwrap_or(0),
        original.events.len() as u64
    );
    for name in ["export.v3.jsonl", "export.v3.jsonl.zstd"] {
        let out = dir.path().join(name);
        export_session(&store, &report.session, &ExportTarget::File(out.clone())).unwrap();
        let exported =
            read_log(std::fs::File::open(&out).unwrap(), ReadOptions::default()).unwrap();
        assert_eq!(exported.events, original.events);
        assert_eq!(exported.header, original.header);
        let (_dir2, second) = temp_store();
        let again = import_file(&second, &out, SnapshotMode::Auto, &mut |_| {}).unwrap();
        assert_eq!(
            again.head_chain, report.head_chain,
            "re-import is identical, chain included"
        );
        assert!(second.verify(&[]).unwrap().iter().all(|r| r.ok()));
    }
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

// Goal: every accepted V3 recording imports, exports and re-imports identically.
#[test]
fn v3_fixtures_round_trip() {
    let Some(dir) = fixtures_dir() else { return };
    let files = accepted_v3_fixtures(&dir);
    assert!(files.len() >= 7, "{} V3 fixtures", files.len());
    for file in files {
        round_trip(&file);
    }
}

// Goal: generated sessions (with replaces, compactions and head rewrites) round-trip.
#[test]
fn generated_sessions_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    for (seed, compression) in [(1, Compression::None), (2, Compression::Zstd)] {
        let (header, batches) = generated(3000, seed);
        let path = tmp.path().join(format!("gen-{seed}.v3.jsonl"));
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = LogWriter::new(file, &header, compression).unwrap();
        for batch in &batches {
            writer.append_batch(batch).unwrap();
        }
        writer.into_inner().unwrap();
        round_trip(&path);
    }
}

// Goal: the warm fold (cached, incremental, checkpointed) equals a fold from scratch after
// every batch, including across reopen (which resumes from the persisted checkpoint).
#[test]
fn warm_fold_equals_fold_from_scratch() {
    let (dir, store) = temp_store();
    let (header, batches) = generated(12_000, 5);
    store.create_session(&header).unwrap();
    let id = header.id.clone();
    let mut next_seq = 0;
    let mut reference = SessionFold::new(sessionlog_format::rules::RuleContext {
        version: sessionlog_format::FormatVersion::V3,
        snapshot: false,
    });
    let mut store = store;
    for (batch_idx, batch) in batches.into_iter().enumerate() {
        for event in &batch {
            reference.admit(Arc::new(event.clone())).unwrap();
        }
        let n_events = batch.len() as u64;
        store.append(&id, next_seq, batch).unwrap();
        next_seq += n_events;
        if batch_idx % 97 == 0 {
            drop(store);
            store = Store::open(&store_path(&dir)).unwrap();
        }
        store
            .with_fold(&id, |warm| {
                assert_eq!(warm.messages(), reference.messages());
                assert_eq!(
                    warm.admission().surface().seqs(),
                    reference.admission().surface().seqs()
                );
                assert_eq!(warm.replace_generation(), reference.replace_generation());
                assert_eq!(warm.request_header(), reference.request_header());
                assert_eq!(warm.request_context(), reference.request_context());
            })
            .unwrap();
    }
    let cold = store.fold_from_start(&id, None).unwrap();
    assert_eq!(cold.messages(), reference.messages());
    let resumed = store.fold_at(&id, None).unwrap();
    assert_eq!(resumed.checkpoint(), cold.checkpoint());
    let reports = store.verify(&[]).unwrap();
    assert!(reports[0].ok(), "{:?}", reports[0].faults);
}

// Goal: point-in-time reads see the surface and messages as of any seq.
#[test]
fn point_in_time_reads() {
    let (_dir, store) = temp_store();
    let (header, batches) = generated(2000, 9);
    store.create_session(&header).unwrap();
    let all: Vec<_> = batches.iter().flatten().cloned().collect();
    let mut next_seq = 0;
    for batch in batches {
        let n = batch.len() as u64;
        store.append(&header.id, next_seq, batch).unwrap();
        next_seq += n;
    }
    for at in [0, 7, 500, 1234, 1999] {
        let fold = store.fold_at(&header.id, Some(at)).unwrap();
        let mut reference = SessionFold::new(sessionlog_format::rules::RuleContext {
            version: sessionlog_format::FormatVersion::V3,
            snapshot: false,
        });
        for event in &all[..=at as usize] {
            reference.admit(Arc::new(event.clone())).unwrap();
        }
        assert_eq!(fold.messages(), reference.messages(), "at {at}");
        assert_eq!(
            fold.admission().surface().seqs(),
            reference.admission().surface().seqs()
        );
    }
    assert!(store.fold_at(&header.id, Some(2000)).is_err());
}
