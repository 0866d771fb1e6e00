//! `copy` and `serve` through the binary: a copy verifies on arrival with the source's head
//! hash and resumes when rerun; `serve` prints its address, answers, and exits 0 on SIGTERM.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{http, sessionlog, start_serve, stderr, stdout};

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
    let (mut child, addr) = start_serve(db);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
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
    let (mut child, _addr) = start_serve(db);
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

/// Events per append of the serve kill test.
const SERVE_KILL_BATCH_EVENTS: u64 = 5;

fn title_rows(from_seq: u64) -> String {
    let rows: Vec<String> = (from_seq..from_seq + SERVE_KILL_BATCH_EVENTS)
        .map(|seq| {
            format!(
                r#"{{"type":"session/title","seq":{seq},"time":1,"data":{{"title":"t{seq}","messageSeqs":[],"source":{{"kind":"user"}}}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"expectedNextSeq":{from_seq},"events":[{}]}}"#,
        rows.join(",")
    )
}

// Goal: SIGKILLing `serve` while a client appends loses no acknowledged event: after every
// kill the store verifies clean and holds every batch the server answered 200 for (and at most
// the one batch in flight besides).
// Method: 12 rounds (SESSIONLOG_SERVE_KILLS=N for more): start `serve`, append batches of 5
// events from a client thread, SIGKILL the server after 60 to 460 ms, then `verify --json` the
// store and compare its event count with the acknowledged one.
#[test]
fn sigkill_of_serve_loses_nothing_acknowledged() {
    let rounds: u64 = std::env::var("SESSIONLOG_SERVE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(12);
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let db = db.to_str().unwrap();
    let header = r#"{"type":"session","version":3,"id":"killed","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;
    let mut held = 0u64;
    let mut in_flight_held = 0u64;
    for round in 0..rounds {
        let (mut child, addr) = start_serve(db);
        if round == 0 {
            assert_eq!(
                http(&addr, "POST", "/v1/sessions", header).map(|r| r.0),
                Some(201)
            );
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let client = {
            let (addr, stop) = (addr.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut acked = held;
                while !stop.load(Ordering::SeqCst) {
                    let path = "/v1/sessions/killed/events";
                    match http(&addr, "POST", path, &title_rows(acked)).map(|r| r.0) {
                        Some(200) => acked += SERVE_KILL_BATCH_EVENTS,
                        Some(code) => panic!("append answered {code}"),
                        None => break,
                    }
                }
                acked
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(60 + (round * 137) % 400));
        child.kill().unwrap();
        child.wait().unwrap();
        stop.store(true, Ordering::SeqCst);
        let acked = client.join().unwrap();
        let verify = sessionlog(&["--json", "verify", "--db", db]);
        assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
        let doc: Value = serde_json::from_str(&stdout(&verify)).unwrap();
        held = doc["sessions"][0]["events"].as_u64().unwrap();
        assert!(
            held == acked || held == acked + SERVE_KILL_BATCH_EVENTS,
            "round {round}: {acked} events acknowledged, {held} held"
        );
        in_flight_held += u64::from(held > acked);
    }
    assert!(held > 0, "no append was acknowledged in {rounds} rounds");
    eprintln!(
        "serve kills: {rounds} kills, {held} events held at the end, every acknowledged one \
         among them; the batch in flight was kept by {in_flight_held} kills"
    );
}
