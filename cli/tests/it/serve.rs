//! `copy` and `serve` through the binary: a copy verifies on arrival with the source's head
//! hash and resumes when rerun; `serve` prints its address, answers, and exits 0 on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout};

fn import(db: &Path, dir: &Path, name: &str, events: &str, seed: &str) {
    let file = dir.join(name);
    let file = file.to_str().unwrap();
    let gen = sessionlog(&["gen", "--events", events, "--seed", seed, "-o", file]);
    assert_eq!(gen.status.code(), Some(0), "{}", stderr(&gen));
    let import = sessionlog(&["import", "--db", db.to_str().unwrap(), file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
}

fn verify_heads(db: &str) -> Vec<(String, String)> {
    let verify = sessionlog(&["--json", "verify", "--db", db]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    let doc: Value = serde_json::from_str(&stdout(&verify)).unwrap();
    let sessions = doc["sessions"].as_array().unwrap();
    sessions
        .iter()
        .map(|s| {
            let session = s["session"].as_str().unwrap().to_owned();
            (session, s["headHash"].as_str().unwrap().to_owned())
        })
        .collect()
}

// Goal: `copy --json` moves every session to another store, each verified with the source's
// head hash; a second copy copies nothing and still verifies.
// Method: two generated sessions in one redb file, copied to a second one.
#[test]
fn copy_between_stores_verifies_on_arrival() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("from.redb");
    import(&from, tmp.path(), "a.v3.jsonl", "500", "4");
    import(&from, tmp.path(), "b.v3.jsonl", "1200", "5");
    let to = tmp.path().join("to.redb");
    let (from_arg, to_arg) = (from.to_str().unwrap(), to.to_str().unwrap());
    let copy = sessionlog(&["--json", "copy", "--from", from_arg, "--to", to_arg]);
    assert_eq!(copy.status.code(), Some(0), "{}", stderr(&copy));
    let doc: Value = serde_json::from_str(&stdout(&copy)).unwrap();
    let source_heads = verify_heads(from_arg);
    let copied: Vec<(String, String)> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["ok"], Value::Bool(true), "{s}");
            assert_eq!(s["copied"], s["events"]);
            let session = s["session"].as_str().unwrap().to_owned();
            (session, s["headHash"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(copied, source_heads);
    assert_eq!(verify_heads(to_arg), source_heads);
    let again = sessionlog(&["--json", "copy", "--from", from_arg, "--to", to_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let doc: Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert!(doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["copied"] == 0 && s["ok"] == true));
}

// Goal: `serve` prints the bound address (port 0), refuses an unreadable token file with exit
// 1, and stops with exit 0 on SIGTERM.
// Method: start it, read its first line, send SIGTERM with `kill`, wait.
#[test]
fn serve_prints_its_address_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let db = db.to_str().unwrap();
    let missing = tmp.path().join("no-token");
    let refused = sessionlog(&[
        "serve",
        "--db",
        db,
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["serve", "--db", db, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{line}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

// Goal: the read commands run beside `serve`, which holds the store: they read the snapshot
// its gate lets through and report what a run without `serve` reports.
// Method: import a generated session, take `verify --json`, `export` and `messages` without
// `serve`; start `serve` on the store; run the same commands beside it; stop it.
#[test]
fn read_commands_run_beside_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    import(&db, tmp.path(), "a.v3.jsonl", "800", "9");
    let db = db.to_str().unwrap();
    let session = verify_heads(db)[0].0.clone();
    let reads: Vec<Vec<&str>> = vec![
        vec!["--json", "verify", "--db", db],
        vec!["export", "--db", db, &session, "-o", "-"],
        vec!["messages", "--db", db, &session],
    ];
    let alone: Vec<String> = reads.iter().map(|args| stdout(&sessionlog(args))).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["serve", "--db", db, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on "), "{line}");
    for (args, expected) in reads.iter().zip(&alone) {
        let output = sessionlog(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(&stdout(&output), expected, "{args:?}");
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
