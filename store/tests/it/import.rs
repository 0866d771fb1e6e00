//! Atomic import (issue #20, finding 4): an import cut short leaves a session flagged as an
//! unfinished import, which every reader and writer but the import refuses and `verify`
//! reports; a rerun of the same import resumes it; a rerun of another log is refused and
//! changes nothing; WAL replay accepts a store ahead of its WAL by exactly a finished import.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use sessionlog_format::gen::GenOptions;
use sessionlog_format::{
    read_log, Compression, Event, FormatVersion, LogWriter, ReadOptions, SessionHeader,
    SnapshotMode,
};
use sessionlog_store::embedded::verify::FaultKind;
use sessionlog_store::embedded::{Head, Store, StoreError};
use sessionlog_store::generate::generate_file;
use sessionlog_store::log_store::LogStore;
use sessionlog_store::transfer::{import_file, ImportReport};
use sessionlog_store::Error;

use crate::faultpos::{CrashImage, CrashWal, Fault};
use crate::support::*;

/// The payload of the unwind that stands in for a kill after a commit (no panic message).
struct Interrupt;

/// A generated log of `version` with `events` events.
fn log_file(dir: &Path, name: &str, events: u64, version: FormatVersion) -> PathBuf {
    let path = dir.join(name);
    let options = GenOptions { events, seed: 5 };
    generate_file(&path, options, version, Compression::None, &mut |_| {}).unwrap();
    path
}

/// Imports `path`, cut short right after its `n_commits`-th durable batch as a kill there
/// would cut it (the store is left as the commit left it); returns the session's id.
fn interrupted_import(store: &Store, path: &Path, n_commits: u64) -> String {
    let mut session = String::new();
    let mut seen = 0;
    let cut = catch_unwind(AssertUnwindSafe(|| {
        import_file(store, path, SnapshotMode::Auto, &mut |ack| {
            seen += 1;
            if seen == n_commits {
                session = ack.session.clone();
                resume_unwind(Box::new(Interrupt));
            }
        })
    }));
    let payload = cut.expect_err("the import was cut before its end");
    assert!(payload.is::<Interrupt>());
    session
}

fn import(store: &Store, path: &Path) -> Result<ImportReport, Error> {
    import_file(store, path, SnapshotMode::Auto, &mut |_| {})
}

/// The head a whole import of `path` reaches in a fresh store.
fn whole_import_head(path: &Path) -> Head {
    let (_dir, store) = temp_store();
    let report = import(&store, path).unwrap();
    store.head(&report.session).unwrap()
}

fn is_interrupted(error: &StoreError, id: &str) -> bool {
    matches!(error, StoreError::ImportInterrupted { session } if session == id)
}

/// Every way to reach a session outside the import refuses the interrupted one.
fn check_refused_everywhere(store: &Store, id: &str) {
    assert!(is_interrupted(&store.header(id).unwrap_err(), id));
    assert!(is_interrupted(&store.head(id).unwrap_err(), id));
    assert!(is_interrupted(&store.is_snapshot(id).unwrap_err(), id));
    assert!(is_interrupted(
        &store.read_range(id, 0, 10).unwrap_err(),
        id
    ));
    assert!(is_interrupted(&store.fold_at(id, None).unwrap_err(), id));
    assert!(is_interrupted(&store.fold_at(id, Some(0)).unwrap_err(), id));
    let fold = store.with_fold(id, |fold| fold.admission().next_seq());
    assert!(is_interrupted(&fold.unwrap_err(), id));
    assert!(is_interrupted(
        &LogStore::session_info(store, id).unwrap_err(),
        id
    ));
    assert!(is_interrupted(
        &store.read_records(id, 0, 10).unwrap_err(),
        id
    ));
    assert!(is_interrupted(
        &LogStore::checkpoint(store, id).unwrap_err(),
        id
    ));
    assert_eq!(store.sessions().unwrap(), Vec::<String>::new());
    assert_eq!(store.interrupted_imports().unwrap(), vec![id.to_owned()]);
    if !store.is_read_only() {
        let appended = store.append(id, 0, vec![title(0)]).unwrap_err();
        assert!(is_interrupted(&appended, id), "{appended}");
        let created = store
            .create_session(&SessionHeader::new_v3(id, 1))
            .unwrap_err();
        assert!(is_interrupted(&created, id), "{created}");
    }
}

