//! `show` through the binary: golden transcripts (human and `--json`) of a generated session,
//! replacement copies shown only as markers, a V0 recording through the migration, the store
//! as a source, paging, and exit codes.
//!
//! Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test -p sessionlog --test it show`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{fixtures_dir, sessionlog, stderr, stdout};

/// The golden session: small, and holding a head rewrite, in-history appends, a compaction,
/// prunes and retried attempts.
const GOLDEN_EVENTS: &str = "300";
const GOLDEN_SEED: &str = "39";
/// Bodies are cut short so that the golden files stay small enough to review.
const GOLDEN_BODY_BYTES: &str = "120";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/show")
}

fn generate(dir: &Path, name: &str, events: &str, seed: &str) -> String {
    let path = dir.join(name).to_str().unwrap().to_owned();
    let output = sessionlog(&[
        "--quiet", "gen", "--events", events, "--seed", seed, "-o", &path,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    path
}

fn json_of(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// The `--json` document with one entry per line, so that a golden diff shows the entry.
fn json_lines(document: &Value) -> String {
    let entries: Vec<String> = document["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    format!(
        "{{\"session\":{},\"entries\":[\n{}\n]}}\n",
        document["session"],
        entries.join(",\n")
    )
}

/// Compares `actual` with the golden file `name`, or rewrites it under `UPDATE_GOLDEN=1`.
fn check_golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(
        expected, actual,
        "{} (regenerate with UPDATE_GOLDEN=1)",
        name
    );
}

/// The seqs of a JSONL log's events whose surfaceOp is a replace.
fn replace_seqs(file: &str) -> BTreeSet<u64> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .skip(1)
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["surfaceOp"].is_object())
        .map(|event| event["seq"].as_u64().unwrap())
        .collect()
}

fn entries_of<'a>(document: &'a Value, kind: &str) -> Vec<&'a Value> {
    document["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

// Goal: the human transcript and the `--json` document of a generated session are stable.
// Method: generate a fixed seed, show it both ways, compare with the checked-in files.
#[test]
fn golden_transcript() {
    let tmp = tempfile::tempdir().unwrap();
    let file = generate(tmp.path(), "g.v3.jsonl", GOLDEN_EVENTS, GOLDEN_SEED);
    let human = sessionlog(&["show", "--max-body-bytes", GOLDEN_BODY_BYTES, &file]);
    assert_eq!(human.status.code(), Some(0), "{}", stderr(&human));
    assert_eq!(stderr(&human), "");
    check_golden("seed39-300.txt", &stdout(&human));
    let json = sessionlog(&[
        "--json",
        "show",
        "--max-body-bytes",
        GOLDEN_BODY_BYTES,
        &file,
    ]);
    check_golden("seed39-300.json", &json_lines(&json_of(&json)));
}

// Goal: spec 7.2: replacement copies never appear as messages, and each is accounted for by
// a marker (a compaction's checkpoint, a prune's copy, a prompt rewrite or clear).
// Method: two generated sessions (the second holds prompt clears); compare the replace seqs
// of the log with the message and marker seqs of `--json`.
#[test]
fn copies_are_markers_not_messages() {
    let tmp = tempfile::tempdir().unwrap();
    for (events, seed) in [(GOLDEN_EVENTS, GOLDEN_SEED), ("500", "31")] {
        let file = generate(tmp.path(), &format!("s{seed}.v3.jsonl"), events, seed);
        let copies = replace_seqs(&file);
        assert!(!copies.is_empty(), "seed {seed}");
        let doc = json_of(&sessionlog(&["--json", "show", &file]));
        let messages: BTreeSet<u64> = entries_of(&doc, "message")
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert!(messages.is_disjoint(&copies), "seed {seed}");
        let mut marked = BTreeSet::new();
        for e in entries_of(&doc, "compaction") {
            marked.extend(e["checkpointSeq"].as_u64());
        }
        for e in entries_of(&doc, "prune") {
            marked.extend(e["rewriteSeq"].as_u64());
        }
        for kind in ["prompt-rewrite", "prompt-clear", "replace"] {
            marked.extend(
                entries_of(&doc, kind)
                    .iter()
                    .map(|e| e["seq"].as_u64().unwrap()),
            );
        }
        assert_eq!(marked, copies, "seed {seed}");
    }
    let file = tmp.path().join("s31.v3.jsonl");
    let human = stdout(&sessionlog(&["show", file.to_str().unwrap()]));
    assert!(
        human.contains("-- #406 system prompt cleared (#"),
        "{human}"
    );
}

// Goal: a stored session shows exactly like its file; `SESSIONLOG_DB` names the store when
// `--db` is absent.
// Method: import a generated file, show it by id with `--db` and with the variable.
#[test]
fn store_and_file_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("store.redb");
    let db = db.to_str().unwrap();
    let file = generate(tmp.path(), "a.v3.jsonl", "1200", "3");
    let import = sessionlog(&["--quiet", "import", "--db", db, &file]);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    let from_file = sessionlog(&["show", &file]);
    let session = stdout(&from_file).lines().next().unwrap()["session ".len()..].to_owned();
    let from_store = sessionlog(&["show", "--db", db, &session]);
    assert_eq!(from_store.status.code(), Some(0), "{}", stderr(&from_store));
    assert_eq!(stdout(&from_file), stdout(&from_store));
    let from_env = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["show", &session])
        .env("SESSIONLOG_DB", db)
        .output()
        .unwrap();
    assert_eq!(stdout(&from_file), stdout(&from_env));
}

