//! The backend suite: every `LogStore` implementation (the embedded redb store, the in-memory
//! store and PostgreSQL) keeps the same records, heads and folds, refuses the same batches, and verifies
//! clean. PostgreSQL runs when `SESSIONLOG_TEST_POSTGRES` names a database (`.ci/run` starts
//! one); without it the postgres half prints a skip note, except under `CI=true`, where a
//! missing database fails the test.

use pretty_assertions::assert_eq;
use sessionlog_format::relations::FactJournal;
use sessionlog_format::{Event, SurfaceOp};
use sessionlog_store::embedded::{AppendRequest, Store, StoreError, CHECKPOINT_INTERVAL_EVENTS};
use sessionlog_store::log_store::{copy_sessions, LogStore};
use sessionlog_store::pg_store::{PgStore, SCHEMA_VERSION};

use crate::harness::*;
use crate::support::*;

// Goal: the same session appended to every backend reads back equal, with equal heads (the
// chain hash is a function of the header and the events, whatever stores them), and
// verifies clean.
// Method: a generated session of 600 events, batch by batch, on each backend.
#[test]
fn every_backend_keeps_the_same_records_and_head() {
    let (header, batches) = session("same-records", 600);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    let mut heads = Vec::new();
    for backend in backends("every_backend_keeps_the_same_records_and_head") {
        let store = backend.store.as_ref();
        append_all(store, &header, &batches);
        let read = store.read_range(&header.id, 0, u64::MAX).unwrap();
        assert_eq!(read, events, "{}", backend.name);
        let middle = store.read_range(&header.id, 100, 150).unwrap();
        assert_eq!(middle, events[100..150].to_vec(), "{}", backend.name);
        let head = store.head(&header.id).unwrap();
        assert_eq!(head.next_seq, events.len() as u64);
        let reports = store.verify(std::slice::from_ref(&header.id)).unwrap();
        assert!(reports[0].ok(), "{}: {:?}", backend.name, reports[0].faults);
        assert_eq!(reports[0].head_chain, head.chain);
        let generic =
            sessionlog_store::verify::verify(store, std::slice::from_ref(&header.id)).unwrap();
        assert_eq!(
            generic, reports,
            "{}: the generic verify agrees",
            backend.name
        );
        assert!(store.sessions().unwrap().contains(&header.id));
        heads.push((backend.name, head));
    }
    for (name, head) in &heads {
        assert_eq!(*head, heads[0].1, "{name} against {}", heads[0].0);
    }
}

// Goal: a stale expected seq is a conflict naming the current head, and a batch that breaks a
// rule is refused with its seq and rule, writing nothing, on every backend.
// Method: append the first batch, then replay it (conflict), then a user message as node 0.
#[test]
fn conflicts_and_refusals_write_nothing() {
    for backend in backends("conflicts_and_refusals_write_nothing") {
        let store = backend.store.as_ref();
        let id = unique_id("refusals");
        store.create_session(&header(&id), false).unwrap();
        let refused = store.append(AppendRequest {
            session: id.clone(),
            expected_next_seq: 0,
            // A system message outside any open step.
            events: vec![system(0, 9, 9, "hello", SurfaceOp::Append)],
        });
        assert!(
            matches!(&refused, Err(StoreError::Rejected { seq: 0, .. })),
            "{}: {refused:?}",
            backend.name
        );
        let before = store.head(&id).unwrap();
        assert_eq!(before.next_seq, 0);
        store
            .append(AppendRequest {
                session: id.clone(),
                expected_next_seq: 0,
                events: vec![title(0), title(1)],
            })
            .unwrap();
        let stale = store.append(AppendRequest {
            session: id.clone(),
            expected_next_seq: 1,
            events: vec![title(1)],
        });
        assert!(
            matches!(
                &stale,
                Err(StoreError::Conflict {
                    expected: 1,
                    current: 2,
                    ..
                })
            ),
            "{}: {stale:?}",
            backend.name
        );
        let unknown = store.head("no-such-session-anywhere");
        assert!(matches!(unknown, Err(StoreError::UnknownSession { .. })));
        assert_eq!(store.read_range(&id, 0, 10).unwrap().len(), 2);
    }
}

