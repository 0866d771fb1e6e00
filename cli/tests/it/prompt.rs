//! `sessionlog prompt` through the binary: the human view, the `--json` shape of CLI.md, files
//! and stores, and the exit codes 0, 1 and 2.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use sessionlog_agent::prompt::capability::{Adapter, Catalog, PreparedCall};
use sessionlog_agent::prompt::step::{FinishInput, PromptLoop, StepInput};
use sessionlog_engine::store::Store;
use sessionlog_format::payload::CallConfig;
use sessionlog_format::{ContentBlock, Extra, Message, SessionHeader, Source};

use crate::support::{sessionlog, stderr, stdout};

/// Writes session `p` to a store at `db`: prompts A, B (appended), a clear, then C on an
/// incapable route (a head rewrite).
fn write_session(db: &Path) {
    let store = Store::open(db).unwrap();
    store
        .create_session(&SessionHeader::new_v3("p", 1_700_000_000_000))
        .unwrap();
    let flash = PreparedCall::prepare(Adapter::DeepSeek, &Catalog::deepseek().models()[0]);
    let pi = PreparedCall::prepare(Adapter::PiAi, &Catalog::deepseek().models()[0]);
    let mut lp = PromptLoop::new(&store, "p").unwrap();
    for (turn, (rendered, call)) in [("A", &flash), ("B", &flash), ("", &flash), ("C", &pi)]
        .into_iter()
        .enumerate()
    {
        let turn = turn as u64 + 1;
        let user = Message {
            id: Some(format!("u{turn}")),
            role: Some("user".into()),
            content: vec![ContentBlock::text("hello")],
            source: Some(Source {
                kind: "user".into(),
                plugin: None,
                provider: None,
                model: None,
                call_id: None,
                extra: Extra::new(),
            }),
            extra: Extra::new(),
        };
        let config = CallConfig {
            provider: Some(call.provider.clone()),
            model: call.model.clone(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
            extra: Extra::new(),
        };
        let input = StepInput {
            turn,
            step: 1,
            time: 0,
            new_turn: true,
            rendered,
            runtime: None,
            users: vec![user],
            call,
            config,
            tools: &[],
            declared_series: false,
        };
        lp.run_step(&store, input).unwrap();
        let finish = FinishInput {
            turn,
            step: 1,
            time: 0,
            reply: "ok",
            call,
            end_turn: true,
        };
        lp.finish_step(&store, finish).unwrap();
    }
}

fn kinds_and_effective(document: &Value) -> Vec<(String, String, bool)> {
    document["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_owned(),
                v["text"].as_str().unwrap().to_owned(),
                v["effective"].as_bool().unwrap(),
            )
        })
        .collect()
}

// Goal: `prompt --db DB SESSION --json` lists every version with the CLI.md shape, and only
// the latest non-empty surviving node is effective. Method: a session with an initial prompt,
// an append, a clear of both, and a head rewrite.
#[test]
fn prompt_json_from_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    write_session(&db);
    let db = db.to_str().unwrap();
    let output = sessionlog(&["--json", "prompt", "--db", db, "p"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(document["session"], json!("p"));
    let expected = [
        ("initial", "A", false),
        ("append", "B", false),
        ("clear", "", false),
        ("clear", "", false),
        ("rewrite", "C", true),
    ];
    let expected: Vec<(String, String, bool)> = expected
        .iter()
        .map(|(k, t, e)| ((*k).to_owned(), (*t).to_owned(), *e))
        .collect();
    assert_eq!(kinds_and_effective(&document), expected);
    assert!(document["versions"][0]["seq"].is_u64());

    // The human view names the effective version and marks it.
    let output = sessionlog(&["prompt", "--db", db, "p"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("p: 5 prompt versions, effective: seq "),
        "{text}"
    );
    assert!(text.contains("initial: A"), "{text}");
    assert!(text.contains("append: B"), "{text}");
    let marked: Vec<&str> = text.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].contains("rewrite of"), "{text}");
}

// Goal: an exported file gives the same history as the store. Method: export, then read the
// file.
#[test]
fn prompt_from_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    write_session(&db);
    let file = tmp.path().join("p.v3.jsonl");
    let (db, file) = (db.to_str().unwrap(), file.to_str().unwrap());
    let export = sessionlog(&["export", "--db", db, "p", "-o", file]);
    assert_eq!(export.status.code(), Some(0), "{}", stderr(&export));
    let from_file = sessionlog(&["--json", "prompt", file]);
    assert_eq!(from_file.status.code(), Some(0), "{}", stderr(&from_file));
    let from_store = sessionlog(&["--json", "prompt", "--db", db, "p"]);
    assert_eq!(stdout(&from_file), stdout(&from_store));
}

// Goal: an unknown session exits 1 with a message; a missing argument is a usage error (2).
// Method: both.
#[test]
fn prompt_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    write_session(&db);
    let db = db.to_str().unwrap();
    let missing = sessionlog(&["prompt", "--db", db, "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(!stderr(&missing).is_empty());
    let usage = sessionlog(&["prompt", "--db", db]);
    assert_eq!(usage.status.code(), Some(2));
}
