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
// has no order-preserving V3 successor is reported with the spec's text and its line; `cat
// --to 3` prints the in-memory successor, which `check` accepts.
#[test]
fn check_and_cat_migrate_v2_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let header = r#"{"type":"session","version":2,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;
    let user = r#"{"type":"user/message","seq":0,"time":1,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#;
    let early = tmp.path().join("session.v2.jsonl");
    std::fs::write(&early, format!("{header}\n{user}\n")).unwrap();
    let check = sessionlog(&["check", early.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1));
    let expected = "format v2 surface before first step cannot acquire a system head without \
                    changing chronology";
    assert!(
        stderr(&check).contains(&format!("session.v2.jsonl:2: {expected}")),
        "{}",
        stderr(&check)
    );

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