// Goal: a session past the checkpoint interval keeps a checkpoint that verify accepts, and a
// second connection (a fresh process) resumes from it and appends on.
// Method: CHECKPOINT_INTERVAL_EVENTS + 300 events; reopen the backend; append one more batch.
#[test]
fn checkpoints_are_kept_and_resumed() {
    let n_events = CHECKPOINT_INTERVAL_EVENTS + 300;
    let (header, batches) = session("checkpoint", n_events);
    for backend in backends("checkpoints_are_kept_and_resumed") {
        let store = backend.store.as_ref();
        append_all(store, &header, &batches);
        if !backend.checkpoints {
            assert_eq!(
                store.checkpoint(&header.id).unwrap(),
                None,
                "{}",
                backend.name
            );
            continue;
        }
        let checkpoint = store.checkpoint(&header.id).unwrap();
        assert!(
            matches!(&checkpoint, Some(Ok((next_seq, _, _))) if *next_seq >= CHECKPOINT_INTERVAL_EVENTS),
            "{}",
            backend.name
        );
        // What verify reads: the same checkpoint, its journal as the reference of the bytes.
        let mut expected = checkpoint.clone();
        if let Some(Ok((_, _, fold))) = &mut expected {
            let journal = fold
                .relations
                .facts
                .bytes()
                .expect("a resolved journal")
                .to_vec();
            assert!(
                !journal.is_empty(),
                "{}: facts were journaled",
                backend.name
            );
            fold.relations.facts = FactJournal::stored(&journal);
        }
        let by_reference = store.checkpoint_by_reference(&header.id).unwrap();
        assert_eq!(by_reference, expected, "{}", backend.name);
        let report = store
            .verify(std::slice::from_ref(&header.id))
            .unwrap()
            .pop()
            .unwrap();
        assert!(report.ok(), "{}: {:?}", backend.name, report.faults);
    }
    let Some(url) = postgres_url("checkpoints_are_kept_and_resumed") else {
        return;
    };
    let reopened = PgStore::connect(&url).unwrap();
    assert_eq!(reopened.schema_version().unwrap(), SCHEMA_VERSION);
    let head = reopened.head(&header.id).unwrap();
    let fold = reopened.fold_at(&header.id, None).unwrap();
    assert_eq!(fold.admission().next_seq(), head.next_seq);
    let next = head.next_seq;
    let ack = reopened
        .append(AppendRequest {
            session: header.id.clone(),
            expected_next_seq: next,
            events: vec![title(next)],
        })
        .unwrap();
    assert_eq!(ack.next_seq, next + 1);
}

// Goal: two processes on one PostgreSQL session: of two appends at the same seq exactly one
// wins, the other gets a conflict with the new head, and each sees the other's events.
// Method: two PgStore connections alternate; both try every seq, in both orders.
#[test]
fn postgres_writers_race_with_one_winner_per_seq() {
    let Some(url) = postgres_url("postgres_writers_race_with_one_winner_per_seq") else {
        return;
    };
    let a = PgStore::connect(&url).unwrap();
    let b = PgStore::connect(&url).unwrap();
    let id = unique_id("race");
    a.create_session(&header(&id), false).unwrap();
    let exists = b.create_session(&header(&id), false);
    assert!(matches!(exists, Err(StoreError::SessionExists { .. })));
    for seq in 0..20u64 {
        let (first, second) = if seq % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let request = AppendRequest {
            session: id.clone(),
            expected_next_seq: seq,
            events: vec![title(seq)],
        };
        assert_eq!(first.append(request.clone()).unwrap().next_seq, seq + 1);
        let lost = second.append(request);
        assert!(
            matches!(lost, Err(StoreError::Conflict { current, .. }) if current == seq + 1),
            "seq {seq}"
        );
    }
    assert_eq!(a.head(&id).unwrap(), b.head(&id).unwrap());
    let report = b.verify(std::slice::from_ref(&id)).unwrap().pop().unwrap();
    assert!(report.ok(), "{:?}", report.faults);
    assert_eq!(report.events, 20);
}

// Goal: `copy` moves every session to PostgreSQL, verifying on arrival with the source's head,
// and a second copy resumes (copies nothing) instead of duplicating.
// Method: two generated sessions in redb; copy them; copy again.
#[test]
fn copy_moves_sessions_and_verifies_on_arrival() {
    let Some(url) = postgres_url("copy_moves_sessions_and_verifies_on_arrival") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = Store::open(&dir.path().join("store.redb")).unwrap();
    let mut ids = Vec::new();
    for n in [300, 5000] {
        let (header, batches) = session("copy", n);
        append_all(&source, &header, &batches);
        ids.push(header.id);
    }
    let target = PgStore::connect(&url).unwrap();
    let mut progress = |_: &str, _: u64| {};
    let copied = copy_sessions(&source, &target, &ids, &mut progress).unwrap();
    for (copy, id) in copied.iter().zip(&ids) {
        assert_eq!(copy.session, *id);
        assert!(copy.report.ok(), "{:?}", copy.report.faults);
        assert_eq!(copy.copied_events, copy.events);
        let source_head = LogStore::head(&source, id).unwrap();
        assert_eq!(copy.head_chain, source_head.chain);
    }
    let again = copy_sessions(&source, &target, &ids, &mut progress).unwrap();
    assert!(again.iter().all(|c| c.copied_events == 0 && c.report.ok()));
}