/// `verify` reports the interrupted import, with its event count, and nothing else.
fn check_verify_reports(store: &Store, id: &str, n_events: u64) {
    let reports = store.verify(&[]).unwrap();
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert!(!report.ok());
    assert_eq!((report.session.as_str(), report.events), (id, n_events));
    let kinds: Vec<FaultKind> = report.faults.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FaultKind::Import]);
    let message = &report.faults[0].message;
    assert!(
        message.contains(&format!("holds {n_events} events")),
        "{message}"
    );
    assert!(
        message.contains("rerun `sessionlog import FILE`"),
        "{message}"
    );
    assert_eq!(store.verify(&[id.to_owned()]).unwrap(), reports);
}

// Goal: an import cut after some commits leaves a session that looks unfinished to every
// reader, writer and `verify`, before and after a reopen (writable and read-only), and a
// rerun completes it to exactly the session a whole import makes.
// Method: a 5000-event V3 log, cut after its 2nd commit (2048 events), checked, reopened,
// checked again, then imported again; the heads are compared with a whole import's.
#[test]
fn an_interrupted_import_is_refused_until_a_rerun_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let log = log_file(dir.path(), "a.v3.jsonl", 5000, FormatVersion::V3);
    let store = Store::open(&path).unwrap();
    let id = interrupted_import(&store, &log, 2);
    check_refused_everywhere(&store, &id);
    check_verify_reports(&store, &id, 2048);
    drop(store);
    let read_only = Store::open_read_only(&path).unwrap();
    check_refused_everywhere(&read_only, &id);
    check_verify_reports(&read_only, &id, 2048);
    drop(read_only);
    let store = Store::open(&path).unwrap();
    check_refused_everywhere(&store, &id);
    let report = import(&store, &log).unwrap();
    assert_eq!(report.events, 5000);
    let head = store.head(&id).unwrap();
    assert_eq!(head, whole_import_head(&log));
    assert_eq!(report.head_chain, head.chain);
    assert_eq!(store.sessions().unwrap(), vec![id.clone()]);
    assert!(store.interrupted_imports().unwrap().is_empty());
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    // Finished: a third import is the ordinary refusal of a session that exists.
    let again = import(&store, &log).unwrap_err();
    assert!(
        matches!(again, Error::Store(StoreError::SessionExists { .. })),
        "{again}"
    );
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head(&id).unwrap(), head, "the finish is durable");
}

// Goal: a kill right after the creation (no event appended yet) and one after the last
// batch (every event appended, the flag still set) both resume: the rerun appends what is
// missing, or nothing, and finishes.
// Method: the creation is cut through `begin_import` alone; the last batch through the
// commit callback of a log of exactly two batches.
#[test]
fn a_rerun_resumes_from_no_events_and_from_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_file(dir.path(), "a.v3.jsonl", 2048, FormatVersion::V3);
    let expected = whole_import_head(&log);
    let (_store_dir, store) = temp_store();
    let file = read_log(std::fs::File::open(&log).unwrap(), ReadOptions::default()).unwrap();
    let held = store.begin_import(&file.header, false).unwrap();
    assert_eq!(held.next_seq, 0);
    check_refused_everywhere(&store, &file.header.id);
    check_verify_reports(&store, &file.header.id, 0);
    assert_eq!(import(&store, &log).unwrap().events, 2048);
    assert_eq!(store.head(&file.header.id).unwrap(), expected);

    let (_store_dir, store) = temp_store();
    let id = interrupted_import(&store, &log, 2);
    check_verify_reports(&store, &id, 2048);
    let mut commits = 0;
    let report = import_file(&store, &log, SnapshotMode::Auto, &mut |_| commits += 1).unwrap();
    assert_eq!(
        (report.events, commits),
        (2048, 0),
        "nothing left to append"
    );
    assert_eq!(store.head(&id).unwrap(), expected);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

