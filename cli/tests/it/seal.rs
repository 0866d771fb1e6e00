//! `export --seal` and `verify FILE`: a sealed export verifies; any damage to the file, a
//! stripped or edited seal, and a line rewritten to the same events are all caught.

use std::path::Path;

use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout, with_db};

/// A store with one generated session; returns the session id.
fn imported(dir: &Path, db: &Path) -> String {
    let file = dir.join("in.v3.jsonl");
    let file = file.to_str().unwrap();
    let output = sessionlog(&["gen", "--events", "400", "--seed", "5", "-o", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let import = with_db(db, &["import", "--acks", file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let last = stdout(&import).lines().last().unwrap().to_owned();
    last.split(' ').nth(1).unwrap().to_owned()
}

fn sealed_export(dir: &Path, db: &Path, session: &str, name: &str) -> String {
    let out = dir.join(name);
    let out = out.to_str().unwrap().to_owned();
    let export = with_db(db, &["export", "--seal", session, "-o", &out]);
    assert_eq!(export.status.code(), Some(0), "{}", stderr(&export));
    out
}

// Goal: a sealed export (raw and zstd) verifies, and the seal's chain head is the store's.
// Method: export with --seal, run `verify FILE --json`, compare with `verify --json` of the
// store.
#[test]
fn sealed_export_verifies_with_the_store_head() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let session = imported(tmp.path(), &db);
    let store_verify = with_db(&db, &["--json", "verify"]);
    let store_doc: Value = serde_json::from_str(&stdout(&store_verify)).unwrap();
    let head = store_doc["sessions"][0]["headHash"].clone();
    for name in ["out.v3.jsonl", "out.v3.jsonl.zstd"] {
        let out = sealed_export(tmp.path(), &db, &session, name);
        assert!(Path::new(&format!("{out}.seal")).is_file());
        let verify = sessionlog(&["--json", "verify", &out]);
        assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
        let doc: Value = serde_json::from_str(&stdout(&verify)).unwrap();
        assert_eq!(doc["files"][0]["ok"], Value::Bool(true));
        assert_eq!(doc["files"][0]["events"], Value::from(400));
        assert_eq!(doc["files"][0]["headHash"], head);
    }
}

// Goal: every tampering with a sealed raw export is reported with exit 1: a changed byte in
// a row, a reordered key (same events, other bytes), a dropped last line, a stripped seal and
// an edited seal.
// Method: copy the sealed export, apply one edit per copy, run `verify FILE` on it.
#[test]
fn tampering_is_evident() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let session = imported(tmp.path(), &db);
    let out = sealed_export(tmp.path(), &db, &session, "base.v3.jsonl");
    let text = std::fs::read_to_string(&out).unwrap();
    let seal = std::fs::read_to_string(format!("{out}.seal")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut cases: Vec<(&str, String, Option<String>, &str)> = Vec::new();
    // A digit of a time field changed: still valid JSON with a valid envelope.
    let row = lines[5];
    let at = row.find("\"time\":").unwrap() + 8;
    let digit = row.as_bytes()[at];
    let swapped = if digit == b'1' { '2' } else { '1' };
    let edited_row = format!("{}{swapped}{}", &row[..at], &row[at + 1..]);
    let mut edited = lines.clone();
    edited[5] = &edited_row;
    cases.push((
        "edited",
        edited.join("\n") + "\n",
        Some(seal.clone()),
        "fileBlake3",
    ));
    // Whitespace only: the same events, other bytes.
    cases.push((
        "spaced",
        text.replacen("\n", " \n", 1),
        Some(seal.clone()),
        "fileBlake3",
    ));
    let dropped = lines[..lines.len() - 1].join("\n") + "\n";
    cases.push(("dropped", dropped, Some(seal.clone()), "events"));
    cases.push(("stripped", text.clone(), None, "no seal"));
    let bad_seal = seal.replace("\"events\":400", "\"events\":401");
    cases.push(("resealed", text.clone(), Some(bad_seal), "events"));
    for (name, body, seal_text, expect) in cases {
        let path = tmp.path().join(format!("{name}.v3.jsonl"));
        std::fs::write(&path, body).unwrap();
        if let Some(seal_text) = seal_text {
            std::fs::write(tmp.path().join(format!("{name}.v3.jsonl.seal")), seal_text).unwrap();
        }
        let verify = sessionlog(&["verify", path.to_str().unwrap()]);
        let err = stderr(&verify);
        assert_eq!(verify.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(expect), "{name}: {err}");
        assert!(err.contains(&format!("{name}.v3.jsonl")), "{name}: {err}");
    }
}

// Goal: `--seal` refuses stdout, and `verify` refuses a mix of files and session ids.
// Method: run both and check the exit code and message.
#[test]
fn seal_arguments_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let session = imported(tmp.path(), &db);
    let export = with_db(&db, &["export", "--seal", &session, "-o", "-"]);
    assert_eq!(export.status.code(), Some(1));
    assert!(stderr(&export).contains("--seal"), "{}", stderr(&export));
    let out = sealed_export(tmp.path(), &db, &session, "x.v3.jsonl");
    let verify = with_db(&db, &["verify", &out, "no-such-session"]);
    assert_eq!(verify.status.code(), Some(1));
    assert!(
        stderr(&verify).contains("no-such-session"),
        "{}",
        stderr(&verify)
    );
}
