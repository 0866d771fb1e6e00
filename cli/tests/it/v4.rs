//! The read commands on dsh V4 logs (issue #22 item 2): dsh's own V4 recording, a generated
//! V4 log with developer messages, and a root mixing V0 to V4.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout};

/// dsh's V4 text-turn recording, beside the checkout (`None`, with a note, when missing).
fn v4_fixture() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../../shared/fixtures/dsh-v4/narutoZed__deepseek-harness/snapshots/sdk/text-turn/session.v4.jsonl",
    );
    if path.is_file() {
        return Some(path);
    }
    eprintln!("skipping: {} is missing", path.display());
    None
}

fn ok(args: &[&str]) -> String {
    let output = sessionlog(args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        stderr(&output)
    );
    stdout(&output)
}

// Goal: every read command reads dsh's V4 recording as V4, with the V4 shapes in its output.
// Method: run check, cat, messages, surface --at, requests, show, tokens, prompt and diff (V3
// sibling against V4) on the fixture; check the exit codes and a telling piece of each.
#[test]
fn read_commands_on_dsh_v4_recording() {
    let Some(file) = v4_fixture() else { return };
    let file = file.to_str().unwrap();
    let check: Value = serde_json::from_str(&ok(&["--json", "check", file])).unwrap();
    assert_eq!(check["files"][0]["version"], 4, "{check}");
    assert!(ok(&["cat", file]).starts_with("{\"type\":\"session\",\"version\":4"));
    let down = sessionlog(&["cat", "--to", "3", file]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        stderr(&down).contains("a v4 log has no v3 form"),
        "{}",
        stderr(&down)
    );
    let messages = ok(&["messages", file]);
    assert!(messages.contains("[0] system: {{system}}"), "{messages}");
    assert!(ok(&["surface", "--at", "10", file]).contains("3 nodes"));
    let requests = ok(&["requests", file]);
    assert!(requests.contains("runtime-context/snapshot"), "{requests}");
    assert!(ok(&["show", file]).contains("system prompt"));
    assert!(ok(&["tokens", file]).contains("1 requests"));
    assert!(ok(&["prompt", file]).contains("1 prompt versions"));
    let v3 = file.replace("session.v4.jsonl", "session.v3.jsonl");
    // The recordings differ by the writer's runtime-context text (dsh-v4.md 8.1): diff finds
    // it and exits 1.
    let diff = sessionlog(&["diff", &v3, file]);
    assert_eq!(diff.status.code(), Some(1), "{}", stderr(&diff));
    assert!(
        stdout(&diff).contains("request 0 diverges at message 2"),
        "{}",
        stdout(&diff)
    );
}

// Goal: a generated V4 log with tool messages and developer messages passes check, its
// requests and messages read, it migrates nowhere (it is current), a V3 log migrates to it
// with `--to 4`, and an audit of a root holding both reports both clean.
#[test]
fn generated_v4_and_migrate_to_4() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let v4 = dir.join("a").join("session.v4.jsonl");
    let v3 = dir.join("b").join("session.v3.jsonl");
    std::fs::create_dir_all(v4.parent().unwrap()).unwrap();
    std::fs::create_dir_all(v3.parent().unwrap()).unwrap();
    let (v4s, v3s) = (v4.to_str().unwrap(), v3.to_str().unwrap());
    ok(&[
        "gen",
        "--events",
        "1500",
        "--seed",
        "2",
        "--version",
        "4",
        "-o",
        v4s,
    ]);
    ok(&["gen", "--events", "300", "--seed", "3", "-o", v3s]);
    assert!(ok(&["check", v4s]).contains("ok (v4, 1500 events)"));
    assert!(ok(&["messages", v4s]).contains("] tool: "));
    ok(&["requests", v4s]);
    assert!(ok(&["migrate", v4s]).contains("1 already current"));
    let migrated = ok(&["migrate", "--to", "4", v3s]);
    assert!(migrated.contains("converted v3 -> v4"), "{migrated}");
    let successor = dir.join("b").join("session.v4.jsonl");
    assert!(ok(&["check", successor.to_str().unwrap()]).contains("(v4, 300 events)"));
    let audit = ok(&["audit", dir.to_str().unwrap()]);
    assert!(
        audit.contains("3 sessions: 3 ok, 0 corrupt, 0 refused"),
        "{audit}"
    );
}

// Goal: `check` of a valid V3 log that has no V4 successor notes it (exit 0), naming the
// edge's refusal, and `--json` reports `migration` with `to: 4`.
// Method: a V3 log whose delivery marker claims format v4 (dsh-v4.md 5.2 step 5).
#[test]
fn check_notes_a_missing_v4_successor() {
    let tmp = tempfile::tempdir().unwrap();
    let text = concat!(
        r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
        "\n",
        r#"{"type":"session-log-deepseek/delivery-accepted","seq":0,"time":1,"data":{"sessionId":"s","sessionFormatVersion":4,"throughSeq":0}}"#,
        "\n",
    );
    let file = crate::support::write_file(tmp.path(), "session.v3.jsonl", text);
    let file = file.to_str().unwrap();
    let output = sessionlog(&["check", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "session.v3.jsonl:2: note: no v4 successor: format v3 delivery marker claims target \
             format v4"
        ),
        "{}",
        stderr(&output)
    );
    let doc: Value = serde_json::from_str(&ok(&["--json", "check", file])).unwrap();
    assert_eq!(doc["files"][0]["migration"]["to"], 4);
    assert_eq!(doc["files"][0]["migration"]["ok"], false);
}
