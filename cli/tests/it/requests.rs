//! `sessionlog requests` through the binary: golden output on a generated session, the
//! CLI.md `--json` shape, the recorded retry fixture, the store source, and exit codes.
//!
//! The golden files live in `tests/golden/requests/` and are derived only from sessions the
//! tests generate (a fixed seed), never from the third-party recordings. Regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p sessionlog --test it requests`.

use std::path::{Path, PathBuf};
use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::support::{fixtures_dir, sessionlog, stderr, stdout, with_db, write_file};

/// The generated session of the golden files: 250 events of seed 39 hold a retry, an
/// in-history prompt append, a head rewrite, a compaction and prunes.
const GOLDEN_EVENTS: &str = "250";
const GOLDEN_SEED: &str = "39";

fn generate(dir: &Path, name: &str, events: &str, seed: &str) -> String {
    let path = dir.join(name);
    let path = path.to_str().unwrap().to_owned();
    let output = sessionlog(&["gen", "--events", events, "--seed", seed, "-o", &path]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    path
}

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// Compares `actual` with the golden file `name`, or rewrites it under `UPDATE_GOLDEN`.
fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/requests")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        expected,
        actual,
        "{} differs; UPDATE_GOLDEN=1 rewrites it",
        path.display()
    );
}

/// The `--json` document without its bulk: each request's messages become their number, its
/// tools their names, and its wire body (on a DeepSeek route) its model and counts; then one line for the session and summary and one line per request.
fn golden_json(doc: &Value) -> String {
    let mut lines = vec![json!({
        "session": doc["session"],
        "snapshot": doc["snapshot"],
        "summary": doc["summary"],
    })
    .to_string()];
    for request in doc["requests"].as_array().unwrap() {
        let mut request = request.clone();
        let n_messages = request["messages"].as_array().map_or(0, Vec::len);
        request["messages"] = json!(n_messages);
        let names: Vec<Value> = request["tools"]
            .as_array()
            .map(|tools| tools.iter().map(|t| t["name"].clone()).collect())
            .unwrap_or_default();
        request["tools"] = Value::Array(names);
        if let Some(body) = request.get("body").cloned() {
            let count = |key: &str| body[key].as_array().map_or(0, Vec::len);
            request["body"] = json!({
                "model": body["model"],
                "messages": count("messages"),
                "tools": count("tools"),
            });
        }
        lines.push(request.to_string());
    }
    lines.join("\n") + "\n"
}

