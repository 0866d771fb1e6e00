//! `sessionlog compact` and `sessionlog tokens`: a manual compaction of run and imported sessions, and the breakdown after it.

use std::path::Path;
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{stderr, stdout};

/// Runs `sessionlog` in `dir` with no DeepSeek or store variables from the environment.
fn sessionlog_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(args)
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env_remove("SESSIONLOG_DB")
        .output()
        .expect("the sessionlog binary runs")
}

/// Runs and expects exit 0 and one JSON document on stdout.
fn json_ok(dir: &Path, args: &[&str]) -> Value {
    let out = sessionlog_in(dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("stdout is one JSON document")
}

fn long_prompt(tag: &str) -> String {
    (0..120)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Asserts that `tokens --json` has one row per request of `requests --json`, each summing
/// to the request's estimated tokens.
fn assert_tokens_match_requests(dir: &Path, db: &str, session: &str) -> Value {
    let requests = json_ok(dir, &["--json", "requests", "--db", db, session]);
    let tokens = json_ok(dir, &["--json", "tokens", "--db", db, session]);
    assert_eq!(tokens["session"], session);
    let rows = requests["requests"].as_array().expect("requests");
    let at = tokens["requests"].as_array().expect("tokens rows");
    assert_eq!(at.len(), rows.len());
    for (row, b) in rows.iter().zip(at) {
        assert_eq!(b["index"], row["index"]);
        let sum = b["systemTokens"].as_u64().unwrap_or(0)
            + b["messageTokens"].as_u64().unwrap_or(0)
            + b["toolsTokens"].as_u64().unwrap_or(0);
        assert_eq!(Some(sum), row["estimatedTokens"].as_u64());
        assert_eq!(b["toolsTokens"], row["toolsTokens"]);
    }
    requests
}

// Goal: a session written by `sessionlog run` compacts through the replay provider on the
// conversation's own route (prefix reuse), the next request shows a compaction break, and
// `tokens` matches the requests before and after.
// Method: three runs with long prompts, `compact --json`, one more run, then `requests` and
// `tokens` on the store.
#[test]
fn compact_a_run_session() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("db").display().to_string();
    for tag in ["alpha", "beta", "gamma"] {
        let prompt = long_prompt(tag);
        let out = sessionlog_in(dir.path(), &["run", "--db", &db, "--session", "s", &prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    assert_tokens_match_requests(dir.path(), &db, "s");
    let report = json_ok(
        dir.path(),
        &[
            "--json",
            "compact",
            "--db",
            &db,
            "s",
            "--retain-tokens",
            "10",
        ],
    );
    assert_eq!(report["compacted"], true);
    assert_eq!(report["reusesPrefix"], true);
    assert_eq!(report["provider"], "replay");
    assert!(report["shadowedSeqs"].as_array().map(Vec::len) > Some(2));
    let checkpoint = report["checkpointSeq"].clone();
    let out = sessionlog_in(dir.path(), &["run", "--db", &db, "--session", "s", "go on"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = assert_tokens_match_requests(dir.path(), &db, "s");
    let last = requests["requests"]
        .as_array()
        .and_then(|r| r.last())
        .expect("a request");
    assert_eq!(last["prefix"]["brokenBy"]["kind"], "compaction");
    assert_eq!(last["prefix"]["brokenBy"]["seq"], checkpoint);
    let tokens = json_ok(dir.path(), &["--json", "tokens", "--db", &db, "s"]);
    let rows = tokens["requests"].as_array().expect("rows");
    let before = &rows[rows.len() - 2];
    let after = &rows[rows.len() - 1];
    assert!(after["messageTokens"].as_u64() < before["messageTokens"].as_u64());
    assert_eq!(after["systemTokens"], before["systemTokens"]);
}

// Goal: an imported generated session compacts with another route (no prefix reuse), and the
// head breakdown shrinks.
// Method: `gen` + `import`, `tokens --json` head before and after `compact --model other`.
#[test]
fn compact_an_imported_session() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("db").display().to_string();
    let file = dir.path().join("g.jsonl").display().to_string();
    let out = sessionlog_in(
        dir.path(),
        &["gen", "--events", "1500", "--seed", "7", "-o", &file],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = sessionlog_in(dir.path(), &["import", "--db", &db, &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let session = json_ok(dir.path(), &["--json", "tokens", &file])["session"]
        .as_str()
        .expect("a session id")
        .to_owned();
    let before = json_ok(dir.path(), &["--json", "tokens", "--db", &db, &session]);
    let report = json_ok(
        dir.path(),
        &[
            "--json", "compact", "--db", &db, &session, "--model", "other",
        ],
    );
    assert_eq!(report["compacted"], true);
    assert_eq!(report["reusesPrefix"], false);
    let after = json_ok(dir.path(), &["--json", "tokens", "--db", &db, &session]);
    assert!(after["head"]["totalTokens"].as_u64() < before["head"]["totalTokens"].as_u64());
    assert_eq!(after["requests"], before["requests"]);
    assert_tokens_match_requests(dir.path(), &db, &session);
}

// Goal: exit codes: nothing to compact exits 0 and commits nothing; an unknown session and
// a missing source exit 1.
// Method: one short run, compact with a large tail, then an unknown session and a bad path.
#[test]
fn compact_exit_codes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("db").display().to_string();
    let out = sessionlog_in(dir.path(), &["run", "--db", &db, "--session", "s", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json_ok(dir.path(), &["--json", "compact", "--db", &db, "s"]);
    assert_eq!(report["compacted"], false);
    let out = sessionlog_in(dir.path(), &["compact", "--db", &db, "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let out = sessionlog_in(dir.path(), &["tokens", "--db", &db, "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let out = sessionlog_in(
        dir.path(),
        &["compact", "--db", &db, "s", "--provider", "other"],
    );
    assert_eq!(out.status.code(), Some(2));
}

// Goal: a summary that is not smaller than the span fails the command with exit 1.
// Method: a replay script whose summary is longer than a two-turn session's span.
#[test]
fn compact_refuses_a_larger_summary() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("db").display().to_string();
    for tag in ["one", "two"] {
        let prompt = long_prompt(tag);
        let out = sessionlog_in(dir.path(), &["run", "--db", &db, "--session", "s", &prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let script = dir.path().join("script.json");
    let text = serde_json::json!({ "responses": [{ "text": long_prompt("word").repeat(8) }] });
    std::fs::write(&script, text.to_string()).expect("a script");
    let script = script.display().to_string();
    let out = sessionlog_in(
        dir.path(),
        &[
            "compact",
            "--db",
            &db,
            "s",
            "--retain-tokens",
            "1",
            "--script",
            &script,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not smaller"), "{}", stderr(&out));
}

/// The seqs of the live surface of stored session `session`.
fn surface(dir: &Path, db: &str, session: &str) -> Vec<u64> {
    let doc = json_ok(dir, &["--json", "surface", "--db", db, session]);
    doc["nodes"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

// Goal: `compact --from SEQ --to SEQ` compacts a mid-range region: the checkpoint takes the
// region's place on the surface, the nodes before and after stay, the report says the span is
// not the head and forgoes reuse, and requests and tokens still agree; a region including
// node 0, a seq off the surface and a lone --from are refused.
// Method: three runs with long prompts, read the surface, compact the second turn's user and
// assistant nodes, read the surface again; then the refused forms and their exit codes.
#[test]
fn compact_a_mid_range_region() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("db").display().to_string();
    for tag in ["alpha", "beta", "gamma"] {
        let prompt = long_prompt(tag);
        let out = sessionlog_in(dir.path(), &["run", "--db", &db, "--session", "s", &prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let before = surface(dir.path(), &db, "s");
    assert_eq!(before.len(), 7);
    let (from, to) = (before[3].to_string(), before[4].to_string());
    let report = json_ok(
        dir.path(),
        &[
            "--json", "compact", "--db", &db, "s", "--from", &from, "--to", &to,
        ],
    );
    assert_eq!(report["compacted"], true);
    assert_eq!(report["atHead"], false);
    assert_eq!(report["reusesPrefix"], false);
    assert_eq!(
        report["shadowedSeqs"],
        serde_json::json!([before[3], before[4]])
    );
    let checkpoint = report["checkpointSeq"].as_u64().expect("a checkpoint seq");
    let after = surface(dir.path(), &db, "s");
    let mut expected = before[..3].to_vec();
    expected.push(checkpoint);
    expected.extend(&before[5..]);
    assert_eq!(after, expected);
    assert_tokens_match_requests(dir.path(), &db, "s");

    let (head, last) = (before[0].to_string(), before[6].to_string());
    let out = sessionlog_in(
        dir.path(),
        &["compact", "--db", &db, "s", "--from", &head, "--to", &last],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("node 0"), "{}", stderr(&out));
    let out = sessionlog_in(
        dir.path(),
        &["compact", "--db", &db, "s", "--from", &from, "--to", &to],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not a live surface node"),
        "{}",
        stderr(&out)
    );
    let out = sessionlog_in(dir.path(), &["compact", "--db", &db, "s", "--from", &from]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(surface(dir.path(), &db, "s"), expected);
}
