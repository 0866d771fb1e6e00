//! `migrate` through the binary: conversion with its proof, refusals with file and line,
//! "current" for existing successors, tree walks, dry runs, and V2 files read in memory.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{fixtures_dir, sessionlog, stderr, stdout};

const TEXT_TURN: &str = "knyazev741__deepseek-harness/snapshots/sdk/text-turn/session.v2.jsonl";
const INTERIM: &str = "0r4ng3cc__deepseek-harness/packages/test-support/session-snapshot/tests/fixtures/suite/pin-turn/session.v2.jsonl";

/// Copies a recording into a temporary session root (never into the repository).
fn stage(fixtures: &Path, from: &str, root: &Path, session_dir: &str) -> std::path::PathBuf {
    let dir = root.join(session_dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.v2.jsonl");
    std::fs::copy(fixtures.join(from), &path).unwrap();
    path
}

// Goal: a V2 recording converts with its requests proved, the source is untouched, a second
// run reports it current, and the interim file is refused with its file and line.
#[test]
fn migrate_converts_proves_and_refuses() {
    let Some(fixtures) = fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let good = stage(&fixtures, TEXT_TURN, tmp.path(), "--w--/a");
    let bad = stage(&fixtures, INTERIM, tmp.path(), "--w--/b");
    let before = std::fs::read(&good).unwrap();
    let root = tmp.path().to_str().unwrap();

    let dry = sessionlog(&["--json", "migrate", "--dry-run", root]);
    assert_eq!(dry.status.code(), Some(1), "the interim file is refused");
    assert!(
        !good.with_file_name("session.v3.jsonl").exists(),
        "a dry run writes nothing"
    );

    let run = sessionlog(&["--json", "migrate", root]);
    assert_eq!(run.status.code(), Some(1));
    let doc: Value = serde_json::from_str(&stdout(&run)).unwrap();
    let files = doc["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["outcome"], Value::from("converted"));
    assert_eq!(files[0]["requestsProved"], Value::from(1));
    assert_eq!(
        (files[0]["from"].clone(), files[0]["to"].clone()),
        (Value::from(2), Value::from(3))
    );
    assert_eq!(files[1]["outcome"], Value::from("refused"));
    let err = stderr(&run);
    assert!(err.contains(&format!("{}:4: ", bad.display())), "{err}");
    assert!(err.contains("system/message"), "{err}");
    assert_eq!(
        std::fs::read(&good).unwrap(),
        before,
        "the source is never changed"
    );
    let successor = good.with_file_name("session.v3.jsonl");
    let check = sessionlog(&["check", successor.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));

    let again = sessionlog(&["--json", "migrate", good.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0));
    let doc: Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(doc["files"][0]["outcome"], Value::from("current"));
}

// Goal: `-o DIR` keeps each file's path relative to the walked root.
#[test]
fn migrate_into_a_directory_keeps_relative_paths() {
    let Some(fixtures) = fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    stage(&fixtures, TEXT_TURN, &root, "--w--/a");
    let out = tmp.path().join("out");
    let run = sessionlog(&[
        "migrate",
        "-o",
        out.to_str().unwrap(),
        root.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(out.join("--w--/a/session.v3.jsonl").is_file());
    assert!(stdout(&run).contains("1 converted, 0 already current, 0 refused"));
}

// Goal: read-only commands and import take a V2 file by migrating it in memory.
#[test]
fn v2_files_are_migrated_in_memory() {
    let Some(fixtures) = fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let v2 = stage(&fixtures, TEXT_TURN, tmp.path(), "s");
    let messages = sessionlog(&["--json", "messages", v2.to_str().unwrap()]);
    assert_eq!(messages.status.code(), Some(0), "{}", stderr(&messages));
    let doc: Value = serde_json::from_str(&stdout(&messages)).unwrap();
    let first = &doc["messages"][0];
    assert_eq!(
        first["role"],
        Value::from("system"),
        "the prompt became node 0"
    );
    let db = tmp.path().join("store.redb");
    let import = sessionlog(&["import", "--db", db.to_str().unwrap(), v2.to_str().unwrap()]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    assert!(
        !v2.with_file_name("session.v3.jsonl").exists(),
        "nothing is written beside it"
    );
}

// Goal: `check` on a V2 log also runs its migration in memory, so a log that is valid V2 but
// has no order-preserving V3 successor is noted with the spec's text and its line (the file
// itself is intact: exit 0); `cat --to 3` prints the in-memory successor, which `check`
// accepts.
#[test]
fn check_and_cat_migrate_v2_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let header = r#"{"type":"session","version":2,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;
    let user = r#"{"type":"user/message","seq":0,"time":1,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#;
    let early = tmp.path().join("session.v2.jsonl");
    std::fs::write(&early, format!("{header}\n{user}\n")).unwrap();
    let check = sessionlog(&["check", early.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0));
    let expected = "format v2 surface before first step cannot acquire a system head without \
                    changing chronology";
    assert!(
        stderr(&check).contains(&format!(
            "session.v2.jsonl:2: note: no v3 successor: {expected}"
        )),
        "{}",
        stderr(&check)
    );
    let json = sessionlog(&["--json", "check", early.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let migration = &doc["files"][0]["migration"];
    assert_eq!(migration["ok"], serde_json::Value::Bool(false));
    assert_eq!(migration["line"], serde_json::Value::from(2));
    assert_eq!(migration["message"], serde_json::Value::from(expected));

    let Some(fixtures) = fixtures_dir() else {
        return;
    };
    let v2 = stage(&fixtures, TEXT_TURN, tmp.path(), "t");
    let cat = sessionlog(&["cat", "--to", "3", v2.to_str().unwrap()]);
    assert_eq!(cat.status.code(), Some(0), "{}", stderr(&cat));
    let successor = tmp.path().join("t/printed.v3.jsonl");
    std::fs::write(&successor, stdout(&cat)).unwrap();
    let check = sessionlog(&["check", successor.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(stdout(&cat).starts_with(r#"{"type":"session","version":3"#));
}

// Goal: `--no-verify` converts without the proof and says so (`requestsProved` is null).
#[test]
fn no_verify_skips_the_proof() {
    let Some(fixtures) = fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let v2 = stage(&fixtures, TEXT_TURN, tmp.path(), "n");
    let run = sessionlog(&["--json", "migrate", "--no-verify", v2.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let doc: Value = serde_json::from_str(&stdout(&run)).unwrap();
    assert_eq!(doc["files"][0]["outcome"], Value::from("converted"));
    assert_eq!(doc["files"][0]["requestsProved"], Value::Null);
    let check = sessionlog(&[
        "check",
        v2.with_file_name("session.v3.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
}

/// A synthetic V2 log: `turns` turns of step/start, a user message, a request header whose
/// system prompt changes every 7 turns, an assistant message with a short stream, step/end.
fn synthetic_v2(turns: u64) -> String {
    let mut out = String::from(
        r#"{"type":"session","version":2,"id":"v2-synth","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
    );
    out.push('\n');
    let mut seq = 0;
    let mut row = |body: String| {
        out.push_str(&body.replacen("{SEQ}", &seq.to_string(), 1));
        out.push('\n');
        seq += 1;
    };
    for turn in 1..=turns {
        let text = format!("question {turn} ").repeat(20);
        let prompt = format!("system prompt version {}", turn / 7);
        let reason = if turn == 1 { "initial" } else { "series" };
        row(format!(
            r#"{{"type":"turn/start","seq":{{SEQ}},"time":1,"data":{{"turn":{turn}}}}}"#
        ));
        row(format!(
            r#"{{"type":"step/start","seq":{{SEQ}},"time":1,"data":{{"turn":{turn},"step":1}}}}"#
        ));
        row(format!(
            r#"{{"type":"user/message","seq":{{SEQ}},"time":1,"data":{{"id":"u{turn}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}},"surfaceOp":"append"}}"#
        ));
        row(format!(
            r#"{{"type":"request/header","seq":{{SEQ}},"time":1,"data":{{"header":{{"config":{{"provider":"p","model":"m"}},"system":"{prompt}"}},"reason":"{reason}"}}}}"#
        ));
        row(format!(
            r#"{{"type":"assistant/message","seq":{{SEQ}},"time":1,"data":{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","content":[{{"type":"text","text":"answer {turn}"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}},"stream":[{{"type":"text-chunks","time0":1,"index":0,"dt":[0],"texts":["answer ","{turn}"]}}]}},"surfaceOp":"append"}}"#
        ));
        row(format!(
            r#"{{"type":"step/end","seq":{{SEQ}},"time":1,"data":{{"turn":{turn},"step":1}}}}"#
        ));
        row(format!(
            r#"{{"type":"turn/end","seq":{{SEQ}},"time":1,"data":{{"turn":{turn},"reason":{{"kind":"completed"}}}}}}"#
        ));
    }
    out
}

// Goal: a crash while `migrate` publishes never leaves a partial successor under the target
// name and never touches the source. Method: SIGKILL the process at pseudo-random points of
// a migration that takes a noticeable time; after each kill the source is byte-identical and
// the successor is either absent or complete (it checks clean and holds every event).
#[test]
fn killed_migrate_publishes_all_or_nothing() {
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("session.v2.jsonl");
    let text = synthetic_v2(3000);
    std::fs::write(&source, &text).unwrap();
    let successor = tmp.path().join("session.v3.jsonl");
    let mut saw_absent = false;
    for iteration in 0..12u64 {
        let _ = std::fs::remove_file(&successor);
        let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
            .args(["--quiet", "migrate", source.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The last run is not killed, so that a complete successor is checked at least once.
        if iteration < 11 {
            let delay_ms = (iteration * 7919) % 1500;
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            let _ = child.kill();
        }
        child.wait().unwrap();
        assert_eq!(
            std::fs::read_to_string(&source).unwrap(),
            text,
            "the source is untouched"
        );
        if !successor.exists() {
            saw_absent = true;
            continue;
        }
        let check = sessionlog(&["--json", "check", successor.to_str().unwrap()]);
        assert_eq!(
            check.status.code(),
            Some(0),
            "iteration {iteration}: {}",
            stderr(&check)
        );
        let doc: Value = serde_json::from_str(&stdout(&check)).unwrap();
        // 7 events per turn, plus the empty head and one head replace every 7 turns.
        assert!(
            doc["files"][0]["events"].as_u64().unwrap() > 21_000,
            "complete successor"
        );
    }
    assert!(saw_absent, "some kill landed before the publication");
    assert!(successor.exists(), "the unkilled run published");
}

// Goal: the synthetic V2 log used above is itself a valid V2 log that migrates with every
// request proved (so the kill test exercises a real conversion).
#[test]
fn synthetic_v2_migrates_with_every_request_proved() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("session.v2.jsonl");
    std::fs::write(&source, synthetic_v2(50)).unwrap();
    let run = sessionlog(&["--json", "migrate", source.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let doc: Value = serde_json::from_str(&stdout(&run)).unwrap();
    assert_eq!(doc["files"][0]["requestsProved"], Value::from(50));
}
