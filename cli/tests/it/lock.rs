//! Two processes and one store: while this test process holds a store open, a `sessionlog`
//! child process that writes to it gets a clear "store is locked" error and exit 1, and the
//! store is untouched; a child that only reads it reads the snapshot the writer lets through.

use std::path::Path;

use pretty_assertions::assert_eq;
use sessionlog_engine::store::Store;
use sessionlog_format::SessionHeader;

use crate::support::{sessionlog, stderr, stdout, write_file};

const LOG: &str = concat!(
    r#"{"type":"session","version":3,"id":"other","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
    "\n"
);

// Goal: a second process writing to a store that is open elsewhere is refused with the lock
// error (exit 1), while a read (`verify`) succeeds and sees the open store's session; once the
// first process closes it, the refused import succeeds.
// Method: hold the store open in this process, run the binary as a child against it.
#[test]
fn second_process_gets_store_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.redb");
    let db_text = db.to_str().unwrap();
    let log = write_file(dir.path(), "other.jsonl", LOG);
    let store = Store::open(&db).unwrap();
    store
        .create_session(&SessionHeader::new_v3("held", 1))
        .unwrap();
    let expected = format!("the store {db_text} is locked: another sessionlog process has it open");
    let output = sessionlog(&["import", "--db", db_text, log.to_str().unwrap()]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "import: {err}");
    assert!(err.contains(&expected), "import: {err}");
    let output = sessionlog(&["--json", "verify", "--db", db_text]);
    assert_eq!(output.status.code(), Some(0), "verify: {}", stderr(&output));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(doc["sessions"][0]["session"], "held", "{doc}");
    assert_eq!(store.sessions().unwrap(), vec!["held".to_owned()]);
    drop(store);
    check_imports(&db, &log);
}

fn check_imports(db: &Path, log: &Path) {
    let output = sessionlog(&[
        "import",
        "--db",
        db.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let store = Store::open(db).unwrap();
    assert_eq!(
        store.sessions().unwrap(),
        vec!["held".to_owned(), "other".to_owned()]
    );
}
