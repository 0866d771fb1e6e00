//! Sessions of both stored versions (issue #22 item 4): a V3 or V4 log is imported and kept in
//! its own version, exported as it was, copied and verified on every backend; a store records
//! version 3 from its first V4 session on (older builds then refuse it) and verify checks that
//! it does; `migrate --db` writes a stored V3 session's proven V4 successor as a new session.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use redb::{Database, ReadableDatabase, TableDefinition};
use sessionlog_format::gen::GenOptions;
use sessionlog_format::{read_log, Compression, FormatVersion, ReadOptions, SnapshotMode};
use sessionlog_store::embedded::verify::FaultKind;
use sessionlog_store::embedded::{
    Store, StoreError, STORE_FORMAT_VERSION, STORE_VERSION_BLOCKS, STORE_VERSION_V4_SESSIONS,
};
use sessionlog_store::generate::generate_file;
use sessionlog_store::log_store::{copy_sessions, LogStore};
use sessionlog_store::mem_store::MemStore;
use sessionlog_store::migrate::{migrate_file, MigrateOptions, Outcome};
use sessionlog_store::migrate_stored::{default_target_id, migrate_stored};
use sessionlog_store::transfer::{export_session, import_file, ExportTarget};

use crate::harness::backends;
use crate::support::*;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// A generated log of `version` with `events` events under the id `id`.
fn log_file(dir: &Path, id: &str, events: u64, version: FormatVersion) -> PathBuf {
    let generated = dir.join(format!("gen-{id}.{}", version.file_name(false)));
    let options = GenOptions { events, seed: 11 };
    generate_file(&generated, options, version, Compression::None, &mut |_| {}).unwrap();
    // The same log under a fresh id, so that runs against a shared database never collide.
    let log = read_log(
        std::fs::File::open(&generated).unwrap(),
        ReadOptions::default(),
    )
    .unwrap();
    let mut header = log.header.clone();
    header.id = id.to_owned();
    let path = dir.join(format!("{id}.{}", version.file_name(false)));
    let mut writer = sessionlog_format::LogWriter::new(
        std::fs::File::create(&path).unwrap(),
        &header,
        Compression::None,
    )
    .unwrap();
    writer.append_batch(&log.events).unwrap();
    drop(writer);
    path
}

fn read(path: &Path) -> sessionlog_format::Log {
    read_log(std::fs::File::open(path).unwrap(), ReadOptions::default()).unwrap()
}

/// The store version a redb store's meta record names, read straight from the file.
fn meta_version(path: &Path) -> u32 {
    let db = Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    let bytes = meta.get("store").unwrap().unwrap().value().to_vec();
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

// Goal: on every backend a V3 and a V4 log are each kept in their own version: the session's
// info names it, its events read back exactly, the export is byte-identical to the imported
// file, verify finds nothing (checkpoints included: 3000 events cross several), and a copy to
// another backend keeps the version and the events.
#[test]
fn each_session_keeps_its_version_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    for backend in backends("each_session_keeps_its_version") {
        let store = &*backend.store;
        for version in [FormatVersion::V3, FormatVersion::V4] {
            let id = crate::harness::unique_id(&format!("versions-{}", version.number()));
            let file = log_file(dir.path(), &id, 3000, version);
            let report = import_file(store, &file, SnapshotMode::Auto, &mut |_| {}).unwrap();
            let info = store.session_info(&report.session).unwrap();
            assert_eq!(info.version(), version, "{}", backend.name);
            assert_eq!(info.context().version, version);
            let original = read(&file);
            assert_eq!(
                store.read_range(&id, 0, u64::MAX).unwrap(),
                original.events,
                "{}",
                backend.name
            );
            let out = dir
                .path()
                .join(format!("{id}.export.{}", version.file_name(false)));
            export_session(store, &id, &ExportTarget::File(out.clone())).unwrap();
            assert_eq!(
                std::fs::read(&out).unwrap(),
                std::fs::read(&file).unwrap(),
                "{} {version}: the export is the imported log",
                backend.name
            );
            let reports = store.verify(std::slice::from_ref(&id)).unwrap();
            assert_eq!(reports[0].faults, vec![], "{} {version}", backend.name);
            assert_eq!(reports[0].events, 3000);
            let copy = MemStore::new();
            copy_sessions(store, &copy, std::slice::from_ref(&id), &mut |_, _| {}).unwrap();
            assert_eq!(copy.session_info(&id).unwrap().version(), version);
            assert_eq!(copy.read_range(&id, 0, u64::MAX).unwrap(), original.events);
        }
    }
}