// Goal: a V0 recording is shown through the in-memory migration: its tool call and result,
// the migrated empty head and its rewrite, and the turn's end.
// Method: show a dsh V0 fixture both ways; explicit assertions, no golden (third-party data).
#[test]
fn v0_fixture_through_migration() {
    let Some(dir) = fixtures_dir() else { return };
    let file = dir.join(
        "toninfo__deepseek-harness/examples/acp-agent/tests/snapshots/tool-call-turn/session.jsonl",
    );
    let file = file.to_str().unwrap();
    let output = sessionlog(&["show", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("note: read as a normalized snapshot recording"));
    let text = stdout(&output);
    for expected in [
        "session e9421ff4-baae-4807-a7ea-fd8a65f2c897\n",
        "== #1 turn 1\n",
        "-- #4 system prompt: (empty)\n",
        "-- #8 system prompt rewritten (head #4 replaced) (10 bytes): {{system}}\n",
        "    [tool call] bash call_00_Rn2Mz1y8uZN62ukEXiNO2077\n",
        "#13 tool bash call_00_Rn2Mz1y8uZN62ukEXiNO2077 (turn 1, step 1)\n    SNAPSHOT_OK\n",
        "#16 assistant (turn 1, step 2)\n",
        "    DONE\n",
        "== #18 turn 1 ended: completed\n",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    let quiet = sessionlog(&["--quiet", "show", file]);
    assert_eq!(stderr(&quiet), "");
    let doc = json_of(&sessionlog(&["--json", "show", file]));
    let roles: Vec<&str> = entries_of(&doc, "message")
        .iter()
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "user", "assistant", "tool", "assistant"]);
    let result = &entries_of(&doc, "message")[3]["blocks"][0];
    assert_eq!(result["name"], "bash");
    assert_eq!(result["text"], "SNAPSHOT_OK\n");
}

// Goal: exit codes: 0 on success, 1 on a missing file or unknown session (diagnostic on
// stderr, nothing on stdout), 2 on a usage error (a `--db` naming no store, as for every
// read command).
// Method: run each case and compare codes and streams.
#[test]
fn exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.v3.jsonl");
    let missing = missing.to_str().unwrap();
    let output = sessionlog(&["show", missing]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    assert!(stderr(&output).contains(missing), "{}", stderr(&output));

    let db = tmp.path().join("store.redb");
    let db = db.to_str().unwrap();
    let no_store = sessionlog(&["show", "--db", db, "some-session"]);
    assert_eq!(no_store.status.code(), Some(2));
    assert!(
        stderr(&no_store).contains("no store at"),
        "{}",
        stderr(&no_store)
    );
    assert!(!Path::new(db).exists(), "show never creates a store");
    let file = generate(tmp.path(), "a.v3.jsonl", "50", "1");
    assert_eq!(
        sessionlog(&["--quiet", "import", "--db", db, &file])
            .status
            .code(),
        Some(0)
    );
    let unknown = sessionlog(&["show", "--db", db, "no-such-session"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("no-such-session"));

    let garbage = crate::support::write_file(tmp.path(), "bad.jsonl", "not json\n");
    let bad = sessionlog(&["show", garbage.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("bad.jsonl:1"), "{}", stderr(&bad));

    assert_eq!(
        sessionlog(&["show", "--bogus", &file]).status.code(),
        Some(2)
    );
    assert_eq!(sessionlog(&["show"]).status.code(), Some(2));
    let bad_number = sessionlog(&["show", "--max-body-bytes", "many", &file]);
    assert_eq!(bad_number.status.code(), Some(2));
    assert_eq!(sessionlog(&["show", &file]).status.code(), Some(0));
}

/// Runs `show` with stdout on a pseudo-terminal (util-linux `script`), or `None` when that
/// tool is not available here.
fn show_on_terminal(args: &str, pager: &str) -> Option<String> {
    let probe = Command::new("script").arg("--version").output().ok()?;
    if !probe.status.success() {
        eprintln!("skipping: util-linux script is not available");
        return None;
    }
    let binary = env!("CARGO_BIN_EXE_sessionlog");
    let command = format!("'{binary}' {args}");
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("PAGER", pager)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    Some(stdout(&output))
}

// Goal: the transcript goes through $PAGER only when stdout is a terminal, never under
// `--no-pager` or `--json`, and is printed directly when the pager cannot start.
// Method: a pager that prefixes each line; run with stdout piped, then on a terminal.
#[test]
fn pages_only_on_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let file = generate(tmp.path(), "a.v3.jsonl", "60", "1");
    let prefixer = "sed s/^/paged:/";
    let piped = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["show", &file])
        .env("PAGER", prefixer)
        .output()
        .unwrap();
    assert!(stdout(&piped).starts_with("session "), "{}", stdout(&piped));

    let Some(paged) = show_on_terminal(&format!("show '{file}'"), prefixer) else {
        return;
    };
    assert!(paged.starts_with("paged:session "), "{paged}");
    let direct = show_on_terminal(&format!("show --no-pager '{file}'"), prefixer).unwrap();
    assert!(direct.starts_with("session "), "{direct}");
    let json = show_on_terminal(&format!("--json show '{file}'"), prefixer).unwrap();
    assert!(json.starts_with("{\"session\""), "{json}");
    let missing = show_on_terminal(&format!("show '{file}'"), "no-such-pager-here").unwrap();
    assert!(missing.starts_with("session "), "{missing}");
}