/// Writes `header` and `events` as a V3 log.
fn write_log(path: &Path, header: &SessionHeader, events: &[Event]) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = LogWriter::new(file, header, Compression::None).unwrap();
    writer.append_batch(events).unwrap();
    writer.into_inner().unwrap();
}

// Goal: a rerun with another log of the same session id is refused, naming the session as an
// interrupted import of another log, and changes nothing: an event changed inside the held
// prefix, a log shorter than what is held, another header, another snapshot mode.
// Method: cut a 3000-event import after 2048 events, then import variants of its log; after
// each refusal the session is as it was, and the right log still completes it.
#[test]
fn a_rerun_of_another_log_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_file(dir.path(), "a.v3.jsonl", 3000, FormatVersion::V3);
    let file = read_log(std::fs::File::open(&log).unwrap(), ReadOptions::default()).unwrap();
    let (_store_dir, store) = temp_store();
    let id = interrupted_import(&store, &log, 2);
    let records_before = store.read_records(&id, 0, u64::MAX);
    assert!(records_before.is_err(), "refused to readers");

    let mut changed = file.events.clone();
    changed[100].time += 1;
    let changed_path = dir.path().join("changed.v3.jsonl");
    write_log(&changed_path, &file.header, &changed);
    let short_path = dir.path().join("short.v3.jsonl");
    write_log(&short_path, &file.header, &file.events[..2000]);
    let mut other_header = file.header.clone();
    other_header.created_at += 1;
    let header_path = dir.path().join("header.v3.jsonl");
    write_log(&header_path, &other_header, &file.events);
    let expected = [
        (
            &changed_path,
            "the 2048 events it holds are not the log's first 2048",
        ),
        (&short_path, "it holds 2048 events and the log only 2000"),
        (&header_path, "its header differs from the log's"),
    ];
    for (path, reason) in expected {
        let error = import(&store, path).unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(&error, Error::Store(StoreError::ImportMismatch { session, .. }) if *session == id),
            "{text}"
        );
        assert_eq!(
            text,
            format!("session {id} is an interrupted import of another log: {reason}; nothing was changed")
        );
        check_verify_reports(&store, &id, 2048);
    }
    let snapshot = import_file(&store, &log, SnapshotMode::On, &mut |_| {}).unwrap_err();
    assert!(
        snapshot
            .to_string()
            .contains("read as a normalized recording"),
        "{snapshot}"
    );
    check_verify_reports(&store, &id, 2048);
    assert_eq!(import(&store, &log).unwrap().events, 3000);
    assert_eq!(store.head(&id).unwrap(), whole_import_head(&log));
}

// Goal: an older log's import (migrated in memory) is resumed the same way: the rerun checks
// the migrated events the session holds and appends the rest.
// Method: V2 and V0 logs, cut after their first commit, then imported again; the heads are
// compared with whole imports.
#[test]
fn a_migrated_import_resumes() {
    for version in [FormatVersion::V2, FormatVersion::V0] {
        let dir = tempfile::tempdir().unwrap();
        let log = log_file(dir.path(), "a.jsonl", 4000, version);
        let expected = whole_import_head(&log);
        let (_store_dir, store) = temp_store();
        let id = interrupted_import(&store, &log, 1);
        check_refused_everywhere(&store, &id);
        let held = store.verify(&[]).unwrap()[0].events;
        assert!(held > 0 && held < expected.next_seq, "{version:?}: {held}");
        import(&store, &log).unwrap();
        assert_eq!(store.head(&id).unwrap(), expected, "{version:?}");
        assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    }
}