// Goal: a new store stays at version 2 while it holds only V3 sessions (older builds open it
// unchanged), moves to version 3 with its first V4 session, and reopens and verifies; verify
// reports a V4 session in a store whose meta record still says 2, which older builds would
// read by the V3 rules.
#[test]
fn the_store_version_moves_with_the_first_v4_session() {
    let (dir, store) = temp_store();
    let path = store_path(&dir);
    let v3 = log_file(dir.path(), "a-v3", 200, FormatVersion::V3);
    import_file(&store, &v3, SnapshotMode::Auto, &mut |_| {}).unwrap();
    drop(store);
    assert_eq!(meta_version(&path), STORE_VERSION_BLOCKS);
    let store = Store::open(&path).unwrap();
    drop(store);
    assert_eq!(
        meta_version(&path),
        STORE_VERSION_BLOCKS,
        "an open alone changes nothing"
    );
    let store = Store::open(&path).unwrap();
    let v4 = log_file(dir.path(), "b-v4", 200, FormatVersion::V4);
    import_file(&store, &v4, SnapshotMode::Auto, &mut |_| {}).unwrap();
    drop(store);
    assert_eq!(meta_version(&path), STORE_VERSION_V4_SESSIONS);
    assert_eq!(STORE_FORMAT_VERSION, STORE_VERSION_V4_SESSIONS);
    let store = Store::open_read_only(&path).unwrap();
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    drop(store);
    // Forge the meta record back to version 2, as a downgrade by hand would leave it.
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            let mut bytes = b"SESSLOG\0".to_vec();
            bytes.extend_from_slice(&STORE_VERSION_BLOCKS.to_le_bytes());
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
            meta.insert("store", bytes.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open_read_only(&path).unwrap();
    let reports = store.verify(&[]).unwrap();
    let faults: Vec<_> = reports
        .iter()
        .flat_map(|r| r.faults.iter().map(move |f| (r.session.as_str(), f)))
        .collect();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, "b-v4");
    assert_eq!(faults[0].1.kind, FaultKind::Session);
    assert!(
        faults[0]
            .1
            .message
            .starts_with("a v4 session in a store of version 2"),
        "{}",
        faults[0].1.message
    );
}

// Goal: a store refuses a session header of a version it does not keep, naming it, and
// creates nothing.
#[test]
fn only_v3_and_v4_headers_are_stored() {
    for backend in backends("only_v3_and_v4_headers_are_stored") {
        for version in [None, Some(2), Some(5)] {
            let mut header = header(&crate::harness::unique_id("old-header"));
            header.version = version;
            let error = backend.store.create_session(&header, false).unwrap_err();
            assert!(
                matches!(&error, StoreError::InvalidHeader { reason }
                    if reason.starts_with("the store keeps V3 and V4 sessions")),
                "{}: {error}",
                backend.name
            );
            assert!(backend.store.session_info(&header.id).is_err());
        }
    }
}