// Goal: the human table and summary of a generated session are stable. Method: a golden
// file; stderr is empty and the exit code 0.
#[test]
fn golden_table() {
    let tmp = tempfile::tempdir().unwrap();
    let file = generate(tmp.path(), "g.v3.jsonl", GOLDEN_EVENTS, GOLDEN_SEED);
    let output = sessionlog(&["requests", &file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    check_golden("gen-250-39.txt", &stdout(&output));
}

// Goal: the `--json` document of a generated session is stable, bodies aside. Method: a
// golden file of the document with messages reduced to their number and tools to names.
#[test]
fn golden_json_document() {
    let tmp = tempfile::tempdir().unwrap();
    let file = generate(tmp.path(), "g.v3.jsonl", GOLDEN_EVENTS, GOLDEN_SEED);
    let output = sessionlog(&["--json", "requests", &file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    check_golden("gen-250-39.jsonl", &golden_json(&json_of(&output)));
}

// Goal: `--json` prints one document in the CLI.md shape, with the full derived messages,
// and prefixes consistent with the message counts. Method: every key of the contract checked
// on a generated session; a kept prefix equals the previous request's message count.
#[test]
fn json_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let file = generate(tmp.path(), "g.v3.jsonl", GOLDEN_EVENTS, GOLDEN_SEED);
    let doc = json_of(&sessionlog(&["--json", "requests", &file]));
    let requests = doc["requests"].as_array().unwrap();
    assert!(requests.len() > 10);
    assert!(doc["session"].as_str().unwrap().starts_with("gen-"));
    for key in [
        "index", "turn", "step", "reason", "config", "tools", "messages", "prefix", "usage",
    ] {
        assert!(requests.iter().all(|r| r.get(key).is_some()), "{key}");
    }
    for (idx, request) in requests.iter().enumerate() {
        assert_eq!(request["index"], json!(idx));
        let messages = request["messages"].as_array().unwrap();
        assert_eq!(json!(messages.len()), request["messageCount"]);
        assert!(messages
            .iter()
            .all(|m| m["id"].is_string() && m["content"].is_array()));
        let prefix = &request["prefix"];
        for key in ["messages", "estimatedTokens", "brokenBy"] {
            assert!(prefix.get(key).is_some(), "prefix.{key}");
        }
        if idx > 0 && prefix["brokenBy"].is_null() {
            assert_eq!(prefix["messages"], requests[idx - 1]["messageCount"]);
        }
        if prefix["brokenBy"]["kind"] == json!("head-rewrite") {
            assert_eq!(prefix["messages"], json!(0));
        }
    }
    let summary = &doc["summary"];
    assert_eq!(summary["requests"], json!(requests.len()));
    let ratio = summary["predictedReuseRatio"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&ratio));
    assert_eq!(summary["promptAppends"], json!(1));
    assert_eq!(summary["promptRewrites"], json!(1));
}

// Goal: on the recorded retry fixture, the attempt and its retry are two requests with the
// same messages and the whole prefix kept, each with its recorded usage; the snapshot note
// goes to stderr. Method: explicit assertions on `--json` (the recording stays out of the
// golden files).
#[test]
fn retry_fixture() {
    let Some(dir) = fixtures_dir() else { return };
    let file = dir.join(
        "knyazev741__deepseek-harness/snapshots/session/empty-response-retry-current/session.v3.jsonl",
    );
    let output = sessionlog(&["--json", "requests", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("note: read as a normalized snapshot recording"));
    let doc = json_of(&output);
    let requests = doc["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["settled"], json!("attempt"));
    assert_eq!(requests[1]["settled"], json!("message"));
    assert_eq!(requests[0]["messages"], requests[1]["messages"]);
    assert_eq!(requests[1]["prefix"]["messages"], json!(3));
    assert_eq!(requests[1]["prefix"]["brokenBy"], Value::Null);
    assert_eq!(requests[0]["usage"]["inputTokens"], json!(0));
    assert_eq!(requests[1]["usage"]["inputTokens"], json!(12));
    assert_eq!(doc["summary"]["recordedInputTokens"], json!(12));
}

// Goal: no accepted fixture makes `requests` panic: a V3 recording gives a report (exit 0),
// and an older one is migrated in memory, or refused with exit 1 and `FILE:LINE:` when it
// has no V3 successor. Method: each accepted row of the manifest.
#[test]
fn accepted_fixtures_report() {
    let Some(dir) = fixtures_dir() else { return };
    for (path, expect) in crate::support::manifest(&dir) {
        if !expect.starts_with("accept") {
            continue;
        }
        let file = path.to_str().unwrap();
        let output = sessionlog(&["--quiet", "requests", file]);
        let v3 = file.ends_with(".v3.jsonl");
        match output.status.code() {
            Some(0) => assert!(stdout(&output).contains("requests"), "{file}"),
            Some(1) if !v3 => {
                assert!(
                    stderr(&output).contains(&format!("{file}:")),
                    "{}",
                    stderr(&output)
                );
            }
            other => panic!("{file}: exit {other:?}: {}", stderr(&output)),
        }
    }
}

// Goal: a stored session gives the same document as its file, through --db and through
// SESSIONLOG_DB. Method: import a generated file, then compare the three documents.
#[test]
fn store_source() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let file = generate(tmp.path(), "g.v3.jsonl", "400", "6");
    let import = with_db(&db, &["--json", "import", &file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let session = json_of(&import)["imports"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let from_file = json_of(&sessionlog(&["--json", "requests", &file]));
    let db_arg = db.to_str().unwrap();
    let from_db = json_of(&sessionlog(&[
        "--json", "requests", "--db", db_arg, &session,
    ]));
    let from_env = json_of(&with_db(&db, &["--json", "requests", &session]));
    assert_eq!(from_file, from_db);
    assert_eq!(from_file, from_env);
}

// Goal: the exit codes of CLI.md: 1 with `FILE:LINE:` for an invalid file, 1 for an unknown
// session or a missing file, 2 for a usage error. Method: one case each.
#[test]
fn exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let header = r#"{"type":"session","version":3,"id":"s","createdAt":0,"isSeeded":false,"delegationDepth":0}"#;
    let bad = write_file(tmp.path(), "bad.jsonl", &format!("{header}\nnot json\n"));
    let output = sessionlog(&["requests", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(&format!("{}:2:", bad.display())),
        "{}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "");

    // A store that exists (a missing one is exit 2: a read never creates a store).
    let db = tmp.path().join("store.redb");
    drop(sessionlog_engine::store::Store::open(&db).unwrap());
    let output = sessionlog(&["requests", "--db", db.to_str().unwrap(), "no-such-session"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no-such-session"),
        "{}",
        stderr(&output)
    );

    let missing = tmp.path().join("missing.jsonl");
    let output = with_db(&db, &["requests", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no such file"),
        "{}",
        stderr(&output)
    );

    assert_eq!(sessionlog(&["requests"]).status.code(), Some(2));
    let file = bad.to_str().unwrap();
    assert_eq!(
        sessionlog(&["requests", "--bogus", file]).status.code(),
        Some(2)
    );
}