/// The bytes of a new, empty store file.
fn empty_store() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    drop(Store::open(&path).unwrap());
    std::fs::read(&path).unwrap()
}

/// An in-memory store (redb and WAL images) that a test can cut at any point.
struct Images {
    backend: CrashImage,
    wal: CrashWal,
    store: Store,
}

impl Images {
    fn new(path: &Path) -> Images {
        let backend = CrashImage::new(Fault::None, empty_store());
        let wal = CrashWal::new(Fault::None);
        let store = Store::open_with_backends(path, backend.clone(), wal.clone()).unwrap();
        Images {
            backend,
            wal,
            store,
        }
    }

    /// Cuts the power and writes the durable redb image and `wal` as the store's files.
    fn crash_with_wal(self, path: &Path, wal: &[u8]) {
        self.backend.power_off();
        self.wal.power_off();
        let redb = self.backend.durable();
        drop(self.store);
        std::fs::write(path, redb).unwrap();
        std::fs::write(path.with_extension("redb.wal"), wal).unwrap();
    }
}

/// The opening of a session and a batch of titles, as one batch.
fn events(n_titles: u64) -> Vec<Event> {
    let mut events = vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "prompt", sessionlog_format::SurfaceOp::Append),
    ];
    events.extend((3..3 + n_titles).map(title));
    events
}

// Goal: a crash after the finish's durable commit and before the WAL restarted leaves redb
// ahead of its WAL (the session record without the flag, the logged creation with it); the
// reopen accepts exactly that and the session is whole.
// Method: in-memory images; the WAL image is taken before `finish_import`, the redb image
// after it; both are written as files and reopened.
#[test]
fn replay_accepts_a_store_ahead_of_its_wal_by_a_finished_import() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let images = Images::new(&path);
    let header = header("s");
    images.store.begin_import(&header, false).unwrap();
    images.store.append_import("s", 0, events(20)).unwrap();
    let wal_before_finish = images.wal.images().1;
    images.store.finish_import("s").unwrap();
    images.crash_with_wal(&path, &wal_before_finish);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.sessions().unwrap(), vec!["s".to_owned()]);
    assert_eq!(store.read_range("s", 0, 100).unwrap(), events(20));
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

// Goal: replay accepts nothing else: a stored record that still has the flag while the WAL
// logged the session without it, and a finished record of another header, are corruption.
// Method: durable redb images made by one store, WAL images by another, combined.
#[test]
fn replay_refuses_any_other_difference_of_session_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    // The store holds an unfinished import of s; the WAL logged s created as a session.
    let importing = Images::new(&path);
    importing.store.begin_import(&header("s"), false).unwrap();
    let plain = Images::new(&dir.path().join("other.redb"));
    plain.store.create_session(&header("s")).unwrap();
    let plain_wal = plain.wal.images().1;
    drop(plain);
    drop(importing.store);
    std::fs::write(&path, importing.backend.durable()).unwrap();
    std::fs::write(path.with_extension("redb.wal"), &plain_wal).unwrap();
    let error = Store::open(&path).unwrap_err().to_string();
    assert!(
        error.contains("the WAL and the store disagree on the record of session s"),
        "{error}"
    );

    // The store holds s finished; the WAL logged the import of s with another header.
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(path.with_extension("redb.wal")).unwrap();
    let finished = Images::new(&path);
    finished.store.begin_import(&header("s"), false).unwrap();
    finished.store.finish_import("s").unwrap();
    let other = Images::new(&dir.path().join("third.redb"));
    other
        .store
        .begin_import(&SessionHeader::new_v3("s", 5), false)
        .unwrap();
    let other_wal = other.wal.images().1;
    drop(other);
    finished.crash_with_wal(&path, &other_wal);
    let error = Store::open(&path).unwrap_err().to_string();
    assert!(
        error.contains("the WAL and the store disagree on the record of session s"),
        "{error}"
    );
}

