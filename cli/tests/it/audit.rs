//! `audit`, `diff` and `demo` through the binary: tables, JSON shapes and exit codes.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout};

/// Writes `<root>/--work-gen--/<id>/<name>` with `sessionlog gen`.
fn gen(root: &std::path::Path, id: &str, name: &str, version: &str, seed: &str) -> String {
    let dir = root.join("--work-gen--").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let path_text = path.to_str().unwrap().to_owned();
    let zstd = name.ends_with(".zstd");
    let mut args = vec![
        "gen",
        "--events",
        "400",
        "--seed",
        seed,
        "--version",
        version,
    ];
    if zstd {
        args.push("--zstd");
    }
    args.extend(["-o", path_text.as_str()]);
    let out = sessionlog(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    path_text
}

// Goal: audit of a clean dsh-like root exits 0 with one row per file keyed by its relative
// path and a totals line; `--json` has CLI.md's `{"sessions","totals"}`; a damaged file
// makes it exit 1 with `FILE:LINE: message` on stderr.
// Method: generate V0, V2 and V3 (.zstd) sessions, audit, then garble one line and audit.
#[test]
fn audit_exit_codes_and_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    gen(&root, "a", "session.jsonl", "0", "1");
    gen(&root, "b", "session.v2.jsonl", "2", "2");
    let v3 = gen(&root, "c", "session.v3.jsonl.zstd", "3", "3");
    let root_text = root.to_str().unwrap();
    let clean = sessionlog(&["audit", root_text]);
    assert_eq!(clean.status.code(), Some(0), "{}", stderr(&clean));
    let text = stdout(&clean);
    assert!(text.contains("--work-gen--/a/session.jsonl"), "{text}");
    assert!(
        text.contains("3 sessions: 3 ok, 0 corrupt, 0 refused"),
        "{text}"
    );

    let json = sessionlog(&["--json", "audit", root_text]);
    let doc: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 3);
    let versions: Vec<&Value> = sessions.iter().map(|s| &s["version"]).collect();
    assert_eq!(
        versions,
        [&Value::from(0), &Value::from(2), &Value::from(3)]
    );
    assert_eq!(doc["totals"]["ok"], Value::from(3));
    assert!(sessions.iter().all(|s| s["integrity"]["status"] == "ok"));

    // A raw V3 copy with line 30 garbled.
    let out = sessionlog(&["cat", &v3]);
    let mut lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    lines[29] = "{garbage".to_owned();
    let bad_dir = root.join("--work-gen--").join("d");
    std::fs::create_dir_all(&bad_dir).unwrap();
    let bad = bad_dir.join("session.v3.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let damaged = sessionlog(&["audit", root_text]);
    assert_eq!(damaged.status.code(), Some(1));
    let expected = format!("{}:30: ", bad.display());
    assert!(stderr(&damaged).contains(&expected), "{}", stderr(&damaged));
    assert!(stdout(&damaged).contains("corrupt line 30"));
}