// Goal: verify on PostgreSQL finds a damaged record (checksum) and a dropped one (missing),
// with their seqs: the same walk as on redb.
// Method: alter one record's byte and delete another through SQL.
#[test]
fn postgres_verify_reports_damage() {
    let Some(url) = postgres_url("postgres_verify_reports_damage") else {
        return;
    };
    let store = PgStore::connect(&url).unwrap();
    let (header, batches) = session("damage", 200);
    append_all(&store, &header, &batches);
    let mut sql = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    sql.execute(
        "UPDATE sessionlog_events SET record = overlay(record placing '\\xff'::bytea from 60) \
         WHERE session_id = $1 AND seq = 50",
        &[&header.id],
    )
    .unwrap();
    sql.execute(
        "DELETE FROM sessionlog_events WHERE session_id = $1 AND seq = 120",
        &[&header.id],
    )
    .unwrap();
    let report = store
        .verify(std::slice::from_ref(&header.id))
        .unwrap()
        .pop()
        .unwrap();
    let faults: Vec<(Option<u64>, &str)> = report
        .faults
        .iter()
        .map(|f| (f.seq, f.kind.name()))
        .collect();
    assert_eq!(
        faults,
        vec![
            (Some(50), "checksum"),
            (Some(120), "missing"),
            // The record after the gap does not follow from the one before it.
            (Some(121), "chain"),
        ],
        "{:?}",
        report.faults
    );
}

// Goal: a PostgreSQL store survives its server closing its connections (a restart, a
// failover): closed pooled connections are replaced, and appends go on from the head.
// Method: terminate the store's backends (tagged by application_name), then retry a head
// read a bounded number of times and append.
#[test]
fn postgres_store_reconnects_after_its_connections_close() {
    let Some(url) = postgres_url("postgres_store_reconnects_after_its_connections_close") else {
        return;
    };
    let tag = format!("sessionlog-reconnect-{}", std::process::id());
    let separator = if url.contains('?') { '&' } else { '?' };
    let tagged = format!("{url}{separator}application_name={tag}");
    let store = PgStore::connect(&tagged).unwrap();
    let id = unique_id("reconnect");
    store.create_session(&header(&id), false).unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&tag],
        )
        .unwrap();
    assert!(!killed.is_empty());
    // A query on a connection not yet seen closed fails once; the pool then replaces it.
    let head = (0..8).find_map(|_| store.head(&id).ok());
    assert_eq!(head.map(|h| h.next_seq), Some(0));
    let ack = (0..8).find_map(|_| {
        store
            .append(AppendRequest {
                session: id.clone(),
                expected_next_seq: 0,
                events: vec![title(0)],
            })
            .ok()
    });
    assert_eq!(ack.map(|a| a.next_seq), Some(1));
}

// Goal: an id that could traverse paths is refused by every backend at creation, and the
// refusal creates nothing. Method: create "../escape" on each backend and list sessions.
#[test]
fn every_backend_refuses_a_path_traversal_session_id() {
    for backend in backends("every_backend_refuses_a_path_traversal_session_id") {
        let (mut header, _) = session("traversal", 10);
        header.id = "../escape".into();
        let result = backend.store.create_session(&header, false);
        assert!(
            matches!(result, Err(StoreError::InvalidSessionId { .. })),
            "{}: {result:?}",
            backend.name
        );
        let sessions = backend.store.sessions().unwrap();
        assert!(!sessions.contains(&header.id), "{}", backend.name);
    }
}