// Goal: `migrate --db` writes a stored V3 session's V4 successor as a new session, proven,
// with the events the file migration writes; the source is unchanged; a rerun is `current`
// and rewrites nothing; a dry run writes nothing; a V4 session is current in its version.
#[test]
fn a_stored_v3_session_gets_a_proven_v4_successor() {
    let dir = tempfile::tempdir().unwrap();
    for backend in backends("a_stored_v3_session_gets_a_proven_v4_successor") {
        let store = &*backend.store;
        let id = crate::harness::unique_id("migrate-db");
        let file = log_file(dir.path(), &id, 1500, FormatVersion::V3);
        import_file(store, &file, SnapshotMode::Auto, &mut |_| {}).unwrap();
        let head = store.head(&id).unwrap();
        let options = MigrateOptions {
            to: Some(FormatVersion::V4),
            ..MigrateOptions::default()
        };
        let dry = MigrateOptions {
            dry_run: true,
            ..options.clone()
        };
        let dry_target = format!("{id}.dry");
        let outcome = migrate_stored(store, &id, &dry_target, &dry, &mut |_| {}).unwrap();
        assert!(matches!(outcome.outcome, Outcome::Converted { .. }));
        assert!(matches!(
            store.session_info(&dry_target),
            Err(StoreError::UnknownSession { .. })
        ));

        let target = default_target_id(&id, FormatVersion::V4);
        let outcome = migrate_stored(store, &id, &target, &options, &mut |_| {}).unwrap();
        let Outcome::Converted {
            requests_proved: Some(proved),
        } = outcome.outcome
        else {
            panic!("{}: {outcome:?}", backend.name)
        };
        assert!(proved > 0);
        assert_eq!((outcome.from, outcome.to), (3, 4));
        assert_eq!(outcome.target.as_deref(), Some(target.as_str()));
        assert_eq!(store.head(&id).unwrap(), head, "the source is unchanged");
        let info = store.session_info(&target).unwrap();
        assert_eq!(info.version(), FormatVersion::V4);
        assert_eq!(info.header.id, target);

        // The file migration of the same log writes the same events.
        let files = tempfile::tempdir().unwrap();
        let source = files.path().join("session.v3.jsonl");
        std::fs::copy(&file, &source).unwrap();
        let migrated = migrate_file(&source, Path::new("session.v3.jsonl"), &options);
        assert!(matches!(migrated.outcome, Outcome::Converted { .. }));
        let expected = read(&files.path().join("session.v4.jsonl"));
        assert_eq!(
            store.read_range(&target, 0, u64::MAX).unwrap(),
            expected.events
        );
        let reports = store.verify(&[id.clone(), target.clone()]).unwrap();
        assert!(reports.iter().all(|r| r.ok()), "{reports:?}");

        let target_head = store.head(&target).unwrap();
        let again = migrate_stored(store, &id, &target, &options, &mut |_| {}).unwrap();
        assert_eq!(again.outcome, Outcome::Current);
        assert_eq!(store.head(&target).unwrap(), target_head);
        let v4 = migrate_stored(store, &target, "unused", &options, &mut |_| {}).unwrap();
        assert_eq!((v4.outcome, v4.target), (Outcome::Current, None));
    }
}

// Goal: a PostgreSQL database of schema 2 (before `format_version`) is read as it is by a
// read-only connection, its sessions V3, and verified; a writing connection migrates it to
// schema 3 with every existing session kept as V3; a row whose column and header disagree on
// the version is corruption.
#[test]
fn a_schema_2_database_reads_unchanged_and_migrates() {
    let Some(url) = crate::harness::postgres_url("a_schema_2_database") else {
        return;
    };
    let url = crate::harness::fresh_database(&url, "schema2");
    let dir = tempfile::tempdir().unwrap();
    let file = log_file(dir.path(), "old-v3", 300, FormatVersion::V3);
    {
        let store = sessionlog_store::pg_store::PgStore::connect(&url).unwrap();
        import_file(&store, &file, SnapshotMode::Auto, &mut |_| {}).unwrap();
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(
            "ALTER TABLE sessionlog_sessions DROP COLUMN format_version; \
             DELETE FROM sessionlog_schema WHERE version >= 3",
        )
        .unwrap();
    let reader = sessionlog_store::pg_store::PgStore::connect_read_only(&url).unwrap();
    assert_eq!(reader.schema_version().unwrap(), 2);
    assert_eq!(
        reader.session_info("old-v3").unwrap().version(),
        FormatVersion::V3
    );
    assert!(reader.verify(&[]).unwrap().iter().all(|r| r.ok()));
    assert_eq!(
        reader.schema_version().unwrap(),
        2,
        "a read migrates nothing"
    );
    drop(reader);
    let writer = sessionlog_store::pg_store::PgStore::connect(&url).unwrap();
    assert_eq!(
        writer.schema_version().unwrap(),
        sessionlog_store::pg_store::SCHEMA_VERSION
    );
    assert_eq!(
        writer.session_info("old-v3").unwrap().version(),
        FormatVersion::V3
    );
    let v4 = log_file(dir.path(), "new-v4", 300, FormatVersion::V4);
    import_file(&writer, &v4, SnapshotMode::Auto, &mut |_| {}).unwrap();
    assert!(writer.verify(&[]).unwrap().iter().all(|r| r.ok()));
    drop(writer);
    client
        .batch_execute(
            "UPDATE sessionlog_sessions SET format_version = 3 WHERE session_id = 'new-v4'",
        )
        .unwrap();
    let reader = sessionlog_store::pg_store::PgStore::connect_read_only(&url).unwrap();
    let error = reader.session_info("new-v4").unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { reason } if reason.contains("row version 3")),
        "{error}"
    );
}