// Goal: a store audit (no paths) exits 0 on a clean store and lists its sessions.
// Method: import one generated log into a fresh store, audit it with --db.
#[test]
fn audit_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let log = gen(tmp.path(), "a", "session.v3.jsonl", "3", "9");
    let db = tmp.path().join("store.redb");
    let db_text = db.to_str().unwrap();
    let import = sessionlog(&["import", "--db", db_text, &log]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let audit = sessionlog(&["--json", "audit", "--db", db_text]);
    assert_eq!(audit.status.code(), Some(0), "{}", stderr(&audit));
    let doc: Value = serde_json::from_str(&stdout(&audit)).unwrap();
    assert_eq!(doc["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(doc["sessions"][0]["path"], Value::Null);
}

// Goal: `diff` of a migrated V2 recording against its native V3 recording agrees (exit 0),
// `--ids` finds the generated system-message id at message 0 (exit 1), and two different
// generated logs diverge at a named request; the JSON names request and message.
// Method: the text-turn fixture pair when present, then two generated logs.
#[test]
fn diff_exit_codes_and_shapes() {
    if let Some(fixtures) = crate::support::fixtures_dir() {
        let pair = fixtures.join("knyazev741__deepseek-harness/snapshots/sdk/text-turn");
        let v2 = pair.join("session.v2.jsonl");
        let v3 = pair.join("session.v3.jsonl");
        let (v2, v3) = (v2.to_str().unwrap(), v3.to_str().unwrap());
        let same = sessionlog(&["diff", v2, v3]);
        assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
        assert!(stdout(&same).starts_with("same: 1 requests agree"));
        let ids = sessionlog(&["--json", "diff", "--ids", v2, v3]);
        assert_eq!(ids.status.code(), Some(1));
        let doc: Value = serde_json::from_str(&stdout(&ids)).unwrap();
        assert_eq!(doc["kind"], "message");
        assert_eq!(
            (&doc["request"], &doc["message"]),
            (&Value::from(0), &Value::from(0))
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = gen(tmp.path(), "a", "session.v3.jsonl", "3", "5");
    let b = gen(tmp.path(), "b", "session.v3.jsonl", "3", "6");
    let differ = sessionlog(&["--json", "diff", &a, &b]);
    assert_eq!(differ.status.code(), Some(1));
    let doc: Value = serde_json::from_str(&stdout(&differ)).unwrap();
    assert_eq!(doc["same"], Value::Bool(false));
    assert!(doc["request"].is_u64(), "{doc}");
    let itself = sessionlog(&["diff", &a, &format!("{a}@100")]);
    assert_eq!(
        itself.status.code(),
        Some(1),
        "the head differs from seq 100"
    );
    let usage = sessionlog(&["diff", &a]);
    assert_eq!(usage.status.code(), Some(2));
}

// Goal: the README's main job runs end to end on a fresh directory: it writes the root and
// the store where it says, verifies, audits every layout clean, and refuses a non-empty
// directory.
// Method: `demo --events 150 --dir DIR`, then `--json demo` in a second directory, then
// `demo` again into the first.
#[test]
fn demo_runs_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let dir_text = dir.to_str().unwrap();
    let run = sessionlog(&["demo", "--events", "150", "--dir", dir_text]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let text = stdout(&run);
    for step in [
        "== generate",
        "== migrate",
        "== import",
        "== verify",
        "== audit",
        "== requests",
    ] {
        assert!(text.contains(step), "{step} missing:\n{text}");
    }
    let store = dir.join("sessions.redb");
    assert!(text.contains(&format!("store written to {}", store.display())));
    assert!(store.is_file());
    assert!(
        text.contains("9 sessions: 9 ok, 0 corrupt, 0 refused"),
        "{text}"
    );
    // The commands the demo suggests run as printed (the store path has no spaces here).
    let suggested: Vec<Vec<&str>> = text
        .lines()
        .filter_map(|line| {
            let command = match line.strip_prefix("explore: ") {
                Some(command) => command,
                None => line
                    .split('`')
                    .nth(1)
                    .filter(|c| c.starts_with("sessionlog "))?,
            };
            Some(command.split_whitespace().skip(1).collect())
        })
        .collect();
    assert!(
        suggested.iter().any(|args| args.first() == Some(&"show")),
        "{text}"
    );
    for args in &suggested {
        let run = sessionlog(args);
        assert_eq!(run.status.code(), Some(0), "{args:?}: {}", stderr(&run));
    }

    let other = tmp.path().join("demo-json");
    let json = sessionlog(&[
        "--json",
        "demo",
        "--events",
        "150",
        "--dir",
        other.to_str().unwrap(),
    ]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let doc: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(doc["ok"], Value::Bool(true));
    assert_eq!(
        doc["sessions"],
        Value::from(6),
        "every session is stored, the V4 one too"
    );
    assert_eq!(doc["audit"]["sessions"], Value::from(9));

    let again = sessionlog(&["demo", "--events", "150", "--dir", dir_text]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("is not empty"),
        "{}",
        stderr(&again)
    );
}

// Goal: a reader that closes stdout early ends the demo (a long printed view) quietly with
// exit 0: no panic message, as for every view.
// Method: run `demo` with stdout a pipe whose reading end is closed at once.
#[test]
fn demo_into_a_closed_pipe_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["demo", "--events", "60", "--dir", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
