//! Read-only opens beside a writer: a read command reads the snapshot the writer's gate lets
//! through (redb's last durable commit plus the WAL), sees every acknowledged event, never
//! writes, and the writer's durable transitions wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sessionlog_format::SurfaceOp;
use sessionlog_store::embedded::Store;

use crate::support::*;

/// Appends `n` title events to session `a` of `store`, from seq `from`, in batches of 10.
fn append_titles(store: &Store, from: u64, n: u64) {
    for start in (from..from + n).step_by(10) {
        let batch = (start..(start + 10).min(from + n)).map(title).collect();
        store.append("a", start, batch).unwrap();
    }
}

// Goal: a read-only open beside an open writer sees every acknowledged event, verifies clean,
// and keeps its snapshot while the writer goes on; a later read-only open sees the new events.
// Method: a writer store with 100 acknowledged events (all in its WAL, none durable in redb
// yet); a read-only open (the snapshot path, since the writer holds redb's lock); 100 more
// appends; compare both readers' heads and records with the writer's.
#[test]
fn a_reader_beside_a_writer_sees_every_acknowledged_event() {
    let (dir, writer) = temp_store();
    writer.create_session(&header("a")).unwrap();
    append_titles(&writer, 0, 100);
    let path = store_path(&dir);

    let first = Store::open_read_only(&path).unwrap();
    assert!(first.is_read_only());
    assert_eq!(first.head("a").unwrap(), writer.head("a").unwrap());
    assert_eq!(
        first.read_range("a", 0, 100).unwrap(),
        writer.read_range("a", 0, 100).unwrap()
    );
    let reports = first.verify(&[]).unwrap();
    assert_eq!(reports.len(), 1);
    assert!(reports[0].ok(), "{reports:?}");
    assert_eq!(reports[0].events, 100);

    append_titles(&writer, 100, 100);
    assert_eq!(first.head("a").unwrap().next_seq, 100, "the snapshot moved");
    let second = Store::open_read_only(&path).unwrap();
    assert_eq!(second.head("a").unwrap(), writer.head("a").unwrap());
    assert!(second.verify(&[]).unwrap()[0].ok());
    // A snapshot takes no write.
    assert!(first.append("a", 100, vec![title(100)]).is_err());
    drop((first, second));

    drop(writer);
    let reopened = Store::open(&path).unwrap();
    assert_eq!(reopened.head("a").unwrap().next_seq, 200);
}

// Goal: a writer's close (which makes redb durable, restarts the WAL and lets redb write its
// shutdown state) waits for a snapshot reader to finish, so the reader's snapshot is never
// changed under it.
// Method: hold a snapshot in another thread, which verifies it, then sets a flag and drops it
// after 300 ms; the writer closes meanwhile. The close must return after the flag is set, and
// the reader's verify (run before and after the close began) is clean.
#[test]
fn a_writer_close_waits_for_a_snapshot_reader() {
    let (dir, writer) = temp_store();
    writer.create_session(&header("a")).unwrap();
    append_titles(&writer, 0, 50);
    let path = store_path(&dir);
    let reader = Store::open_read_only(&path).unwrap();
    let released = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader_thread = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            let reports = reader.verify(&[]).unwrap();
            released.store(true, Ordering::SeqCst);
            drop(reader);
            reports
        });
        drop(writer);
        assert!(
            released.load(Ordering::SeqCst),
            "the writer closed under a snapshot reader"
        );
        let reports = reader_thread.join().unwrap();
        assert!(reports[0].ok(), "{reports:?}");
        assert_eq!(reports[0].events, 50);
    });
    let reopened = Store::open_read_only(&path).unwrap();
    assert_eq!(reopened.head("a").unwrap().next_seq, 50);
    assert!(reopened.verify(&[]).unwrap()[0].ok());
}

// Goal: a WAL that outgrows the durable threshold while a snapshot reader holds the gate does
// not make redb durable under it: the reader still reads and verifies its snapshot whole, and
// once it is gone the writer catches up and nothing acknowledged is lost.
// Method: a reader holds a snapshot of 10 events; the writer appends about 70 MiB of messages
// (past the WAL's 64 MiB durable threshold); the reader verifies; it drops; one more append;
// the store reopens with every event.
#[test]
fn a_full_wal_defers_its_durable_commit_while_a_reader_holds_a_snapshot() {
    let (dir, writer) = temp_store();
    writer.create_session(&header("a")).unwrap();
    append_titles(&writer, 0, 10);
    let path = store_path(&dir);
    let reader = Store::open_read_only(&path).unwrap();
    let text = "x".repeat(1 << 20);
    let mut seq = 10;
    for _ in 0..70 {
        let event = user(seq, &text, SurfaceOp::Append, None);
        writer.append("a", seq, vec![event]).unwrap();
        seq += 1;
    }
    let reports = reader.verify(&[]).unwrap();
    assert!(reports[0].ok(), "{reports:?}");
    assert_eq!(reports[0].events, 10);
    assert_eq!(reader.read_range("a", 0, 10).unwrap().len(), 10);
    drop(reader);
    writer.append("a", seq, vec![title(seq)]).unwrap();
    drop(writer);
    let reopened = Store::open_read_only(&path).unwrap();
    let reports = reopened.verify(&[]).unwrap();
    assert!(reports[0].ok(), "{reports:?}");
    assert_eq!(reports[0].events, seq + 1);
}
