//! The store commands through the binary: import (with --acks), export, verify, messages and
//! surface, with their exit codes and `--json` shapes.

use std::path::Path;
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout, with_db};

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

fn generate(dir: &Path, name: &str, events: &str, seed: &str) -> String {
    let path = dir.join(name);
    let path = path.to_str().unwrap().to_owned();
    let output = sessionlog(&["gen", "--events", events, "--seed", seed, "-o", &path]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    path
}

// Goal: import prints an acknowledgement per durable commit, ending at the last seq; verify
// then passes with the CLI.md shape; export round-trips to the same events.
#[test]
fn import_verify_export() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let file = generate(tmp.path(), "a.v3.jsonl", "3000", "1");
    let import = with_db(&db, &["import", "--acks", &file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let acks: Vec<String> = stdout(&import).lines().map(str::to_owned).collect();
    assert!(acks.len() >= 3, "{acks:?}");
    let last: Vec<&str> = acks.last().unwrap().split(' ').collect();
    assert_eq!((last[0], last[2]), ("committed", "2999"));
    let session = last[1].to_owned();

    let verify = with_db(&db, &["--json", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    let doc = json_of(&verify);
    let entry = &doc["sessions"][0];
    assert_eq!(entry["session"], Value::from(session.clone()));
    assert_eq!(entry["events"], Value::from(3000));
    assert_eq!(entry["ok"], Value::Bool(true));
    assert_eq!(entry["headHash"].as_str().unwrap().len(), 64);
    assert_eq!(entry["faults"], Value::Array(vec![]));

    let out = tmp.path().join("out.v3.jsonl.zstd");
    let export = with_db(&db, &["export", &session, "-o", out.to_str().unwrap()]);
    assert_eq!(export.status.code(), Some(0), "{}", stderr(&export));
    let again = with_db(&db, &["export", &session, "-o", out.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1), "export never overwrites");
    let stdout_export = with_db(&db, &["export", &session, "-o", "-"]);
    assert_eq!(stdout(&sessionlog(&["cat", &file])), stdout(&stdout_export));
    let cat = sessionlog(&["cat", out.to_str().unwrap()]);
    assert_eq!(stdout(&cat), stdout(&stdout_export));
}

// Goal: messages and surface read the same view from a file and from the store, at the head
// and at a seq, with CLI.md's JSON shapes.
#[test]
fn messages_and_surface_from_file_and_store() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let file = generate(tmp.path(), "b.v3.jsonl", "1500", "2");
    assert_eq!(with_db(&db, &["import", &file]).status.code(), Some(0));
    let session = json_of(&with_db(&db, &["--json", "verify"]))["sessions"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    for at in [None, Some("700")] {
        let mut file_args = vec!["--json", "messages", file.as_str()];
        let mut db_args = vec![
            "--json",
            "messages",
            "--db",
            db.to_str().unwrap(),
            session.as_str(),
        ];
        if let Some(at) = at {
            file_args.extend(["--at", at]);
            db_args.extend(["--at", at]);
        }
        let from_file = json_of(&sessionlog(&file_args));
        let from_db = json_of(&sessionlog(&db_args));
        assert_eq!(from_file, from_db);
        assert_eq!(from_file["session"], Value::from(session.clone()));
        let expected_at = at.map_or(1499, |a| a.parse().unwrap());
        assert_eq!(from_file["atSeq"], Value::from(expected_at));
        assert!(!from_file["messages"].as_array().unwrap().is_empty());
        let surface = json_of(&with_db(&db, &["--json", "surface", session.as_str()]));
        assert!(surface["replaceGeneration"].as_u64().unwrap() > 0);
        assert!(surface["nodes"].as_array().unwrap().len() > 1);
    }
}

// Goal: importing a V0 log the migration chain refuses (a retired `mode/set`) exits 1 with
// `FILE:LINE: reason` and creates no session; asking for an unknown session is exit 1 too.
#[test]
fn refusals_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let v0 = tmp.path().join("session.jsonl");
    let header = r#"{"type":"session","version":0,"id":"o","createdAt":1,"delegationDepth":0}"#;
    let mode = r#"{"type":"mode/set","seq":0,"time":1,"data":{"mode":"plan"}}"#;
    std::fs::write(&v0, format!("{header}\n{mode}\n")).unwrap();
    let import = with_db(&db, &["import", v0.to_str().unwrap()]);
    assert_eq!(import.status.code(), Some(1));
    let expected = format!(
        "{}:2: session \"o\" contains unsupported legacy mode/set event at seq 0",
        v0.display()
    );
    assert!(stderr(&import).contains(&expected), "{}", stderr(&import));
    let listed = with_db(&db, &["messages", "o"]);
    assert_eq!(
        listed.status.code(),
        Some(1),
        "the refused import created nothing"
    );
    let missing = with_db(&db, &["messages", "no-such-session"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no session no-such-session"),
        "{}",
        stderr(&missing)
    );
}

/// The bytes and modification times of a store's files (the `.wal` may be absent).
fn files_state(db: &Path) -> Vec<Option<(Vec<u8>, std::time::SystemTime)>> {
    let wal = sessionlog_engine::store::wal_path(db);
    [db.to_owned(), wal]
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).ok()?;
            Some((bytes, std::fs::metadata(p).ok()?.modified().ok()?))
        })
        .collect()
}

// Goal: issue #20's operator traps: a read command never creates a store (a mistyped --db is
// exit 2 and no file appears; an empty or foreign file is exit 1, named as not a store) and
// never writes one (verify, export, messages, surface, audit leave both files byte for byte
// and mtime for mtime as they were, and work with no .wal file at all, as on a copy of the
// .redb alone made after a clean close).
#[test]
fn read_commands_never_create_or_write_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("typo.redb");
    for args in [
        &["verify"][..],
        &["export", "s", "-o", "-"],
        &["messages", "s"],
    ] {
        let output = with_db(&missing, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("no store at"),
            "{}",
            stderr(&output)
        );
        assert!(!missing.exists(), "{args:?} created the store");
        assert!(!sessionlog_engine::store::wal_path(&missing).exists());
    }
    let empty = tmp.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let output = with_db(&empty, &["verify"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("not a sessionlog store"),
        "{}",
        stderr(&output)
    );
    let foreign = tmp.path().join("foreign.redb");
    std::fs::write(&foreign, b"just some text, not a database at all").unwrap();
    let output = with_db(&foreign, &["verify"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));

    let db = tmp.path().join("store.redb");
    let file = generate(tmp.path(), "a.v3.jsonl", "500", "3");
    let import = with_db(&db, &["--json", "import", &file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let session = json_of(&import)["imports"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(sessionlog_engine::store::wal_path(&db)).unwrap();
    let before = files_state(&db);
    let out = tmp.path().join("out.v3.jsonl");
    let out = out.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["verify"],
        &["export", &session, "-o", out],
        &["messages", &session],
        &["surface", &session],
        &["audit"],
    ];
    for args in commands {
        let output = with_db(&db, args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(files_state(&db) == before, "{args:?} wrote to the store");
    }
}

// Goal: `export -o -` into a pipe closed early (`| head`) exits non-zero: a truncated export
// is not success (issue #20, finding 4).
#[test]
fn export_to_a_closed_pipe_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let file = generate(tmp.path(), "a.v3.jsonl", "20000", "4");
    let import = with_db(&db, &["--json", "import", &file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let session = json_of(&import)["imports"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["export", &session, "-o", "-"])
        .env("SESSIONLOG_DB", &db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1024];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("cut short"), "{}", stderr(&output));
}

// Goal: `backup` writes one file that opens and verifies with the same heads as the store,
// and refuses to overwrite; the source store is not written.
#[test]
fn backup_is_one_file_with_the_same_heads() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    for (name, seed) in [("a.v3.jsonl", "5"), ("b.v3.jsonl", "6")] {
        let file = generate(tmp.path(), name, "700", seed);
        let import = with_db(&db, &["import", &file]);
        assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    }
    let before = files_state(&db);
    let copy = tmp.path().join("copy.redb");
    let copy_arg = copy.to_str().unwrap();
    let backup = with_db(&db, &["backup", "-o", copy_arg]);
    assert_eq!(backup.status.code(), Some(0), "{}", stderr(&backup));
    assert!(files_state(&db) == before, "backup wrote to the source");
    assert!(!sessionlog_engine::store::wal_path(&copy).exists());
    let heads = |db: &Path| {
        let verify = with_db(db, &["--json", "verify"]);
        assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
        json_of(&verify)["sessions"].clone()
    };
    assert_eq!(heads(&copy), heads(&db));
    let again = with_db(&db, &["backup", "-o", copy_arg]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
}

// Goal: byte flips over the whole store file (issue #20, findings 1 and 6): `verify` after
// any flip either fails (exit 1) naming the damage, or passes with every session's events
// and head exactly as before (the flip hit free space); it never panics or prints a
// backtrace, and never writes the damaged file. Method: one store of two sessions, one flip
// every 509 bytes (a stride prime to the page size, so every offset within a page is hit
// over the file), each on a fresh copy.
#[test]
fn byte_flips_over_the_store_are_faults_or_harmless_never_silent() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    for (name, seed) in [("a.v3.jsonl", "7"), ("b.v3.jsonl", "8")] {
        let file = generate(tmp.path(), name, "300", seed);
        let import = with_db(&db, &["import", &file]);
        assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    }
    let verify = with_db(&db, &["--json", "verify"]);
    let expected = json_of(&verify)["sessions"].clone();
    let good = std::fs::read(&db).unwrap();
    let flipped = tmp.path().join("flipped.redb");
    let (mut faults, mut harmless) = (0, 0);
    for at in (0..good.len()).step_by(509) {
        let mut bytes = good.clone();
        bytes[at] ^= 0x55;
        std::fs::write(&flipped, &bytes).unwrap();
        let output = with_db(&flipped, &["--json", "verify"]);
        let err = stderr(&output);
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "byte {at}: {err}"
        );
        assert_eq!(
            std::fs::read(&flipped).unwrap(),
            bytes,
            "byte {at}: written"
        );
        match output.status.code() {
            Some(0) => {
                assert_eq!(
                    json_of(&output)["sessions"],
                    expected,
                    "byte {at}: silent loss"
                );
                harmless += 1;
            }
            Some(1) => faults += 1,
            other => panic!("byte {at}: exit {other:?}: {err}"),
        }
    }
    assert!(
        faults > 0 && harmless > 0,
        "{faults} faults, {harmless} harmless"
    );
    eprintln!("store byte flips: {faults} faults, {harmless} harmless");
}

// Goal: issue #20, finding 4: a V3 log whose last row is bad is refused (exit 1) and adds
// no session at all, so that importing the good file afterwards succeeds (it was refused
// with "already exists" when the refused import had left a shorter session behind).
#[test]
fn a_refused_import_adds_no_session() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let good = generate(tmp.path(), "a.v3.jsonl", "20000", "9");
    let text = std::fs::read_to_string(&good).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    lines.push("{\"seq\": 1, \"not\": \"an event\"}");
    let bad = tmp.path().join("bad.v3.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let refused = with_db(&db, &["import", bad.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let verify = with_db(&db, &["--json", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    assert_eq!(json_of(&verify)["sessions"], serde_json::json!([]));
    let import = with_db(&db, &["import", &good]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
}

// Goal: a `verify` killed at any point changes neither file of the store (a read never
// writes), and the store then verifies clean with every event.
// Method: import a generated 20,000-event session; SIGKILL `verify` (and `verify` beside a
// running `serve`) after 0 to 400 ms, 8 times each; compare both files byte for byte with
// their bytes before, then verify.
#[test]
fn a_killed_verify_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = generate(dir.path(), "big.v3.jsonl", "20000", "31");
    let db = dir.path().join("store.redb");
    let import = with_db(&db, &["import", &log]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let wal = dir.path().join("store.redb.wal");
    let before = (std::fs::read(&db).unwrap(), std::fs::read(&wal).unwrap());
    let db_text = db.to_str().unwrap();
    let kill_verifies = || {
        for round in 0..8u64 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
                .args(["verify", "--db", db_text])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(round * 50));
            let _ = child.kill();
            child.wait().unwrap();
        }
    };
    kill_verifies();
    assert!(std::fs::read(&db).unwrap() == before.0, "the .redb changed");
    assert!(std::fs::read(&wal).unwrap() == before.1, "the .wal changed");
    let (mut serve, _addr) = crate::support::start_serve(db_text);
    kill_verifies();
    let _ = serve.kill();
    serve.wait().unwrap();
    let verify = with_db(&db, &["--json", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    assert_eq!(json_of(&verify)["sessions"][0]["events"], 20000);
}