// Goal: the import protocol behaves alike on every backend: an unfinished import is hidden
// from listings and refused to readers and writers, a second begin resumes it at its head,
// another header is a mismatch, and the finish makes it a normal session.
// Method: begin, append half, check every refusal, begin again, append the rest, finish.
#[test]
fn every_backend_hides_an_unfinished_import_until_it_finishes() {
    for backend in backends("every_backend_hides_an_unfinished_import_until_it_finishes") {
        let store = backend.store.as_ref();
        let name = backend.name;
        let (header, batches) = session("import", 300);
        let id = header.id.clone();
        let head = store.begin_import(&header, false).unwrap();
        assert_eq!(head.next_seq, 0, "{name}");
        let half = batches.len() / 2;
        let mut next_seq = 0;
        for batch in &batches[..half] {
            next_seq = store
                .append_import(&id, next_seq, batch.clone())
                .unwrap()
                .next_seq;
        }
        assert!(!store.sessions().unwrap().contains(&id), "{name}");
        assert!(store.interrupted_imports().unwrap().contains(&id), "{name}");
        let interrupted = |result: Result<(), StoreError>| {
            assert!(
                matches!(result, Err(StoreError::ImportInterrupted { .. })),
                "{name}: {result:?}"
            );
        };
        interrupted(store.session_info(&id).map(drop));
        interrupted(store.head(&id).map(drop));
        interrupted(store.read_range(&id, 0, 10).map(drop));
        interrupted(store.read_records(&id, 0, 10).map(drop));
        interrupted(store.fold_at(&id, None).map(drop));
        interrupted(
            store
                .append_events(&id, next_seq, batches[half].clone())
                .map(drop),
        );
        let mut other = header.clone();
        other.created_at += 1;
        let mismatch = store.begin_import(&other, false);
        assert!(
            matches!(mismatch, Err(StoreError::ImportMismatch { .. })),
            "{name}: {mismatch:?}"
        );
        let resumed = store.begin_import(&header, false).unwrap();
        assert_eq!(resumed.next_seq, next_seq, "{name}");
        for batch in &batches[half..] {
            next_seq = store
                .append_import(&id, next_seq, batch.clone())
                .unwrap()
                .next_seq;
        }
        store.finish_import(&id).unwrap();
        assert!(store.sessions().unwrap().contains(&id), "{name}");
        assert!(
            !store.interrupted_imports().unwrap().contains(&id),
            "{name}"
        );
        assert_eq!(store.head(&id).unwrap().next_seq, next_seq, "{name}");
        let again = store.begin_import(&header, false);
        assert!(
            matches!(again, Err(StoreError::SessionExists { .. })),
            "{name}: {again:?}"
        );
        let report = store
            .verify(std::slice::from_ref(&id))
            .unwrap()
            .pop()
            .unwrap();
        assert!(report.ok(), "{name}: {:?}", report.faults);
    }
}

// Goal: a copy cut short leaves an unfinished import on the target, never a shorter session
// that looks whole, and a second copy completes it.
// Method: begin the target's import by hand with the source's first events (what a killed
// copy leaves), then copy; on every pair of backends with redb as the source.
#[test]
fn a_copy_resumes_an_interrupted_copy() {
    let (header, batches) = session("copy-resume", 400);
    let dir = tempfile::tempdir().unwrap();
    let source = Store::open(&dir.path().join("source.redb")).unwrap();
    append_all(&source, &header, &batches);
    for backend in backends("a_copy_resumes_an_interrupted_copy") {
        let target = backend.store.as_ref();
        target.begin_import(&header, false).unwrap();
        target
            .append_import(&header.id, 0, batches[0].clone())
            .unwrap();
        assert!(!target.sessions().unwrap().contains(&header.id));
        let copied = copy_sessions(&source, target, &[], &mut |_, _| {}).unwrap();
        assert_eq!(copied.len(), 1, "{}", backend.name);
        assert!(copied[0].report.ok(), "{}", backend.name);
        assert_eq!(
            copied[0].copied_events,
            400 - batches[0].len() as u64,
            "{}",
            backend.name
        );
        assert_eq!(
            target.head(&header.id).unwrap(),
            source.head(&header.id).unwrap()
        );
    }
}

// Goal: a read-only PostgreSQL connection creates and writes nothing: a database without the
// schema is "no store", and every write is refused.
#[test]
fn a_read_only_postgres_connection_writes_nothing() {
    let Some(url) = postgres_url("a_read_only_postgres_connection_writes_nothing") else {
        return;
    };
    // The suite's database has the schema (another connect may have made it first).
    PgStore::connect(&url).unwrap();
    let reader = PgStore::connect_read_only(&url).unwrap();
    let (header, _) = session("read-only", 10);
    let refused = reader.create_session(&header, false);
    assert!(
        matches!(refused, Err(StoreError::ReadOnly { .. })),
        "{refused:?}"
    );
    let refused = reader.begin_import(&header, false);
    assert!(
        matches!(refused, Err(StoreError::ReadOnly { .. })),
        "{refused:?}"
    );
    let empty = fresh_database(&url, "ro");
    let missing = PgStore::connect_read_only(&empty);
    assert!(
        matches!(missing, Err(StoreError::Missing { .. })),
        "{missing:?}"
    );
    let tables = count_tables(&empty);
    assert_eq!(tables, 0, "a read-only connect created tables");
}