// Goal: a normalized recording whose header names no placeholder (only its rows lack `seq`
// and `time`) is imported as one: the session is created in snapshot mode, which the reader
// knows from the open, not only once its first row is read.
// Method: import such a log (a pipelined read of it too, through `check`'s V3 migration) and
// ask the store for the session's mode; import the same rows with `seq` and `time` beside it.
#[test]
fn a_recording_told_by_its_first_row_is_imported_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let header = |id: &str| {
        format!(
            r#"{{"type":"session","version":3,"id":"{id}","createdAt":1,"isSeeded":false,"delegationDepth":0}}"#
        )
    };
    let row = r#"{"type":"permission/preset","data":{"preset":"danger-full-access"}}"#;
    let timed = |seq: u64| {
        format!(
            r#"{{"type":"permission/preset","seq":{seq},"time":7,"data":{{"preset":"danger-full-access"}}}}"#
        )
    };
    let normalized = dir.path().join("normalized.jsonl");
    std::fs::write(&normalized, format!("{}\n{row}\n{row}\n", header("n"))).unwrap();
    let plain = dir.path().join("plain.jsonl");
    std::fs::write(
        &plain,
        format!("{}\n{}\n{}\n", header("p"), timed(0), timed(1)),
    )
    .unwrap();
    let (_store_dir, store) = temp_store();
    assert_eq!(import(&store, &normalized).unwrap().events, 2);
    assert_eq!(import(&store, &plain).unwrap().events, 2);
    assert!(store.is_snapshot("n").unwrap());
    assert!(!store.is_snapshot("p").unwrap());
    let report = sessionlog_store::check::check_file(&normalized, Default::default());
    assert!(report.ok && report.snapshot, "{report:?}");
    assert!(report.migration.is_none(), "{report:?}");
}

// Goal: a finished import leaves its last records sealed, as a close would, not flushed
// plain into the events table by its durable commit (to be sealed again at the close, their
// pages left free); and the store reads them as before.
// Method: import a 300-event log (short of a block, over the tail's 64 KiB) into a fresh
// store, copy the file as the import's last durable commit left it (the store still open),
// and look at the copy's tables: the session's records are one block at seq 0 and none is in
// the events table. The open store reads every event back and verifies.
#[test]
fn a_finished_import_leaves_its_records_sealed() {
    const BLOCKS: redb::TableDefinition<(u64, u64, u32), &[u8]> =
        redb::TableDefinition::new("blocks");
    const EVENTS: redb::TableDefinition<(u64, u64), &[u8]> = redb::TableDefinition::new("events");
    let dir = tempfile::tempdir().unwrap();
    let path = log_file(dir.path(), "log.jsonl", 300, FormatVersion::V3);
    let (store_dir, store) = temp_store();
    let report = import(&store, &path).unwrap();
    assert_eq!(report.events, 300);
    let copy = dir.path().join("copy.redb");
    std::fs::copy(store_path(&store_dir), &copy).unwrap();
    {
        use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};
        let db = redb::Database::open(&copy).unwrap();
        let txn = db.begin_read().unwrap();
        let blocks = txn.open_table(BLOCKS).unwrap();
        let starts: std::collections::BTreeSet<(u64, u64)> = blocks
            .iter()
            .unwrap()
            .map(|entry| {
                let (key, first_seq, _) = entry.unwrap().0.value();
                (key, first_seq)
            })
            .collect();
        assert_eq!(starts.into_iter().map(|(_, s)| s).collect::<Vec<_>>(), [0]);
        assert_eq!(txn.open_table(EVENTS).unwrap().len().unwrap(), 0);
    }
    let events = store.read_range(&report.session, 0, u64::MAX).unwrap();
    assert_eq!(events.len(), 300);
    assert_eq!(store.verify(&[]).unwrap()[0].faults, vec![]);
}
